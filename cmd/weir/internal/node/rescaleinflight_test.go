package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestRescaleFromUnalignedCheckpoint rescales a keyed stateful operator
// (the Go keyedcount, slowed to a record per millisecond so its input
// backs up) from unaligned checkpoints that hold in-flight records, 2 → 3
// → 1 subtasks: the job is canceled, and restored from its latest
// checkpoint under the new parallelism. The in-flight records of the
// operator's input and output channels are replayed by the subtasks that
// hold their keys now, so the exactly-once output holds every key's
// counts 1..n with no gap and no repeat.
func TestRescaleFromUnalignedCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inj := &injector{piece: 1}
	n, mods := oneNodeHooked(t, ctx, inj.hooks(), "keyedcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec := func(counters int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: count, module: %s, parallelism: %d, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count, partition: round-robin}}]
checkpointing: {interval: 100ms, mode: unaligned, retained: 3}
`, mods["keyedcount"], counters)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	in := newKeyedInput(t, ctx, n.JS, 13)
	in.value = func(string) []byte { return []byte("x") } // keyedcount counts by key
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(2)}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in.publish(50)
	par := 2
	for _, next := range []int{3, 1} {
		// Cancel with records in flight; restore the latest checkpoint
		// under the new parallelism once it holds some (until then, under
		// the same one, and try again).
		for try := 1; ; try++ {
			in.send(3000)
			id, chans := inFlightCheckpoint(t, ctx, n)
			p := par
			if chans > 0 {
				p = next
			} else if try == 10 {
				t.Fatalf("no latest checkpoint held in-flight records in %d tries", try)
			}
			if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: fmt.Sprint(id), Spec: spec(p)}); err != nil {
				t.Fatalf("restore checkpoint %d (%d bytes in flight) at parallelism %d: %v", id, chans, p, err)
			}
			waitJob(t, ctx, n, "counts", "restored job running", running)
			if chans > 0 {
				t.Logf("restored checkpoint %d with %d bytes in flight at parallelism %d → %d", id, chans, par, p)
				par = p
				break
			}
		}
		in.await()
	}
	in.publish(100)
	in.checkCounts()
}

// inFlightCheckpoint waits for a completed checkpoint of job counts whose
// tasks hold channel state, cancels the job and returns its latest
// completed checkpoint and the channel state bytes that one holds.
func inFlightCheckpoint(t *testing.T, ctx context.Context, n *Node) (int64, int64) {
	t.Helper()
	latest := func() (int64, int64) {
		cks, err := n.API.Checkpoints(ctx, "counts")
		if err != nil {
			t.Fatal(err)
		}
		var id, chans int64
		for _, c := range cks {
			if c.Status == control.CheckpointCompleted && !c.Savepoint && c.ID > id {
				id, chans = c.ID, 0
				for _, m := range c.Tasks {
					chans += m[control.MetricChannelStateBytes]
				}
			}
		}
		return id, chans
	}
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if !poll(wait, func() bool { _, chans := latest(); return chans > 0 }) {
		st, _ := n.API.Job(ctx, "counts")
		cks, _ := n.API.Checkpoints(ctx, "counts")
		for _, c := range cks[max(0, len(cks)-3):] {
			t.Logf("checkpoint %d: %s %s, %d/%d acked, %v", c.ID, c.Status, c.Reason, c.Acked, c.Total, c.Tasks)
		}
		t.Logf("job %s (%s), attempt %d", st.State, st.Reason, st.Attempt)
	}
	if _, err := n.API.CancelJob(ctx, "counts"); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
	id, chans := latest()
	if id == 0 {
		t.Fatal("no completed checkpoint")
	}
	return id, chans
}
