package job

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// endedCopy runs job orig, takes two savepoints and cancels it, then
// starts job copy from orig's second savepoint and cancels it before it
// completed a checkpoint of its own: copy's advice names orig/second, and
// orig's its second savepoint. It returns both savepoints' IDs.
func endedCopy(t *testing.T, ctx context.Context, e *env) (first, second int64) {
	t.Helper()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "orig", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "orig", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	first, second = e.savepoint(t, ctx, "orig"), e.savepoint(t, ctx, "orig")
	if _, err := e.api.CancelJob(ctx, "orig"); err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprintf("orig/%d", second)
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"), RestoreFrom: from}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := e.api.CancelJob(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.api.Job(ctx, "copy"); err != nil || st.StartedFrom != from || st.LatestCheckpoint != 0 {
		t.Fatalf("canceled copy: started from %q, latest %d, %v; want %s and none of its own", st.StartedFrom, st.LatestCheckpoint, err, from)
	}
	return first, second
}

// A removal of the checkpoint an ended job's advice names is allowed (the
// user's explicit act), and says what each such job's advice names now:
// the job's own newest checkpoint still stored, or none. A job started
// from the removed checkpoint of another no longer names it — weir job
// status, ls and cancel print no restore from a checkpoint that is gone —
// also after a coordinator restart (its record says so).
func TestRemovalReadvisesEndedJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	first, second := endedCopy(t, ctx, e)

	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "orig", ID: second})
	if err != nil || len(rm.Checkpoints) != 1 {
		t.Fatalf("remove orig/%d = %+v, %v", second, rm, err)
	}
	want := []control.Readvised{
		{Job: "copy", State: control.JobCanceled},
		{Job: "orig", State: control.JobCanceled, LatestCheckpoint: first},
	}
	if got := rm.Checkpoints[0].Readvised; !reflect.DeepEqual(got, want) {
		t.Errorf("readvised %+v, want %+v", got, want)
	}
	check := func(when string) {
		t.Helper()
		if st, err := e.api.Job(ctx, "copy"); err != nil || st.StartedFrom != "" || st.LatestCheckpoint != 0 {
			t.Errorf("%s: copy started from %q, latest %d, %v; want neither (orig/%d is gone)", when, st.StartedFrom, st.LatestCheckpoint, err, second)
		}
		if st, err := e.api.Job(ctx, "orig"); err != nil || st.LatestCheckpoint != first {
			t.Errorf("%s: orig's latest %d, %v; want %d", when, st.LatestCheckpoint, err, first)
		}
	}
	check("after the removal")
	stop()
	stop = startManager()
	defer stop()
	check("after a coordinator restart")

	// The last one of orig goes too: nothing is left to name.
	rm, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "orig", ID: first})
	if err != nil || len(rm.Checkpoints) != 1 {
		t.Fatalf("remove orig/%d = %+v, %v", first, rm, err)
	}
	want = []control.Readvised{{Job: "orig", State: control.JobCanceled}}
	if got := rm.Checkpoints[0].Readvised; !reflect.DeepEqual(got, want) {
		t.Errorf("readvised %+v, want %+v", got, want)
	}
}

// A coordinator that went away after the checkpoint an ended job started
// from was removed, before it wrote that job's record, leaves the record
// naming it: the next coordinator, as it starts, names it no more. So does
// rm -earlier, which removes it as one of an earlier run of its job.
func TestStartedFromGoneIsCorrectedAtStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	first, second := endedCopy(t, ctx, e)
	stop()
	st, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&checkpoint.Catalog{Meta: st, State: st}).Remove(ctx, "orig", second); err != nil {
		t.Fatal(err)
	}
	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "copy", "no checkpoint named", func(st control.JobStatus) bool { return st.StartedFrom == "" })

	// copy again, from orig's first, which orig's new run leaves to
	// rm -earlier.
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"),
		RestoreFrom: fmt.Sprintf("orig/%d", first)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := e.api.CancelJob(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	e.submitRunning(t, ctx, spec(t, "orig", "checkpointing: {disabled: true}\n"))
	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "orig", Earlier: true})
	if err != nil || len(rm.Checkpoints) != 1 || rm.Checkpoints[0].ID != first {
		t.Fatalf("remove -earlier = %+v, %v; want %d removed", rm, err, first)
	}
	want := []control.Readvised{{Job: "copy", State: control.JobCanceled}}
	if got := rm.Checkpoints[0].Readvised; !reflect.DeepEqual(got, want) {
		t.Errorf("readvised %+v, want %+v", got, want)
	}
	if st, err := e.api.Job(ctx, "copy"); err != nil || st.StartedFrom != "" {
		t.Errorf("copy after rm -earlier: started from %q, %v; want none", st.StartedFrom, err)
	}
}

// A checkpoint another job started from stays stored while that job runs
// without one of its own; once that job ended, the retention of the job
// that took it discards it — and the ended job names it no more.
func TestRetentionDiscardReadvisesAJobStartedFromIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "src", "checkpointing: {interval: 20ms, retained: 1}\n"))
	// Retention may discard the latest before the submit takes it: the
	// next one, then.
	var from string
	for {
		st := waitFor(t, ctx, e, "src", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
		from = fmt.Sprintf("src/%d", st.LatestCheckpoint)
		_, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"), RestoreFrom: from})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("submit from %s: %v", from, err)
		}
	}
	waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := e.api.CancelJob(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", fmt.Sprintf("%s discarded and named no more", from), func(st control.JobStatus) bool { return st.StartedFrom == "" })
	var id int64
	fmt.Sscanf(from, "src/%d", &id)
	if e.stored("src", id) {
		t.Errorf("%s is still stored, but copy names it no more", from)
	}
}
