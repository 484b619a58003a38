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

// A JetStream source task's unread count (SourcePending, UNREAD in weir
// job status) is what the task has not processed: what its stream holds
// past the task's read position, fetched records the source holds
// included. Here a slow operator backpressures the source, which holds
// a batch it cannot hand on, the batch its poller took next and the one
// it gathers after; the count left all of them out — the server's
// count of what was not delivered — and so read less than the stream
// holds past the task's position, down to 0 once everything was fetched.
func TestSourceUnreadCountsWhatItHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	misbehave, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "UIN", Subjects: []string{"uin"}})
	const total = 1000
	value := []byte(strings.Repeat("x", 4096)) // a few hundred fill a channel
	for i := 0; i < total; i++ {
		if _, err := n.JS.PublishAsync("uin", value); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the input was not stored")
	}
	// misbehave d spins 0x400000 times per record: a few ms each.
	spec, err := jobspec.Parse("unread.yaml", []byte(`name: unread
sources: [{name: in, kind: jetstream, stream: UIN}]
operators: [{name: op, module: `+misbehave+`, config: "d\0\0@\0", inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: uout, input: {from: op}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	// Once the source task is held up (it read some, not all, and the
	// operator is behind), its count is what the stream holds past its
	// read position: the stream's sequences are the records, 1 to total.
	// A heartbeat's counts are taken one after the other, as the source
	// fetches on: they may be a message or two apart.
	var src control.TaskStatus
	waitJob(t, ctx, n, "unread", "the source held up by the slow operator", func(st control.JobStatus) bool {
		var op control.TaskStatus
		for _, task := range st.Tasks {
			switch task.Task {
			case "in-0":
				src = task
			case "op-0":
				op = task
			}
		}
		s := src.Stats
		return s.SourcePending != nil && s.SourceReadSeq != nil && *s.SourceReadSeq > 0 && *s.SourceReadSeq < total &&
			op.Stats.RecordsIn > 0 && op.Stats.RecordsIn < total-500
	})
	readSeq, pending := int64(*src.Stats.SourceReadSeq), *src.Stats.SourcePending
	if want := total - readSeq; pending < want-2 || pending > want+1 {
		t.Errorf("source read through sequence %d of %d, unread %d; want about %d", readSeq, total, pending, want)
	}
}
