package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// metaDeleteHold is a Store that holds the first delete of a stored
// checkpoint's metadata under prefix — the first step of a discard — until
// release is closed, having sent the key on held.
type metaDeleteHold struct {
	storage.Store
	mu      sync.Mutex
	prefix  string // "": hold nothing
	held    chan string
	release chan struct{}
}

func (s *metaDeleteHold) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	hold := s.prefix != "" && strings.HasPrefix(key, s.prefix) && strings.HasSuffix(key, "/_metadata")
	if hold {
		if rc, err := s.Store.Get(ctx, key); err == nil {
			_ = rc.Close()
			s.prefix = ""
		} else {
			hold = false // a failed checkpoint's: nothing to restore
		}
	}
	s.mu.Unlock()
	if hold {
		s.held <- key
		<-s.release
	}
	return s.Store.Delete(ctx, key)
}

// A restore from a checkpoint that its job's retention is discarding is
// refused, naming what deletes it, as for a removal — from another job
// while the job runs, and of the job itself once it ended while the
// discard goes on — rather than deployed with the snapshots being deleted
// under it; a removal of it meanwhile says that retention discarded it.
// Once the discard is done, the checkpoint is not there.
func TestRestoreRefusedWhileRetentionDiscardsTheCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs := &metaDeleteHold{prefix: "src/chk-", held: make(chan string, 1), release: make(chan struct{})}
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hs.release) }) })
	e, _, _, start := removalEnv(t, ctx, "dir", func(s storage.Store) storage.Store {
		hs.Store = s
		return hs
	})
	defer start()()
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "src", "checkpointing: {interval: 20ms, retained: 1, timeout: 3s}\n"))
	var n int64
	select {
	case key := <-hs.held:
		if _, err := fmt.Sscanf(key, "src/chk-%d/_metadata", &n); err != nil {
			t.Fatalf("held %q: %v", key, err)
		}
	case <-ctx.Done():
		t.Fatal("retention discarded no checkpoint")
	}
	want := fmt.Sprintf("restore from src/%d: the checkpoint is being removed (the job's retention discards it, as checkpointing.retained keeps only the newest); "+
		"restore another one: weir checkpoint ls src lists them", n)
	_, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"), RestoreFrom: fmt.Sprintf("src/%d", n)})
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("submit from the checkpoint retention discards = %v; want conflict: %s", err, want)
	}
	// A removal meanwhile says what a removal says once it is gone.
	_, err = e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "src", ID: n})
	if wantRm := fmt.Sprintf("checkpoint %d of job src is gone: retention discarded it (checkpointing.retained)", n); !errors.Is(err, control.ErrNotFound) || err.Error() != wantRm {
		t.Errorf("removal of the checkpoint retention discards = %v; want not found: %s", err, wantRm)
	}

	// The job ends; its runner carries out the discard under way before
	// the cancel returns.
	canceled := make(chan error, 1)
	go func() {
		_, err := e.api.CancelJob(ctx, "src")
		canceled <- err
	}()
	waitFor(t, ctx, e, "src", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
	_, err = e.api.Restore(ctx, control.RestoreRequest{Job: "src", From: fmt.Sprint(n)})
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("restore of the ended job from the checkpoint retention discards = %v; want conflict: %s", err, want)
	}
	release.Do(func() { close(hs.release) })
	if err := <-canceled; err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "src", From: fmt.Sprint(n)}); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("restore from the checkpoint retention discarded = %v; want not found", err)
	}
}

