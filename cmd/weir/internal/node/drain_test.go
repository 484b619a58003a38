package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// twoWorkerCounts starts a node with the coordinator and two workers, w1
// and w1-1, of slots each, and runs the job counts on them: a JetStream
// source, the wordcount guest counting per key in two subtasks, an
// exactly-once sink — four tasks, spread over both workers.
func twoWorkerCounts(t *testing.T, ctx context.Context, slots int) (*Node, control.JobStatus) {
	t.Helper()
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 2, WorkerID: "w1", WorkerSlots: slots,
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("counts.yaml", []byte(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+mod+`, parallelism: 2, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "two workers", func() bool { return len(n.Manager.Control().LiveWorkers()) == 2 })
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "counts", "a checkpoint", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint > 0
	})
	on := tasksOn(st)
	if on["w1"] == 0 || on["w1-1"] == 0 {
		t.Fatalf("tasks per worker %v: want some on each", on)
	}
	return n, st
}

// tasksOn counts a job's tasks per worker.
func tasksOn(st control.JobStatus) map[string]int {
	on := map[string]int{}
	for _, w := range st.Assignment {
		on[w]++
	}
	return on
}

// workerUsed returns the tasks the coordinator counts on worker id, and
// whether it is cordoned.
func workerUsed(t *testing.T, ctx context.Context, n *Node, id string) (int, bool) {
	t.Helper()
	ws, err := n.API.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w.Used, w.Cordoned
		}
	}
	t.Fatalf("worker %s not listed: %+v", id, ws)
	return 0, false
}

// drainOff drains worker from the counts job as weir worker drain does:
// cordon, move, wait until the job runs on the other worker and the
// drained one holds no task.
func drainOff(t *testing.T, ctx context.Context, n *Node, worker string, before control.JobStatus) control.JobStatus {
	t.Helper()
	began := time.Now()
	p, err := n.API.DrainWorker(ctx, control.DrainRequest{Worker: worker})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Jobs) != 1 || p.Jobs[0].Job != "counts" || p.Jobs[0].Needs != 4 {
		t.Fatalf("drain %s: %+v", worker, p)
	}
	mv, err := n.API.MoveJob(ctx, control.MoveRequest{Job: "counts", Worker: worker})
	if err != nil || !mv.Moved || mv.Attempt != before.Attempt {
		t.Fatalf("move off %s: %+v, %v", worker, mv, err)
	}
	saved := time.Since(began)
	st := waitJob(t, ctx, n, "counts", "running off "+worker, func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > before.Attempt && tasksOn(st)[worker] == 0 && len(st.Restoring) == 0
	})
	t.Logf("drain of %s: stop savepoint %d taken after %v, the job running on the other worker after %v",
		worker, mv.Savepoint, saved.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if st.RestoredFrom != mv.Savepoint {
		t.Errorf("the moved job restored %d; want its stop savepoint %d", st.RestoredFrom, mv.Savepoint)
	}
	waitUntil(t, ctx, worker+" holding no task", func() bool {
		used, cordoned := workerUsed(t, ctx, n, worker)
		return used == 0 && cordoned
	})
	waitUntil(t, ctx, worker+"'s heartbeats reporting no task", func() bool {
		for _, hb := range n.Manager.Control().Workers() {
			if hb.Worker.ID == worker && len(hb.Tasks) != 0 {
				return false
			}
		}
		return true
	})
	return st
}

// Draining a worker moves a job with tasks on it and on the other worker
// off it, with no failover: no failure, no restart, and the exactly-once
// output of keyed running counts, fed all the while, has no gap and no
// repeat. Uncordoned, the worker takes tasks again: draining the other
// worker moves the job back onto it, exactly once again.
func TestDrainMovesAJobExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, st := twoWorkerCounts(t, ctx, 4)
	in := newKeyedInput(t, ctx, n.JS, 5)
	in.publish(200)

	// Input flows while the job moves.
	feed := func() (stop func()) {
		done, quit := make(chan struct{}), make(chan struct{})
		var once sync.Once
		go func() {
			defer close(done)
			for {
				select {
				case <-quit:
					return
				case <-time.After(20 * time.Millisecond):
				}
				in.send(10)
			}
		}()
		return func() { once.Do(func() { close(quit); <-done }) }
	}
	stop := feed()
	st = drainOff(t, ctx, n, "w1", st)
	stop()
	in.publish(100)
	if on := tasksOn(st); on["w1-1"] != 4 {
		t.Errorf("tasks per worker after the drain %v; want all 4 on w1-1", on)
	}
	if st.Restarts != 0 || len(st.Failures) != 0 || st.Replacements != 1 {
		t.Errorf("after the drain: %d restarts, failures %+v, %d replacements; want none, none, 1", st.Restarts, st.Failures, st.Replacements)
	}

	// Placeable again: the job moves back onto w1 when w1-1 drains.
	cs, err := n.API.Uncordon(ctx, "w1")
	if err != nil || !cs.Was {
		t.Fatalf("uncordon: %+v, %v", cs, err)
	}
	if _, cordoned := workerUsed(t, ctx, n, "w1"); cordoned {
		t.Error("w1 still cordoned after uncordon")
	}
	stop = feed()
	st = drainOff(t, ctx, n, "w1-1", st)
	stop()
	in.publish(100)
	if on := tasksOn(st); on["w1"] != 4 {
		t.Errorf("tasks per worker after the second drain %v; want all 4 on w1", on)
	}
	if st.Restarts != 0 || len(st.Failures) != 0 || st.Replacements != 2 {
		t.Errorf("after the second drain: %d restarts, failures %+v, %d replacements; want none, none, 2", st.Restarts, st.Failures, st.Replacements)
	}
	in.checkCounts()
}

// A drain whose job does not fit on the other worker's slots is refused
// before anything is cordoned or stopped, saying what the job needs and
// what is free; the job runs on as it was.
func TestDrainRefusedWithoutRoomRunsOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, st := twoWorkerCounts(t, ctx, 2)
	_, err := n.API.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	const want = "drain w1: no room on the other workers for job counts: it needs 4 slots; the other workers have 2, counting the 2 its own tasks hold on w1-1 (w1-1 has 2 slots: 0 free, 2 counts's); nothing was cordoned or stopped"
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("drain: %v; want %q", err, want)
	}
	if _, cordoned := workerUsed(t, ctx, n, "w1"); cordoned {
		t.Error("w1 cordoned by a refused drain")
	}
	in := newKeyedInput(t, ctx, n.JS, 5)
	in.publish(100)
	now, err := n.API.Job(ctx, "counts")
	if err != nil || now.State != control.JobRunning || now.Attempt != st.Attempt || len(now.Failures) != 0 {
		t.Errorf("job after a refused drain: %+v, %v; want it running on as attempt %d", now, err, st.Attempt)
	}
	in.checkCounts()
}

// A rolling upgrade of two 'weir worker's, as OPERATIONS describes it:
// drain w1, stop it (its goodbye moves nothing: the job keeps its
// attempt), start it again under its ID (still cordoned: it gets no
// task), uncordon it; then the same with w2, which moves the job onto
// the new w1. The job never fails over: no failure, no restart, one
// replacement per drain.
func TestRollingUpgradeWithDrains(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, startWorker := upWithoutWorkers(t, ctx)
	w1 := startWorker("w1", StoreDir, 0)
	w2 := startWorker("w2", StoreDir, 0)
	waitUntil(t, ctx, "two workers", func() bool { return len(up.Manager.Control().LiveWorkers()) == 2 })
	spec, err := jobspec.Parse("up.yaml", []byte(`name: up
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: `+mod+`, parallelism: 2, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 100ms}
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, up, "up", "running on both", func(st control.JobStatus) bool {
		on := tasksOn(st)
		return st.State == control.JobRunning && len(st.Restoring) == 0 && on["w1"] > 0 && on["w2"] > 0
	})
	upgrade := func(id string, w *Node, other string) *Node {
		t.Helper()
		if _, err := up.API.DrainWorker(ctx, control.DrainRequest{Worker: id}); err != nil {
			t.Fatal(err)
		}
		mv, err := up.API.MoveJob(ctx, control.MoveRequest{Job: "up", Worker: id})
		if err != nil || !mv.Moved {
			t.Fatalf("move off %s: %+v, %v", id, mv, err)
		}
		st = waitJob(t, ctx, up, "up", "running off "+id, func(s control.JobStatus) bool {
			return s.State == control.JobRunning && s.Attempt > st.Attempt && len(s.Restoring) == 0 && tasksOn(s)[other] == 4
		})
		w.Close() // its goodbye: nothing to move
		waitUntil(t, ctx, id+" gone", func() bool { return !slices.Contains(up.Manager.Control().LiveWorkers(), id) })
		w = startWorker(id, StoreDir, 0)
		waitUntil(t, ctx, id+" back", func() bool { return slices.Contains(up.Manager.Control().LiveWorkers(), id) })
		if used, cordoned := workerUsed(t, ctx, up, id); used != 0 || !cordoned {
			t.Errorf("%s started again: %d tasks, cordoned %v; want none, cordoned", id, used, cordoned)
		}
		if now, err := up.API.Job(ctx, "up"); err != nil || now.Attempt != st.Attempt || now.State != control.JobRunning {
			t.Errorf("after %s stopped and came back: %+v, %v; want attempt %d running on", id, now, err, st.Attempt)
		}
		if cs, err := up.API.Uncordon(ctx, id); err != nil || !cs.Was {
			t.Fatalf("uncordon %s: %+v, %v", id, cs, err)
		}
		return w
	}
	upgrade("w1", w1, "w2")
	upgrade("w2", w2, "w1")
	if st.Restarts != 0 || len(st.Failures) != 0 || st.Replacements != 2 {
		t.Errorf("after the rolling upgrade: %d restarts, failures %+v, %d replacements; want none, none, 2", st.Restarts, st.Failures, st.Replacements)
	}
}
