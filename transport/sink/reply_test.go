package sink

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/natsconn"
)

// wantStreamGone checks a fast batch's failure against a deleted stream,
// which nobody answers, as while a stream elects a leader: the sink looked
// the stream up and failed with stream not found rather than wait for a
// leader, the error names the stream as not taking the messages, and it
// says nothing of JSON (the fast publisher read the server's bodiless "no
// responders" reply as JSON and reported "unexpected end of JSON input").
func wantStreamGone(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) ||
		!strings.Contains(err.Error(), "stream OUT took no message of the batch") ||
		strings.Contains(err.Error(), "JSON") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a fast batch to a deleted stream failed with %v", err)
	}
}

// A fast batch whose stream was deleted fails naming the stream, in the
// exactly-once sink's commit and in the at-least-once sink's checkpoint.
func TestFastBatchToADeletedStream(t *testing.T) {
	t.Run("exactly-once", func(t *testing.T) {
		ctx, js, s := sinkOn(t, embedded.Config{}, PublishFast, ExactlyOnceConfig{Timeout: 2 * time.Second})
		must(t, s.Write(ctx, batchOf(0, 10)))
		_, err := s.PreCommit(ctx, 1)
		must(t, err)
		must(t, js.DeleteStream(ctx, "OUT"))
		must(t, s.Commit(ctx, 1))
		err = s.Wait(ctx)
		wantStreamGone(t, err)
	})
	t.Run("at-least-once", func(t *testing.T) {
		nc, js, ctx := outSetup(t, outStream(PublishFast))
		s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", Publish: PublishFast, Timeout: 2 * time.Second, IdleCommit: time.Hour})
		must(t, err)
		defer s.Close()
		must(t, js.DeleteStream(ctx, "OUT"))
		// The first message waits for its acknowledgement: the write
		// fails, or else the checkpoint.
		if err = s.Write(ctx, batchOf(0, 10)); err == nil {
			_, err = s.PreCommit(ctx, 1)
		}
		wantStreamGone(t, err)
	})
}
