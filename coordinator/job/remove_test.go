package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
)

// savepoint takes a savepoint of job and returns its ID.
func (e *env) savepoint(t *testing.T, ctx context.Context, job string) int64 {
	t.Helper()
	cp, err := e.api.Savepoint(ctx, job)
	if err != nil || cp.Status != control.CheckpointCompleted {
		t.Fatalf("savepoint of %s: %+v, %v", job, cp, err)
	}
	return cp.ID
}

// removeErr removes checkpoint id of job and checks that it is refused
// with sentinel and the message want.
func (e *env) removeErr(t *testing.T, ctx context.Context, job string, id int64, sentinel error, want string) {
	t.Helper()
	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: job, ID: id})
	if !errors.Is(err, sentinel) || err.Error() != want {
		t.Errorf("remove %s/%d = %+v, %v; want %v: %s", job, id, rm, err, sentinel, want)
	}
}

// stored reports whether anything of checkpoint id of job is in e's
// directory.
func (e *env) stored(job string, id int64) bool {
	_, err := os.Stat(filepath.Join(e.dir, job, fmt.Sprintf("chk-%d", id)))
	return err == nil
}

// weir checkpoint rm deletes a checkpoint's metadata and every task's
// snapshot, and the run forgets it; it refuses the latest of a running
// job (what a failover restores) and one being written, says that one
// removed already is gone and that one never taken is not there; once the
// job ended, its latest can go too. (The checkpoint timeout is seconds: the
// savepoints the worker acks must complete on a loaded machine too.)
func TestRemoveCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "rm", "checkpointing: {disabled: true, timeout: 3s}\n"))
	a, b, c := e.savepoint(t, ctx, "rm"), e.savepoint(t, ctx, "rm"), e.savepoint(t, ctx, "rm")

	e.removeErr(t, ctx, "rm", c, control.ErrConflict, fmt.Sprintf(
		"cannot remove savepoint %d of job rm: job rm is running, and a failover restores it (its latest completed checkpoint)", c))
	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: b})
	if err != nil || len(rm.Checkpoints) != 1 {
		t.Fatalf("remove %d = %+v, %v", b, rm, err)
	}
	// The metadata and the snapshots of the five tasks (in ×2, count ×2, out).
	if got := rm.Checkpoints[0]; got.ID != b || !got.Savepoint || got.Status != control.CheckpointCompleted || got.Objects != 6 || got.Size != 25 {
		t.Errorf("removed %+v", got)
	}
	if e.stored("rm", b) {
		t.Errorf("checkpoint %d is still in storage", b)
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "rm", From: fmt.Sprint(b)}); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("restore from the removed checkpoint: %v", err)
	}
	e.removeErr(t, ctx, "rm", b, control.ErrNotFound, fmt.Sprintf("checkpoint %d of job rm is gone: it was removed already", b))
	e.removeErr(t, ctx, "rm", 9, control.ErrNotFound, fmt.Sprintf(
		"there is no checkpoint 9 of job rm to remove (discarded, or never taken); rm can be restored from %d, %d", c, a))
	e.removeErr(t, ctx, "nosuch", 1, control.ErrNotFound, `no job "nosuch"`)
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm"}); !errors.Is(err, control.ErrInvalid) {
		t.Errorf("remove without an ID: %v", err)
	}
	cps, err := e.api.Checkpoints(ctx, "rm")
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		if cp.ID == b && (cp.Status != control.CheckpointDiscarded || cp.Reason != checkpoint.ReasonRemoved) {
			t.Errorf("listed after the removal: %+v", cp)
		}
	}

	// A savepoint whose acks never come is pending until it times out.
	w.mu.Lock()
	w.noAck = true
	w.mu.Unlock()
	failed := make(chan error, 1)
	go func() { _, err := e.api.Savepoint(ctx, "rm"); failed <- err }()
	pending := int64(0)
	for pending == 0 {
		cps, err := e.api.Checkpoints(ctx, "rm")
		if err != nil {
			t.Fatal(err)
		}
		if cps[0].Status == control.CheckpointPending {
			pending = cps[0].ID
		}
	}
	e.removeErr(t, ctx, "rm", pending, control.ErrConflict, fmt.Sprintf("cannot remove checkpoint %d of job rm: it is being written (pending)", pending))
	// A pending one is listed with how long it has been pending.
	time.Sleep(50 * time.Millisecond)
	if cps, err := e.api.Checkpoints(ctx, "rm"); err != nil || cps[0].ID != pending || cps[0].Status != control.CheckpointPending || cps[0].Duration < 50*time.Millisecond {
		t.Errorf("pending listed as %+v (%v); want its time so far", cps[0], err)
	}
	if err := <-failed; err == nil {
		t.Fatal("a savepoint nobody acked completed")
	}
	e.removeErr(t, ctx, "rm", pending, control.ErrNotFound, fmt.Sprintf("there is no checkpoint %d of job rm to remove: it failed (expired after 3s; no snapshot from in-0, in-1, count-0 and 2 more)", pending))

	// The failover's checkpoint is still the latest.
	if st, err := e.api.Job(ctx, "rm"); err != nil || st.LatestCheckpoint != c {
		t.Errorf("status after the removals: %+v, %v; want latest checkpoint %d", st, err, c)
	}
	// Once the job ended, nothing restores its latest but a restore.
	if _, err := e.api.CancelJob(ctx, "rm"); err != nil {
		t.Fatal(err)
	}
	if rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: c}); err != nil || len(rm.Checkpoints) != 1 {
		t.Fatalf("remove the ended job's latest: %+v, %v", rm, err)
	}
	if st, err := e.api.Job(ctx, "rm"); err != nil || st.LatestCheckpoint != a {
		t.Errorf("status after removing the latest: %+v, %v; want latest checkpoint %d", st, err, a)
	}
	if ids, err := e.catalogIDs(ctx, "rm"); err != nil || !slices.Equal(ids, []int64{a}) {
		t.Errorf("stored: %v, %v; want %d", ids, err, a)
	}
}

