package job

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// waitingForSlots reports whether a job waits in state for free slots,
// missing what shortfall says (plan.CapacityError.Shortfall).
func waitingForSlots(state control.JobState, shortfall string) func(control.JobStatus) bool {
	return func(st control.JobStatus) bool {
		return st.State == state && st.Reason == ReasonWaitingForSlots+shortfall
	}
}

// perWorker counts a job's tasks on each worker.
func perWorker(st control.JobStatus) map[string]int {
	n := map[string]int{}
	for _, w := range st.Assignment {
		n[w]++
	}
	return n
}

// A job with more tasks than the live workers have slots waits, created
// and saying what is missing, and deploys when a worker with slots
// enough joins: the wait is no restart attempt, and no worker gets more
// tasks than its slots.
func TestSubmitWaitsForFreeSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 2)
	e.waitWorkers(1)
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for more slots", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && st.Reason == ReasonTooBig+
			"needs 5 tasks, and the live workers have 2 slots in all (w1 2): lower the job's parallelism, or add workers or slots (weir worker -slots)"
	})
	e.fleet.startSlots(ctx, "w2", 3)
	st := waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 || st.Reason != "" {
		t.Errorf("status after w2 joined %+v", st)
	}
	if got := perWorker(st); got["w1"] != 2 || got["w2"] != 3 {
		t.Errorf("tasks per worker %v, want w1 2 (its slots), w2 3", got)
	}
	ws, err := e.api.Workers(ctx)
	heardNow(t, ws)
	if err != nil || len(ws) != 2 || ws[0] != (control.WorkerStatus{ID: "w1", Slots: 2, Used: 2, MemoryUsed: 64 << 20}) ||
		ws[1] != (control.WorkerStatus{ID: "w2", Slots: 3, Used: 3, MemoryUsed: 64 << 20}) {
		t.Errorf("workers %+v (%v), want w1 2 of 2 slots used, w2 3 of 3", ws, err)
	}
}

// A worker that refuses its tasks for want of slots (control.ErrNoSlots:
// it runs tasks the manager does not count) costs no restart: the job is
// placed again at once with that worker full, waits for free slots when
// the others have too few, saying so, and runs on the room a joining
// worker makes, without asking the refusing worker again (that asked it
// again, and again, as the job's own release of its slots made room).
func TestARefusalForWantOfSlotsPlacesAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.startSlots(ctx, "w1", 5)
	w1.mu.Lock()
	w1.deployErr = control.Errorf(control.ErrNoSlots, "worker w1 has 5 slots and runs 5 tasks (job other: 5): no room for the tasks of job wc")
	w1.mu.Unlock()
	e.fleet.startSlots(ctx, "w2", 2)
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: none}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for free slots with w1 full",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 2 free (w1 0 of 5, w2 2 of 2)"))
	e.fleet.startSlots(ctx, "w3", 3)
	st := waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 || st.State.Terminal() })
	// Attempt 1 was refused by w1; 2 runs.
	if st.State != control.JobRunning || st.Attempt != 2 || st.Restarts != 0 || len(st.Failures) != 0 || st.Reason != "" {
		t.Errorf("status after w3 joined %+v", st)
	}
	const why = "attempt 1 was not started: its worker w1 refused its tasks for want of free slots"
	if len(st.Skipped) != 1 || st.Skipped[0].String() != why || st.Skipped[0].Worker != "w1" {
		t.Errorf("skipped %+v; want %q", st.Skipped, why)
	}
	if got := perWorker(st); got["w2"] != 2 || got["w3"] != 3 {
		t.Errorf("tasks per worker %v, want w2 2, w3 3", got)
	}
	w1.mu.Lock()
	refused := len(w1.deploys)
	w1.mu.Unlock()
	if refused != 1 {
		t.Errorf("w1 was asked %d times, want once", refused)
	}
}

// A job that ends frees its slots for a job waiting for them, which then
// deploys; a cancel ends a wait for slots at once.
func TestAJobEndingFreesItsSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 5)
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "a", "checkpointing: {interval: 30ms}\n"))
	for _, name := range []string{"b", "c"} {
		if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, name, "checkpointing: {interval: 30ms}\n")}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, e, name, "waiting for a's slots",
			waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
	}
	if _, err := e.api.CancelJob(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.api.Job(ctx, "c"); st.State != control.JobCanceled || st.Attempt != 0 || len(st.Failures) != 0 {
		t.Errorf("c after its cancel %+v, want canceled before any attempt", st)
	}
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "b", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 || st.Reason != "" {
		t.Errorf("b after a ended %+v", st)
	}
}

