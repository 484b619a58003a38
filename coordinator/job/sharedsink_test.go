package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// sinkSpec is a job whose sink out writes stream subject subj.
func sinkSpec(t *testing.T, name, stream, subj string) *jobspec.Spec {
	t.Helper()
	s, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: count, module: count@1, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: `+stream+`, subject: "`+subj+`", input: {from: count}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sharedWarnings are st's warnings of a sink subject another job writes.
func sharedWarnings(st control.JobStatus) []string {
	var out []string
	for _, w := range st.Warnings {
		if strings.Contains(w, SharedSinkMark) {
			out = append(out, w)
		}
	}
	return out
}

// A job submitted or restored to write a stream subject that another job,
// not ended, writes too — the same subject, or one a keyed subject may
// fill — is warned, naming that job; one of another stream or subject,
// or beside a job that ended, is not. A trial's jobs a1 and a2 both wrote
// stream SHARED subject shared exactly-once, and nothing said so.
func TestSubmitWarnsOfASinkSubjectAnotherJobWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	submit := func(s *jobspec.Spec) control.JobStatus {
		t.Helper()
		st, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	expect := func(st control.JobStatus, want string) {
		t.Helper()
		got := sharedWarnings(st)
		switch {
		case want == "" && len(got) > 0:
			t.Errorf("job %s: warned %q", st.Name, got)
		case want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], want)):
			t.Errorf("job %s: warned %q, want one %q…", st.Name, got, want)
		}
	}

	a1 := e.submitRunning(t, ctx, sinkSpec(t, "a1", "SHARED", "shared"))
	expect(a1, "")
	if sp, err := e.api.Savepoint(ctx, "a1"); err != nil || sp.ID != 1 {
		t.Fatalf("savepoint of a1: %+v %v", sp, err)
	}
	a2 := submit(sinkSpec(t, "a2", "SHARED", "shared"))
	expect(a2, "sink out writes stream SHARED subject shared, which job a1 writes too (its sink out, subject shared): ")
	if w := sharedWarnings(a2); len(w) == 1 && !strings.HasSuffix(w[0], "(weir job cancel a1, if it is a leftover)") {
		t.Errorf("the warning says not what to do: %q", w[0])
	}
	// The status says so for as long as the job lives, not in the
	// submit's answer only.
	a2 = waitFor(t, ctx, e, "a2", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	expect(a2, "sink out writes stream SHARED subject shared, which job a1 writes too")
	// And a1, which started first, says so too from then on: a trial's
	// a1 said nothing of a2, submitted after it.
	expect(e.status(t, ctx, "a1"), "sink out writes stream SHARED subject shared, which job a2 writes too (its sink out, subject shared): ")

	// Restored beside a job that writes the subject: warned too.
	if _, err := e.api.CancelJob(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	st, err := e.api.Restore(ctx, control.RestoreRequest{Job: "a1", From: "1"})
	if err != nil {
		t.Fatal(err)
	}
	expect(st, "sink out writes stream SHARED subject shared, which job a2 writes too (its sink out, subject shared): ")

	// Once one of them ends, neither is warned: the one left writes the
	// subject alone, the one that ended writes nothing.
	if _, err := e.api.CancelJob(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	expect(e.status(t, ctx, "a1"), "")
	expect(e.status(t, ctx, "a2"), "")
	if _, err := e.api.CancelJob(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	expect(submit(sinkSpec(t, "a3", "SHARED", "shared")), "")

	// A keyed subject's and a subject it may fill; another stream's
	// subject of the same name, another subject of the stream.
	expect(submit(sinkSpec(t, "k1", "OUT", "out.{key}")), "")
	expect(submit(sinkSpec(t, "k2", "OUT", "out.eu")), "sink out writes stream OUT subject out.eu, which job k1 writes too")
	expect(submit(sinkSpec(t, "k3", "OTHER", "out.eu")), "")
	expect(submit(sinkSpec(t, "k4", "OUT", "eu.out")), "")
}

// status returns job's status, failing the test when it cannot.
func (e *env) status(t *testing.T, ctx context.Context, job string) control.JobStatus {
	t.Helper()
	st, err := e.api.Job(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Jobs a coordinator that restarted resumes are warned of each other's
// sink subjects as the coordinator before warned them: the warnings are
// computed from the jobs it resumed, not only at a submit. A trial's
// resumed jobs said nothing.
func TestResumedJobsAreWarnedOfASharedSinkSubject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	stop := startManager()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	for _, name := range []string{"b1", "b2"} {
		e.submitRunning(t, ctx, sinkSpec(t, name, "SHARED", "shared"))
	}
	stop()
	stop = startManager()
	defer stop()
	for _, c := range []struct{ job, other string }{{"b1", "b2"}, {"b2", "b1"}} {
		st := waitFor(t, ctx, e, c.job, "resumed", func(st control.JobStatus) bool { return st.State == control.JobRunning && st.Attempt > 1 })
		want := "sink out writes stream SHARED subject shared, which job " + c.other + " writes too (its sink out, subject shared): "
		if got := sharedWarnings(st); len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("resumed job %s: warned %q, want one %q…", c.job, got, want)
		}
	}
}
