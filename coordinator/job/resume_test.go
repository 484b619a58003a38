package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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

// A job a restarted coordinator could not resume is listed as failed, but
// it has not ended: the next coordinator resumes it from its run's latest
// checkpoint. Until then that checkpoint stays, and so does the job's
// record: removing the run's latest checkpoint is refused (it was
// allowed, the job looking ended, and the next coordinator resumed the
// job from an older one), and removing a checkpoint of an earlier run of
// its name, which nothing needs, leaves the record as it was (it wrote
// the record as failed, and no coordinator resumed the job again). A
// cancel gives the job up: the next coordinator lists it canceled (a
// cancel was refused as of a job that ended).
func TestUnresumedJobKeepsWhatTheNextCoordinatorResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var broken atomic.Bool
	e, startManager := restartable(t, func(s storage.Store) storage.Store { return brokenGet{Store: s, broken: &broken} })
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	// An earlier run of the name, with a savepoint.
	e.submitRunning(t, ctx, spec(t, "ha", "checkpointing: {disabled: true}\n"))
	earlier := e.savepoint(t, ctx, "ha")
	if _, err := e.api.CancelJob(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	before := waitFor(t, ctx, e, "ha", "a checkpoint of the second run", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.LatestCheckpoint > earlier
	})
	stop()
	ids, err := e.catalogIDs(ctx, "ha")
	if err != nil || len(ids) == 0 {
		t.Fatalf("checkpoints of ha: %v, %v", ids, err)
	}
	latest := ids[len(ids)-1]

	broken.Store(true)
	stop = startManager()
	if st, err := e.api.Job(ctx, "ha"); err != nil || st.State != control.JobFailed {
		t.Fatalf("job after a restart that cannot read its checkpoints' metadata for now: %+v, %v", st, err)
	}
	broken.Store(false) // readable again, under the coordinator that gave up
	e.removeErr(t, ctx, "ha", latest, control.ErrConflict, fmt.Sprintf(
		"cannot remove checkpoint %d of job ha: job ha was not resumed after the coordinator restarted, and the next coordinator resumes it from its latest checkpoint (cancel the job first to give it up)", latest))
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "ha", ID: earlier}); err != nil {
		t.Errorf("remove savepoint %d of an earlier run: %v", earlier, err)
	}
	stop()

	stop = startManager()
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > before.Attempt
	})
	if d := w.lastDeploy("ha"); d.Restore == nil || d.Restore.CheckpointID != latest {
		t.Errorf("resumed from %+v; want checkpoint %d, the latest", d.Restore, latest)
	}
	stop()

	broken.Store(true)
	stop = startManager()
	st, err := e.api.CancelJob(ctx, "ha")
	if err != nil || st.State != control.JobCanceled {
		t.Errorf("cancel of a job the coordinator did not resume: %+v, %v", st, err)
	}
	stop()
	broken.Store(false)
	stop = startManager()
	defer stop()
	if st, err := e.api.Job(ctx, "ha"); err != nil || st.State != control.JobCanceled {
		t.Errorf("job canceled while not resumed, after a restart: %+v, %v; want canceled", st, err)
	}
}

// meetingList is a store whose listings of a job's checkpoints, while
// meet is set, each wait until every job's listing is under way, as
// listings wait side by side for a bucket's stream to elect a leader.
type meetingList struct {
	storage.Store
	meet func(job string) // nil: no waiting
}

func (s *meetingList) List(ctx context.Context, prefix string) ([]string, error) {
	if job, ok := strings.CutSuffix(prefix, "/chk-"); ok && s.meet != nil {
		s.meet(job)
	}
	return s.Store.List(ctx, prefix)
}

