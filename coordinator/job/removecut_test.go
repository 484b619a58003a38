package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// cutDeletes is a Store whose deletes under a prefix fail, once
// cutAfter armed it, after left more of them went through, until mend:
// storage failing (a timeout, a lost leader) partway through a removal,
// and for a while after.
type cutDeletes struct {
	storage.Store
	mu   sync.Mutex
	cuts map[string]int // by prefix: the deletes under it that still pass
}

// cutAfter makes the deletes under prefix fail after left more.
func (s *cutDeletes) cutAfter(prefix string, left int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cuts == nil {
		s.cuts = map[string]int{}
	}
	s.cuts[prefix] = left
}

// mend makes every delete pass again.
func (s *cutDeletes) mend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts = nil
}

func (s *cutDeletes) Delete(ctx context.Context, prefix string) error {
	s.mu.Lock()
	fail := false
	for p, left := range s.cuts {
		if strings.HasPrefix(prefix, p) {
			fail = fail || left == 0
			s.cuts[p] = max(left-1, 0)
		}
	}
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("delete %s: injected: storage failed", prefix)
	}
	return s.Store.Delete(ctx, prefix)
}

// listed returns checkpoint id as weir checkpoint ls lists it.
func listed(t *testing.T, ctx context.Context, api *control.APIClient, job string, id int64) control.CheckpointInfo {
	t.Helper()
	cps, err := api.Checkpoints(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if c.ID == id {
			return c
		}
	}
	t.Errorf("checkpoint %d of %s is not listed: %+v", id, job, cps)
	return control.CheckpointInfo{}
}

// A checkpoint removal that storage cuts short, after it deleted a
// snapshot, leaves no checkpoint that looks restorable, also to the next
// coordinator, while storage keeps failing (the next coordinator's start
// cannot finish it): weir checkpoint ls lists it as being removed, saying
// how to finish; a restarted coordinator resumes the job without it; a
// restore from it is refused with the reason, and an ended job's latest
// is the newest checkpoint still whole; weir checkpoint rm again, once
// storage works, finishes the removal and counts what it deleted.
func TestRemovalCutShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs *cutDeletes
	logs := &logBuffer{}
	e, start := restartableWith(t, func(st storage.Store) storage.Store {
		cs = &cutDeletes{Store: st}
		return cs
	}, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second, Log: slog.New(slog.NewTextHandler(logs, nil))})
	stop := start()
	defer func() { stop() }()
	w := e.fleet.start(ctx, "w1")
	api := e.api
	e.submitRunning(t, ctx, spec(t, "rm", "checkpointing: {disabled: true, timeout: 3s}\n"))
	var ids []int64
	for range 4 {
		ids = append(ids, e.savepoint(t, ctx, "rm"))
	}
	b, c, d := ids[1], ids[2], ids[3]
	removing := func(id int64) string {
		return fmt.Sprintf("partly removed: a removal began and did not finish, so it is not restored; weir checkpoint rm rm %d finishes it", id)
	}
	isRemoving := func(when string, id int64) {
		t.Helper()
		if got := listed(t, ctx, api, "rm", id); got.Status != control.CheckpointRemoving || got.Reason != removing(id) || got.Size != 25 {
			t.Errorf("%s: checkpoint %d listed as %+v; want removing: %s", when, id, got, removing(id))
		}
	}
	// startTried waits until the coordinator's start has tried to finish
	// the removal of id, and failed (storage still fails), n times in
	// all: a request meanwhile is refused, as the checkpoint is being
	// removed, and one after storage mends may find it gone.
	startTried := func(id int64, n int) {
		t.Helper()
		line := fmt.Sprintf(`msg="finishing a checkpoint removal cut short failed: weir checkpoint rm finishes it" job=rm checkpoint=%d `, id)
		for strings.Count(logs.String(), line) < n {
			select {
			case <-ctx.Done():
				t.Fatalf("the coordinator's start did not try to finish the removal of %d %d times:\n%s", id, n, logs.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	refused := func(when string, id int64) {
		t.Helper()
		want := fmt.Sprintf("restore: checkpoint rm/%d is partly removed (a removal began and did not finish), so it cannot be restored: "+
			"run weir checkpoint rm rm %d again to finish the removal", id, id)
		if _, err := api.Restore(ctx, control.RestoreRequest{Job: "rm", From: fmt.Sprint(id)}); !errors.Is(err, control.ErrNotFound) || err.Error() != want {
			t.Errorf("%s: restore from %d = %v; want %s", when, id, err, want)
		}
	}

	// The running job's c: one snapshot goes, then storage fails.
	cs.cutAfter(fmt.Sprintf("rm/chk-%d/", c), 1)
	if _, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: c}); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("injected: storage failed (removed 1 objects; weir checkpoint rm rm %d tries again)", c)) {
		t.Fatalf("remove cut short: %v", err)
	}
	isRemoving("after the cut", c)

	// A new coordinator reads it from storage: the job resumes from its
	// latest, d, and the listing still says c is being removed.
	before := waitFor(t, ctx, e, "rm", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	stop()
	stop = start()
	waitFor(t, ctx, e, "rm", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > before.Attempt
	})
	if dep := w.lastDeploy("rm"); dep.Restore == nil || dep.Restore.CheckpointID != d {
		t.Errorf("resumed from %+v; want %d", dep.Restore, d)
	}
	isRemoving("after a coordinator restart", c)
	startTried(c, 1)

	// Once the job ended, its latest, d, can go; cut short, the latest is
	// the newest one whole, b.
	if _, err := api.CancelJob(ctx, "rm"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "rm", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
	cs.cutAfter(fmt.Sprintf("rm/chk-%d/", d), 1)
	if _, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: d}); err == nil {
		t.Fatal("a removal storage cut short succeeded")
	}
	if st, err := api.Job(ctx, "rm"); err != nil || st.LatestCheckpoint != b {
		t.Errorf("status after the cut: latest %d, %v; want %d", st.LatestCheckpoint, err, b)
	}
	isRemoving("the ended job's latest, after the cut", d)
	refused("the ended job", d)
	refused("the ended job", c)

	// The next coordinator knows the ended job from its record.
	stop()
	stop = start()
	if st, err := api.Job(ctx, "rm"); err != nil || st.LatestCheckpoint != b {
		t.Errorf("status after a restart: latest %d, %v; want %d", st.LatestCheckpoint, err, b)
	}
	isRemoving("after the second restart", d)
	isRemoving("after the second restart", c)
	startTried(c, 2)
	startTried(d, 1)
	refused("after the second restart", d)

	// rm again finishes each: what the cut left (four of the five
	// snapshots) and the metadata.
	cs.mend()
	for _, id := range []int64{d, c} {
		rm, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: id})
		if err != nil || len(rm.Checkpoints) != 1 || rm.Checkpoints[0].Objects != 5 || rm.Checkpoints[0].Status != control.CheckpointRemoving {
			t.Fatalf("remove %d again = %+v, %v; want 5 objects", id, rm, err)
		}
		if e.stored("rm", id) {
			t.Errorf("checkpoint %d is still in storage", id)
		}
	}
	if got, err := e.catalogIDs(ctx, "rm"); err != nil || !slices.Equal(got, ids[:2]) {
		t.Errorf("stored: %v, %v; want %v", got, err, ids[:2])
	}
	if st, err := api.Job(ctx, "rm"); err != nil || st.LatestCheckpoint != b {
		t.Errorf("status after the removals: latest %d, %v; want %d", st.LatestCheckpoint, err, b)
	}
}
