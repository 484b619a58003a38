package job

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	e.lose(w1)
	waitFor(t, ctx, e, "wc", "waiting for a worker", waiting(control.JobRestarting))
	e.fleet.start(ctx, "w2")
	// A heartbeat w1 sent before it was lost can reach the coordinator
	// after the loss and bring w1 back for a moment: the attempt placed
	// on it then is skipped (no responders) and the next one goes to w2
	// — a replacement, not a restart.
	st := waitFor(t, ctx, e, "wc", "a checkpoint in attempt 2 or later", func(st control.JobStatus) bool {
		return st.Attempt >= 2 && st.Attempt == 2+st.Replacements && st.State == control.JobRunning &&
			st.LatestCheckpoint > st.RestoredFrom
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

// waitRunsOut waits until the wait for room (a worker, free slots) of job
// wc, whose restart strategy allows one restart, ran out twice: the
// first counts as one failure, with the reason want, and one restart;
// the second is the same wait going on, no new failure — the failure's
// entry counts it (Repeats) — and the job waits on. Then it cancels wc.
func waitRunsOut(t *testing.T, ctx context.Context, e *env, want string) {
	t.Helper()
	st := waitFor(t, ctx, e, "wc", "the wait run out twice", func(st control.JobStatus) bool {
		return len(st.Failures) > 0 && st.Failures[0].Repeats >= 1 || st.State.Terminal()
	})
	if st.State != control.JobRestarting || st.Restarts != 1 || st.FailuresInARow != 1 || len(st.Failures) != 1 ||
		st.FailureCounts[control.FailurePlacement] != 1 {
		t.Fatalf("status %+v; want restarting, one failure, one restart, the job waiting on", st)
	}
	if f := st.Failures[0]; f.Reason != want || f.Kind != control.FailurePlacement || !f.Last.After(f.Time) {
		t.Errorf("failure %+v, want reason %q, kind %s, the latest period after the first", f, want, control.FailurePlacement)
	}
	if _, err := e.api.CancelJob(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
}

// With the restart strategy none, the first wait that runs out fails the
// job.
func TestWorkerWaitRunsOutWithoutRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{WorkerWait: 50 * time.Millisecond})
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "restart: {strategy: none}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	const want = "no worker joined within 50ms"
	if st.State != control.JobFailed || st.Reason != want+" (not restarted: the restart strategy is none)" || len(st.Failures) != 1 {
		t.Errorf("status %+v; want failed at the first wait that ran out", st)
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

// A worker that writes checkpoints where the coordinator does not read
// them (a directory of its own, with weir up's default store) gets no
// tasks: its registration is refused, saying why, so weir worker stops
// at once; one that joins by heartbeat alone (registered before this
// coordinator started) is listed with the reason and left out of every
// placement — a job placed on it failed for good, as the worker refuses
// such a deploy — and a job that finds no other worker says so when its
// wait runs out.
func TestWorkerOfAnotherCheckpointStoreGetsNoTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{WorkerWait: 300 * time.Millisecond})
	why := "it writes checkpoints to dir:/elsewhere, and this coordinator reads them from " + e.mgr.stateStore() +
		" (give 'weir up' and 'weir worker' the same -checkpoint-store: jetstream when workers run in other processes)"

	nc, err := nats.Connect(e.fleet.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	err = control.NewWorker(nc, "far", nil, control.WorkerOptions{Store: "dir:/elsewhere"}).Run(ctx, nil)
	if want := "worker far: the coordinator places no tasks on it: " + why; err == nil || err.Error() != want {
		t.Fatalf("a worker of another store: Run returned %v; want %q", err, want)
	}

	// Joined by heartbeat alone.
	hb, err := json.Marshal(control.Heartbeat{Worker: control.WorkerInfo{ID: "far", Session: "s1", Store: "dir:/elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	beat := func() {
		if err := nc.Publish(control.Subjects{}.Heartbeat(), hb); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
	}
	beat()
	e.waitWorkers(1)
	// The worker's heartbeats go on until the test ends; the goroutine is
	// gone before the connection closes (a beat on a closed connection
	// failed the test after it passed).
	stop, beating := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-beating }()
	go func() {
		defer close(beating)
		for {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
				_ = nc.Publish(control.Subjects{}.Heartbeat(), hb) // a lost beat shows as the worker lost
			}
		}
	}()
	ws, err := e.api.Workers(ctx)
	if err != nil || len(ws) != 1 || ws[0].ID != "far" || ws[0].Unusable != why {
		t.Fatalf("workers %+v (%v); want far, saying why it gets no tasks", ws, err)
	}
	s := spec(t, "wc", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitRunsOut(t, ctx, e, "no worker joined within 300ms (worker far is live, but gets no tasks: "+why+")")

	// A worker of the coordinator's store takes the job; far gets none.
	e.fleet.start(ctx, "w1")
	s = spec(t, "wc2", "checkpointing: {interval: 30ms}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc2", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	if got := perWorker(st); got["far"] != 0 || got["w1"] != 5 {
		t.Errorf("tasks per worker %v; want all 5 on w1, none on far", got)
	}
}
