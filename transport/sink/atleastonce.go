package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/subject"
)

// AtLeastOnceGuarantee is the delivery guarantee of AtLeastOnce.
const AtLeastOnceGuarantee = "at-least-once: JetStream, every message acknowledged before its checkpoint completes; a replay after recovery may repeat output"

// AtLeastOnceConfig configures an at-least-once JetStream sink.
type AtLeastOnceConfig struct {
	// Subject is what the sink publishes on, or a keyed template
	// ("out.{key}": each record on "out." and its key); a stream must
	// capture it.
	Subject string
	// Stream is that stream; empty: the stream that captures Subject.
	Stream string
	// Publish is how records are published: PublishAuto (default) is
	// PublishFast where the stream allows batched publish, PublishAsync
	// elsewhere. PublishAtomic is for exactly-once sinks only.
	Publish PublishMode
	// MaxPending bounds unacknowledged messages in async mode (default
	// 4096): Write blocks beyond it.
	MaxPending int
	// Timeout bounds the wait for an acknowledgement (default
	// DefaultAtLeastOnceTimeout).
	Timeout time.Duration
	// IdleCommit is how long a fast batch stays open without a record
	// before the sink commits it (default 1s): the server drops a batch
	// that sees no message for 10s.
	IdleCommit time.Duration
}

// AtLeastOnce publishes records to a JetStream stream as they are written
// and waits at every checkpoint until all are stored, so a completed
// checkpoint implies the output before it is stored. In PublishFast mode
// the records go out as one fast-ingest batch per checkpoint (the server
// acknowledges every few hundred messages instead of each one, and a
// message lost on the way ends the batch, which fails the checkpoint: the
// job recovers and replays). In PublishAsync mode each record is its own
// asynchronous publish.
type AtLeastOnce struct {
	cfg   AtLeastOnceConfig
	js    jetstream.JetStream
	mode  PublishMode
	route route
	name  string // "at-least-once sink <subject> (stream <name>)", for errors

	emu sync.Mutex
	err error // the first failure; the sink fails from then on

	mu     sync.Mutex // guards the fields below; held while a batch is committed
	fp     jetstreamext.FastPublisher
	sent   int       // messages added to fp
	last   time.Time // when the last message was added to fp
	m      *nats.Msg // reused for every message of fp
	key    []string  // its key header's value, reused
	idle   *time.Timer
	closed bool
}

