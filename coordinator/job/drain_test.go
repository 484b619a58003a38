package job

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/plan"
)

// workerStatus returns the coordinator's status of worker id, once it
// lists it (a restarted coordinator hears of it with its heartbeats).
func workerStatus(t *testing.T, ctx context.Context, e *env, id string) control.WorkerStatus {
	t.Helper()
	for {
		ws, err := e.api.Workers(ctx)
		for _, w := range ws {
			if w.ID == id {
				return w
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("worker %s not listed: %+v (%v)", id, ws, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Draining a worker cordons it and moves a job with tasks on it to the
// other worker with a stop savepoint and an attempt restored from it: no
// failure, no restart, the savepoint's output committed (the workers
// brought the attempt to rest with it) before the attempt was canceled.
// The cordon survives a coordinator restart; uncordon undoes it, which
// survives a restart too.
func TestDrainMovesAJobAndTheCordonSurvivesARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartableWith(t, nil, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second})
	stop := startManager()
	defer func() { stop() }()
	f := e.fleet
	w1 := f.start(ctx, "w1")
	w2 := f.start(ctx, "w2")
	defer f.wait()
	for {
		if ws, err := e.api.Workers(ctx); err == nil && len(ws) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the workers never joined")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := spec(t, "wc", "checkpointing: {interval: 50ms}\nrestart: {strategy: none}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "a checkpoint", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint >= 1
	})
	on := perWorker(st)
	if on["w1"] == 0 || on["w2"] == 0 {
		t.Fatalf("tasks per worker %v: want some on each", on)
	}

	p, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Live || p.AlreadyCordoned || len(p.Jobs) != 1 || p.Jobs[0] != (control.DrainJob{Job: "wc", State: control.JobRunning, Tasks: on["w1"], Needs: 5}) {
		t.Errorf("drain plan %+v", p)
	}
	if w := workerStatus(t, ctx, e, "w1"); !w.Cordoned || w.Used != on["w1"] {
		t.Errorf("w1 after the cordon: %+v; want cordoned, its %d tasks still there", w, on["w1"])
	}
	mv, err := e.api.MoveJob(ctx, control.MoveRequest{Job: "wc", Worker: "w1"})
	if err != nil || !mv.Moved || mv.Savepoint == 0 || mv.Attempt != 1 {
		t.Fatalf("move: %+v, %v", mv, err)
	}
	st = waitFor(t, ctx, e, "wc", "running off w1", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	if got := perWorker(st); got["w1"] != 0 || got["w2"] != 5 {
		t.Errorf("tasks per worker after the move %v; want all 5 on w2", got)
	}
	if st.Restarts != 0 || st.Replacements != 1 || len(st.Failures) != 0 || st.RestoredFrom != mv.Savepoint {
		t.Errorf("status after the move: restarts %d, replacements %d, failures %+v, restored from %d; want 0, 1, none, savepoint %d",
			st.Restarts, st.Replacements, st.Failures, st.RestoredFrom, mv.Savepoint)
	}
	if d := w2.lastDeploy("wc"); d.Restore == nil || d.Restore.CheckpointID != mv.Savepoint {
		t.Errorf("the deploy to w2 restores %+v; want savepoint %d", d.Restore, mv.Savepoint)
	}
	w1.mu.Lock()
	stops := append([]control.Stop(nil), w1.stops...)
	w1.mu.Unlock()
	if len(stops) != 1 || stops[0].CheckpointID != mv.Savepoint || stops[0].Attempt != 1 {
		t.Errorf("w1 was brought to rest with %+v; want savepoint %d of attempt 1 (its sinks commit it)", stops, mv.Savepoint)
	}
	if _, ok := w1.currentAttempt("wc"); ok {
		t.Error("w1 still runs the job")
	}
	if w := workerStatus(t, ctx, e, "w1"); !w.Cordoned || w.Used != 0 {
		t.Errorf("w1 after the move: %+v; want cordoned, no task", w)
	}
	// Nothing left to move: said, not done again.
	if mv, err := e.api.MoveJob(ctx, control.MoveRequest{Job: "wc", Worker: "w1"}); err != nil || mv.Moved || mv.Note != "it has no task on worker w1" {
		t.Errorf("move again: %+v, %v", mv, err)
	}

	// A restarted coordinator keeps the cordon: the resumed job is
	// placed off w1.
	stop()
	stop = startManager()
	if w := workerStatus(t, ctx, e, "w1"); !w.Cordoned {
		t.Errorf("w1 after a coordinator restart: %+v; want cordoned", w)
	}
	st = waitFor(t, ctx, e, "wc", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 3
	})
	if got := perWorker(st); got["w1"] != 0 {
		t.Errorf("the resumed job was placed on the cordoned w1: %v", got)
	}

	cs, err := e.api.Uncordon(ctx, "w1")
	if err != nil || !cs.Was || cs.Cordoned {
		t.Errorf("uncordon: %+v, %v", cs, err)
	}
	if cs, err := e.api.Uncordon(ctx, "w1"); err != nil || cs.Was {
		t.Errorf("uncordon again: %+v, %v; want it was not cordoned", cs, err)
	}
	stop()
	stop = startManager()
	if w := workerStatus(t, ctx, e, "w1"); w.Cordoned {
		t.Errorf("w1 after uncordon and a coordinator restart: %+v; want placeable", w)
	}
}

// A drain whose jobs do not fit on the other workers is refused in one
// line — the job, what it needs, what is free — before anything is
// cordoned or stopped; a worker nobody knows is refused with a guess.
func TestDrainRefusedWithoutRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 3)
	e.fleet.startSlots(ctx, "w2", 3)
	e.waitWorkers(2)
	st := e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 50ms}\n"))
	// The job's own tasks on w2 count for it — it is placed again whole —
	// and the refusal says so, as weir worker ls counts them used.
	_, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	own := perWorker(st)["w2"]
	if own == 0 {
		t.Fatalf("tasks per worker %v: none on w2", perWorker(st))
	}
	want := "drain w1: no room on the other workers for job wc: it needs 5 slots; the other workers have 3, counting the " + strconv.Itoa(own) +
		" its own tasks hold on w2 (w2 has 3 slots: " + strconv.Itoa(3-own) + " free, " + strconv.Itoa(own) + " wc's); nothing was cordoned or stopped"
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("drain: %v; want %q", err, want)
	}
	if w := workerStatus(t, ctx, e, "w1"); w.Cordoned {
		t.Errorf("w1 cordoned after a refused drain: %+v", w)
	}
	if now, _ := e.api.Job(ctx, "wc"); now.State != control.JobRunning || now.Attempt != st.Attempt {
		t.Errorf("job after a refused drain: %s attempt %d; want it running on as attempt %d", now.State, now.Attempt, st.Attempt)
	}
	// A move needs the worker cordoned first.
	if _, err := e.api.MoveJob(ctx, control.MoveRequest{Job: "wc", Worker: "w1"}); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "not cordoned") {
		t.Errorf("move off a worker not cordoned: %v", err)
	}
	if _, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w3"}); !errors.Is(err, control.ErrNotFound) ||
		!strings.Contains(err.Error(), "no worker w3 is live") {
		t.Errorf("drain of an unknown worker: %v", err)
	}
}

