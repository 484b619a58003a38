package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// memSized is sized with each operator task's limits.memory set to mem.
func memSized(t *testing.T, name string, p int, mem string) *jobspec.Spec {
	t.Helper()
	n := string(rune('0' + p))
	s, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: jetstream, stream: IN, parallelism: `+n+`}]
operators:
  - {name: count, module: count@1, parallelism: `+n+`, limits: {memory: `+mem+`}, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 30ms}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The line of waiting jobs counts the workers' memory budgets as
// placement does: a job whose operators' memory the budgets do not hold
// even with nothing else on the workers says so, and what to do — no job
// that ends makes room for it —, and holds up no job behind it; the job
// behind waits for memory, saying how much it needs and what each worker
// has free, and runs once a job ends. (The line counted slots only: the
// job too big in memory held up every job behind it for good.)
func TestTheLineCountsMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startCaps(ctx, "w1", 20, control.Caps{Memory: 256 << 20})
	e.waitWorkers(1)
	e.submitRunning(t, ctx, memSized(t, "a", 2, "128MiB"))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: memSized(t, "big", 3, "128MiB")}); err != nil {
		t.Fatal(err)
	}
	const want = ReasonTooBigMemory + "needs 384MiB of operator memory (limits.memory), which the live workers' memory budgets do not hold with nothing else on them (w1 256MiB: 256MiB in all): " +
		"lower the operators' limits.memory or their parallelism, or add workers or memory (weir worker -memory)"
	waitFor(t, ctx, e, "big", "too big", func(st control.JobStatus) bool { return st.State == control.JobCreated && st.Reason == want })
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: memSized(t, "small", 1, "128MiB")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "small", "waiting for memory, not behind big", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && strings.HasPrefix(st.Reason, ReasonWaitingForSlots+"needs 128MiB of operator memory (limits.memory), workers have ") &&
			strings.HasSuffix(st.Reason, " (w1 0 bytes of 256MiB)")
	})
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "small", "running", running)
	if st, err := e.api.Job(ctx, "big"); err != nil || st.Reason != want {
		t.Errorf("big once a ended: %q %v", st.Reason, err)
	}
}

// A drain counts the memory budgets of the other workers, and their caps,
// as placement does: a job whose operators' memory the workers left do
// not hold is refused before anything is cordoned, naming the job, the
// memory it needs and each worker's free memory; a worker whose caps
// refuse the job (-max-task-memory) is no room for it. (A drain counted
// slots alone: it moved the job where it then waited.)
func TestDrainCountsMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startCaps(ctx, "w1", 10, control.Caps{Memory: 512 << 20})
	e.fleet.startCaps(ctx, "w2", 10, control.Caps{Memory: 256 << 20})
	e.waitWorkers(2)
	st := e.submitRunning(t, ctx, memSized(t, "a", 2, "192MiB"))
	if got := perWorker(st); got["w1"] != 3 || got["w2"] != 2 {
		t.Fatalf("a's tasks per worker %v; want 3 on w1 (a source, an operator, the sink), 2 on w2", got)
	}
	// Slots to spare, no memory budget, but a cap a's operators are over.
	e.fleet.startCaps(ctx, "w3", 10, control.Caps{MaxTaskMemory: 128 << 20})
	e.waitWorkers(3)
	_, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	const want = "drain w1: no room on the other workers for job a: it needs 384MiB of operator memory (limits.memory), workers have 256MiB free (w2 256MiB of 256MiB), " +
		"counting the 192MiB its own tasks hold on w2 as free; start a worker, raise its -memory, or stop a job, and drain again; nothing was cordoned or stopped"
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("drain: %v\nwant %s", err, want)
	}
	if ws, err := e.api.Workers(ctx); err != nil || ws[0].Cordoned {
		t.Errorf("w1 cordoned by a refused drain: %+v %v", ws, err)
	}
	// With the budget elsewhere, the drain goes ahead.
	e.fleet.startCaps(ctx, "w4", 10, control.Caps{Memory: 1 << 30})
	e.waitWorkers(4)
	p, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	if err != nil || len(p.Jobs) != 1 || p.Jobs[0].Job != "a" {
		t.Fatalf("drain once w4 joined: %+v %v", p, err)
	}
}
