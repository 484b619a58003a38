package job

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A bad record fails the job for good only where a restart would meet it
// again: where some source upstream of the refusing task replays from the
// checkpoint (a JetStream stream). Fed by core NATS subjects alone, the
// record is gone: lostRecord says so, naming the sources, and the job
// follows its restart strategy.
func TestLostRecord(t *testing.T) {
	const yaml = `name: g
sources:
  - {name: core, kind: nats, subject: in}
  - {name: core2, kind: nats, subject: in2}
  - {name: js, kind: jetstream, stream: IN}
operators:
  - {name: a, module: m.wasm, inputs: [{from: core}]}
  - {name: b, module: m.wasm, inputs: [{from: a}, {from: core2}]}
  - {name: c, module: m.wasm, inputs: [{from: b}, {from: js}]}
sinks:
  - {name: direct, kind: nats, subject: "x.{key}", input: {from: core}}
  - {name: one, kind: nats, subject: "a.{key}", input: {from: a}}
  - {name: two, kind: nats, subject: "b.{key}", input: {from: b}}
  - {name: mixed, kind: nats, subject: "c.{key}", input: {from: c}}
  - {name: replays, kind: nats, subject: "j.{key}", input: {from: js}}
`
	s, p := planned(t, yaml)
	for _, c := range []struct{ task, want string }{
		{"direct-0", "the record is lost: it came from core NATS source core, which cannot replay it, so a restart goes on without it"},
		{"one-0", "the record is lost: it came from core NATS source core, which cannot replay it, so a restart goes on without it"},
		{"two-0", "the record is lost: it came from core NATS sources core, core2, which cannot replay it, so a restart goes on without it"},
		{"mixed-0", ""},   // js replays: every replay meets it again
		{"replays-0", ""}, // likewise
		{"nosuch-0", ""},  // not in the plan: the worker's judgment stands
	} {
		if got := lostRecord(s, p, c.task); got != c.want {
			t.Errorf("lostRecord(%s) = %q, want %q", c.task, got, c.want)
		}
	}
}

// A sink's bad record fails a job fed by a JetStream stream at once (every
// replay meets it again), but restarts one fed by core NATS subjects
// alone, whose input cannot replay it: its reason says the record is lost.
func TestBadRecordRestartsWhereTheInputCannotReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	const restart = "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"
	const cause = `core sink kk.{key}: record 1 of the batch: record key cannot form a subject: key "": empty`
	core, err := jobspec.Parse("core.yaml", []byte(`name: core
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: count, module: count@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: "kk.{key}", input: {from: count}}]
`+restart), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.submitRunning(t, ctx, core)
	if err := w1.client.FailedUnrecoverable(ctx, control.TaskRef{Job: "core", Attempt: 1, Task: "out-0"}, control.FailureBadRecord, cause); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "core", "running again", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2 || st.State.Terminal()
	})
	lost := "task out-0 failed: " + cause + "; the record is lost: it came from core NATS source in, which cannot replay it, so a restart goes on without it"
	if st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 ||
		st.Failures[0].Reason != lost || st.Failures[0].Kind != control.FailureBadRecord {
		t.Errorf("core-fed job after a bad record: %s, %d restarts, failures %+v; want running again after one restart, failure %q",
			st.State, st.Restarts, st.Failures, lost)
	}

	e.submitRunning(t, ctx, spec(t, "js", restart))
	if err := w1.client.FailedUnrecoverable(ctx, control.TaskRef{Job: "js", Attempt: 1, Task: "out-0"}, control.FailureBadRecord, cause); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "js", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if want := "task out-0 failed: " + cause + " (not restarted: it would fail the same way again)"; st.State != control.JobFailed || st.Restarts != 0 || st.Reason != want {
		t.Errorf("stream-fed job after a bad record: %s, %d restarts, %q; want failed at once: %q", st.State, st.Restarts, st.Reason, want)
	}
}
