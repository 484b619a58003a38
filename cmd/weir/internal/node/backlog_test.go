package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestBacklogCheckpointsDoNotWaitForCommits starts a keyed count with an
// exactly-once sink on a stream that already holds a backlog. The sink
// commits slower than the operators produce (async publish, an ack per
// record), so its commits queue: a sink whose queue is full waits in its
// commit for room, takes no input meanwhile, and every task upstream
// waits with it. A barrier sent then waited behind a whole commit of an
// earlier checkpoint — with a large backlog, past the checkpoint timeout,
// and the failover met the same backlog again. The coordinator now sends
// the next barrier only once the sink took the last checkpoint's commit
// (EventCommitting), so no barrier waits for a commit: every checkpoint's
// sink ack says none (commit_wait_ns, measured from the trigger), the job
// catches up without a failed checkpoint or a restart, and the output
// holds every key's counts 1..n once.
func TestBacklogCheckpointsDoNotWaitForCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")

	in := newKeyedInput(t, ctx, n.JS, 16)
	const backlog = 15_000
	publishAsync(t, ctx, n.JS, in, backlog)

	// A timeout no healthy checkpoint comes near, and none tolerated.
	spec, err := jobspec.Parse("backlog.yaml", []byte(`name: backlog
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+mods["wordcount"]+`, parallelism: 2, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, publish: async, input: {from: count}}]
checkpointing: {interval: 50ms, timeout: 2m, tolerable-failures: 0}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 100}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	in.checkCounts()

	st, err := n.API.Job(ctx, "backlog")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 {
		t.Errorf("job after the backlog: %s (%s), attempt %d, %d restarts; want running in attempt 1", st.State, st.Reason, st.Attempt, st.Restarts)
	}
	cks, err := n.API.Checkpoints(ctx, "backlog")
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for _, c := range cks {
		switch c.Status {
		case control.CheckpointFailed:
			t.Errorf("checkpoint %d failed: %s", c.ID, c.Reason)
		case control.CheckpointCompleted, control.CheckpointDiscarded:
			completed++
			if w := c.Tasks["out-0"][control.MetricCommitWaitNanos]; w != 0 {
				t.Errorf("checkpoint %d: its barrier waited %s for the sink's earlier commits", c.ID, time.Duration(w))
			}
			if c.Tasks["out-0"][control.MetricCommitReport] != 1 {
				t.Errorf("checkpoint %d: the sink's ack has no %s: %v", c.ID, control.MetricCommitReport, c.Tasks["out-0"])
			}
		}
	}
	if completed < 2 {
		t.Errorf("%d checkpoints completed while the job caught up, want several", completed)
	}
	t.Logf("%d checkpoints while the job caught up %d records", completed, backlog)
}

// publishAsync sends count records of in to IN without waiting for each
// acknowledgement: for those of a thousand at a time.
func publishAsync(t *testing.T, ctx context.Context, js jetstream.JetStream, in *keyedInput, count int) {
	t.Helper()
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("the backlog was not stored")
		}
	}
	for i := 0; i < count; i++ {
		if i%1000 == 0 {
			wait()
		}
		k := fmt.Sprintf("k%02d", (in.total+i)%in.keys)
		in.sent[in.outKey(k)]++
		m := nats.NewMsg("in." + k)
		m.Header.Set("Weir-Key", k)
		m.Data = in.value(k)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	in.total += count
	wait()
}
