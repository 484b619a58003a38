package job

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A job's status counts its failures since the latest completed
// checkpoint, as its restart strategy does, and says how many restarts
// the strategy allows: a job failing over in a loop (a record that makes
// an operator trap is read again after every restore) shows how close it
// is to failing. A completed checkpoint (here a savepoint) ends the row.
func TestStatusCountsFailuresInARow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "loop", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	st := e.submitRunning(t, ctx, s)
	if st.FailuresInARow != 0 || st.RestartAttempts != 3 {
		t.Fatalf("before a failure: %d failures in a row, %d restart attempts", st.FailuresInARow, st.RestartAttempts)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := w1.client.Failed(ctx, control.TaskRef{Job: "loop", Attempt: attempt, Task: "count-1"}, control.FailureUnknown, "trap in weir_process"); err != nil {
			t.Fatal(err)
		}
		st = waitFor(t, ctx, e, "loop", "the next attempt", func(st control.JobStatus) bool {
			return st.Attempt == attempt+1 && st.State == control.JobRunning
		})
		if st.FailuresInARow != attempt || st.RestartAttempts != 3 {
			t.Errorf("after failure %d: %d failures in a row, %d restart attempts", attempt, st.FailuresInARow, st.RestartAttempts)
		}
	}
	if _, err := e.api.Savepoint(ctx, "loop"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.api.Job(ctx, "loop"); err != nil || st.FailuresInARow != 0 {
		t.Errorf("after a savepoint: %d failures in a row (%v)", st.FailuresInARow, err)
	}
}

