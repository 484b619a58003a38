package job

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// waiting reports whether a job waits for a worker to join in state.
func waiting(state control.JobState) func(control.JobStatus) bool {
	return func(st control.JobStatus) bool { return st.State == state && st.Reason == ReasonWaitingForWorker }
}

// A job submitted before any worker joined waits for one, created and
// saying so, and deploys when one joins: the wait is no restart attempt.
func TestSubmitWaitsForAWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for a worker", waiting(control.JobCreated))
	ls, err := e.api.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Reason != ReasonWaitingForWorker {
		t.Errorf("job ls %+v, want wc waiting for a worker", ls)
	}
	e.fleet.start(ctx, "w1")
	st := waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 || st.Reason != "" {
		t.Errorf("status after the worker joined %+v", st)
	}
}

// A job whose only worker is lost fails over once and waits for another
// worker, restarting, without using up its restart attempts meanwhile.
func TestFailoverWaitsForAWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	e.submitRunning(t, ctx, s)
	w1.kill()
	waitFor(t, ctx, e, "wc", "waiting for a worker", waiting(control.JobRestarting))
	e.fleet.start(ctx, "w2")
	st := waitFor(t, ctx, e, "wc", "a checkpoint in attempt 2", func(st control.JobStatus) bool {
		return st.Attempt == 2 && st.State == control.JobRunning && st.LatestCheckpoint > st.RestoredFrom
	})
	// Running again: no reason; the failure it recovered from is the
	// last failure, of attempt 1.
	if lf := st.LastFailure; st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 || st.Reason != "" ||
		lf == nil || *lf != st.Failures[0] || lf.Attempt != 1 || lf.Reason != "worker w1 lost" {
		t.Errorf("status after w2 joined %+v", st)
	}
}

// A wait that runs out counts as one failure, with a reason that says so.
func TestWorkerWaitRunsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{WorkerWait: 50 * time.Millisecond})
	s := spec(t, "wc", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitRunsOut(t, ctx, e, "no worker joined within 50ms")
}

// waitRunsOut waits for job wc, whose restart strategy allows one restart,
// to fail, each of its two attempts with the failure want: its wait for
// room (a worker, free slots) ran out.
func waitRunsOut(t *testing.T, ctx context.Context, e *env, want string) {
	t.Helper()
	st := waitFor(t, ctx, e, "wc", "failed", func(st control.JobStatus) bool { return st.State == control.JobFailed })
	if st.Reason != want+" (after 1 restart attempt)" || st.Restarts != 1 || len(st.Failures) != 2 {
		t.Fatalf("status %+v, want failed after one wait per attempt", st)
	}
	for _, f := range st.Failures {
		if f.Reason != want || f.Kind != control.FailurePlacement {
			t.Errorf("failure %+v, want reason %q, kind %s", f, want, control.FailurePlacement)
		}
	}
}

// A cancel ends the wait for a worker at once (the default wait is
// minutes, longer than the test's deadline).
func TestCancelWhileWaitingForAWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	s := spec(t, "wc", "")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for a worker", waiting(control.JobCreated))
	if _, err := e.api.CancelJob(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
	if st.Restarts != 0 || len(st.Failures) != 0 || st.Attempt != 0 {
		t.Errorf("status %+v", st)
	}
}
