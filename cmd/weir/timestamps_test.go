package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/sink"
)

// A sink with timestamps: true publishes each record's time in Weir-Time,
// the header sources read it from: a job reading the output takes the
// event time, through an operator too. Without it the sink publishes none.
func TestSinkTimestampsCarryTheEventTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n := outputJob(t, ctx, `name: stamped
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: pass, module: ../../guests/wat/passthrough.wasm, inputs: [{from: in}]}]
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: pass}, timestamps: true}
  - {name: plain, kind: jetstream, stream: PLAIN, subject: plain, input: {from: in}}
checkpointing: {interval: 50ms}
`)
	m := nats.NewMsg("in.x")
	m.Header.Set(sink.TimeHeader, "1733300000123")
	m.Data = []byte("v")
	if _, err := n.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]string{"OUT": "1733300000123", "PLAIN": ""} {
		got := awaitFirst(t, ctx, n.JS, stream, func() string {
			dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer dcancel()
			st, err := n.API.Job(dctx, "stamped")
			return fmt.Sprintf("%+v %v", st, err)
		})
		if h := got.Header.Get(sink.TimeHeader); h != want || string(got.Data) != "v" {
			t.Errorf("stream %s: %q with Weir-Time %q, want %q", stream, got.Data, h, want)
		}
	}
}

// awaitFirst waits until stream holds a message and returns its first.
func awaitFirst(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, diag func() string) *jetstream.RawStreamMsg {
	t.Helper()
	for {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().State.Msgs > 0 {
			m, err := st.GetMsg(ctx, st.CachedInfo().State.FirstSeq)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s holds nothing: %s", stream, diag())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