// A refusal names the cordoned workers it does not count, with their
// free slots: "the other workers have 6" left out a cordoned worker's 6
// free slots without a word of it.
func TestDrainRefusalNamesTheCordonedWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w3", 6)
	e.waitWorkers(1)
	if _, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w3"}); err != nil {
		t.Fatalf("drain of w3, which runs nothing: %v", err)
	}
	e.fleet.startSlots(ctx, "w1", 5)
	e.waitWorkers(2)
	st := e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 50ms}\n"))
	if got := perWorker(st); got["w1"] != 5 {
		t.Fatalf("tasks per worker %v; want them all on w1", got)
	}
	e.fleet.startSlots(ctx, "w2", 1)
	e.waitWorkers(3)
	_, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	want := "drain w1: no room on the other workers for job wc: it needs 5 slots; the other workers have 1 free (w2 has 1 slot: 1 free)" +
		"; not counted: cordoned w3 (6 slots free), which weir worker uncordon w3 lets jobs move to; nothing was cordoned or stopped"
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("drain:\n%v\nwant\n%s", err, want)
	}
}

// A move whose stop savepoint fails (it expires: a worker never acks)
// leaves the job running where it was, and says why.
func TestMoveWhoseSavepointFailsLeavesTheJobRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	st := e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 1h, timeout: 300ms}\n"))
	waitFor(t, ctx, e, "wc", "tasks running", func(st control.JobStatus) bool { return len(st.Restoring) == 0 && st.State == control.JobRunning })
	if _, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		w.noAck = true
		w.mu.Unlock()
	}
	mv, err := e.api.MoveJob(ctx, control.MoveRequest{Job: "wc", Worker: "w1"})
	if err == nil || mv.Moved || !strings.Contains(err.Error(), "stop savepoint failed") || !strings.Contains(err.Error(), "keeps running where it was") {
		t.Fatalf("move: %+v, %v; want the savepoint's failure", mv, err)
	}
	time.Sleep(200 * time.Millisecond)
	now, err := e.api.Job(ctx, "wc")
	if err != nil || now.State != control.JobRunning || now.Attempt != st.Attempt || len(now.Failures) != 0 {
		t.Errorf("job after a failed move: %+v, %v; want it running on as attempt %d", now, err, st.Attempt)
	}
	if got := perWorker(now); got["w1"] == 0 {
		t.Errorf("tasks per worker %v: the job left w1", got)
	}
}

