package job

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// nameFrom rewrites stored checkpoint id of job (a savepoint the test
// took) as a periodic checkpoint whose snapshot of the sink task out-0
// names output staged from checkpoint from on (control.MetricSinkStateFrom;
// 0: none), as an exactly-once sink's snapshot does.
func (e *env) nameFrom(t *testing.T, ctx context.Context, job string, id, from int64) {
	t.Helper()
	st, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	cat := &checkpoint.Catalog{Meta: st, State: st}
	md, err := cat.Read(ctx, job, id)
	if err != nil {
		t.Fatal(err)
	}
	md.Savepoint = false
	if from > 0 {
		md.Metrics["out-0"][control.MetricSinkStateFrom] = from
	}
	if err := cat.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
}

// waitIDs polls the checkpoints of job in storage until cond holds.
func (e *env) waitIDs(t *testing.T, ctx context.Context, job, what string, cond func([]int64) bool) []int64 {
	t.Helper()
	for {
		ids, err := e.catalogIDs(ctx, job)
		if err == nil && cond(ids) {
			return ids
		}
		select {
		case <-ctx.Done():
			t.Fatalf("checkpoints of %s in storage: %v, %v; want %s", job, ids, err, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A running job's retention keeps the checkpoint its sink's snapshots
// name, and everything after it, past checkpointing.retained — after a
// coordinator restart too — and weir checkpoint ls says why; a removal of
// it is refused, naming the checkpoint that names it. Once the sink's
// snapshots name nothing, retention lets them go.
func TestRetentionAndRemovalHonourWhatASinkNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	var named atomic.Int64
	w.mu.Lock()
	w.sinkStateFrom = func(id int64) int64 {
		if k := named.Load(); k > 0 && k < id {
			return k
		}
		return 0
	}
	w.mu.Unlock()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "nm", "checkpointing: {interval: 20ms, retained: 1}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "nm", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	// The checkpoints after k name it: k is not taken yet, so every one
	// after it names it from its first ack on.
	k := st.LatestCheckpoint + 3
	named.Store(k)
	waitFor(t, ctx, e, "nm", "checkpoints after the one named", func(s control.JobStatus) bool { return s.LatestCheckpoint >= k+3 })
	e.waitIDs(t, ctx, "nm", fmt.Sprintf("%d, the one named, the oldest", k), func(ids []int64) bool { return len(ids) > 0 && ids[0] == k })

	refused := regexp.MustCompile(fmt.Sprintf(`^cannot remove checkpoint %d of job nm: checkpoint \d+'s snapshot of task out-0 names output staged in it \(remove \d+ and the \d+ other checkpoints after %d that name it first\)$`, k, k))
	_, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "nm", ID: k})
	if !errors.Is(err, control.ErrConflict) || !refused.MatchString(err.Error()) {
		t.Errorf("remove %d: %v; want refused: %s", k, err, refused)
	}
	if !e.stored("nm", k) {
		t.Fatalf("the refused checkpoint %d is gone", k)
	}

	stop()
	stop = startManager()
	before := waitFor(t, ctx, e, "nm", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	waitFor(t, ctx, e, "nm", "checkpoints after the restart", func(s control.JobStatus) bool {
		return s.LatestCheckpoint >= before.LatestCheckpoint+3
	})
	if ids, err := e.catalogIDs(ctx, "nm"); err != nil || len(ids) == 0 || ids[0] != k {
		t.Errorf("stored after the restart: %v, %v; want %d the oldest", ids, err, k)
	}
	cps, err := e.api.Checkpoints(ctx, "nm")
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		if cp.ID == k && (cp.Status != control.CheckpointCompleted ||
			!strings.HasPrefix(cp.Reason, "kept past checkpointing.retained: checkpoint ") ||
			!strings.HasSuffix(cp.Reason, fmt.Sprintf("'s snapshot of task out-0 names output staged from checkpoint %d on, which its restore reads", k))) {
			t.Errorf("listed after the restart: %+v", cp)
		}
	}

	named.Store(0)
	e.waitIDs(t, ctx, "nm", fmt.Sprintf("%d discarded", k), func(ids []int64) bool { return len(ids) > 0 && ids[0] > k })
	if _, err := e.api.CancelJob(ctx, "nm"); err != nil {
		t.Fatal(err)
	}
	stop()
}

// weir checkpoint rm refuses a checkpoint of an ended job while another
// one stored names output staged in it — the one it names first, or one
// after it — and removes both once the one naming it went first.
func TestRemoveRefusesACheckpointAnotherNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "ref", "checkpointing: {disabled: true, timeout: 3s}\n"))
	a, b, c := e.savepoint(t, ctx, "ref"), e.savepoint(t, ctx, "ref"), e.savepoint(t, ctx, "ref")
	if _, err := e.api.CancelJob(ctx, "ref"); err != nil {
		t.Fatal(err)
	}
	e.nameFrom(t, ctx, "ref", a, 0)
	e.nameFrom(t, ctx, "ref", b, 0)
	e.nameFrom(t, ctx, "ref", c, a)

	e.removeErr(t, ctx, "ref", a, control.ErrConflict, fmt.Sprintf(
		"cannot remove checkpoint %d of job ref: checkpoint %d's snapshot of task out-0 names output staged in it (remove %d first)", a, c, c))
	e.removeErr(t, ctx, "ref", b, control.ErrConflict, fmt.Sprintf(
		"cannot remove checkpoint %d of job ref: checkpoint %d's snapshot of task out-0 names output staged in checkpoints from %d on, which may be in it (remove %d first)", b, c, a, c))
	for _, id := range []int64{a, b, c} {
		if !e.stored("ref", id) {
			t.Fatalf("checkpoint %d is gone after the refusals", id)
		}
	}
	for _, id := range []int64{c, a} {
		if rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "ref", ID: id}); err != nil || len(rm.Checkpoints) != 1 {
			t.Errorf("remove %d = %+v, %v", id, rm, err)
		}
	}
	if ids, err := e.catalogIDs(ctx, "ref"); err != nil || !slices.Equal(ids, []int64{b}) {
		t.Errorf("stored: %v, %v; want [%d]", ids, err, b)
	}
}

