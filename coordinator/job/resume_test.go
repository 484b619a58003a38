package job

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// brokenList is a store whose List fails while broken is set.
type brokenList struct {
	storage.Store
	broken *atomic.Bool
}

func (s brokenList) List(ctx context.Context, prefix string) ([]string, error) {
	if s.broken.Load() && strings.HasSuffix(prefix, "/chk-") {
		return nil, errors.New("injected: checkpoint metadata unreadable")
	}
	return s.Store.List(ctx, prefix)
}

// A job a restarted coordinator cannot resume (its checkpoints cannot be
// listed) is listed as failed with why, not dropped without a word; the
// next coordinator, able to read them, resumes it.
func TestUnresumableJobIsListedFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var broken atomic.Bool
	e, startManager := restartable(t, func(s storage.Store) storage.Store { return brokenList{Store: s, broken: &broken} })
	f := e.fleet
	stop := startManager()
	f.start(ctx, "w1")
	defer f.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	before := waitFor(t, ctx, e, "ha", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	stop()

	broken.Store(true)
	stop = startManager()
	st1, err := e.api.Job(ctx, "ha")
	if err != nil || st1.State != control.JobFailed ||
		!strings.Contains(st1.Reason, "not resumed after the coordinator restarted: list checkpoints of ha: injected: checkpoint metadata unreadable") {
		t.Fatalf("job after a restart that cannot read its checkpoints: %+v, %v", st1, err)
	}
	stop()

	broken.Store(false)
	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > before.Attempt && s.LatestCheckpoint > before.LatestCheckpoint
	})
}

// brokenGet is a store whose reads of checkpoint metadata fail while
// broken is set, as a store that is not available for now fails them
// (not a missing or corrupt checkpoint).
type brokenGet struct {
	storage.Store
	broken *atomic.Bool
}

func (s brokenGet) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if s.broken.Load() && strings.HasSuffix(key, "/_metadata") {
		return nil, errors.New("injected: checkpoint metadata unreadable for now")
	}
	return s.Store.Get(ctx, key)
}

// A restarted coordinator that cannot read a checkpoint's metadata for
// now (storage unavailable, a bucket's stream without a leader) does not
// take the checkpoint for unusable and resume the job from an older one,
// or from none, which an exactly-once sink's output after it would be
// committed again; it lists the job as failed with why, and the next
// coordinator resumes it from its latest checkpoint.
func TestUnreadableCheckpointIsNotSkippedAtResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var broken atomic.Bool
	e, startManager := restartable(t, func(s storage.Store) storage.Store { return brokenGet{Store: s, broken: &broken} })
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	before := waitFor(t, ctx, e, "ha", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	stop()
	ids, err := e.catalogIDs(ctx, "ha")
	if err != nil || len(ids) == 0 {
		t.Fatalf("checkpoints of ha: %v, %v", ids, err)
	}
	latest := ids[len(ids)-1]

	broken.Store(true)
	stop = startManager()
	st, err := e.api.Job(ctx, "ha")
	if err != nil || st.State != control.JobFailed ||
		!strings.Contains(st.Reason, "not resumed after the coordinator restarted: ") ||
		!strings.Contains(st.Reason, "injected: checkpoint metadata unreadable for now") {
		t.Fatalf("job after a restart that cannot read its checkpoints' metadata for now: %+v, %v", st, err)
	}
	stop()

	broken.Store(false)
	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > before.Attempt
	})
	if d := w.lastDeploy("ha"); d.Restore == nil || d.Restore.CheckpointID != latest {
		t.Errorf("resumed from %+v; want checkpoint %d, the latest", d.Restore, latest)
	}
}
