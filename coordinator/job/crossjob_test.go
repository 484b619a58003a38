package job

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A job restored from another job's checkpoint ("OTHER/ID") restores from
// that checkpoint on a failover, and never touches its own checkpoint with
// the same ID (a savepoint of an earlier run under its name).
func TestRestoreFromAnotherJobsCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")

	// Job a: savepoints 1, 2, 3 of its own.
	e.submitRunning(t, ctx, spec(t, "a", "checkpointing: {disabled: true}\n"))
	for i := 1; i <= 3; i++ {
		if sp, err := e.api.Savepoint(ctx, "a"); err != nil || sp.ID != int64(i) {
			t.Fatalf("savepoint %d of a: %+v %v", i, sp, err)
		}
	}
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// Job b: periodic checkpoints; b/chk-3 is kept.
	e.submitRunning(t, ctx, spec(t, "b", "checkpointing: {interval: 20ms, retained: 20}\n"))
	waitFor(t, ctx, e, "b", "checkpoint 3", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 3 })
	if _, err := e.api.CancelJob(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	// A restore of b with a's spec would start a beside b: refused,
	// saying how to ask for that.
	for _, r := range []control.RestoreRequest{{Job: "b", From: "3", Spec: spec(t, "a", "")}, {Job: "b", From: "b/3", Spec: spec(t, "a", "")}} {
		want := "restore b: the spec is of job a, not b: give a spec named b, or start job a from this checkpoint by its own name (restore a -from b/3)"
		if _, err := e.api.Restore(ctx, r); !errors.Is(err, control.ErrInvalid) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("restore %+v: %v, want ...%q", r, err, want)
		}
		if err := e.api.CheckRestore(ctx, r); !errors.Is(err, control.ErrInvalid) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("check restore %+v: %v, want ...%q", r, err, want)
		}
	}
	// Restore a from b's periodic checkpoint 3, without periodic
	// checkpoints of its own: a failover must restore from b/3 again.
	st, err := e.api.Restore(ctx, control.RestoreRequest{Job: "a", From: "b/3", Spec: spec(t, "a", "checkpointing: {disabled: true}\nrestart: {delay: 5ms}\n")})
	if err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "a", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if h := w.lastDeploy("a").Restore.Handles["in-0"]; !strings.HasPrefix(h, "b/chk-3/") {
		t.Fatalf("first deploy restores in-0 from %q, want b/chk-3/...", h)
	}
	if err := w.client.Failed(ctx, control.TaskRef{Job: "a", Attempt: st.Attempt, Task: "in-0"}, control.FailureUnknown, "boom"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "a", "failed over", func(s control.JobStatus) bool { return s.State == control.JobRunning && s.Attempt == st.Attempt+1 })
	if r := w.lastDeploy("a").Restore; r == nil || !strings.HasPrefix(r.Handles["in-0"], "b/chk-3/") {
		t.Errorf("after a failover, in-0 restores from %+v, want b/chk-3/... (the checkpoint the run was started from)", r)
	}
	// Its status names that checkpoint, which a restore of it takes:
	// the job has no checkpoint of its own (weir job status's advice).
	if st, err := e.api.Job(ctx, "a"); err != nil || st.StartedFrom != "b/3" || st.LatestCheckpoint != 0 {
		t.Errorf("status of a restored from b/3: started from %q, latest %d, %v; want b/3 and none of its own", st.StartedFrom, st.LatestCheckpoint, err)
	}
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	// Same with periodic checkpoints and retained 1: once a's own
	// checkpoint completes, retention drops b/3 from the run — and must
	// not delete a/chk-3, a savepoint of a's first run.
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "a", From: "b/3", Spec: spec(t, "a", "checkpointing: {interval: 20ms, retained: 1}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "a", "two checkpoints", func(s control.JobStatus) bool { return s.State == control.JobRunning && s.LatestCheckpoint >= 6 })
	if _, err := os.Stat(filepath.Join(e.dir, "a", "chk-3", "_metadata")); err != nil {
		t.Errorf("savepoint a/3 of an earlier run was deleted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "b", "chk-3", "_metadata")); err != nil {
		t.Errorf("b/3 was deleted: %v", err)
	}
}

// A job submitted from another job's checkpoint that a restarted
// coordinator resumes before it completed a checkpoint of its own restores
// from that checkpoint, not from nothing.
func TestCoordinatorRestartResumesFromAnotherJobsCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	e.submitRunning(t, ctx, spec(t, "orig", "checkpointing: {disabled: true}\n"))
	if sp, err := e.api.Savepoint(ctx, "orig"); err != nil || sp.ID != 1 {
		t.Fatalf("savepoint: %+v %v", sp, err)
	}
	if _, err := e.api.CancelJob(ctx, "orig"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "fork", "checkpointing: {disabled: true}\n"), RestoreFrom: "orig/1"}); err != nil {
		t.Fatal(err)
	}
	before := waitFor(t, ctx, e, "fork", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if r := w.lastDeploy("fork").Restore; r == nil || r.CheckpointID != 1 {
		t.Fatalf("first deploy restores %+v", r)
	}
	stop()
	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "fork", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning && s.Attempt > before.Attempt })
	if r := w.lastDeploy("fork").Restore; r == nil || !strings.HasPrefix(r.Handles["in-0"], "orig/chk-1/") {
		t.Errorf("resumed job restores from %+v, want orig/chk-1 (it would start over from nothing)", r)
	}
	if st, err := e.api.Job(ctx, "fork"); err != nil || st.StartedFrom != "orig/1" {
		t.Errorf("resumed job's status says it started from %q, %v; want orig/1", st.StartedFrom, err)
	}
}

