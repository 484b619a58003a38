package sink

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
)

// AtLeastOnceGuarantee is the delivery guarantee of AtLeastOnce.
const AtLeastOnceGuarantee = "at-least-once: JetStream, every message acknowledged before its checkpoint completes; a replay after recovery may repeat output"

// AtLeastOnce publishes records to a JetStream stream asynchronously and
// waits for all acknowledgements at every checkpoint, so a completed
// checkpoint implies the output before it is stored.
type AtLeastOnce struct {
	subject string
	js      jetstream.JetStream

	mu  sync.Mutex
	err error
}

// NewAtLeastOnce returns a sink publishing on subject, which a stream must
// capture. maxPending bounds unacknowledged messages (default 4096): Write
// blocks beyond it.
func NewAtLeastOnce(nc *nats.Conn, subject string, maxPending int) (*AtLeastOnce, error) {
	if maxPending <= 0 {
		maxPending = 4096
	}
	s := &AtLeastOnce{subject: subject}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(ackTimeout),
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}))
	if err != nil {
		return nil, fmt.Errorf("jetstream sink %s: %w", subject, err)
	}
	s.js = js
	return s, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (s *AtLeastOnce) Guarantee() string { return AtLeastOnceGuarantee }

func (s *AtLeastOnce) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("jetstream sink %s: publish: %w", s.subject, s.err)
	}
	return nil
}

// Write publishes every record of batch asynchronously.
func (s *AtLeastOnce) Write(ctx context.Context, batch []byte) error {
	if err := s.failed(); err != nil {
		return err
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("jetstream sink %s: %w", s.subject, err)
	}
	for it.Next() {
		r := it.Record()
		m := &nats.Msg{Subject: s.subject, Data: r.Value}
		if len(r.Key) > 0 {
			m.Header = nats.Header{KeyHeader: []string{string(r.Key)}}
		}
		if err := publishAsync(ctx, s.js, m); err != nil {
			return fmt.Errorf("jetstream sink %s: publish: %w", s.subject, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("jetstream sink %s: %w", s.subject, err)
	}
	return nil
}

// wait blocks until every published message is acknowledged.
func (s *AtLeastOnce) wait(ctx context.Context) error {
	select {
	case <-s.js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("jetstream sink %s: waiting for acks: %w", s.subject, ctx.Err())
	}
	return s.failed()
}

// PreCommit waits for the acknowledgement of everything written so far.
func (s *AtLeastOnce) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	return nil, s.wait(ctx)
}

// Commit does nothing: the output is already stored.
func (s *AtLeastOnce) Commit(ctx context.Context, id int64) error { return nil }

// Recover does nothing.
func (s *AtLeastOnce) Recover(ctx context.Context, id int64, state []byte) error { return nil }

// EndOfInput waits for every acknowledgement.
func (s *AtLeastOnce) EndOfInput(ctx context.Context) error { return s.wait(ctx) }

// Close does nothing; the connection belongs to the caller.
func (s *AtLeastOnce) Close() error { return nil }