// A job that fails over counts its own tasks' slots as free but not
// those of the worker it lost: it waits, restarting, without using up its
// restart attempts, and runs on the worker that joins.
func TestFailoverWaitsForFreeSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 3)
	w2 := e.fleet.startSlots(ctx, "w2", 2)
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")
	e.submitRunning(t, ctx, s)
	e.lose(w2)
	waitFor(t, ctx, e, "wc", "waiting for more slots", func(st control.JobStatus) bool {
		return st.State == control.JobRestarting && st.Reason == ReasonTooBig+
			"needs 5 tasks, and the live workers have 3 slots in all (w1 3): lower the job's parallelism, or add workers or slots (weir worker -slots)"
	})
	e.fleet.startSlots(ctx, "w3", 2)
	st := waitFor(t, ctx, e, "wc", "a checkpoint in attempt 2", func(st control.JobStatus) bool {
		return st.Attempt == 2 && st.State == control.JobRunning && st.LatestCheckpoint > st.RestoredFrom
	})
	// Running again: no reason; the failure it recovered from is the
	// last failure, of attempt 1.
	if lf := st.LastFailure; st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 || st.Reason != "" ||
		lf == nil || *lf != st.Failures[0] || lf.Attempt != 1 || lf.Reason != "worker w2 lost" ||
		lf.Kind != control.FailureWorkerLost || lf.Task != "" {
		t.Errorf("status after w3 joined %+v", st)
	}
	if got := perWorker(st); got["w1"] != 3 || got["w3"] != 2 {
		t.Errorf("tasks per worker %v, want w1 3, w3 2", got)
	}
}

// A wait for slots that runs out counts as one failure, saying what was
// missing: here more slots than the worker has in all.
func TestSlotWaitRunsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{WorkerWait: 50 * time.Millisecond})
	e.fleet.startSlots(ctx, "w1", 1)
	e.waitWorkers(1)
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")}); err != nil {
		t.Fatal(err)
	}
	waitRunsOut(t, ctx, e, "no room within 50ms: needs 5 tasks, and the live workers have 1 slot in all (w1 1): lower the job's parallelism, or add workers or slots (weir worker -slots)")
}

// A job is placed counting the tasks other jobs have on each worker: the
// second of two five-task jobs on two workers gets more tasks on the
// worker the first gave fewer, so both carry five.
func TestPlacementCountsOtherJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	a := e.submitRunning(t, ctx, spec(t, "a", ""))
	b := e.submitRunning(t, ctx, spec(t, "b", ""))
	if got, want := perWorker(a), map[string]int{"w1": 3, "w2": 2}; !maps.Equal(got, want) {
		t.Errorf("a's tasks per worker %v, want %v", got, want)
	}
	if got, want := perWorker(b), map[string]int{"w1": 2, "w2": 3}; !maps.Equal(got, want) {
		t.Errorf("b's tasks per worker %v, want %v", got, want)
	}
	ws, err := e.api.Workers(ctx)
	heardNow(t, ws)
	if err != nil || len(ws) != 2 || ws[0] != (control.WorkerStatus{ID: "w1", Used: 5, MemoryUsed: 128 << 20}) ||
		ws[1] != (control.WorkerStatus{ID: "w2", Used: 5, MemoryUsed: 128 << 20}) {
		t.Errorf("workers %+v (%v), want w1 and w2 with 5 tasks each", ws, err)
	}
}

// When every worker turns out gone during one deploy (crashed between
// heartbeats: nobody answers its deploy), the deploy waits for a worker
// to join, as when none is live, instead of failing: with the restart
// strategy none the job would be lost.
func TestDeployWaitsWhenEveryWorkerVanished(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{HeartbeatTimeout: time.Hour})
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	w1.crash()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "restart: {strategy: none}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for a worker", func(st control.JobStatus) bool {
		return waiting(control.JobCreated)(st) || st.State.Terminal()
	})
	e.fleet.start(ctx, "w2")
	st := waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool {
		return st.State == control.JobRunning || st.State.Terminal()
	})
	if st.State != control.JobRunning || st.Restarts != 0 || len(st.Failures) != 0 || st.Attempt != 2 {
		t.Fatalf("status %+v; want running attempt 2 with no failure", st)
	}
	if got := perWorker(st); got["w2"] != 5 {
		t.Errorf("tasks per worker %v, want all 5 on w2", got)
	}
}