// A checkpoint taken again where the attempt restored — every source task
// at the position the restored checkpoint recorded — does not end the
// failures in a row: a job whose operator traps on the record after that
// place completed such a checkpoint before each failure under load, and
// restarted forever instead of failing once restart.attempts ran out. One
// that read on does end the row.
func TestCheckpointWithoutProgressKeepsTheRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	at := func(p0, p1 int64) {
		w1.mu.Lock()
		w1.positions = map[string]int64{"in-0": p0, "in-1": p1}
		w1.mu.Unlock()
	}
	fail := func(attempt int) control.JobStatus {
		t.Helper()
		if err := w1.client.Failed(ctx, control.TaskRef{Job: "stuck", Attempt: attempt, Task: "count-1"}, control.FailureUnknown, "trap in weir_process"); err != nil {
			t.Fatal(err)
		}
		return waitFor(t, ctx, e, "stuck", "the next attempt", func(st control.JobStatus) bool {
			return st.Attempt == attempt+1 && st.State == control.JobRunning
		})
	}
	savepoint := func() control.JobStatus {
		t.Helper()
		if _, err := e.api.Savepoint(ctx, "stuck"); err != nil {
			t.Fatal(err)
		}
		st, err := e.api.Job(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	s := spec(t, "stuck", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n")
	e.submitRunning(t, ctx, s)
	at(7, 9)
	if st := savepoint(); st.FailuresInARow != 0 {
		t.Fatalf("after the first savepoint: %d failures in a row", st.FailuresInARow)
	}
	fail(1)
	if st := fail(2); st.FailuresInARow != 2 {
		t.Fatalf("after two failures: %d failures in a row", st.FailuresInARow)
	}
	// Attempt 3 restored the savepoint at (7, 9): one taken there again
	// keeps the row.
	if st := savepoint(); st.FailuresInARow != 2 {
		t.Errorf("after a savepoint where the attempt restored: %d failures in a row, want 2", st.FailuresInARow)
	}
	if st := fail(3); st.FailuresInARow != 3 {
		t.Errorf("after the next failure: %d failures in a row, want 3", st.FailuresInARow)
	}
	// One source task read on: the row ends.
	at(7, 10)
	if st := savepoint(); st.FailuresInARow != 0 {
		t.Errorf("after a savepoint that read on: %d failures in a row, want 0", st.FailuresInARow)
	}
}

// A job's status says its checkpointing mode and aligned-timeout, for
// weir job status to give advice for expiring checkpoints that fits how
// the job's barriers travel.
func TestStatusSaysTheCheckpointMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	for _, c := range []struct {
		name, extra, mode string
		aligned           time.Duration
	}{
		{"aligned", "checkpointing: {disabled: true}\n", "exactly-once", 0},
		{"timeout", "checkpointing: {disabled: true, aligned-timeout: 200ms}\n", "exactly-once", 200 * time.Millisecond},
		{"unaligned", "checkpointing: {disabled: true, mode: unaligned}\n", "unaligned", 0},
		{"alo", "checkpointing: {disabled: true, mode: at-least-once}\n", "at-least-once", 0},
	} {
		st := e.submitRunning(t, ctx, spec(t, c.name, c.extra))
		if st.CheckpointMode != c.mode || st.AlignedTimeout != c.aligned {
			t.Errorf("%s: status says mode %q, aligned-timeout %s; want %q, %s", c.name, st.CheckpointMode, st.AlignedTimeout, c.mode, c.aligned)
		}
	}
}

// The failures in a row outlive a coordinator restart: the job's record
// keeps them, so a job restarting in a loop is not given its
// restart.attempts again by a restart of the coordinator (weir up), and
// fails once they run out, counting the failures before the restart.
func TestFailuresInARowOutliveACoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 3)
	defer l.close()
	e, fail := l.e, l.fail
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	for attempt := 1; attempt <= 2; attempt++ {
		fail(attempt)
		waitFor(t, ctx, e, "loop", "the next attempt", func(st control.JobStatus) bool {
			return st.Attempt == attempt+1 && st.State == control.JobRunning
		})
	}
	l.restart()
	st := waitFor(t, ctx, e, "loop", "running again", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > 3
	})
	if st.FailuresInARow != 2 {
		t.Fatalf("after the coordinator restart: %d failures in a row, want 2", st.FailuresInARow)
	}
	fail(st.Attempt)
	st = waitFor(t, ctx, e, "loop", "the next attempt", func(s control.JobStatus) bool {
		return s.Attempt > st.Attempt && s.State == control.JobRunning
	})
	if st.FailuresInARow != 3 {
		t.Errorf("after the third failure: %d failures in a row, want 3", st.FailuresInARow)
	}
	fail(st.Attempt)
	st = waitFor(t, ctx, e, "loop", "failed", func(s control.JobStatus) bool { return s.State == control.JobFailed })
	if want := "(after 3 restart attempts)"; !strings.HasSuffix(st.Reason, want) {
		t.Errorf("reason %q, want it to end %q", st.Reason, want)
	}
}

// A coordinator restarted while a job waits out its restart delay keeps
// the failure that made it wait: the count went up after the record was
// written with the restarting state, so the restarted coordinator read
// one failure fewer and gave the loop an extra restart.
func TestFailuresInARowKeepTheFailureARestartDelayFollows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "1h", 3)
	defer l.close()
	e, fail := l.e, l.fail
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	fail(1)
	waitFor(t, ctx, e, "loop", "restarting after its first failure", func(st control.JobStatus) bool {
		return st.State == control.JobRestarting && st.FailuresInARow == 1
	})
	l.restart()
	st := waitFor(t, ctx, e, "loop", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > 1
	})
	if st.FailuresInARow != 1 {
		t.Errorf("resumed during the restart delay: %d failures in a row, want 1", st.FailuresInARow)
	}
}

