package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
