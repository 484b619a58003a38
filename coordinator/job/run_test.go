package job

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// Every deploy names the run it belongs to (control.Deploy.Submitted):
// the same for a restart and after the coordinator restarted, another
// for the job submitted again under its name, whose attempts number on.
// A worker tells runs apart by it: a trap's stack it logged for one run
// is logged again for the next.
func TestDeployNamesItsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	w1 := e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	s := spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n")
	st := e.submitRunning(t, ctx, s)
	run := w1.lastDeploy("wc").Submitted
	if run.IsZero() || !run.Equal(st.Submitted) {
		t.Fatalf("first deploy names run %v; want the job's submission %v", run, st.Submitted)
	}
	check := func(what string, attempt int, want time.Time) {
		t.Helper()
		d := w1.lastDeploy("wc")
		if d.Attempt != attempt || !d.Submitted.Equal(want) {
			t.Errorf("%s: attempt %d's deploy names run %v; want attempt %d of run %v", what, d.Attempt, d.Submitted, attempt, want)
		}
	}

	if err := w1.client.Failed(ctx, control.TaskRef{Job: "wc", Attempt: st.Attempt, Task: "in-0"}, control.FailureUnknown, "boom"); err != nil {
		t.Fatal(err)
	}
	before := st.Attempt
	st = waitFor(t, ctx, e, "wc", "restarted", func(st control.JobStatus) bool { return st.State == control.JobRunning && st.Attempt > before })
	check("a restart", st.Attempt, run)

	stop()
	stop = startManager()
	defer stop()
	before = st.Attempt
	st = waitFor(t, ctx, e, "wc", "resumed", func(st control.JobStatus) bool { return st.State == control.JobRunning && st.Attempt > before })
	check("after the coordinator restarted", st.Attempt, run)

	if _, err := e.api.CancelJob(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	before = st.Attempt
	st = e.submitRunning(t, ctx, s)
	if st.Attempt <= before || st.Submitted.Equal(run) {
		t.Fatalf("the job submitted again: %+v", st)
	}
	check("submitted again", st.Attempt, st.Submitted)
}
