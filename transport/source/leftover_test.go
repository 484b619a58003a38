package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A task canceled while its source starts — the attempt failed over, or
// was canceled — cancels the request that creates the source's consumer.
// The server creates the consumer all the same, and nothing deleted it:
// each such start left a consumer on the stream until its inactivity
// threshold (five minutes), counting against the stream's and the
// account's consumer limits, on a job failing over again and again.
func TestJetStreamStartCanceledLeavesNoConsumer(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 10)
	// The start's context is canceled once the server has the request to
	// create the consumer, before its answer is back: a second connection
	// sees the request as the server does.
	spy, _ := embeddedtest.Connect(t, srv)
	created := make(chan struct{}, 1)
	if _, err := spy.Subscribe("$JS.API.CONSUMER.CREATE.IN.>", func(*nats.Msg) {
		select {
		case created <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	must(t, spy.Flush())
	const starts = 20
	canceled := 0
	for range starts {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
		must(t, err)
		pctx, pcancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-created:
				pcancel()
			case <-stop:
			}
		}()
		if _, _, err := src.Poll(pctx); err != nil {
			canceled++
		}
		close(stop)
		pcancel()
		must(t, src.Close())
		select { // a start that was not canceled
		case <-created:
		default:
		}
	}
	must(t, nc.Flush())
	stream, err := js.Stream(ctx, "IN")
	must(t, err)
	var names []string
	for name := range stream.ListConsumers(ctx).Info() {
		names = append(names, name.Name)
	}
	t.Logf("%d of %d starts canceled", canceled, starts)
	if canceled == 0 {
		t.Skip("no start was canceled while its consumer was created")
	}
	if len(names) != 0 {
		t.Errorf("%d of %d starts canceled, %d closed; consumers left on the stream: %v", canceled, starts, starts, names)
	}
}
