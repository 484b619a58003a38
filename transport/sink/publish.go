package sink

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackTimeout bounds the wait for one asynchronous publish acknowledgement;
// past it the publish counts as failed (e.g. the server restarted).
const ackTimeout = 30 * time.Second

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