// weir checkpoint rm -earlier removes what earlier runs of a job left
// stored: their checkpoints and savepoints, but not the one the run
// started from nor one another job started from and still restores on a
// failover (it says why), and the snapshots of their checkpoints that
// never completed. Once the other job completed a checkpoint of its own,
// that one goes too.
func TestRemoveEarlierRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "old", "checkpointing: {disabled: true, timeout: 3s}\n"))
	one, two := e.savepoint(t, ctx, "old"), e.savepoint(t, ctx, "old")
	w.mu.Lock()
	w.noAck = true
	w.mu.Unlock()
	if _, err := e.api.Savepoint(ctx, "old"); err == nil {
		t.Fatal("a savepoint nobody acked completed")
	}
	w.mu.Lock()
	w.noAck = false
	w.mu.Unlock()
	four := e.savepoint(t, ctx, "old")
	if _, err := e.api.CancelJob(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	// The failed savepoint's snapshot, finished after the job ended: by
	// then the discard its abort queued is done (the cancel waits for it),
	// so nothing deletes the directory under the write.
	late := checkpoint.StateKey("old", two+1, "in-0")
	if err := e.fleet.store.Put(ctx, late, strings.NewReader("late")); err != nil {
		t.Fatal(err)
	}
	// Another job starts from old's savepoint 4, and old again from 2.
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"),
		RestoreFrom: fmt.Sprintf("old/%d", four)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "old", From: fmt.Sprint(two)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "old", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })

	started := "the job started from it and has completed no checkpoint of its own since"
	e.removeErr(t, ctx, "old", two, control.ErrConflict, fmt.Sprintf(
		"cannot remove savepoint %d of job old: job old is running, and a failover restores it (%s)", two, started))
	kept := fmt.Sprintf("cannot remove savepoint %d of job old: job copy is running, and a failover restores it (%s)", four, started)
	e.removeErr(t, ctx, "old", four, control.ErrConflict, kept)

	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", Earlier: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Checkpoints) != 1 || rm.Checkpoints[0].ID != one || !rm.Checkpoints[0].EarlierRun ||
		!slices.Equal(rm.Kept, []string{kept}) || !slices.Equal(rm.Leftovers, []int64{two + 1}) || rm.LeftoverObjects != 1 {
		t.Errorf("remove -earlier = %+v", rm)
	}
	if ids, err := e.catalogIDs(ctx, "old"); err != nil || !slices.Equal(ids, []int64{two, four}) {
		t.Errorf("stored: %v, %v; want %d, %d", ids, err, two, four)
	}
	for _, id := range []int64{one, two + 1} {
		if e.stored("old", id) {
			t.Errorf("checkpoint %d is still in storage", id)
		}
	}
	cps, err := e.api.Checkpoints(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	var listed []int64
	for _, cp := range cps {
		listed = append(listed, cp.ID)
	}
	if !slices.Equal(listed, []int64{four, two}) {
		t.Errorf("listed %v, want %d, %d", listed, four, two)
	}

	// copy's own savepoint is what its failover restores now.
	e.savepoint(t, ctx, "copy")
	rm, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", Earlier: true})
	if err != nil || len(rm.Checkpoints) != 1 || rm.Checkpoints[0].ID != four || len(rm.Kept) != 0 || len(rm.Leftovers) != 0 {
		t.Errorf("second remove -earlier = %+v, %v", rm, err)
	}
	rm, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", Earlier: true})
	if err != nil || len(rm.Checkpoints)+len(rm.Kept)+len(rm.Leftovers) != 0 {
		t.Errorf("third remove -earlier = %+v, %v", rm, err)
	}
}

