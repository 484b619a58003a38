package job

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// Placement counts the memory of the stale tasks a worker's heartbeats
// report — here of a job the coordinator does not know, an attempt whose
// cancel has not reached the worker — against the worker's memory
// budget, as it counts their slots: a job that needs that memory waits
// for it, saying so, instead of being placed there and refused by the
// worker, and runs there as soon as the stale tasks are gone.
// (staleTasks counted their slots only: right after a failover placement
// took their memory for free, the worker refused the deploy and the job
// waited, refused.)
func TestPlacementCountsTheMemoryOfStaleTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	const budget = 384 << 20
	w1 := e.fleet.startCaps(ctx, "w1", 20, control.Caps{Memory: budget})
	w1.mu.Lock()
	w1.memory = budget
	w1.mu.Unlock()
	e.waitWorkers(1)
	e.submitRunning(t, ctx, memSized(t, "a", 1, "128MiB"))

	// The worker still runs two operator tasks of a job the coordinator
	// does not know, 128MiB each: their cancel reaches it only once the
	// gate opens.
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	held := &control.TaskStats{MemoryLimit: 128 << 20}
	w1.mu.Lock()
	w1.extra = []control.TaskRef{
		{Job: "gone", Attempt: 3, Task: "in-0"}, {Job: "gone", Attempt: 3, Task: "count-0", Stats: held}, {Job: "gone", Attempt: 3, Task: "count-1", Stats: held},
	}
	w1.cancelGate = func(c control.Cancel) {
		if c.Job == "gone" {
			<-gate
		}
	}
	w1.mu.Unlock()
	for {
		ws, err := e.api.Workers(ctx)
		if err == nil && len(ws) == 1 && ws[0].Used == 3+3 {
			// weir worker ls counts their memory too.
			if ws[0].MemoryUsed != budget || ws[0].Caps.Memory != budget {
				t.Errorf("w1's memory %d of %d, want %d of %d: a's 128MiB and the stale tasks' 256MiB", ws[0].MemoryUsed, ws[0].Caps.Memory, budget, budget)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workers %+v (%v), want w1's 6 tasks counted: a's 3 and the 3 stale ones", ws, err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: memSized(t, "b", 1, "128MiB")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "b", "waiting for the stale tasks' memory", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && strings.HasPrefix(st.Reason, ReasonWaitingForSlots+"needs 128MiB of operator memory (limits.memory), workers have ") &&
			strings.HasSuffix(st.Reason, " (w1 0 bytes of 384MiB)")
	})
	open()
	st := waitFor(t, ctx, e, "b", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning || st.State.Terminal() })
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 {
		t.Errorf("b once the stale tasks ended: %+v", st)
	}
	w1.mu.Lock()
	deploys := 0
	for _, d := range w1.deploys {
		if d.Job == "b" {
			deploys++
		}
	}
	w1.mu.Unlock()
	if deploys != 1 {
		t.Errorf("w1 was asked to deploy b %d times, want once (no refusal)", deploys)
	}
}
