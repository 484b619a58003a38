package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/natsconn"
)

// ErrStreamNotDurable is returned for a sink stream that acknowledges
// messages before it has written them (persist_mode async): a server crash
// can then lose output that a completed checkpoint counted as stored.
var ErrStreamNotDurable = errors.New("sink stream not durable")

// CheckDurable refuses a stream that can lose messages it acknowledged,
// which neither an exactly-once nor an at-least-once sink can build on.
func CheckDurable(stream jetstream.StreamConfig) error {
	if stream.PersistMode == jetstream.AsyncPersistMode {
		return fmt.Errorf("%w: stream %s acknowledges messages before writing them (persist_mode async), so a server crash can lose output a completed checkpoint counted as stored; use persist_mode default", ErrStreamNotDurable, stream.Name)
	}
	return nil
}

// Default acknowledgement timeouts: past them a publish or a commit got no
// answer. A stream electing a leader gives none, so the sink publishes
// again what was not acknowledged, for up to natsconn.ElectionWait; then
// the checkpoint (at-least-once) or the commit (exactly-once) fails, and
// the job recovers.
const (
	// DefaultAtLeastOnceTimeout bounds the at-least-once sink's wait for an
	// acknowledgement.
	DefaultAtLeastOnceTimeout = 30 * time.Second
	// DefaultExactlyOnceTimeout bounds the exactly-once sink's wait for an
	// acknowledgement of its commit.
	DefaultExactlyOnceTimeout = 10 * time.Second
)

// asyncPublisher is a sink's async publishes through js, watched for
// their stream's deletion. A stream deleted under async publishes fails
// them in two ways that nats.go ends only at its ack timeout (minutes, if
// so configured) or after retries: those its server had taken and not
// stored yet get no answer at all, their futures waiting out the ack
// timeout (and holding their places among the publishes the client
// allows out, which stalls the publishes after them), and those after it
// get "no responders", which nats.go publishes again twice, 250 ms apart,
// before failing them with jetstream.ErrNoStreamResponse. A stream
// electing a leader gives the same two, and is waited out. So a wait on
// the publishes — for their acknowledgements (awaitAcks), for a place
// among those out (publish) — looks the stream up: at once after a
// publish that nobody answered (publishFailed), no more often than every
// natsconn.ElectionTry so, and every ElectionTry the wait lasts. A stream
// not found ends the wait with an error naming it; any other answer (a
// replica's, a timeout in an election) lets it go on. A publish that
// does not wait (the client has a place for it) looks nothing up.
type asyncPublisher struct {
	js     jetstream.JetStream
	failed chan struct{} // a publish nobody answered since a wait last looked

	mu     sync.Mutex
	looked time.Time // the last lookup of the stream
}

// newAsyncPublisher watches the async publishes of js, whose error
// handler is to pass their failures to publishFailed.
func newAsyncPublisher(js jetstream.JetStream) *asyncPublisher {
	return &asyncPublisher{js: js, failed: make(chan struct{}, 1)}
}

// publishFailed takes err, an async publish's failure, from the error
// handler: nobody answering it (no stream took it, after nats.go's
// retries) wakes a wait, to look the stream up.
func (p *asyncPublisher) publishFailed(err error) {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		select {
		case p.failed <- struct{}{}:
		default:
		}
	}
}

// publish publishes m, to stream, asynchronously, waiting — as
// backpressure — while the client has its maximum of unacknowledged
// messages out, instead of failing as nats.go does after its stall wait;
// the wait ends with ctx, or when stream is found gone.
func (p *asyncPublisher) publish(ctx context.Context, stream string, m *nats.Msg) error {
	var stalled time.Time // since when, after a lookup
	for {
		_, err := p.js.PublishMsgAsync(m)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		woke, long := false, false
		select {
		case <-p.failed:
			woke = true
		default:
		}
		if stalled.IsZero() {
			stalled = time.Now()
		} else if time.Since(stalled) >= natsconn.ElectionTry {
			long, stalled = true, time.Now()
		}
		if woke || long {
			if err := p.lookup(ctx, stream, long); err != nil {
				return err
			}
		}
	}
}

// awaitAcks waits until every async publish out is acknowledged or
// failed, until ctx ends, or until stream, the publishes', is found
// gone. Its error does not name the sink.
func (p *asyncPublisher) awaitAcks(ctx context.Context, stream string) error {
	done := p.js.PublishAsyncComplete()
	tick := time.NewTicker(natsconn.ElectionTry)
	defer tick.Stop()
	for {
		long := false
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for acks: %w", ctx.Err())
		case <-p.failed:
		case <-tick.C:
			long = true
		}
		if err := p.lookup(ctx, stream, long); err != nil {
			return fmt.Errorf("waiting for acks: %w", err)
		}
	}
}

// lookup looks stream up, unless it did less than natsconn.ElectionTry
// ago and always is not set, and returns an error naming it when it does
// not exist (wrapping jetstream.ErrStreamNotFound); nil for any other
// answer.
func (p *asyncPublisher) lookup(ctx context.Context, stream string, always bool) error {
	p.mu.Lock()
	if !always && !p.looked.IsZero() && time.Since(p.looked) < natsconn.ElectionTry {
		p.mu.Unlock()
		return nil
	}
	p.looked = time.Now()
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, natsconn.ElectionTry)
	defer cancel()
	if _, err := p.js.Stream(ctx, stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	return nil
}
