package job

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// endInputCalls records each fake worker's EndInput requests.
var endInputCalls sync.Map // *fakeWorker → *[]control.EndInput

var endInputMu sync.Mutex

// EndInput implements control.InputEnder: it records the request.
func (w *fakeWorker) EndInput(_ context.Context, e control.EndInput) error {
	endInputMu.Lock()
	defer endInputMu.Unlock()
	v, _ := endInputCalls.LoadOrStore(w, new([]control.EndInput))
	l := v.(*[]control.EndInput)
	*l = append(*l, e)
	return nil
}

func (w *fakeWorker) endInputs() []control.EndInput {
	endInputMu.Lock()
	defer endInputMu.Unlock()
	v, ok := endInputCalls.Load(w)
	if !ok {
		return nil
	}
	return slices.Clone(*v.(*[]control.EndInput))
}

// A drain tells the workers of the source tasks to end their input; a
// failover meanwhile does not undo it: the next attempt is deployed to end
// its input as it restores (Deploy.EndInput), and once every task's input
// ended the job finishes with its final savepoint, which the drain
// returns and the status names. A job that ended, or is not there, is
// refused.
func TestDrainJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	st := e.submitRunning(t, ctx, spec(t, "d", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"))
	if d := w.lastDeploy("d"); d.EndInput {
		t.Fatalf("first deploy %+v ends its input", d)
	}
	type result struct {
		cp  control.CheckpointInfo
		err error
	}
	drained := make(chan result, 1)
	go func() {
		cp, err := e.api.DrainJob(ctx, "d")
		drained <- result{cp, err}
	}()
	waitFor(t, ctx, e, "d", "the sources told to end their input", func(control.JobStatus) bool { return len(w.endInputs()) > 0 })
	got := w.endInputs()[0]
	slices.Sort(got.Tasks)
	if got.Job != "d" || got.Attempt != st.Attempt || !slices.Equal(got.Tasks, []string{"in-0", "in-1"}) {
		t.Fatalf("end-input %+v, want the source tasks of attempt %d", got, st.Attempt)
	}
	if now, _ := e.api.Job(ctx, "d"); !now.Drained || now.State != control.JobRunning {
		t.Fatalf("while draining: %s, drained %v", now.State, now.Drained)
	}
	if _, err := e.api.StopJob(ctx, "d"); err == nil || !strings.Contains(err.Error(), "stop d: the job is being drained") {
		t.Errorf("stop while draining: %v; want it refused", err)
	}
	// A failover before the end: the next attempt ends its input at once.
	if err := w.client.Failed(ctx, control.TaskRef{Job: "d", Attempt: st.Attempt, Task: "count-0"}, control.FailureUnknown, "injected"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "d", "the next attempt", func(s control.JobStatus) bool { return s.Attempt > st.Attempt && s.State == control.JobRunning })
	if d := w.lastDeploy("d"); !d.EndInput || d.Attempt != st.Attempt {
		t.Fatalf("deploy of attempt %d after the failover: %+v, want it to end its input", st.Attempt, d)
	}
	endInputs(t, ctx, w, st, allTasks(st)...)
	var r result
	select {
	case r = <-drained:
	case <-ctx.Done():
		t.Fatal("the drain did not return")
	}
	st, _ = e.api.Job(ctx, "d")
	if r.err != nil || r.cp.ID == 0 || !r.cp.Savepoint || st.State != control.JobFinished || st.DrainedWithSavepoint != r.cp.ID ||
		!strings.HasPrefix(st.Reason, "drained: ") || !strings.Contains(st.Reason, "final savepoint") {
		t.Fatalf("drain: %+v, %v; job %s (%s), drained with %d", r.cp, r.err, st.State, st.Reason, st.DrainedWithSavepoint)
	}
	if _, err := e.api.DrainJob(ctx, "d"); err == nil || !strings.Contains(err.Error(), "job d already finished") || !strings.Contains(err.Error(), "nothing to drain") {
		t.Errorf("drain of the finished job: %v", err)
	}
	if _, err := e.api.DrainJob(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `no job "nope"`) {
		t.Errorf("drain of no job: %v", err)
	}
}

// A drain outlives a coordinator restart: the job's record keeps it, so
// the attempt the next coordinator deploys ends its input as it restores,
// and the job finishes drained.
func TestDrainOutlivesACoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	w := e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	st := e.submitRunning(t, ctx, spec(t, "dr", "checkpointing: {interval: 1h}\n"))
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	go func() { _, _ = e.api.DrainJob(dctx, "dr") }() // the coordinator stops under it
	waitFor(t, ctx, e, "dr", "the sources told to end their input", func(control.JobStatus) bool { return len(w.endInputs()) > 0 })
	stop()
	dcancel()
	stop = startManager()
	defer stop()
	st = waitFor(t, ctx, e, "dr", "resumed", func(s control.JobStatus) bool { return s.Attempt > st.Attempt && s.State == control.JobRunning })
	if d := w.lastDeploy("dr"); !d.EndInput || d.Attempt != st.Attempt || !st.Drained {
		t.Fatalf("resumed attempt %d (drained %v) deployed %+v, want it to end its input", st.Attempt, st.Drained, d)
	}
	type result struct {
		cp  control.CheckpointInfo
		err error
	}
	again := make(chan result, 1)
	go func() { // asked again: waits for the same end
		cp, err := e.api.DrainJob(ctx, "dr")
		again <- result{cp, err}
	}()
	time.Sleep(100 * time.Millisecond)
	endInputs(t, ctx, w, st, allTasks(st)...)
	r := <-again
	cp, err := r.cp, r.err
	st, _ = e.api.Job(ctx, "dr")
	if err != nil || st.State != control.JobFinished || st.DrainedWithSavepoint == 0 || cp.ID != st.DrainedWithSavepoint {
		t.Fatalf("drain again: %+v, %v; job %s (%s), drained with %d", cp, err, st.State, st.Reason, st.DrainedWithSavepoint)
	}
}
