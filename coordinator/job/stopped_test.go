package job

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// A job that StopJob stopped says so in its status by the savepoint's ID
// (StoppedWithSavepoint), not only in its reason's words; a job canceled
// otherwise has none. The job's record keeps it: a restarted coordinator
// still lists the job as stopped with that savepoint. A record written
// before the field was kept reads 0, its reason as it was.
func TestStoppedWithSavepoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	for _, name := range []string{"st", "can"} {
		if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, name, "checkpointing: {disabled: true}\n")}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, e, name, "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	}
	if st, err := e.api.Job(ctx, "st"); err != nil || st.StoppedWithSavepoint != 0 {
		t.Fatalf("running job: %+v, %v; want no StoppedWithSavepoint", st, err)
	}
	sp, err := e.api.StopJob(ctx, "st")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.CancelJob(ctx, "can"); err != nil {
		t.Fatal(err)
	}
	reason := fmt.Sprintf("stopped with savepoint %d", sp.ID)
	check := func(when string, want int64) {
		t.Helper()
		st, err := e.api.Job(ctx, "st")
		if err != nil || st.State != control.JobCanceled || st.StoppedWithSavepoint != want || st.Reason != reason {
			t.Errorf("%s: stopped job %+v, %v; want canceled, StoppedWithSavepoint %d, reason %q", when, st, err, want, reason)
		}
		if st, err := e.api.Job(ctx, "can"); err != nil || st.State != control.JobCanceled || st.StoppedWithSavepoint != 0 {
			t.Errorf("%s: canceled job %+v, %v; want canceled, StoppedWithSavepoint 0", when, st, err)
		}
	}
	check("after the stop", sp.ID)

	stop()
	stop = startManager()
	check("after a coordinator restart", sp.ID)

	// The record as a coordinator that did not keep the field wrote it.
	stop()
	dir, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedRecord(t, ctx, dir, "st")
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(stored, &rec); err != nil {
		t.Fatal(err)
	}
	if string(rec["stopped_with_savepoint"]) != fmt.Sprint(sp.ID) {
		t.Fatalf("record %s; want stopped_with_savepoint %d", stored, sp.ID)
	}
	delete(rec, "stopped_with_savepoint")
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Put(ctx, recordKey("st"), strings.NewReader(string(data))); err != nil {
		t.Fatal(err)
	}
	stop = startManager()
	defer stop()
	check("from an older record", 0)
}

// A stop whose attempt failed over before the job was canceled did not
// stop the job with its savepoint: the attempt after it ran past the
// savepoint. The job is canceled saying so, with no StoppedWithSavepoint.
// Here the stop's request to bring w2's tasks to rest is held, with w2's
// heartbeats, until w2 was declared lost and the job runs its next attempt
// on w1.
func TestStopThatFailedOverIsNoStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := setupWith(t, ctx, Options{RequestTimeout: time.Minute})
	e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	first := e.submitRunning(t, ctx, spec(t, "st", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n"))
	if d := w2.lastDeploy("st"); d.Attempt != first.Attempt || len(d.Tasks) == 0 {
		t.Fatalf("attempt %d placed no task on w2 (%+v): the case under test needs it there", first.Attempt, first.Assignment)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w2.mu.Lock()
	w2.gate = func(op string) {
		if op != control.OpStop {
			return
		}
		once.Do(func() {
			w2.mu.Lock() // w2's heartbeats (w2.tasks) wait too: it is lost
			defer w2.mu.Unlock()
			close(held)
			<-release
		})
	}
	w2.mu.Unlock()
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)

	type result struct {
		sp  control.CheckpointInfo
		err error
	}
	stopped := make(chan result, 1)
	go func() {
		sp, err := e.api.StopJob(ctx, "st")
		stopped <- result{sp, err}
	}()
	select {
	case <-held:
	case r := <-stopped:
		t.Fatalf("the stop ended before it brought w2's tasks to rest: %+v, %v", r.sp, r.err)
	case <-ctx.Done():
		t.Fatal("the stop never asked w2 to bring its tasks to rest")
	}
	waitFor(t, ctx, e, "st", "its next attempt running without w2", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > first.Attempt
	})
	releaseAll()
	r := <-stopped
	if r.err != nil {
		t.Fatalf("stop: %v", r.err)
	}
	st, err := e.api.Job(ctx, "st")
	reason := fmt.Sprintf("canceled: the job failed over while it stopped (stopped with savepoint %d); restore it from its latest checkpoint", r.sp.ID)
	if err != nil || st.State != control.JobCanceled || st.StoppedWithSavepoint != 0 || st.Reason != reason {
		t.Errorf("job %+v, %v; want canceled, StoppedWithSavepoint 0, reason %q", st, err, reason)
	}
}

// A job stopped with a savepoint that is then removed no longer names it
// as the savepoint to restore (StoppedWithSavepoint: weir run would send
// the user to it): its reason says the savepoint was removed, and it is
// restored from its latest checkpoint left, as a canceled job is; a
// restarted coordinator says the same.
func TestStoppedWithARemovedSavepoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "st", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "st", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	first, err := e.api.Savepoint(ctx, "st")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := e.api.StopJob(ctx, "st")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "st", ID: sp.ID}); err != nil {
		t.Fatal(err)
	}
	reason := fmt.Sprintf("stopped with savepoint %d, removed since", sp.ID)
	check := func(when string) {
		t.Helper()
		st, err := e.api.Job(ctx, "st")
		if err != nil || st.State != control.JobCanceled || st.StoppedWithSavepoint != 0 || st.Reason != reason || st.LatestCheckpoint != first.ID {
			t.Errorf("%s: %+v, %v; want canceled, no StoppedWithSavepoint, reason %q, latest %d", when, st, err, reason, first.ID)
		}
	}
	check("after the removal")
	stop()
	stop = startManager()
	defer stop()
	check("after a coordinator restart")
}