// weir checkpoint rm -earlier keeps the checkpoints of earlier runs that
// a checkpoint of the job still stored names (the run's start), saying
// why, and removes the others; once that one is removed, -earlier removes
// them too.
func TestRemoveEarlierKeepsWhatAKeptCheckpointNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "old", "checkpointing: {disabled: true, timeout: 3s}\n"))
	var s [5]int64
	for i := 1; i <= 4; i++ {
		s[i] = e.savepoint(t, ctx, "old")
	}
	if _, err := e.api.CancelJob(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 4; i++ {
		from := int64(0)
		if i == 4 {
			from = s[2]
		}
		e.nameFrom(t, ctx, "old", s[i], from)
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "old", From: fmt.Sprint(s[4])}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "old", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	own := e.savepoint(t, ctx, "old")

	rm, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", Earlier: true})
	if err != nil {
		t.Fatal(err)
	}
	kept := []string{
		fmt.Sprintf("cannot remove checkpoint %d of job old: checkpoint %d's snapshot of task out-0 names output staged in checkpoints from %d on, which may be in it (remove %d first)", s[3], s[4], s[2], s[4]),
		fmt.Sprintf("cannot remove checkpoint %d of job old: checkpoint %d's snapshot of task out-0 names output staged in it (remove %d first)", s[2], s[4], s[4]),
	}
	if len(rm.Checkpoints) != 1 || rm.Checkpoints[0].ID != s[1] || !slices.Equal(rm.Kept, kept) {
		t.Errorf("remove -earlier = %+v; want %d removed, kept:\n%s", rm, s[1], strings.Join(kept, "\n"))
	}
	if ids, err := e.catalogIDs(ctx, "old"); err != nil || !slices.Equal(ids, []int64{s[2], s[3], s[4], own}) {
		t.Errorf("stored: %v, %v; want %v", ids, err, []int64{s[2], s[3], s[4], own})
	}

	// The run completed one of its own: its start can go, and then what
	// that named.
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", ID: s[4]}); err != nil {
		t.Fatal(err)
	}
	rm, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "old", Earlier: true})
	if err != nil || len(rm.Checkpoints) != 2 || rm.Checkpoints[0].ID != s[3] || rm.Checkpoints[1].ID != s[2] || len(rm.Kept) != 0 {
		t.Errorf("remove -earlier after %d went = %+v, %v; want %d and %d removed", s[4], rm, err, s[3], s[2])
	}
	if ids, err := e.catalogIDs(ctx, "old"); err != nil || !slices.Equal(ids, []int64{own}) {
		t.Errorf("stored: %v, %v; want [%d]", ids, err, own)
	}
}
