package job

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// Checkpointing of an attempt starts once every task of it reported
// running (it restored its state): reports of an earlier attempt do not
// count, the job's status lists the tasks still restoring, and a
// savepoint that cannot wait for them is refused, naming them.
func TestCheckpointsWaitForEveryTaskRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	w.mu.Lock()
	w.restoring = true
	w.mu.Unlock()
	e.waitWorkers(1)
	st := e.submitRunning(t, ctx, spec(t, "slow", "checkpointing: {interval: 20ms, timeout: 1s}\n"))
	tasks := slices.Sorted(func(yield func(string) bool) {
		for task := range st.Assignment {
			if !yield(task) {
				return
			}
		}
	})
	if len(st.Restoring) != len(tasks) {
		t.Fatalf("restoring %v; want every task of %v", st.Restoring, tasks)
	}
	ref := func(attempt int, task string) control.TaskRef {
		return control.TaskRef{Job: "slow", Attempt: attempt, Task: task}
	}
	// An earlier attempt's reports are ignored; all but the last task of
	// this one run.
	for _, task := range tasks {
		if err := w.client.Running(ctx, ref(st.Attempt-1, task)); err != nil {
			t.Fatal(err)
		}
	}
	last := tasks[len(tasks)-1]
	for _, task := range tasks[:len(tasks)-1] {
		if err := w.client.Running(ctx, ref(st.Attempt, task)); err != nil {
			t.Fatal(err)
		}
	}
	st = waitFor(t, ctx, e, "slow", "one task restoring", func(st control.JobStatus) bool { return len(st.Restoring) == 1 })
	if st.Restoring[0] != last || st.State != control.JobRunning {
		t.Fatalf("status %+v; want running with %s restoring", st, last)
	}
	// The savepoint waits up to the checkpoint timeout for the last task.
	_, err := e.api.Savepoint(ctx, "slow")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("savepoint of slow: 1 of %d tasks still restore their state (%s)", len(tasks), last)) {
		t.Errorf("savepoint while %s restores: %v; want it refused, naming the task", last, err)
	}
	w.mu.Lock()
	triggered := len(w.triggers)
	w.mu.Unlock()
	if triggered > 0 {
		t.Errorf("%d checkpoints triggered while %s restored its state", triggered, last)
	}
	if err := w.client.Running(ctx, ref(st.Attempt, last)); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "slow", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
	if len(st.Restoring) > 0 || st.Attempt != 1 {
		t.Errorf("status %+v; want attempt 1 with no task restoring", st)
	}
	if _, err := e.api.Savepoint(ctx, "slow"); err != nil {
		t.Errorf("savepoint once every task runs: %v", err)
	}
}

// A savepoint waiting for the tasks of an attempt to restore their state
// is refused as soon as the attempt fails over, naming the failure — not
// at the next deploy (an hour's restart delay here) or its own deadline.
func TestSavepointWhileRestoringRefusedOnFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waits := &messageWatch{msg: "savepoint waits for tasks restoring their state", seen: make(chan struct{}), once: new(sync.Once)}
	e := setupWith(t, ctx, Options{Log: slog.New(waits)})
	w := e.fleet.start(ctx, "w1")
	w.mu.Lock()
	w.restoring = true
	w.mu.Unlock()
	e.waitWorkers(1)
	st := e.submitRunning(t, ctx, spec(t, "slow", "checkpointing: {interval: 20ms, timeout: 1h}\nrestart: {strategy: fixed-delay, delay: 1h, attempts: 1}\n"))
	errs := make(chan error, 1)
	go func() {
		_, err := e.api.Savepoint(ctx, "slow")
		errs <- err
	}()
	select {
	case <-waits.seen:
	case err := <-errs:
		t.Fatalf("savepoint while every task restores: %v; want it to wait", err)
	}
	if err := w.client.Failed(ctx, control.TaskRef{Job: "slow", Attempt: st.Attempt, Task: "count-0"}, control.FailureUnknown, "boom"); err != nil {
		t.Fatal(err)
	}
	err := <-errs
	const want = "savepoint of slow: the job failed over while its tasks restored their state (attempt 1: task count-0 failed: boom); try again once it runs"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("savepoint across a failover: %v; want %q", err, want)
	}
}

// A task's running report is sent once: lost (a NATS blip), checkpointing
// of the attempt never started and nothing failed it, a job running
// without checkpoints for good. The worker's heartbeats say which tasks
// restored their state, and stand in for the lost reports.
func TestLostRunningReportsComeByHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	w.mu.Lock()
	w.restoring = true // no task ever sends its report
	w.mu.Unlock()
	e.waitWorkers(1)
	st := e.submitRunning(t, ctx, spec(t, "lost", "checkpointing: {interval: 20ms, timeout: 1h}\n"))
	if len(st.Restoring) == 0 {
		t.Fatalf("status %+v; want its tasks restoring", st)
	}
	w.mu.Lock()
	w.restored = true // the heartbeats say they run
	w.mu.Unlock()
	st = waitFor(t, ctx, e, "lost", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
	if len(st.Restoring) > 0 || st.Attempt != 1 || st.Restarts != 0 {
		t.Errorf("status %+v; want attempt 1 checkpointing with no task restoring", st)
	}
}
