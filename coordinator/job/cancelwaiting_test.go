package job

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A job still waiting for slots (state created: the workers' slots are
// taken, or there is no worker) is canceled by a cancel, as weir run
// -cancel asks when it stops; the job in line behind it is placed in its
// stead once slots come free.
func TestCancelAJobWaitingForSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "early", "")}); err != nil {
		t.Fatal(err)
	}
	st, err := e.api.CancelJob(ctx, "early")
	if err != nil || st.State != control.JobCanceled {
		t.Fatalf("cancel with no worker = %s, %v; want canceled", st.State, err)
	}

	e.fleet.startSlots(ctx, "w1", 5)
	e.waitWorkers(1)
	extra := "checkpointing: {interval: 30ms}\n"
	e.submitRunning(t, ctx, spec(t, "a", extra))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "waits", extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "waits", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: sized(t, "behind", 1, extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "behind", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5)"))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: sized(t, "last", 1, extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "last", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5)"))
	// The first in line, and one behind another.
	for _, job := range []string{"waits", "behind"} {
		st, err = e.api.CancelJob(ctx, job)
		if err != nil || st.State != control.JobCanceled {
			t.Fatalf("cancel of %s, waiting for slots = %s, %v; want canceled", job, st.State, err)
		}
		if st, err := e.api.Job(ctx, job); err != nil || st.State != control.JobCanceled {
			t.Fatalf("%s after the cancel: %s, %v; want canceled", job, st.State, err)
		}
	}
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "last", "running", running)
}
