package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// endInputs reports the end of input of the tasks of the job's attempt,
// from w.
func endInputs(t *testing.T, ctx context.Context, w *fakeWorker, st control.JobStatus, tasks ...string) {
	t.Helper()
	for _, task := range tasks {
		if err := w.client.InputEnded(ctx, control.TaskRef{Job: st.Name, Attempt: st.Attempt, Task: task}); err != nil {
			t.Fatal(err)
		}
	}
}

// allTasks lists the tasks of the job's attempt.
func allTasks(st control.JobStatus) []string {
	var out []string
	for task := range st.Assignment {
		out = append(out, task)
	}
	return out
}

// A job finishes once every task's input ended: with a stop savepoint
// whose completion the workers handle (Stop) before the job is finished.
// The sources' ends are not enough: the rest of the graph must have
// handled the end of its input too.
func TestInputEndedFinishesWithASavepoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	st := e.submitRunning(t, ctx, spec(t, "b", "checkpointing: {interval: 1h}\n"))
	endInputs(t, ctx, w, st, "in-0", "in-0", "in-1") // in-0 twice
	time.Sleep(200 * time.Millisecond)
	if now, _ := e.api.Job(ctx, "b"); now.State != control.JobRunning {
		t.Fatalf("job %s (%s) with only its sources ended", now.State, now.Reason)
	}
	endInputs(t, ctx, w, st, allTasks(st)...)
	st = waitFor(t, ctx, e, "b", "finished", func(s control.JobStatus) bool { return s.State.Terminal() })
	if st.State != control.JobFinished || !strings.Contains(st.Reason, "final savepoint") || st.Restarts != 0 {
		t.Fatalf("status %s (%s), %d restarts", st.State, st.Reason, st.Restarts)
	}
	cps, err := e.api.Checkpoints(ctx, "b")
	if err != nil || len(cps) == 0 || !cps[0].Savepoint || cps[0].Status != control.CheckpointCompleted {
		t.Fatalf("checkpoints %+v, %v; want a completed savepoint", cps, err)
	}
	w.mu.Lock()
	stops := w.stops
	w.mu.Unlock()
	if len(stops) != 1 || stops[0].CheckpointID != cps[0].ID {
		t.Fatalf("stops %+v, want one for savepoint %d", stops, cps[0].ID)
	}
}

// A final savepoint that fails (here: times out, the tasks never ack it)
// is taken again; a worker that cannot bring its tasks to rest after it
// (a sink's commit failed) fails the attempt, and the next attempt, whose
// sources end again, finishes.
func TestInputEndedRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	st := e.submitRunning(t, ctx, spec(t, "r", "checkpointing: {interval: 1h, timeout: 200ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"))
	w.mu.Lock()
	w.noAck = true
	w.stopErr = errors.New("task out-0: sink: commit failed")
	w.mu.Unlock()
	endInputs(t, ctx, w, st, allTasks(st)...)
	// The first savepoint times out; let the next one complete.
	waitFor(t, ctx, e, "r", "a failed savepoint", func(control.JobStatus) bool {
		cps, _ := e.api.Checkpoints(ctx, "r")
		return len(cps) > 0 && cps[0].Status == control.CheckpointFailed
	})
	w.mu.Lock()
	w.noAck = false
	w.mu.Unlock()
	st = waitFor(t, ctx, e, "r", "a restart", func(s control.JobStatus) bool { return s.Attempt == 2 && s.State == control.JobRunning })
	if len(st.Failures) == 0 || !strings.Contains(st.Failures[0].Reason, "worker w1 could not commit it: task out-0: sink: commit failed") ||
		st.Failures[0].Kind != control.FailureFinalSavepoint {
		t.Fatalf("failures %+v", st.Failures)
	}
	endInputs(t, ctx, w, st, allTasks(st)...)
	st = waitFor(t, ctx, e, "r", "finished", func(s control.JobStatus) bool { return s.State.Terminal() })
	if st.State != control.JobFinished {
		t.Fatalf("status %s (%s)", st.State, st.Reason)
	}
}

// The final savepoint of an attempt that fails over meanwhile is given up,
// and the next attempt's ends of input, which may come while the old
// attempt's savepoint waits to be tried again, still end the job.
func TestInputEndedAcrossAFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	st := e.submitRunning(t, ctx, spec(t, "f", "checkpointing: {interval: 1h, timeout: 100ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"))
	w.mu.Lock()
	w.noAck = true
	w.mu.Unlock()
	endInputs(t, ctx, w, st, allTasks(st)...)
	waitFor(t, ctx, e, "f", "a failed savepoint", func(control.JobStatus) bool {
		cps, _ := e.api.Checkpoints(ctx, "f")
		return len(cps) > 0 && cps[0].Status == control.CheckpointFailed
	})
	w.mu.Lock()
	w.noAck = false
	w.mu.Unlock()
	if err := w.client.Failed(ctx, control.TaskRef{Job: "f", Attempt: 1, Task: "count-0"}, control.FailureUnknown, "injected"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "f", "attempt 2", func(s control.JobStatus) bool { return s.Attempt == 2 && s.State == control.JobRunning })
	endInputs(t, ctx, w, st, allTasks(st)...)
	st = waitFor(t, ctx, e, "f", "finished", func(s control.JobStatus) bool { return s.State.Terminal() })
	if st.State != control.JobFinished {
		t.Fatalf("status %s (%s)", st.State, st.Reason)
	}
}