// A completed checkpoint that ends the failures in a row ends them in the
// job's record too: a coordinator restarted after it resumed the job with
// the failures before it, and the next single failure failed the job as
// if restart.attempts had run out.
func TestFailuresInARowEndedByACheckpointStayEndedAfterARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 2)
	defer l.close()
	e, fail := l.e, l.fail
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	for attempt := 1; attempt <= 2; attempt++ {
		fail(attempt)
		waitFor(t, ctx, e, "loop", "the next attempt", func(st control.JobStatus) bool {
			return st.Attempt == attempt+1 && st.State == control.JobRunning
		})
	}
	if _, err := e.api.Savepoint(ctx, "loop"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.api.Job(ctx, "loop"); err != nil || st.FailuresInARow != 0 {
		t.Fatalf("after a savepoint: %d failures in a row (%v), want 0", st.FailuresInARow, err)
	}
	l.restart()
	st := waitFor(t, ctx, e, "loop", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > 3
	})
	if st.FailuresInARow != 0 {
		t.Errorf("resumed after the savepoint: %d failures in a row, want 0", st.FailuresInARow)
	}
	fail(st.Attempt)
	st = waitFor(t, ctx, e, "loop", "restarted or failed", func(s control.JobStatus) bool {
		return s.State == control.JobFailed || (s.Attempt > st.Attempt && s.State == control.JobRunning)
	})
	if st.State == control.JobFailed {
		t.Errorf("one failure after the savepoint failed the job: %s", st.Reason)
	}
}

// A job that failed once its restart.attempts ran out keeps its failures
// in a row through a coordinator restart too: weir job status says by them
// that they all failed the same way and how to go on (for an operator that
// traps on a record, restore with a fixed build), and said nothing of it
// once the coordinator had restarted.
func TestFailuresInARowOfAFailedJobOutliveACoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 1)
	defer l.close()
	e, fail := l.e, l.fail
	for attempt := 1; attempt <= 2; attempt++ {
		waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool {
			return st.Attempt == attempt && st.State == control.JobRunning
		})
		fail(attempt)
	}
	waitFor(t, ctx, e, "loop", "failed", func(st control.JobStatus) bool { return st.State == control.JobFailed })
	l.restart()
	st, err := e.api.Job(ctx, "loop")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != control.JobFailed || st.FailuresInARow != 2 {
		t.Errorf("after the coordinator restart: %s with %d failures in a row, want failed with 2", st.State, st.FailuresInARow)
	}
}

// A job's failures keep the kind the worker classified them as and the
// task that failed, in its status and through a coordinator restart in
// its record: weir job status tells by them that the job failed the same
// way each time, and that an operator trapped, where it matched words of
// the reason that a reworded message no longer has.
func TestFailuresKeepTheirKindAndTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 3)
	defer l.close()
	e := l.e
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	const reason = "operator count: weir_process: at record 5 of the batch: unreachable" // no "trap" in it
	if err := l.w1.client.Failed(ctx, control.TaskRef{Job: "loop", Attempt: 1, Task: "count-1"}, control.FailureTrap, reason); err != nil {
		t.Fatal(err)
	}
	want := control.Failure{Attempt: 1, Reason: "task count-1 failed: " + reason, Kind: control.FailureTrap, Task: "count-1"}
	check := func(when string, st control.JobStatus) {
		t.Helper()
		if len(st.Failures) != 1 {
			t.Fatalf("%s: failures %+v, want 1", when, st.Failures)
		}
		got := st.Failures[0]
		got.Time = time.Time{}
		if got != want {
			t.Errorf("%s: failure %+v, want %+v", when, got, want)
		}
	}
	check("restarted", waitFor(t, ctx, e, "loop", "the next attempt", func(st control.JobStatus) bool {
		return st.Attempt == 2 && st.State == control.JobRunning
	}))
	l.restart()
	check("after a coordinator restart", waitFor(t, ctx, e, "loop", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > 2
	}))
}

// loop is a job "loop" (checkpointing off, restarts with a fixed delay)
// on worker w1 of a coordinator that a test restarts.
type loop struct {
	e          *env
	stop       func() // stops the coordinator running now
	startAgain func() func()
	w1         *fakeWorker
	t          *testing.T
	ctx        context.Context
}

