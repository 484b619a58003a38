package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
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

// publishAsync publishes m asynchronously, waiting — as backpressure — while
// the client has its maximum of unacknowledged messages out, instead of
// failing as nats.go does after its stall wait.
func publishAsync(ctx context.Context, js jetstream.JetStream, m *nats.Msg) error {
	for {
		_, err := js.PublishMsgAsync(m)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// releaseFast ends fp without waiting for the server: it sends the
// end-of-batch commit and gives up on the answer at once, which drops the
// publisher's acknowledgement subscription (and the goroutine nats.go runs
// for it) from the connection — a worker's connection outlives its tasks.
// The messages fp sent are stored already; ending the batch only closes
// it. A publisher that ended already is left as it is.
func releaseFast(fp jetstreamext.FastPublisher) {
	if fp.IsClosed() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = fp.Close(ctx)
}

// fastReplyError gives an error of a fast publisher's reply handler its
// cause, naming stream, the stream the batch goes to. The publisher reads
// every reply to a batch message as JSON, and the server's "no responders"
// status — no stream took the message: the stream was deleted, or a
// clustered stream has no leader — has no body, which it reported as
// "unexpected end of JSON input". Such an error wraps nats.ErrNoResponders.
func fastReplyError(stream string, err error) error {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		return err
	}
	if syn.Offset == 0 {
		return fmt.Errorf("stream %s took no message of the batch: %w; the stream is gone or has no leader", stream, nats.ErrNoResponders)
	}
	return fmt.Errorf("stream %s answered the batch with a reply that is not JSON: %w", stream, err)
}
