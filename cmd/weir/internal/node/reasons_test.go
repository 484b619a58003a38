package node

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A job whose operator cannot start on the worker fails with a reason
// that names the worker, the task and the operator or module once each, outside in,
// and ends in words, not in a sentinel's "not found" or "conflict"; its
// restart count is the restarts made.
func TestFailureReasonsNameEachThingOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	misbehave, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	badExport, err := filepath.Abs("../../../../host/wasm/testdata/bad/missing_export.wasm")
	if err != nil {
		t.Fatal(err)
	}
	submit := func(name, module, config, restart string) control.JobStatus {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: `+module+`, config: "`+config+`", inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
checkpointing: {disabled: true}
restart: `+restart+`
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		return waitJob(t, ctx, n, name, "the end", func(st control.JobStatus) bool { return st.State.Terminal() })
	}
	// misbehave with config i fails its weir_init: every restart would
	// hand it the same config, so the job fails at once whatever its
	// restart strategy allows.
	for _, c := range []struct {
		name, module, config, restart string
		restarts                      int
		want                          string
		// kind is the failure's: the operator's, as the worker gives
		// it, for one that failed in weir_init; deploy for a module
		// that does not load.
		kind control.FailureKind
	}{
		{"gone", misbehave, "i", "{strategy: none}", 0,
			"deploy to worker w1: task op-0: operator op[0]: weir_init: bad config (not restarted: it would fail the same way again)",
			control.FailureOperatorError},
		{"once", misbehave, "i", "{strategy: fixed-delay, delay: 10ms, attempts: 1}", 0,
			"deploy to worker w1: task op-0: operator op[0]: weir_init: bad config (not restarted: it would fail the same way again)",
			control.FailureOperatorError},
		{"badexport", badExport, "", "{strategy: fixed-delay, delay: 10ms, attempts: 3}", 0,
			"deploy to worker w1: task op-0: module " + badExport + ": missing export weir_process (not restarted: it would fail the same way again)",
			control.FailureDeploy},
	} {
		st := submit(c.name, c.module, c.config, c.restart)
		if st.State != control.JobFailed || st.Reason != c.want || st.Restarts != c.restarts {
			t.Errorf("%s: %s, reason %q, %d restarts; want failed, reason %q, %d restarts", c.name, st.State, st.Reason, st.Restarts, c.want, c.restarts)
		}
		if len(st.Failures) == 0 || st.Failures[0].Kind != c.kind {
			t.Errorf("%s: failures %+v; want the latest of kind %q", c.name, st.Failures, c.kind)
		}
	}

	if _, err := n.API.Job(ctx, "nosuch"); !errors.Is(err, control.ErrNotFound) || err.Error() != `no job "nosuch"` {
		t.Errorf("status of an unknown job: %v", err)
	}
	gone, err := n.API.Job(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Savepoint(ctx, "gone"); !errors.Is(err, control.ErrConflict) ||
		err.Error() != "job gone already failed at "+gone.Updated.UTC().Format(time.DateTime+" MST")+"; nothing to take a savepoint of" {
		t.Errorf("savepoint of a failed job: %v", err)
	}
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "gone", From: "9"}); !errors.Is(err, control.ErrNotFound) ||
		err.Error() != "restore from gone/9: there is no such checkpoint; job gone completed no checkpoint before it ended (failed), so there is nothing to restore: weir run SPEC starts it afresh" {
		t.Errorf("restore from a checkpoint that is not there: %v", err)
	}
}