// startLoop starts a restartable coordinator and worker w1, and submits
// job "loop" with restart.delay delay and restart.attempts attempts.
func startLoop(t *testing.T, ctx context.Context, delay string, attempts int) *loop {
	t.Helper()
	e, startManager := restartable(t, nil)
	l := &loop{e: e, stop: startManager(), startAgain: startManager, t: t, ctx: ctx}
	l.w1 = e.fleet.start(ctx, "w1")
	s := spec(t, "loop", fmt.Sprintf("checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: %s, attempts: %d}\n", delay, attempts))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	return l
}

// close waits for the worker and stops the coordinator running now.
func (l *loop) close() {
	l.e.fleet.wait()
	l.stop()
}

// restart stops the coordinator and starts another on the same records.
func (l *loop) restart() {
	l.stop()
	l.stop = l.startAgain()
}

// fail fails the task count-1 of attempt, as a trap would.
func (l *loop) fail(attempt int) {
	l.t.Helper()
	if err := l.w1.client.Failed(l.ctx, control.TaskRef{Job: "loop", Attempt: attempt, Task: "count-1"}, control.FailureTrap, "trap in weir_process"); err != nil {
		l.t.Fatal(err)
	}
}

// A coordinator restarted during a restart delay begins the restart the
// failure was due, counted as one, not a resume: restart.attempts ran out
// "after 1 restart attempt" while RESTARTS said 0 and the attempts
// counted a resume instead, since the resume took the restart's place.
func TestAResumeDuringARestartDelayIsThatRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "1h", 1)
	defer l.close()
	e, fail := l.e, l.fail
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	fail(1)
	waitFor(t, ctx, e, "loop", "restarting after its first failure", func(st control.JobStatus) bool {
		return st.State == control.JobRestarting && st.FailuresInARow == 1
	})
	l.restart()
	st := waitFor(t, ctx, e, "loop", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	if st.Restarts != 1 || st.Resumes != 0 || st.AttemptsExplained() != "" {
		t.Errorf("resumed during the restart delay: %d restarts, %d resumes (%q); want the attempt counted as the restart",
			st.Restarts, st.Resumes, st.AttemptsExplained())
	}
	fail(2)
	st = waitFor(t, ctx, e, "loop", "failed", func(s control.JobStatus) bool { return s.State == control.JobFailed })
	if want := "(after 1 restart attempt)"; !strings.HasSuffix(st.Reason, want) || st.Restarts != 1 {
		t.Errorf("failed with %d restarts, reason %q; want 1, the reason ending %q", st.Restarts, st.Reason, want)
	}
}

// A restarted coordinator goes on counting the job's failures by kind
// from its record, as it does its restarts: weir_job_restarts_total said 1
// after a coordinator restart while weir_job_failures_total had no series.
func TestAResumeKeepsTheFailureCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 5)
	defer l.close()
	e := l.e
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	l.fail(1)
	waitFor(t, ctx, e, "loop", "running again", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	l.restart()
	st := waitFor(t, ctx, e, "loop", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 3
	})
	if st.Restarts != 1 || st.FailureCounts[control.FailureTrap] != 1 || len(st.FailureCounts) != 1 {
		t.Errorf("after a coordinator restart: %d restarts, failure counts %v; want 1 and trap: 1", st.Restarts, st.FailureCounts)
	}
}

