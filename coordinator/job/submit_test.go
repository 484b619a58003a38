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
// jobspec.Parse: a spec no job can run is refused as invalid, with the
// field at fault named, and leaves a running job as it was.
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
	} {
		s := spec(t, "bad", "")
		edit(s)
		if st, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); !errors.Is(err, control.ErrInvalid) {
			t.Errorf("%s: Submit = %s, %v; want ErrInvalid", name, st.State, err)
		}
	}
	jobs, err := e.api.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != "good" || jobs[0].State != control.JobRunning {
		t.Errorf("jobs = %+v, want only good, running", jobs)
	}
}