// A restarted coordinator reads each job's checkpoints from the buckets'
// stream leaders, which may wait up to 30 s for a stream to elect one; it
// resumed its jobs one after the other, before it served anything, so a
// stream without a leader kept it from serving for that long a job. It
// resumes them side by side: every job's listing is under way at once.
func TestJobsResumedSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	store := &meetingList{}
	e, startManager := restartable(t, func(s storage.Store) storage.Store { store.Store = s; return store })
	f := e.fleet
	stop := startManager()
	f.start(ctx, "w1")
	defer f.wait()
	jobs := []string{"ja", "jb", "jc"}
	before := map[string]control.JobStatus{}
	for _, name := range jobs {
		if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, name, "checkpointing: {interval: 20ms}\n")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range jobs {
		before[name] = waitFor(t, ctx, e, name, "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	}
	stop()

	// Each listing waits for the others, up to 20 s.
	mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
	defer mcancel()
	meet := rendezvous(mctx, len(jobs))
	store.meet = func(job string) {
		if i := slices.Index(jobs, job); i >= 0 {
			meet[i]()
		}
	}
	stop = startManager()
	defer stop()
	if mctx.Err() != nil {
		t.Errorf("the jobs' checkpoint listings did not run side by side: each waited for the others in vain (%v)", mctx.Err())
	}
	for _, name := range jobs {
		waitFor(t, ctx, e, name, "resumed", func(s control.JobStatus) bool {
			return s.State == control.JobRunning && s.Attempt > before[name].Attempt
		})
	}
}

// failingRecords is a store whose first lists of job records and first
// reads of a job record fail, as a store that is not available for now
// fails them.
type failingRecords struct {
	storage.Store
	lists, reads atomic.Int32 // failures left
}

func (s *failingRecords) List(ctx context.Context, prefix string) ([]string, error) {
	if prefix == recordPrefix && s.lists.Add(-1) >= 0 {
		return nil, errors.New("injected: job records unlistable for now")
	}
	return s.Store.List(ctx, prefix)
}

func (s *failingRecords) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasPrefix(key, recordPrefix) && s.reads.Add(-1) >= 0 {
		return nil, errors.New("injected: job record unreadable for now")
	}
	return s.Store.Get(ctx, key)
}

// A restarted coordinator that cannot list or read the job records for
// now tries again until it can: a job left out would not be listed at
// all, and its workers' tasks would be canceled as those of a job nobody
// knows. The job is resumed as usual.
func TestUnreadableJobRecordIsReadAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var fr *failingRecords
	e, startManager := restartable(t, func(s storage.Store) storage.Store {
		fr = &failingRecords{Store: s}
		return fr
	})
	f := e.fleet
	stop := startManager()
	f.start(ctx, "w1")
	defer f.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	before := waitFor(t, ctx, e, "ha", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	stop()

	fr.lists.Store(2)
	fr.reads.Store(2)
	stop = startManager()
	defer stop()
	if n, m := fr.lists.Load(), fr.reads.Load(); n >= 0 || m >= 0 {
		t.Errorf("the coordinator served before it listed and read the job records (injected failures left: %d listings, %d reads)", max(n, 0), max(m, 0))
	}
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > before.Attempt && s.LatestCheckpoint > before.LatestCheckpoint
	})
}

// A failover whose coordinator cannot read the latest checkpoint for now
// (storage unavailable) is not deployed from an older one or from none:
// it fails with the kind restore, saying so, and the next attempt, able
// to read it, restores it.
func TestUnreadableCheckpointAtFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var broken atomic.Bool
	e, startManager := restartable(t, func(s storage.Store) storage.Store { return brokenGet{Store: s, broken: &broken} })
	defer startManager()()
	w := e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	s := spec(t, "fo", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 20ms, attempts: 50}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "fo", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	cp, err := e.api.Savepoint(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	if err := w.client.Failed(ctx, control.TaskRef{Job: "fo", Attempt: st.Attempt, Task: "count-0"}, control.FailureTrap, "trap"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "fo", "a failure to read the checkpoint", func(s control.JobStatus) bool {
		return len(s.Failures) > 0 && strings.HasPrefix(s.Failures[0].Reason, "read the latest checkpoint: ")
	})
	if f := st.Failures[0]; f.Kind != control.FailureRestore || f.Task != "" ||
		!strings.Contains(f.Reason, "injected: checkpoint metadata unreadable for now") {
		t.Errorf("failure %+v; want one of kind %q naming the store's error", f, control.FailureRestore)
	}
	broken.Store(false)
	st = waitFor(t, ctx, e, "fo", "running again", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > st.Attempt
	})
	if d := w.lastDeploy("fo"); d.Restore == nil || d.Restore.CheckpointID != cp.ID {
		t.Errorf("restored %+v; want savepoint %d", d.Restore, cp.ID)
	}
	cancelWhileLive(t, ctx, e, "fo")
}