// A move outlives its request: a caller that stops waiting (its wait ran
// out, Ctrl-C) while the workers bring the attempt to rest with the stop
// savepoint is told the move is under way, and the coordinator finishes
// it — the job runs off the cordoned worker, no failure counted — rather
// than leaving the job stopped.
func TestAMoveOutlivesItsRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: none}\n"))
	waitFor(t, ctx, e, "wc", "tasks running", func(st control.JobStatus) bool { return len(st.Restoring) == 0 && st.State == control.JobRunning })
	if _, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	held, release := w1.holdFirst(t, control.OpStop)
	rctx, rcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := e.api.MoveJob(rctx, control.MoveRequest{Job: "wc", Worker: "w1"})
	rcancel()
	if !errors.Is(err, control.ErrUnavailable) || !strings.Contains(err.Error(), "still under way") {
		t.Errorf("move whose request stopped waiting: %v; want it said to be under way", err)
	}
	<-held
	release()
	st := waitFor(t, ctx, e, "wc", "running off w1", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	if got := perWorker(st); got["w1"] != 0 || st.Restarts != 0 || len(st.Failures) != 0 {
		t.Errorf("after the move: tasks per worker %v, %d restarts, failures %+v; want none on w1, no restart, no failure", got, st.Restarts, st.Failures)
	}
}