// A checkpoint that another job was started from stays stored while that
// job runs without one of its own — a failover restores it — though the
// retention of the job that took it drops it; it is discarded with that
// job's next discard once it is needed no more.
func TestRetentionKeepsACheckpointAnotherJobStartedFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "src", "checkpointing: {interval: 20ms, retained: 2, timeout: 3s}\n"))

	// Started from the latest checkpoint of src as it runs; one its
	// retention took meanwhile is not found, or refused while it goes.
	var n int64
	for n == 0 {
		st := waitFor(t, ctx, e, "src", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint > 0 })
		_, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\nrestart: {delay: 5ms}\n"),
			RestoreFrom: fmt.Sprintf("src/%d", st.LatestCheckpoint)})
		switch {
		case err == nil:
			n = st.LatestCheckpoint
		case !errors.Is(err, control.ErrNotFound) && !errors.Is(err, control.ErrConflict):
			t.Fatal(err)
		}
	}
	st := waitFor(t, ctx, e, "copy", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })

	stored := func(id int64) bool {
		_, err := os.Stat(filepath.Join(e.dir, "src", fmt.Sprintf("chk-%d", id), "_metadata"))
		return err == nil
	}
	// discardedPast waits until two checkpoints of src above n that
	// completed were discarded, each by a completion of its own: the
	// discarder tries n's discard (held) with the first one's, after it
	// (newest first), so that came before the second one's.
	discardedPast := func(what string) {
		t.Helper()
		var m []int64
		for {
			ids, err := e.catalogIDs(ctx, "src")
			if err != nil {
				t.Fatal(err)
			}
			if len(m) < 2 {
				m = nil
				for _, id := range ids {
					if id > n && len(m) < 2 {
						m = append(m, id)
					}
				}
			} else if !slices.Contains(ids, m[0]) && !slices.Contains(ids, m[1]) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: src discarded no checkpoint after %d (stored: %v)", what, n, ids)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	discardedPast("while copy needs it")
	if !stored(n) {
		t.Fatalf("src/%d, which copy started from and restores on a failover, was discarded by the retention of src", n)
	}
	// weir checkpoint ls src lists it as what it is: stored, restorable,
	// and why it outlives the retained ones.
	listed := func() control.CheckpointInfo {
		t.Helper()
		cps, err := e.api.Checkpoints(ctx, "src")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cps {
			if c.ID == n {
				return c
			}
		}
		return control.CheckpointInfo{}
	}
	if c := listed(); c.Status != control.CheckpointCompleted || !strings.Contains(c.Reason, "kept past checkpointing.retained: job copy started from it") {
		t.Errorf("while copy needs it, weir checkpoint ls src lists %d as %q (%s); want completed, kept for copy", n, c.Status, c.Reason)
	}
	if err := w.client.Failed(ctx, control.TaskRef{Job: "copy", Attempt: st.Attempt, Task: "in-0"}, control.FailureUnknown, "boom"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "copy", "failed over", func(s control.JobStatus) bool { return s.State == control.JobRunning && s.Attempt > st.Attempt })
	d := w.lastDeploy("copy")
	if d.Restore == nil || d.Restore.CheckpointID != n || !strings.HasPrefix(d.Restore.Handles["in-0"], checkpoint.StatePrefix("src", n)) {
		t.Fatalf("after a failover, copy restores %+v; want src/%d", d.Restore, n)
	}
	for task, h := range d.Restore.Handles {
		if _, err := os.Stat(filepath.Join(e.dir, filepath.FromSlash(h))); err != nil {
			t.Errorf("after a failover, %s restores from %s: %v", task, h, err)
		}
	}

	// Needed no more: the next discard of src takes it.
	if _, err := e.api.CancelJob(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	discardedPast("once copy ended")
	if c := listed(); c.Status == control.CheckpointCompleted {
		t.Errorf("once copy ended, weir checkpoint ls src lists %d as completed (%s)", n, c.Reason)
	}
	for stored(n) {
		select {
		case <-ctx.Done():
			t.Fatalf("src/%d stays stored after copy, which needed it, ended", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if keys, err := e.fleet.store.List(ctx, checkpoint.StatePrefix("src", n)); err != nil || len(keys) > 0 {
		t.Errorf("src/%d left %v (%v)", n, keys, err)
	}
}
