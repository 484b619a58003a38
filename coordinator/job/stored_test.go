package job

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// The checkpoints a job's earlier run left in storage are listed after a
// restore, marked as the earlier run's: a restore can start from them (the
// new run's retention does not discard them), and they vanished from the
// listing, which showed only the checkpoint the run was restored from and
// its own. Those retention discarded are not listed. A coordinator
// restarted after the job ended lists the same.
func TestCheckpointsListTheEarlierRunsStoredOnes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ls", "checkpointing: {interval: 20ms, retained: 3}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ls", "five checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 5 })
	sp, err := e.api.Savepoint(ctx, "ls")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ls", "a checkpoint after the savepoint", func(s control.JobStatus) bool { return s.LatestCheckpoint > sp.ID })
	if _, err := e.api.CancelJob(ctx, "ls"); err != nil {
		t.Fatal(err)
	}
	stored, err := e.catalogIDs(ctx, "ls")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(stored, sp.ID) || len(stored) < 4 || stored[0] == 1 {
		t.Fatalf("stored after the first run: %v (savepoint %d; retained 3)", stored, sp.ID)
	}
	// Restore from the newest stored periodic checkpoint but one; the
	// run takes no checkpoints of its own.
	var from int64
	for i := len(stored) - 2; i >= 0 && from == 0; i-- {
		if stored[i] != sp.ID {
			from = stored[i]
		}
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "ls", From: fmt.Sprint(from),
		Spec: spec(t, "ls", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ls", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })

	check := func(when string) {
		t.Helper()
		cps, err := e.api.Checkpoints(ctx, "ls")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for i, c := range cps {
			ids = append(ids, c.ID)
			if i > 0 && c.ID >= cps[i-1].ID {
				t.Errorf("%s: listed out of order: %d after %d", when, c.ID, cps[i-1].ID)
			}
			if c.Status != control.CheckpointCompleted || c.Savepoint != (c.ID == sp.ID) || c.Total == 0 {
				t.Errorf("%s: checkpoint %+v, want a completed one with its tasks", when, c)
			}
			if want := c.ID != from; c.EarlierRun != want {
				t.Errorf("%s: checkpoint %d earlier run %v, want %v", when, c.ID, c.EarlierRun, want)
			}
		}
		slices.Reverse(ids)
		if !slices.Equal(ids, stored) {
			t.Errorf("%s: listed %v, want those stored: %v", when, ids, stored)
		}
	}
	check("after the restore")
	if _, err := e.api.CancelJob(ctx, "ls"); err != nil {
		t.Fatal(err)
	}
	check("after the cancel")
	stop()
	stop = startManager()
	defer stop()
	check("after a coordinator restart")
}

// The checkpoints a listing returns are its caller's: a removal cut short
// that the job notes as the caller still reads them (the coordinator's
// start finishes removals while it serves its first listings) changes the
// job's own list, not the one returned. Before, the first listing
// returned the job's list itself, which the race detector caught noteCut
// writing while a Checkpoints handler copied it.
func TestStoredCheckpointsAreTheCallers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &checkpoint.Catalog{Meta: dir, State: dir}
	if err := cat.Write(ctx, &checkpoint.Metadata{Job: "ls", ID: 1}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{Catalog: cat})
	m.ctx = ctx
	j := terminalJob(m, record{Spec: spec(t, "ls", ""), State: control.JobCanceled, FirstID: 1})

	got := j.storedCheckpoints(ctx, nil)
	if len(got) != 1 || got[0].ID != 1 || got[0].Status != control.CheckpointCompleted {
		t.Fatalf("stored = %+v; want checkpoint 1, completed", got)
	}
	j.noteCut(1)
	if got[0].Status != control.CheckpointCompleted {
		t.Errorf("the listing returned before the cut changed under its caller: %+v", got[0])
	}
	if again := j.storedCheckpoints(ctx, nil); len(again) != 1 || again[0].Status != control.CheckpointRemoving {
		t.Errorf("stored after the cut = %+v; want checkpoint 1, being removed", again)
	}
}

// A savepoint of the run, and the checkpoint the run was restored from,
// stay in weir checkpoint ls however many checkpoints came after: the run
// keeps them (stored, restorable) after its history, which holds the
// newest 100, no longer lists them. Before, they were gone from the list
// once a hundred checkpoints had passed, while a restore's refusal named
// them as restorable.
func TestListingKeepsWhatTheRunKeeps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {disabled: true}\n"))
	sp, err := e.api.Savepoint(ctx, "wc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.StopJob(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	start := sp.ID + 1 // the stop's savepoint
	waitFor(t, ctx, e, "wc", "stopped", func(st control.JobStatus) bool { return st.State.Terminal() })
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "wc", From: strconv.FormatInt(start, 10),
		Spec: spec(t, "wc", "checkpointing: {interval: 10ms, retained: 2}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	mid, err := e.api.Savepoint(ctx, "wc")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "120 checkpoints more", func(st control.JobStatus) bool { return st.LatestCheckpoint > mid.ID+120 })
	cs, err := e.api.Checkpoints(ctx, "wc")
	if err != nil {
		t.Fatal(err)
	}
	found := map[int64]control.CheckpointInfo{}
	for i, c := range cs {
		found[c.ID] = c
		if i > 0 && cs[i-1].ID <= c.ID {
			t.Errorf("listing not newest first at %d: %d after %d", i, c.ID, cs[i-1].ID)
		}
	}
	for _, id := range []int64{sp.ID, start, mid.ID} {
		if c, ok := found[id]; !ok || c.Status != control.CheckpointCompleted || !c.Savepoint {
			t.Errorf("savepoint %d: listed %v as %+v; want listed, completed", id, ok, c)
		}
	}
	if c := found[start]; c.EarlierRun {
		t.Errorf("the savepoint the run started from is listed as an earlier run's: %+v", c)
	}
	if c := found[sp.ID]; !c.EarlierRun {
		t.Errorf("the earlier run's savepoint is not listed as the earlier run's: %+v", c)
	}
}
