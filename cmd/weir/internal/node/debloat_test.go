package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A job's tasks debloat their input buffers (channels.debloat): behind a
// slow operator the channel into it shrinks from its 1 MiB to what the
// operator takes in the target time, the status reports the size, and the
// channel holds no more than that — the backlog stays in the stream,
// where a barrier does not wait behind it.
func TestDebloatShrinksASlowOperatorsInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	misbehave, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "DIN", Subjects: []string{"din"}})
	const total, size = 1000, 4096
	value := []byte(strings.Repeat("x", size))
	for i := 0; i < total; i++ {
		if _, err := n.JS.PublishAsync("din", value); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the input was not stored")
	}
	// misbehave d spins 0x400000 times per record: a few ms each, so at
	// most ~1 MB/s, 100 KB in the target's 100ms (a loaded machine is
	// slower, and the buffer smaller).
	spec, err := jobspec.Parse("debloat.yaml", []byte(`name: debloat
sources: [{name: in, kind: jetstream, stream: DIN}]
operators: [{name: op, module: `+misbehave+`, config: "d\0\0@\0", inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: dout, input: {from: op}}]
checkpointing: {interval: 500ms}
channels: {debloat: 100ms}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	const bound = 512 << 10
	var op control.TaskStatus
	waitJob(t, ctx, n, "debloat", "the operator's input buffer shrunk and holding no more than that", func(st control.JobStatus) bool {
		for _, task := range st.Tasks {
			if task.Task == "op-0" {
				op = task
			}
		}
		s := op.Stats
		return s.InputBufferBytes > 0 && s.InputBufferBytes <= bound && s.RecordsIn < total-100 &&
			s.QueuedRecords*size <= s.InputBufferBytes+2*size
	})
	if b := op.Stats.InputBufferBytes; b < jobspec.MinChannelBuffer {
		t.Errorf("op-0's input buffer is %d bytes, under channels.buffer's least (%d)", b, jobspec.MinChannelBuffer)
	}
	t.Logf("op-0: input buffer %d bytes, %d records queued, %d processed", op.Stats.InputBufferBytes, op.Stats.QueuedRecords, op.Stats.RecordsIn)
}