// NewAtLeastOnce checks that a stream captures cfg.Subject and returns the
// sink. While the stream, or JetStream's meta layer, has no leader (an
// election) the lookups are made again, within ctx's deadline or
// natsconn.ElectionWait; a stream that does not exist fails at once.
func NewAtLeastOnce(ctx context.Context, nc *nats.Conn, cfg AtLeastOnceConfig) (*AtLeastOnce, error) {
	if cfg.Subject == "" {
		return nil, errors.New("at-least-once sink: a subject is required")
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultAtLeastOnceTimeout
	}
	if cfg.IdleCommit <= 0 {
		cfg.IdleCommit = time.Second
	}
	s := &AtLeastOnce{cfg: cfg}
	js, err := jetstream.New(nc,
		jetstream.WithDefaultTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { s.fail(err) }))
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink %s: %w", cfg.Subject, err)
	}
	s.js = js
	tmpl, err := subject.Parse(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink: %w", err)
	}
	name := cfg.Stream
	if !tmpl.Keyed() || name == "" {
		// A keyed template's filter may overlap several streams' subjects:
		// the named stream is the one, and each record's subject is
		// checked against its subjects.
		var found string
		err := throughElection(ctx, js, func(ctx context.Context) (err error) {
			found, err = js.StreamNameBySubject(ctx, tmpl.Filter())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("at-least-once sink %s: no stream captures the subject: %w", cfg.Subject, err)
		}
		if name != "" && name != found {
			return nil, fmt.Errorf("at-least-once sink %s: the subject is captured by stream %s, not by %s", cfg.Subject, found, name)
		}
		name = found
	}
	st, err := lookupStream(ctx, js, name)
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink %s: stream %s: %w", cfg.Subject, name, err)
	}
	s.name = fmt.Sprintf("at-least-once sink %s (stream %s)", cfg.Subject, name)
	if s.route, err = newRoute(cfg.Subject, name, st.CachedInfo().Config.Subjects); err != nil {
		return nil, fmt.Errorf("at-least-once sink: %w", err)
	}
	if err := CheckDurable(st.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if s.mode, err = ResolveAtLeastOnceMode(cfg.Publish, st.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return s, nil
}

// ResolveAtLeastOnceMode is the mode an at-least-once sink configured with
// mode publishes in on a stream configured as stream: PublishAuto becomes
// PublishFast where the stream allows batched publish, else PublishAsync.
func ResolveAtLeastOnceMode(mode PublishMode, stream jetstream.StreamConfig) (PublishMode, error) {
	if mode == PublishAtomic {
		return "", errors.New("publish mode atomic is for exactly-once sinks; at-least-once publishes fast or async")
	}
	resolved, err := ResolvePublishMode(mode, stream)
	if err != nil {
		return "", err
	}
	if resolved == PublishAtomic { // auto on a stream that allows atomic but not batched publish
		resolved = PublishAsync
	}
	return resolved, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (s *AtLeastOnce) Guarantee() string { return AtLeastOnceGuarantee }

// String names the sink in its errors: "at-least-once sink <subject>
// (stream <name>)".
func (s *AtLeastOnce) String() string { return s.name }

// Mode reports how the sink publishes: PublishFast or PublishAsync.
func (s *AtLeastOnce) Mode() PublishMode { return s.mode }

// fail records err as the sink's failure unless it failed before.
func (s *AtLeastOnce) fail(err error) {
	s.emu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.emu.Unlock()
}

// failed reports the sink's failure, if any, without the sink's name:
// "publish: <cause>".
func (s *AtLeastOnce) failed() error {
	s.emu.Lock()
	defer s.emu.Unlock()
	if s.err != nil {
		return fmt.Errorf("publish: %w", s.err)
	}
	return nil
}

// Write publishes every record of batch. A keyed sink checks every key of
// the batch first: a bad one fails the write with nothing of the batch
// published.
func (s *AtLeastOnce) Write(ctx context.Context, batch []byte) error {
	if err := s.route.check(batch); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	if s.mode == PublishFast {
		return s.writeFast(ctx, &it)
	}
	if err := s.failed(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	for it.Next() {
		r := it.Record()
		subj, err := s.route.subject(r.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		m := &nats.Msg{Subject: subj, Data: r.Value}
		if len(r.Key) > 0 {
			m.Header = nats.Header{KeyHeader: []string{string(r.Key)}}
		}
		if err := publishAsync(ctx, s.js, m); err != nil {
			return fmt.Errorf("%s: publish: %w", s, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	return nil
}

// writeFast adds the records to the open fast batch, opening one if
// needed. AddMsg waits while the server is behind (flow control), up to the
// ack timeout, and takes no context: a cancelled task stops at the next
// record instead, leaving the open batch to Close.
func (s *AtLeastOnce) writeFast(ctx context.Context, it *abi.Iter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	done := ctx.Done()
	for it.Next() {
		select {
		case <-done:
			return fmt.Errorf("%s: %w", s, ctx.Err())
		default:
		}
		if s.fp == nil {
			fp, err := jetstreamext.NewFastPublisher(s.js,
				jetstreamext.FastPublishFlowControl{Flow: fastFlow, MaxOutstandingAcks: fastOutstanding, AckTimeout: s.cfg.Timeout},
				jetstreamext.WithFastPublisherErrorHandler(func(err error) { s.fail(fastReplyError(s.route.stream, err)) }))
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			s.fp, s.sent = fp, 0
			if s.m == nil {
				s.m, s.key = &nats.Msg{Subject: s.cfg.Subject, Header: nats.Header{}}, []string{""}
			}
		}
		// The publisher encodes the message before AddMsg returns and
		// keeps nothing of it: one message and header map serve them all.
		r := it.Record()
		subj, err := s.route.subject(r.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		s.m.Subject, s.m.Data = subj, r.Value
		if len(r.Key) > 0 {
			s.key[0] = string(r.Key)
			s.m.Header[KeyHeader] = s.key
		} else {
			delete(s.m.Header, KeyHeader)
		}
		if _, err := s.fp.AddMsg(s.m); err != nil {
			releaseFast(s.fp)
			s.fp = nil
			s.fail(err)
			return fmt.Errorf("%s: %w", s, s.failed())
		}
		s.sent++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	s.last = time.Now()
	if s.idle == nil && !s.closed {
		s.idle = time.AfterFunc(s.cfg.IdleCommit, s.commitIdle)
	}
	return nil
}

// commitIdle commits the open fast batch once no record came for
// IdleCommit, so a quiet input does not let the server drop it.
func (s *AtLeastOnce) commitIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = nil
	if s.fp == nil || s.closed {
		return
	}
	if wait := s.cfg.IdleCommit - time.Since(s.last); wait > 0 {
		s.idle = time.AfterFunc(wait, s.commitIdle)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.commitLocked(ctx); err != nil {
		s.fail(err)
	}
}

// commitLocked commits the open fast batch, if any, and checks that the
// server stored all of it.
func (s *AtLeastOnce) commitLocked(ctx context.Context) error {
	if s.fp == nil {
		return nil
	}
	fp, n := s.fp, s.sent
	s.fp, s.sent = nil, 0
	ack, err := fp.Close(ctx)
	if err != nil {
		return fmt.Errorf("batch of %d messages: %w", n, err)
	}
	// The server ends a batch early at a gap or an error and acknowledges
	// what it stored up to there.
	if ack.BatchSize != uint64(n) {
		return fmt.Errorf("the server stored %d of a batch of %d messages", ack.BatchSize, n)
	}
	return nil
}

// wait blocks until every published message is acknowledged. Its error
// does not name the sink.
func (s *AtLeastOnce) wait(ctx context.Context) error {
	if s.mode == PublishFast {
		s.mu.Lock()
		err := s.commitLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
		}
		return s.failed()
	}
	select {
	case <-s.js.PublishAsyncComplete():
	case <-ctx.Done():
		return fmt.Errorf("waiting for acks: %w", ctx.Err())
	}
	return s.failed()
}

// PreCommit waits until everything written so far is stored.
func (s *AtLeastOnce) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := s.wait(ctx); err != nil {
		return nil, fmt.Errorf("%s: checkpoint %d: %w", s, id, err)
	}
	return nil, nil
}

// Commit does nothing: the output is already stored.
func (s *AtLeastOnce) Commit(ctx context.Context, id int64) error { return nil }

// Recover does nothing.
func (s *AtLeastOnce) Recover(ctx context.Context, id int64, state []byte) error { return nil }

// EndOfInput waits until everything written is stored.
func (s *AtLeastOnce) EndOfInput(ctx context.Context) error {
	if err := s.wait(ctx); err != nil {
		return fmt.Errorf("%s: end of input: %w", s, err)
	}
	return nil
}

// Close stops the idle commit and ends a fast batch still open without
// waiting for the server: what it holds is not covered by a completed
// checkpoint, so a recovery replays it. The connection belongs to the
// caller.
func (s *AtLeastOnce) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	if s.fp != nil {
		releaseFast(s.fp)
		s.fp = nil
	}
	return nil
}