// Checkpoint failures beyond the tolerated count fail over the attempt
// they happened in: when that attempt failed over for another reason
// before the runner got to it (the abort before it waited for a worker
// that was cut off), the new attempt runs on.
//
// Only checkpoint 1 is to fail: the new attempt's checkpoints are acked
// at once, and the checkpoint timeout, the heartbeat timeout and the gap
// between w2's loss and the end of the abort's wait (RequestTimeout) are
// seconds, so that a loaded machine fails nothing else over. The test
// waits for the runner's decision on checkpoint 1 itself, not for a time.
func TestCheckpointFailuresDoNotFailTheNextAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	passedOn := make(chan struct{})
	log := slog.New(&messageWatch{msg: "checkpoint failures of an attempt that ended meanwhile", seen: passedOn, once: new(sync.Once)})
	e := setupWith(t, ctx, Options{HeartbeatTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second, Log: log})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	w1.noAck, w2.noAck = true, true
	w2.abortHang = make(chan struct{}, 1)
	e.waitWorkers(2)
	s := spec(t, "tol", "checkpointing: {interval: 50ms, timeout: 3s, tolerable-failures: 0}\nrestart: {delay: 5ms}\n")
	first := e.submitRunning(t, ctx, s)
	// Checkpoint 1 expires: the runner tells the workers (w2 hangs), then
	// is to fail the attempt over.
	select {
	case <-w2.abortHang:
	case <-ctx.Done():
		t.Fatal("no abort reached w2")
	}
	w1.mu.Lock()
	w1.noAck = false
	w1.mu.Unlock()
	// w2 is cut off meanwhile: its loss fails the attempt over first.
	go w2.crash()
	// (At least the next: a loaded machine may take w1 for lost too.)
	waitFor(t, ctx, e, "tol", "next attempt", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > first.Attempt
	})
	// The abort to w2 times out after RequestTimeout; the runner then
	// carries out the rest: it logs that it does not pass the failure on,
	// or (wrongly) fails the next attempt over.
	for done := false; !done; {
		select {
		case <-passedOn:
			done = true
		case <-ctx.Done():
			t.Fatal("the runner never decided on checkpoint 1's failure")
		case <-time.After(20 * time.Millisecond):
			st, err := e.api.Job(ctx, "tol")
			done = err == nil && st.Attempt > first.Attempt+1
		}
	}
	st, err := e.api.Job(ctx, "tol")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Failures {
		if f.Attempt != first.Attempt && strings.Contains(f.Reason, "checkpoint 1:") {
			t.Errorf("attempt %d failed because checkpoint 1 of attempt %d expired: %+v", f.Attempt, first.Attempt, st.Failures)
		}
	}
	if st.Attempt != first.Attempt+1 || st.Restarts != 1 {
		t.Errorf("attempt %d, restarts %d, want %d and 1; failures %+v", st.Attempt, st.Restarts, first.Attempt+1, st.Failures)
	}
}

// messageWatch is a slog.Handler that closes seen at the first record
// whose message is msg, and drops every record.
type messageWatch struct {
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (h *messageWatch) Enabled(context.Context, slog.Level) bool { return true }

func (h *messageWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}

func (h *messageWatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *messageWatch) WithGroup(string) slog.Handler      { return h }

// A checkpoint in flight when the coordinator goes away has no metadata,
// but a cut-off worker may still write its snapshots: the resumed job
// numbers its checkpoints above every ID that may have been triggered
// (the job record reserves them), so no snapshot key is used twice.
func TestCoordinatorRestartDoesNotReuseTriggeredIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	w.mu.Lock()
	w.noAck = true // every checkpoint stays in flight
	w.mu.Unlock()
	e.submitRunning(t, ctx, spec(t, "ha", "checkpointing: {interval: 20ms, timeout: 1h, max-concurrent: 3}\n"))
	var triggered int64
	waitFor(t, ctx, e, "ha", "checkpoints in flight", func(control.JobStatus) bool {
		cps, err := e.api.Checkpoints(ctx, "ha")
		if err != nil || len(cps) == 0 {
			return false
		}
		triggered = cps[0].ID
		return triggered >= 2
	})
	stop()
	w.mu.Lock()
	w.noAck = false
	w.mu.Unlock()
	stop = startManager()
	defer stop()
	got := waitFor(t, ctx, e, "ha", "a checkpoint after the restart", func(s control.JobStatus) bool { return s.LatestCheckpoint > 0 })
	if got.LatestCheckpoint <= triggered {
		t.Fatalf("the resumed job completed checkpoint %d, an ID already triggered before the restart (up to %d)", got.LatestCheckpoint, triggered)
	}
}