// A worker lost while its job's stop savepoint runs — weir worker drain
// w2, then kill -9 of w2 — fails the job over: the savepoint was cut as
// the attempt ended ("aborted", as weir run says of it), and the move
// says the job failed over from the lost worker to the others, from its
// latest checkpoint, as no refusal to try again.
func TestMoveWhoseWorkerIsLostSaysTheJobFailedOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	st := e.submitRunning(t, ctx, spec(t, "dk", "checkpointing: {interval: 1h, timeout: 30s}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n"))
	waitFor(t, ctx, e, "dk", "tasks running", func(st control.JobStatus) bool { return len(st.Restoring) == 0 && st.State == control.JobRunning })
	if got := perWorker(st); got["w2"] == 0 {
		t.Fatalf("tasks per worker %v: none on w2", got)
	}
	if _, err := e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w2"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		w.noAck = true
		w.mu.Unlock()
	}
	type result struct {
		mv  control.Move
		err error
	}
	res := make(chan result, 1)
	go func() {
		mv, err := e.api.MoveJob(ctx, control.MoveRequest{Job: "dk", Worker: "w2"})
		res <- result{mv, err}
	}()
	for {
		w2.mu.Lock()
		n := len(w2.triggers)
		w2.mu.Unlock()
		if n > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the stop savepoint was never triggered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.lose(w2)
	r := <-res
	if r.err != nil || r.mv.Moved || !r.mv.FailedOver || !r.mv.WorkerLost ||
		!strings.Contains(r.mv.Note, "worker w2 was lost") || !strings.Contains(r.mv.Note, "savepoint aborted") ||
		!strings.Contains(r.mv.Note, "failed over from w2 to the other workers, from its latest checkpoint") {
		t.Fatalf("move: %+v, %v; want it to say the job failed over from the lost w2", r.mv, r.err)
	}
	if strings.Contains(r.mv.Note, "savepoint failed") || strings.Contains(r.mv.Note, "keeps running where it was") {
		t.Errorf("move note %q: the savepoint was aborted, and the job did not keep running where it was", r.mv.Note)
	}
	w1.mu.Lock()
	w1.noAck = false
	w1.mu.Unlock()
	now := waitFor(t, ctx, e, "dk", "running on w1", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > r.mv.Attempt
	})
	if got := perWorker(now); got["w2"] != 0 || now.Restarts != 1 || now.FailureCounts[control.FailureWorkerLost] != 1 {
		t.Errorf("after the failover: tasks per worker %v, %d restarts, failures %v; want none on w2, a restart for the lost worker", got, now.Restarts, now.FailureCounts)
	}
}

// The refusal's numbers say what they count: the job's own tasks on the
// other workers, which it frees as it moves, apart from their free slots.
func TestNoRoomCountsTheJobsOwnTasks(t *testing.T) {
	short := &plan.CapacityError{Job: "dk", Tasks: 4, Free: 2, Workers: []plan.Worker{{ID: "w2", Slots: 2, Used: 0}}}
	if got, want := noRoom("dk", short, map[string]int{"w1": 2, "w2": 2}),
		"it needs 4 slots; the other workers have 2, counting the 2 its own tasks hold on w2 (w2 has 2 slots: 0 free, 2 dk's)"; got != want {
		t.Errorf("noRoom:\n%s\nwant\n%s", got, want)
	}
	short = &plan.CapacityError{Job: "dk", Tasks: 3, Free: 1, Workers: []plan.Worker{{ID: "w2", Slots: 1, Used: 0}}}
	if got, want := noRoom("dk", short, map[string]int{"w1": 2, "w2": 1}),
		"it needs 3 slots; the other workers have 1, counting the 1 its own task holds on w2 (w2 has 1 slot: 0 free, 1 dk's)"; got != want {
		t.Errorf("noRoom:\n%s\nwant\n%s", got, want)
	}
	short = &plan.CapacityError{Job: "dk", Tasks: 1, Free: 0, Workers: []plan.Worker{{ID: "w2", Slots: 1, Used: 1}, {ID: "w3", Slots: 4, Used: 5}}}
	if got, want := noRoom("dk", short, map[string]int{"w1": 1}),
		"it needs 1 slot; the other workers have 0 free (w2 has 1 slot: 0 free; w3 has 4 slots: 0 free)"; got != want {
		t.Errorf("noRoom:\n%s\nwant\n%s", got, want)
	}
}

// A cordoned worker that is not live (it stopped after a drain) stays
// listed, as down, so that its cordon is not forgotten; uncordoned, it
// is listed no more.
func TestWorkersListsACordonedWorkerThatIsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	if _, err := e.mgr.setCordon(ctx, "w0", true); err != nil {
		t.Fatal(err)
	}
	for {
		ws, err := e.api.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 2 {
			if ws[0].ID != "w1" || ws[0].Down || ws[1] != (control.WorkerStatus{ID: "w0", Cordoned: true, Down: true}) {
				t.Errorf("workers %+v; want w1 live, then w0 cordoned and down", ws)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("workers %+v", ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.api.Uncordon(ctx, "w0"); err != nil {
		t.Fatal(err)
	}
	if ws, err := e.api.Workers(ctx); err != nil || len(ws) != 1 || ws[0].ID != "w1" {
		t.Errorf("after uncordon: %+v, %v; want w1 alone", ws, err)
	}
}