// Jobs that fail over together and no longer all fit do not each wait for
// the slots another holds: a job waiting for room holds none, so one of
// them runs, and the other waits for what is left.
func TestJobsWaitingForRoomHoldNoSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 4)
	e.fleet.startSlots(ctx, "w2", 4)
	w3 := e.fleet.startSlots(ctx, "w3", 2)
	e.waitWorkers(3)
	extra := "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n"
	for _, name := range []string{"a", "b"} {
		st := e.submitRunning(t, ctx, spec(t, name, extra))
		if got, want := perWorker(st), map[string]int{"w1": 2, "w2": 2, "w3": 1}; !maps.Equal(got, want) {
			t.Fatalf("%s's tasks per worker %v, want %v", name, got, want)
		}
	}
	e.lose(w3)
	// Each needs 5 slots; w1 and w2 have 8: one job fits, not both.
	var ran, waits string
	waitFor(t, ctx, e, "a", "one job running, the other waiting", func(a control.JobStatus) bool {
		b, err := e.api.Job(ctx, "b")
		if err != nil {
			return false
		}
		const short = "needs 5 tasks, workers have 3 free (w1 1 of 4, w2 2 of 4)"
		switch {
		case a.State == control.JobRunning && a.Attempt == 2 && waitingForSlots(control.JobRestarting, short)(b):
			ran, waits = "a", "b"
		case b.State == control.JobRunning && b.Attempt == 2 && waitingForSlots(control.JobRestarting, short)(a):
			ran, waits = "b", "a"
		}
		return ran != ""
	})
	// A checkpoint of attempt 2: newer than the one it restored (the
	// latest of attempt 1 counts from the start of attempt 2).
	st := waitFor(t, ctx, e, ran, "a checkpoint in attempt 2", func(st control.JobStatus) bool {
		return st.Attempt == 2 && st.State == control.JobRunning && st.LatestCheckpoint > st.RestoredFrom
	})
	if got, want := perWorker(st), map[string]int{"w1": 3, "w2": 2}; !maps.Equal(got, want) || st.Restarts != 1 {
		t.Errorf("%s after the failover: %d restarts, tasks per worker %v; want 1 restart, %v", ran, st.Restarts, got, want)
	}
	if _, err := e.api.CancelJob(ctx, ran); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, waits, "a checkpoint in attempt 2", func(st control.JobStatus) bool {
		return st.Attempt == 2 && st.State == control.JobRunning && st.LatestCheckpoint > st.RestoredFrom
	})
	if st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 {
		t.Errorf("%s once %s ended: %+v", waits, ran, st)
	}
}

// A job that a restarted coordinator resumes holds the slots its record
// says it ran in from the start, not only from its next placement: a job
// submitted while the resumed one gives the workers a heartbeat timeout to
// find the new coordinator waits for free slots, and the resumed job runs
// on. (Without them, the newcomer took the slots — beside the old attempt
// still running there after a crash — and the job that had been running
// waited for it to end.)
func TestResumedJobKeepsItsSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.startSlots(ctx, "w1", 5)
	defer e.fleet.wait()
	before := e.submitRunning(t, ctx, spec(t, "a", "checkpointing: {interval: 30ms}\n"))
	stop()

	stop = startManager()
	defer stop()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "b", "checkpointing: {interval: 30ms}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "a", "resumed or waiting for slots", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > before.Attempt || strings.HasPrefix(st.Reason, ReasonWaitingForSlots)
	})
	if st.State != control.JobRunning {
		t.Fatalf("the resumed job %+v, want it running again: a job submitted after the restart took its slots", st)
	}
	waitFor(t, ctx, e, "b", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
	if ws, err := e.api.Workers(ctx); err != nil || len(ws) != 1 || ws[0].Used != 5 {
		t.Errorf("workers %+v (%v), want w1 5 of 5 slots used", ws, err)
	}
}

