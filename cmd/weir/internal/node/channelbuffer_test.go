package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A job whose channels.buffer is the least allowed (16 KiB) carries many
// times that through its channels, every record once: the bound slows
// the producer, it loses nothing.
func TestSmallChannelBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	pass, err := filepath.Abs("../../../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"CBIN", "CBOUT"} {
		if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name)}, Duplicates: 5 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := jobspec.Parse("cb.yaml", []byte(`name: cb
sources: [{name: in, kind: jetstream, stream: CBIN}]
operators: [{name: op, module: `+pass+`, parallelism: 2, inputs: [{from: in, partition: round-robin}]}]
sinks: [{name: out, kind: jetstream, stream: CBOUT, subject: cbout, input: {from: op}}]
checkpointing: {interval: 100ms}
channels: {buffer: 16KiB}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const records = 3000
	value := strings.Repeat("v", 200)
	for i := range records {
		if _, err := n.JS.PublishAsync("cbin", []byte(fmt.Sprintf("%05d%s", i, value))); err != nil {
			t.Fatal(err)
		}
	}
	<-n.JS.PublishAsyncComplete()
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := n.JS.Stream(ctx, "CBOUT")
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got == records {
			break
		} else if got > records {
			t.Fatalf("CBOUT holds %d messages, want %d", got, records)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the output did not arrive")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