// An ended job known from its record (the coordinator restarted) loses
// its latest checkpoint to a removal: the newest of its run still stored
// takes its place, in its record too, and the record still says which
// checkpoint the run started from.
func TestRemoveLatestOfAnEndedJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "end", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "end", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	one, two := e.savepoint(t, ctx, "end"), e.savepoint(t, ctx, "end")
	if _, err := e.api.CancelJob(ctx, "end"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "end", From: fmt.Sprint(one)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "end", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	latest := e.savepoint(t, ctx, "end")
	if _, err := e.api.CancelJob(ctx, "end"); err != nil {
		t.Fatal(err)
	}
	stop()
	stop = startManager()
	if rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "end", ID: latest}); err != nil || len(rm.Checkpoints) != 1 {
		t.Fatalf("remove %d = %+v, %v", latest, rm, err)
	}
	check := func(when string) {
		t.Helper()
		if st, err := e.api.Job(ctx, "end"); err != nil || st.LatestCheckpoint != one {
			t.Errorf("%s: %+v, %v; want latest checkpoint %d (the run's start)", when, st, err, one)
		}
		cps, err := e.api.Checkpoints(ctx, "end")
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range cps {
			if cp.ID == latest || cp.EarlierRun != (cp.ID == two) {
				t.Errorf("%s: listed %+v", when, cp)
			}
		}
	}
	check("after the removal")
	stop()
	stop = startManager()
	defer stop()
	check("after a coordinator restart")
}

// A sink's commit marker written after its checkpoint was removed belongs
// to nothing: the next removal deletes it. Once the job has ended,
// weir checkpoint rm -earlier deletes what its own run's checkpoints that
// never completed left too (a snapshot finished after the job ended).
func TestRemoveStrayMarkersAndWhatAnEndedRunLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "mk", "checkpointing: {disabled: true, timeout: 2s}\n"))
	one, two := e.savepoint(t, ctx, "mk"), e.savepoint(t, ctx, "mk")
	e.savepoint(t, ctx, "mk")
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "mk", ID: one}); err != nil {
		t.Fatal(err)
	}
	// The sink's commit of one was stored after the removal.
	marker := checkpoint.StateKey("mk", one, "out-0") + checkpoint.CommitMarkerSuffix
	if err := e.fleet.store.Put(ctx, marker, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "mk", ID: two})
	if err != nil || rm.StrayMarkers != 1 {
		t.Errorf("remove %d = %+v, %v; want the stray marker of %d removed", two, rm, err, one)
	}
	if e.stored("mk", one) {
		t.Errorf("the commit marker of removed checkpoint %d is still stored", one)
	}

	// A savepoint fails; its snapshot is finished after the job ended.
	w.mu.Lock()
	w.noAck = true
	w.mu.Unlock()
	if _, err := e.api.Savepoint(ctx, "mk"); err == nil {
		t.Fatal("a savepoint nobody acked completed")
	}
	if _, err := e.api.CancelJob(ctx, "mk"); err != nil {
		t.Fatal(err)
	}
	failed := two + 2
	if err := e.fleet.store.Put(ctx, checkpoint.StateKey("mk", failed, "in-0"), strings.NewReader("late")); err != nil {
		t.Fatal(err)
	}
	rm, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "mk", Earlier: true})
	if err != nil || !slices.Equal(rm.Leftovers, []int64{failed}) || rm.LeftoverObjects != 1 || len(rm.Checkpoints) != 0 {
		t.Errorf("remove -earlier = %+v, %v; want the leftover of %d", rm, err, failed)
	}
	if e.stored("mk", failed) {
		t.Errorf("the snapshot of failed savepoint %d is still stored", failed)
	}
}
