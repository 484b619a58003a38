package job

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// The job API takes a spec as JSON, so it may not have passed
// jobspec.Parse: a spec Parse would refuse (jobspec.Check) or no job can
// run is refused as invalid, with the field at fault named, and leaves a
// running job as it was.
func TestSubmitRefusesAnInvalidSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "good", ""))

	for name, edit := range map[string]func(s *jobspec.Spec){
		"wildcard job name":    func(s *jobspec.Spec) { s.Name = ">" },
		"empty job name":       func(s *jobspec.Spec) { s.Name = "" },
		"dotted vertex name":   func(s *jobspec.Spec) { s.Operators[0].Name = "c.*"; s.Sinks[0].Input.From = "c.*" },
		"zero parallelism":     func(s *jobspec.Spec) { s.Sources[0].Parallelism = 0 },
		"huge parallelism":     func(s *jobspec.Spec) { s.Operators[0].Parallelism = 1 << 30 },
		"negative parallelism": func(s *jobspec.Spec) { s.Sinks[0].Parallelism = -1 },
		"cycle": func(s *jobspec.Spec) {
			s.Operators[0].Inputs = append(s.Operators[0].Inputs, jobspec.Input{From: "count", Partition: jobspec.Forward})
		},
		"unknown checkpointing mode": func(s *jobspec.Spec) { s.Checkpointing.Mode = "sometimes" },
		"unknown guarantee":          func(s *jobspec.Spec) { s.Sinks[0].Guarantee = "twice" },
		"wildcard sink subject":      func(s *jobspec.Spec) { s.Sinks[0].Subject = "out.>" },
		"unknown source kind":        func(s *jobspec.Spec) { s.Sources[0].Kind = "kafka" },
		"negative restart attempts":  func(s *jobspec.Spec) { s.Restart.Attempts = -1 },
	} {
		s := spec(t, "bad", "")
		edit(s)
		if st, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); !errors.Is(err, control.ErrInvalid) {
			t.Errorf("%s: Submit = %s, %v; want ErrInvalid", name, st.State, err)
		}
	}
	bad := spec(t, "good", "")
	bad.Checkpointing.Mode = "sometimes"
	if st, err := e.api.Restore(ctx, control.RestoreRequest{Job: "good", From: "1", Spec: bad}); !errors.Is(err, control.ErrInvalid) {
		t.Errorf("Restore with an invalid spec = %s, %v; want ErrInvalid", st.State, err)
	}
	jobs, err := e.api.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != "good" || jobs[0].State != control.JobRunning {
		t.Errorf("jobs = %+v, want only good, running", jobs)
	}
}

// A job's status names its sinks, as its spec has them: a client follows
// what the job outputs from them (weir job output), with no spec of its
// own.
func TestStatusNamesTheSinks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	s := spec(t, "sinks", "")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st, err := e.api.Job(ctx, "sinks")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sinks) != len(s.Sinks) || len(st.Sinks) == 0 || st.Sinks[0].Name != s.Sinks[0].Name ||
		st.Sinks[0].Kind != s.Sinks[0].Kind || st.Sinks[0].Subject != s.Sinks[0].Subject || st.Sinks[0].Stream != s.Sinks[0].Stream {
		t.Errorf("status sinks %+v, want the spec's %+v", st.Sinks, s.Sinks)
	}
	if len(st.Sources) != 1 || st.Sources[0].Name != "in" || st.Sources[0].Stream != "IN" {
		t.Errorf("status sources %+v, want the spec's %+v", st.Sources, s.Sources)
	}
}