// A coordinator restarted while a restart waits for a worker begins that
// restart, counted once: it was counted as a restart and, begun by the
// new coordinator, as a resume too, and the attempts added up to one
// more than there were (no first deployment said).
func TestAResumeOfARestartWaitingForAWorkerCountsItOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startLoop(t, ctx, "10ms", 3)
	defer l.close()
	e := l.e
	waitFor(t, ctx, e, "loop", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	l.w1.crash()
	waitFor(t, ctx, e, "loop", "waiting for a worker", waiting(control.JobRestarting))
	l.restart()
	e.fleet.start(ctx, "w2")
	st := waitFor(t, ctx, e, "loop", "running on w2", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	if st.Restarts != 1 || st.Resumes != 0 || st.AttemptsExplained() != "" {
		t.Errorf("resumed while the restart waited for a worker: %d restarts, %d resumes (%q); want the attempt counted once, as the restart",
			st.Restarts, st.Resumes, st.AttemptsExplained())
	}
}

// A completion whose notice comes after the next attempt was deployed — a
// checkpoint of the attempt before, which no source task of this attempt
// acked — is not this attempt's progress: counted as such, it gave a job
// that traps on a record one restart more than restart.attempts (seen
// under load in cmd/weir/internal/node TestRestartsLeaveNothingBehind).
func TestCheckpointOfAnEarlierAttemptIsNoProgress(t *testing.T) {
	j := &job{}
	j.noteRestore(&checkpoint.Metadata{ID: 4, Metrics: map[string]map[string]int64{"in-0": {control.MetricSourcePosition: 7}}})
	if j.progressed(4) {
		t.Error("the restored checkpoint's late notice counts as progress")
	}
	j.ackedAt[5] = map[string]int64{"in-0": 7}
	if j.progressed(5) {
		t.Error("a checkpoint taken again where the attempt restored counts as progress")
	}
	j.ackedAt[6] = map[string]int64{"in-0": 8}
	if !j.progressed(6) {
		t.Error("a checkpoint that read on does not count as progress")
	}
	// At the restored place with nothing left to read (an idle job): no
	// record is there to trap on, and the row ends.
	j.ackedAt[8] = map[string]int64{"in-0": 7}
	j.caughtUp[8] = map[string]bool{"in-0": true}
	if !j.progressed(8) {
		t.Error("a checkpoint of a caught-up source at the restored place does not end the row")
	}
	j.noteRestore(nil)
	if !j.progressed(7) {
		t.Error("with nothing restored, a checkpoint does not count as progress")
	}
}

// TestLateNoticeOfAFailedAttempt: the runner passes a completion's notice
// on asynchronously, so the one of a checkpoint an attempt took just
// before it failed can reach the job after the failure was counted. It
// counts as the progress it made before the failure, not after it: a job
// trapping on the record after such a checkpoint got one restart more than
// restart.attempts (the CI flake TestRestartsLeaveNothingBehind "canceled
// after 11 restarts; want failed after 10", at-least-once auto).
func TestLateNoticeOfAFailedAttempt(t *testing.T) {
	j := &job{spec: &jobspec.Spec{Restart: jobspec.Restart{Strategy: jobspec.RestartFixedDelay, Attempts: 10}}}
	j.noteRestore(nil) // the first attempt: every checkpoint it takes is progress
	j.st.LatestCheckpoint = 3
	if n, why := j.countFailure(3); n != 1 || why != "" {
		t.Fatalf("first failure: %d in a row (%q); want 1", n, why)
	}
	// Checkpoint 4 completed before the failure; its notice comes after.
	j.noteCompleted(4)
	if j.consecutive != 1 {
		t.Errorf("a late notice undid the failure: %d in a row; want 1", j.consecutive)
	}

	// The runner had completed checkpoint 6 when the next attempt failed,
	// and it read on from the restored one: that attempt made progress.
	j.noteRestore(&checkpoint.Metadata{ID: 4, Metrics: map[string]map[string]int64{"in-0": {control.MetricSourcePosition: 7}}})
	j.ackedAt[6] = map[string]int64{"in-0": 9}
	if n, _ := j.countFailure(6); n != 1 {
		t.Errorf("a failure after a checkpoint that read on, its notice not passed on yet: %d in a row; want 1", n)
	}
	// One that took the restored place again is none.
	j.noteRestore(&checkpoint.Metadata{ID: 6, Metrics: map[string]map[string]int64{"in-0": {control.MetricSourcePosition: 9}}})
	j.ackedAt[7] = map[string]int64{"in-0": 9}
	if n, _ := j.countFailure(7); n != 2 {
		t.Errorf("a failure after a checkpoint taken again at the restored place: %d in a row; want 2", n)
	}
}