// A job whose every worker is gone keeps its slots while it waits for one
// to join: when its worker comes back it runs there again, and a job
// submitted meanwhile waits for free slots rather than racing it for the
// worker. (A job that released them on every failed placement lost them
// to the other job about half the time; a resumed job whose workers'
// heartbeats had not reached the new coordinator yet, too.)
func TestAJobWaitingForAWorkerKeepsItsSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.startSlots(ctx, "w1", 5)
	e.waitWorkers(1)
	extra := "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n"
	e.submitRunning(t, ctx, spec(t, "a", extra))
	e.lose(w1)
	waitFor(t, ctx, e, "a", "waiting for a worker", waiting(control.JobRestarting))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "b", extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "b", "waiting for a worker", waiting(control.JobCreated))
	e.fleet.startSlots(ctx, "w1", 5)
	st := waitFor(t, ctx, e, "a", "running again or waiting for slots", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2 || strings.HasPrefix(st.Reason, ReasonWaitingForSlots)
	})
	if st.State != control.JobRunning {
		t.Fatalf("a once w1 was back: %+v; want it running there again", st)
	}
	waitFor(t, ctx, e, "b", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
}

// A worker that still runs tasks the coordinator does not count — of an
// attempt whose cancel has not reached it, here of a job the coordinator
// does not know — has those slots taken: a job that needs them waits for
// free slots, saying so, instead of being refused by the worker; and it
// runs there as soon as the worker's heartbeats show the stale tasks gone
// (the coordinator cancels them), not after the wait for slots ran out (a
// failure, here the job's end).
func TestPlacementCountsAWorkersStaleTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.startSlots(ctx, "w1", 5)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	w1.mu.Lock()
	w1.refuseBeyond = true
	for i := range 5 {
		w1.extra = append(w1.extra, control.TaskRef{Job: "gone", Attempt: 3, Task: fmt.Sprintf("t-%d", i)})
	}
	w1.cancelGate = func(c control.Cancel) {
		if c.Job == "gone" {
			<-gate // the cancel reaches the worker only now
		}
	}
	w1.mu.Unlock()
	e.waitWorkers(1)
	// The worker's heartbeats report the stale tasks; weir worker ls
	// counts them.
	for {
		ws, err := e.api.Workers(ctx)
		if err == nil && len(ws) == 1 && ws[0].Used == 5 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workers %+v (%v), want w1 5 of 5 slots used", ws, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	s := spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: none}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "waiting for the stale tasks' slots",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
	open()
	st := waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 || st.State.Terminal() })
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 || st.Reason != "" {
		t.Errorf("status once the stale tasks ended %+v", st)
	}
	w1.mu.Lock()
	deploys := len(w1.deploys)
	w1.mu.Unlock()
	if deploys != 1 {
		t.Errorf("w1 was asked to deploy %d times, want once (no refusal)", deploys)
	}
}

// heardNow checks that each of ws was heard from within the last minute,
// and zeroes the time, for comparisons.
func heardNow(t *testing.T, ws []control.WorkerStatus) {
	t.Helper()
	for i := range ws {
		if d := time.Since(ws[i].LastHeartbeat); d < 0 || d > time.Minute {
			t.Errorf("worker %s last heard from %v ago", ws[i].ID, d)
		}
		ws[i].LastHeartbeat = time.Time{}
	}
}

// A worker that stops on purpose (weir worker's SIGTERM: it says
// goodbye) has its tasks placed on the others, from the latest
// checkpoint, with no failure counted: a job whose restart strategy is
// none runs on, the status counts a replacement, not a restart. A
// trial's rolling restart of a worker counted as a worker-lost failure.
func TestAWorkerThatLeavesIsNoFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: none}\n"))
	waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
	w2.kill()
	st := waitFor(t, ctx, e, "wc", "running on w1 alone", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2 && perWorker(st)["w1"] == 5
	})
	if st.Restarts != 0 || st.Replacements != 1 || len(st.Failures) != 0 || st.FailuresInARow != 0 {
		t.Errorf("after w2 left: %d restarts, %d replacements, failures %+v, %d in a row; want a replacement, no failure",
			st.Restarts, st.Replacements, st.Failures, st.FailuresInARow)
	}
	if lost, left := e.mgr.WorkerLosses(); lost != 0 || left != 1 {
		t.Errorf("workers lost %d, left %d; want 0, 1", lost, left)
	}
}
