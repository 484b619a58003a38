package job

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// weir job rm removes an ended job with every checkpoint and savepoint of
// it, and the job is listed and found no more, also after a coordinator
// restart. It refuses a job that runs, and one whose savepoint another
// job restores on a failover, before it removes anything. A job
// submitted again under the name numbers its attempts and checkpoints on
// past the removed run's (its exactly-once output must not get the
// removed run's message IDs), without the removed run's history.
func TestRemoveJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	e.submitRunning(t, ctx, spec(t, "gone", "checkpointing: {disabled: true}\n"))
	a, b := e.savepoint(t, ctx, "gone"), e.savepoint(t, ctx, "gone")

	if _, err := e.api.RemoveJob(ctx, "gone"); !errors.Is(err, control.ErrConflict) || err.Error() !=
		"cannot remove job gone: it is running; stop it first (weir job stop keeps a savepoint to restore, weir job cancel does not)" {
		t.Errorf("remove a running job: %v", err)
	}
	old, err := e.api.CancelJob(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	// copy starts from gone's savepoint b, and restores it on a failover
	// until it has one of its own.
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"),
		RestoreFrom: fmt.Sprintf("gone/%d", b)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := e.api.RemoveJob(ctx, "gone"); !errors.Is(err, control.ErrConflict) || err.Error() != fmt.Sprintf(
		"cannot remove job gone: its checkpoint %d must stay: job copy is running, and a failover restores it (the job started from it and has completed no checkpoint of its own since)", b) {
		t.Errorf("remove a job whose savepoint another job needs: %v", err)
	}
	if ids, err := e.catalogIDs(ctx, "gone"); err != nil || len(ids) != 2 {
		t.Errorf("stored after the refusal: %v, %v; want %d, %d", ids, err, a, b)
	}
	e.savepoint(t, ctx, "copy")

	rm, err := e.api.RemoveJob(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Checkpoints) != 2 || rm.Checkpoints[0].ID != b || rm.Checkpoints[1].ID != a || !rm.Checkpoints[0].Savepoint {
		t.Errorf("removed %+v", rm)
	}
	if ids, err := e.catalogIDs(ctx, "gone"); err != nil || len(ids) != 0 {
		t.Errorf("stored after the removal: %v, %v", ids, err)
	}
	check := func(when string) {
		t.Helper()
		jobs, err := e.api.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range jobs {
			if st.Name == "gone" {
				t.Errorf("%s: listed %+v", when, st)
			}
		}
		if _, err := e.api.Job(ctx, "gone"); !errors.Is(err, control.ErrNotFound) || err.Error() != `no job "gone"` {
			t.Errorf("%s: status: %v", when, err)
		}
		if _, err := e.api.Checkpoints(ctx, "gone"); !errors.Is(err, control.ErrNotFound) {
			t.Errorf("%s: checkpoints: %v", when, err)
		}
		if _, err := e.api.RemoveJob(ctx, "gone"); !errors.Is(err, control.ErrNotFound) {
			t.Errorf("%s: removed again: %v", when, err)
		}
	}
	check("after the removal")
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "cpy", From: "1"}); !errors.Is(err, control.ErrNotFound) ||
		err.Error() != `restore cpy: no spec given, and no job "cpy" to take it from (did you mean copy?)` {
		t.Errorf("restore of a misspelled job: %v", err)
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "cpy", From: "1", Spec: spec(t, "cpy", "")}); !errors.Is(err, control.ErrNotFound) ||
		err.Error() != `restore from cpy/1: there is no such checkpoint (no job "cpy": did you mean copy?)` {
		t.Errorf("restore of a misspelled job with a spec: %v", err)
	}
	stop()
	stop = startManager()
	defer func() { stop() }()
	check("after a coordinator restart")

	st := e.submitRunning(t, ctx, spec(t, "gone", "checkpointing: {disabled: true}\n"))
	if st.Attempt <= old.Attempt || len(st.Failures) != 0 {
		t.Errorf("submitted again: attempt %d (the removed run's was %d), failures %v", st.Attempt, old.Attempt, st.Failures)
	}
	if c := e.savepoint(t, ctx, "gone"); c <= b {
		t.Errorf("the new run's first savepoint is %d; want it past the removed run's %d", c, b)
	}
	cps, err := e.api.Checkpoints(ctx, "gone")
	if err != nil || len(cps) != 1 {
		t.Errorf("the new run lists %+v, %v; want its own savepoint alone", cps, err)
	}
}
