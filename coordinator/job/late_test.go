package job

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
)

// A snapshot acked by a task of an attempt that failed over, for a
// checkpoint the failover aborted, is deleted: nothing else would ever
// delete it while the job runs.
func TestLateAckOfAnEndedAttemptDiscarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		w.noAck = true
		w.mu.Unlock()
	}
	s := spec(t, "late", "checkpointing: {interval: 30ms, timeout: 60s}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	var id int64
	for id == 0 {
		cps, err := e.api.Checkpoints(ctx, "late")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cps {
			if c.Status == control.CheckpointPending {
				id = c.ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := w2.client.Failed(ctx, control.TaskRef{Job: "late", Attempt: 1, Task: "count-1"}, control.FailureUnknown, "trap"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "late", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })

	// count-0 of attempt 1 finishes its snapshot and acks it.
	// The discard the failover's abort queued may be deleting the
	// checkpoint's directory as the snapshot is written: that write
	// fails, and is done again as one finished after the discard.
	key := checkpoint.StateKey("late", id, "count-0")
	for {
		err := e.fleet.store.Put(ctx, key, strings.NewReader("state"))
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if err := w1.client.Ack(ctx, control.TaskRef{Job: "late", Attempt: 1, Task: "count-0"}, id, key, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		keys, err := e.fleet.store.List(ctx, checkpoint.StatePrefix("late", id))
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %d aborted by the failover keeps %v", id, keys)
		}
	}
}

// A job that ends while a checkpoint is pending leaves nothing of it in
// storage: what its tasks wrote is deleted by the time the cancel returns,
// though the job's end cancels the context its checkpoint runner works
// with.
func TestJobEndDiscardsItsPendingCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	w.mu.Lock()
	w.noAck = true
	w.mu.Unlock()
	e.submitRunning(t, ctx, spec(t, "ends", "checkpointing: {interval: 30ms, timeout: 60s}\n"))
	var id int64
	for id == 0 {
		cps, err := e.api.Checkpoints(ctx, "ends")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cps {
			if c.Status == control.CheckpointPending {
				id = c.ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	key := checkpoint.StateKey("ends", id, "count-0")
	if err := e.fleet.store.Put(ctx, key, strings.NewReader("state")); err != nil {
		t.Fatal(err)
	}
	if err := w.client.Ack(ctx, control.TaskRef{Job: "ends", Attempt: 1, Task: "count-0"}, id, key, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.CancelJob(ctx, "ends"); err != nil {
		t.Fatal(err)
	}
	keys, err := e.fleet.store.List(ctx, checkpoint.StatePrefix("ends", id))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("checkpoint %d, pending as the job was canceled, left %v", id, keys)
	}
}
