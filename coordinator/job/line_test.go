package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// sized is a job of 2p+1 tasks: a source and an operator of parallelism
// p, and a sink.
func sized(t *testing.T, name string, p int, extra string) *jobspec.Spec {
	t.Helper()
	n := string(rune('0' + p))
	s, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: jetstream, stream: IN, parallelism: `+n+`}]
operators:
  - {name: count, module: count@1, parallelism: `+n+`, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`+extra), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// running reports whether a job runs.
func running(st control.JobStatus) bool { return st.State == control.JobRunning }

// Jobs that fail over are placed before a job never placed, which waited
// longer: the slots a joining worker brings go to the failed-over job
// first, and a job that would fit in what is free waits while one ahead
// of it in line waits, saying which. (A trial's new job took the slots of
// two long-running jobs whose worker was lost; they waited until it was
// canceled.)
func TestFailedOverJobsArePlacedFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 5)
	w2 := e.fleet.startSlots(ctx, "w2", 5)
	e.waitWorkers(2)
	extra := "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n"
	for _, name := range []string{"a", "b"} {
		e.submitRunning(t, ctx, spec(t, name, extra))
	}
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: sized(t, "c", 1, extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "c", "waiting for free slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5, w2 0 of 5)"))

	// Both had tasks on w2; w1 takes one of them.
	e.lose(w2)
	var ran, waits string
	waitFor(t, ctx, e, "a", "one of a and b running again, the other waiting", func(a control.JobStatus) bool {
		b, err := e.api.Job(ctx, "b")
		if err != nil {
			return false
		}
		switch {
		case running(a) && a.Attempt == 2 && b.State == control.JobRestarting && strings.HasPrefix(b.Reason, ReasonWaitingForSlots):
			ran, waits = "a", "b"
		case running(b) && b.Attempt == 2 && a.State == control.JobRestarting && strings.HasPrefix(a.Reason, ReasonWaitingForSlots):
			ran, waits = "b", "a"
		}
		return ran != ""
	})

	// 4 slots more: c would fit, but the job that ran waits ahead of it.
	e.fleet.startSlots(ctx, "w3", 4)
	waitFor(t, ctx, e, "c", "waiting behind "+waits, waitingForSlots(control.JobCreated,
		"job "+waits+" is ahead in line: it ran before (a job failing over is placed before one never placed), and the slots that come free go to it first"))
	waitFor(t, ctx, e, waits, "waiting for a fifth slot",
		waitingForSlots(control.JobRestarting, "needs 5 tasks, workers have 4 free (w1 0 of 5, w3 4 of 4)"))

	// 1 slot more: the job ahead runs; c waits for room.
	e.fleet.startSlots(ctx, "w4", 1)
	waitFor(t, ctx, e, waits, "running again", func(st control.JobStatus) bool { return running(st) && st.Attempt == 2 })
	waitFor(t, ctx, e, "c", "waiting for free slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5, w3 0 of 4, w4 0 of 1)"))
	if _, err := e.api.CancelJob(ctx, ran); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "c", "running", running)
	if st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 {
		t.Errorf("c once %s ended: %+v", ran, st)
	}
}

// Among jobs never placed, the one that waited longest goes first: a
// smaller job submitted later does not take the slots that come free from
// a bigger one that waits for them (it would, again and again, as long as
// small jobs come).
func TestFirstComeFirstPlaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 5)
	e.waitWorkers(1)
	extra := "checkpointing: {interval: 30ms}\n"
	e.submitRunning(t, ctx, spec(t, "a", extra))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "big", extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "big", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 5 tasks, workers have 0 free (w1 0 of 5)"))
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: sized(t, "small", 1, extra)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "small", "waiting for a's slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5)"))
	if _, err := e.api.CancelJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "big", "running", running)
	waitFor(t, ctx, e, "small", "waiting for big's slots",
		waitingForSlots(control.JobCreated, "needs 3 tasks, workers have 0 free (w1 0 of 5)"))
}

// A job with more tasks than all the workers have slots says so, and
// what to do — no job that ends makes room for it —, and holds up no job
// behind it in line.
func TestAJobBiggerThanAllWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 2)
	e.fleet.startSlots(ctx, "w2", 2)
	e.waitWorkers(2)
	extra := "checkpointing: {interval: 30ms}\n"
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "big", extra)}); err != nil {
		t.Fatal(err)
	}
	const want = ReasonTooBig + "needs 5 tasks, and the live workers have 4 slots in all (w1 2, w2 2): lower the job's parallelism, or add workers or slots (weir worker -slots)"
	waitFor(t, ctx, e, "big", "too big", func(st control.JobStatus) bool { return st.State == control.JobCreated && st.Reason == want })
	e.submitRunning(t, ctx, sized(t, "small", 1, extra))
	if st, err := e.api.Job(ctx, "big"); err != nil || st.Reason != want {
		t.Errorf("big: %q (%v); want %q", st.Reason, err, want)
	}
}

// A wait for room that runs out again and again is one failure, not one
// per period: the failures in a row and the restarts count it once, and
// the failure before it (the worker lost) stays in the list, as does the
// count by kind. (A trial's job waiting for slots counted a restart and
// a failure each period; its failures list filled with them.)
func TestARepeatedWaitIsOneFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{WorkerWait: 100 * time.Millisecond})
	e.fleet.startSlots(ctx, "w1", 3)
	w2 := e.fleet.startSlots(ctx, "w2", 2)
	e.waitWorkers(2)
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 30ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"))
	e.lose(w2)
	st := waitFor(t, ctx, e, "wc", "the wait run out three times", func(st control.JobStatus) bool {
		return len(st.Failures) > 0 && st.Failures[0].Repeats >= 2 || st.State.Terminal()
	})
	if st.State != control.JobRestarting || st.Restarts != 2 || st.FailuresInARow != 2 || len(st.Failures) != 2 {
		t.Fatalf("status %+v; want restarting after 2 failures and 2 restarts", st)
	}
	const wait = "no room within 100ms: needs 5 tasks, and the live workers have 3 slots in all (w1 3): lower the job's parallelism, or add workers or slots (weir worker -slots)"
	if f := st.Failures[0]; f.Kind != control.FailurePlacement || f.Reason != wait {
		t.Errorf("newest failure %+v; want the wait's, %q", f, wait)
	}
	if f := st.Failures[1]; f.Kind != control.FailureWorkerLost {
		t.Errorf("failure before %+v; want the worker lost", f)
	}
	if got := st.FailureCounts; got[control.FailurePlacement] != 1 || got[control.FailureWorkerLost] != 1 {
		t.Errorf("failure counts %v; want one of each", got)
	}
	e.fleet.startSlots(ctx, "w3", 2)
	st = waitFor(t, ctx, e, "wc", "running again", running)
	if st.Restarts != 2 || st.Attempt != 2 {
		t.Errorf("running again: %+v; want attempt 2 after 2 restarts", st)
	}
}
