package job

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A checkpoint's completion that does not reach a worker (its request
// fails: no answer within the request timeout, nobody listening while the
// worker reconnects) holds no trigger. The worker's exactly-once sink
// tasks, which did not hear it, do not report committing it; waiting for
// their reports stopped periodic checkpoints for a checkpoint timeout —
// here an hour — with no failure, while their output waits for the next
// completion. Here the worker holds its first completion past the request
// timeout.
func TestALostCompletionHoldsNoTrigger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{RequestTimeout: 300 * time.Millisecond, HeartbeatTimeout: time.Hour})
	w := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	w.mu.Lock()
	w.commitReport = true
	w.mu.Unlock()
	held, release := w.holdFirst(t, control.OpComplete)
	e.submitRunning(t, ctx, spec(t, "lost", "checkpointing: {interval: 20ms, timeout: 1h}\n"))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no checkpoint completed")
	}
	// The completion's request fails; the next checkpoint is triggered
	// (its trigger waits at the worker behind the held completion, and
	// fails too: that is no checkpoint failure).
	var done int64
	for {
		cps, err := e.api.Checkpoints(ctx, "lost")
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(cps, func(c control.CheckpointInfo) bool { return c.Status == control.CheckpointCompleted }); i >= 0 {
			done = cps[i].ID
		}
		if done > 0 && slices.ContainsFunc(cps, func(c control.CheckpointInfo) bool { return c.ID > done }) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no checkpoint triggered after checkpoint %d, whose completion the worker did not answer: %+v", done, cps)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Let go, the worker's completions and its sink's reports come, and
	// checkpoints complete one after the other, each waiting for them.
	release()
	st := waitFor(t, ctx, e, "lost", "two more checkpoints", func(st control.JobStatus) bool { return st.LatestCheckpoint >= done+2 })
	if st.State != control.JobRunning || st.Restarts != 0 {
		t.Errorf("job after the lost completion: %+v", st)
	}
	if _, err := e.api.CancelJob(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "lost", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
}
