package job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// endedSpec plans yaml (a job named r) with its JetStream sources' stops
// resolved as stops says (source name → stop sequence), as the coordinator
// resolves them at submit.
func endedSpec(t *testing.T, yaml string, stops map[string]uint64) (*jobspec.Spec, *plan.Plan) {
	t.Helper()
	s, p := planned(t, "name: r\n"+yaml)
	for i := range s.Sources {
		s.Sources[i].StopSequence = stops[s.Sources[i].Name]
	}
	return s, p
}

// resolvedAtRestore is stopsResolvedNow of a spec endedSpec resolved, as
// if the restore had resolved its stops: the sources whose stop is
// relative to when it is resolved.
func resolvedAtRestore(s *jobspec.Spec) map[string]bool {
	now := map[string]bool{}
	for _, src := range s.Sources {
		if relativeStop(src.Stop) {
			now[src.Name] = true
		}
	}
	return now
}

// ended is a checkpointed task: its ended ports (bits, as the metric
// carries them), its source's stop (0: none recorded) and whether its
// state is keyed.
type ended struct {
	ports int64
	stop  int64
	keyed bool
	// reading and read record source_ended 0 and 1 (neither: absent, as
	// before it was recorded).
	reading, read bool
}

// endedMetadata is a checkpoint (7) of tasks with the metrics the tasks
// of a finished bounded job acknowledge.
func endedMetadata(tasks map[string]ended) *checkpoint.Metadata {
	md := &checkpoint.Metadata{ID: 7, Handles: map[string]string{}, Metrics: map[string]map[string]int64{}}
	for id, e := range tasks {
		md.Handles[id] = "r/chk-7/" + id
		m := map[string]int64{control.MetricStateBytes: 0, control.MetricChannelStateBytes: 0, control.MetricEndedPorts: e.ports}
		if e.stop != 0 {
			m[control.MetricStopSequence] = e.stop
		}
		if e.keyed {
			m[control.MetricKeyedState], m[control.MetricStateBytes] = 1, 12
		}
		switch {
		case e.reading:
			m[control.MetricSourceEnded] = 0
		case e.read:
			m[control.MetricSourceEnded] = 1
		}
		md.Metrics[id] = m
	}
	return md
}

const (
	// boundedJob: in (stop: 5) → count → out.
	boundedJob = `sources: [{name: in, kind: jetstream, stream: IN, stop: "5"}]
operators: [{name: count, module: count@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`
	// laterStop is boundedJob with stop: 8.
	laterStop = `sources: [{name: in, kind: jetstream, stream: IN, stop: "8"}]
operators: [{name: count, module: count@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`
)

// The finished job's final savepoint: every port ended, the source
// stopped at 5.
var finished = map[string]ended{"in-0": {stop: 5}, "count-0": {ports: 1}, "out-0": {ports: 1}}

func TestCheckEnded(t *testing.T) {
	for _, c := range []struct {
		name  string
		yaml  string
		stops map[string]uint64
		tasks map[string]ended
		want  string // "" accepted, else a part of the reason
	}{
		{"the same spec again", boundedJob, map[string]uint64{"in": 5}, finished, ""},
		{"an earlier stop (the source is past it: it ends at once)", boundedJob, map[string]uint64{"in": 3}, finished, ""},
		{"a later stop", laterStop, map[string]uint64{"in": 8}, finished,
			"task count-0's input port 0 ended in the checkpoint, but source in would give it more records: it stops at sequence 8 in the spec (stop: 8), after sequence 5, where it stopped in the checkpoint (task in-0)"},
		{"stop: end resolved anew after the stream grew", strings.Replace(boundedJob, `stop: "5"`, "stop: end", 1), map[string]uint64{"in": 12}, finished,
			"it stops at sequence 12 in the spec (stop: end, as resolved for this restore), after sequence 5"},
		{"unbounded", strings.Replace(boundedJob, `, stop: "5"`, "", 1), nil, finished,
			"source in would give it more records: it is unbounded in the spec (no stop)"},
		{"a core NATS source", strings.Replace(boundedJob, `kind: jetstream, stream: IN, stop: "5"`, "kind: nats, subject: in", 1), nil, finished,
			"source in would give it more records: it is a core NATS source, which is never bounded"},
		{"a source that was unbounded in the checkpoint", boundedJob, map[string]uint64{"in": 5},
			map[string]ended{"in-0": {}, "count-0": {ports: 1}, "out-0": {ports: 1}},
			"it was unbounded when the checkpoint was taken (task in-0 records no stop)"},
		{"a new upstream operator", `sources: [{name: in, kind: jetstream, stream: IN, stop: "5"}]
operators:
  - {name: pre, module: pre@1, inputs: [{from: in}]}
  - {name: count, module: count@1, inputs: [{from: pre}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`, map[string]uint64{"in": 5}, finished,
			"task count-0's input port 0 ended in the checkpoint, but operator pre would give it more records: it is new in the spec (the checkpoint holds no task of it), so it would end its input again"},
		{"a new source on a new port of the operator", `sources:
  - {name: in, kind: jetstream, stream: IN, stop: "5"}
  - {name: more, kind: jetstream, stream: MORE, stop: "3"}
operators: [{name: count, module: count@1, inputs: [{from: in}, {from: more}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`, map[string]uint64{"in": 5, "more": 3}, finished,
			"task out-0's input port 0 ended in the checkpoint, but operator count would give it more records: it had not finished in the checkpoint (task count-0's input port 1, from more, had not ended)"},
		{"a new source on an ended port", `sources:
  - {name: in, kind: jetstream, stream: IN, stop: "5"}
  - {name: more, kind: jetstream, stream: MORE, stop: "3"}
operators: [{name: count, module: count@1, inputs: [{from: more}, {from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`, map[string]uint64{"in": 5, "more": 3}, finished,
			"task count-0's input port 0 ended in the checkpoint, but source more would give it more records: it is new in the spec (the checkpoint holds no task of it), so it would read from its start"},
		{"a stateless operator grew", strings.Replace(boundedJob, "inputs: [{from: in}]", "parallelism: 2, inputs: [{from: in}]", 1), map[string]uint64{"in": 5}, finished,
			"task out-0's input port 0 ended in the checkpoint, but operator count would give it more records: its task count-1 is new (its parallelism grew to 2) and restores no state"},
		{"a stateless operator shrank", boundedJob, map[string]uint64{"in": 5},
			map[string]ended{"in-0": {stop: 5}, "count-0": {ports: 1}, "count-1": {ports: 1}, "out-0": {ports: 1}}, ""},
		{"a JetStream source rescaled", strings.Replace(boundedJob, `stop: "5"`, `stop: "5", parallelism: 3`, 1), map[string]uint64{"in": 5},
			map[string]ended{"in-0": {stop: 5}, "in-1": {stop: 5}, "count-0": {ports: 1}, "out-0": {ports: 1}}, ""},
		{"a JetStream source rescaled with a later stop", strings.Replace(laterStop, `stop: "8"`, `stop: "8", parallelism: 3`, 1), map[string]uint64{"in": 8},
			map[string]ended{"in-0": {stop: 5}, "in-1": {stop: 5}, "count-0": {ports: 1}, "out-0": {ports: 1}},
			"after sequence 5, where it stopped in the checkpoint (task in-0)"},
		{"a keyed operator rescaled, its port ended everywhere", strings.Replace(boundedJob, "inputs: [{from: in}]", "parallelism: 3, inputs: [{from: in, partition: key}]", 1), map[string]uint64{"in": 5},
			map[string]ended{"in-0": {stop: 5}, "count-0": {ports: 1, keyed: true}, "count-1": {ports: 1, keyed: true}, "out-0": {ports: 1}}, ""},
		{"a keyed operator rescaled, its port ended in one old subtask only", strings.Replace(boundedJob, "inputs: [{from: in}]", "parallelism: 3, inputs: [{from: in, partition: key}]", 1), map[string]uint64{"in": 5},
			map[string]ended{"in-0": {stop: 5}, "count-0": {keyed: true}, "count-1": {ports: 1, keyed: true}, "out-0": {}},
			"task count-0 would merge the state of count-0, count-1, and its input port 0 ended in count-1 and not in count-0"},
		{"a shrinking sink whose old subtasks disagree", strings.Replace(boundedJob, "input: {from: count}", "parallelism: 1, input: {from: count}", 1), map[string]uint64{"in": 5},
			map[string]ended{"in-0": {stop: 5}, "count-0": {ports: 1}, "out-0": {ports: 1}, "out-1": {}},
			"task out-0 would merge the state of out-0, out-1, and its input port 0 ended in out-0 and not in out-1"},
		{"nothing ended (a checkpoint before the end)", laterStop, map[string]uint64{"in": 8},
			map[string]ended{"in-0": {stop: 5}, "count-0": {}, "out-0": {}}, ""},
		{"a port ended under an unbounded second input", `sources:
  - {name: in, kind: jetstream, stream: IN, stop: "8"}
  - {name: live, kind: nats, subject: live}
operators: [{name: join, module: join@1, inputs: [{from: in}, {from: live}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: join}}]
`, map[string]uint64{"in": 8}, map[string]ended{"in-0": {stop: 5}, "live-0": {}, "join-0": {ports: 0b01}, "out-0": {}},
			"task join-0's input port 0 ended in the checkpoint, but source in would give it more records: it stops at sequence 8"},
		{"the unbounded input's port never ended", `sources:
  - {name: in, kind: jetstream, stream: IN, stop: "5"}
  - {name: live, kind: nats, subject: live}
operators: [{name: join, module: join@1, inputs: [{from: in}, {from: live}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: join}}]
`, map[string]uint64{"in": 5}, map[string]ended{"in-0": {stop: 5}, "live-0": {}, "join-0": {ports: 0b01}, "out-0": {}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := endedSpec(t, c.yaml, c.stops)
			err := checkEnded(s, p, endedMetadata(c.tasks), resolvedAtRestore(s))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatal("accepted")
			case c.want != "" && (!strings.Contains(err.Error(), c.want) || !errors.Is(err, control.ErrInvalid) ||
				!strings.HasPrefix(err.Error(), "restore r from checkpoint 7: ")):
				t.Fatalf("got %v, want ErrInvalid saying %q", err, c.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// The rule holds transitively: a chain whose source would read on is
// refused once, at the first port it would reach (an operator whose ports
// all ended counts as finished for the ports below it).
func TestCheckEndedNamesTheFirstPort(t *testing.T) {
	s, p := endedSpec(t, `sources: [{name: in, kind: jetstream, stream: IN, stop: "8"}]
operators:
  - {name: a, module: a@1, inputs: [{from: in}]}
  - {name: b, module: b@1, inputs: [{from: a}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: b}}]
`, map[string]uint64{"in": 8})
	err := checkEnded(s, p, endedMetadata(map[string]ended{"in-0": {stop: 5}, "a-0": {ports: 1}, "b-0": {ports: 1}, "out-0": {ports: 1}}), nil)
	if err == nil || !strings.Contains(err.Error(), "task a-0's input port 0 ended") || strings.Contains(err.Error(), "b-0") || strings.Contains(err.Error(), "out-0") {
		t.Fatalf("got %v, want the refusal to name a-0's port alone", err)
	}
}

// A checkpoint without the metrics (written before they were recorded)
// counts as one in which no port ended: restoring it is left to the
// tasks.
func TestCheckEndedWithoutMetrics(t *testing.T) {
	s, p := endedSpec(t, laterStop, map[string]uint64{"in": 8})
	md := endedMetadata(finished)
	md.Metrics = nil
	if err := checkEnded(s, p, md, nil); err != nil {
		t.Fatal(err)
	}
}

// Ports from 63 on share the mask's sign bit, set when they all ended.
func TestPortEnded(t *testing.T) {
	for _, c := range []struct {
		mask int64
		port int
		want bool
	}{
		{0, 0, false}, {1, 0, true}, {0b100, 2, true}, {0b100, 1, false},
		{1 << 62, 62, true}, {-1 << 63, 63, true}, {-1 << 63, 100, true}, {1<<63 - 1, 63, false}, {1, -1, false},
	} {
		if got := control.PortEnded(c.mask, c.port); got != c.want {
			t.Errorf("PortEnded(%b, %d) = %v", c.mask, c.port, got)
		}
	}
}

// The job API refuses, before it creates the job, a restore (job restore
// -from, or a submit that restores) whose spec would give a port that
// ended in the checkpoint more records; the same stop passes.
func TestRestoreRefusesMoreInputForAnEndedPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	md := endedMetadata(map[string]ended{"in-0": {stop: 3}, "in-1": {stop: 3}, "count-0": {ports: 1, keyed: true},
		"count-1": {ports: 1, keyed: true}, "out-0": {ports: 1}})
	md.Job, md.Savepoint = "fin", true
	for task := range md.Handles {
		md.Handles[task] = checkpoint.StateKey("fin", md.ID, task)
		if err := e.fleet.store.Put(ctx, md.Handles[task], strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.mgr.opts.Catalog.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
	withStop := func(stop string) *jobspec.Spec {
		s := spec(t, "fin", "")
		s.Sources[0].Stop = stop
		return s
	}
	want := `restore fin from checkpoint 7: task count-0's input port 0 ended in the checkpoint, but source in would give it more records: it stops at sequence 5 in the spec (stop: 5), after sequence 3, where it stopped in the checkpoint (task in-0)`
	_, err := e.api.Restore(ctx, control.RestoreRequest{Job: "fin", From: "7", Spec: withStop("5")})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("restore with a later stop: %v, want ErrInvalid saying %q", err, want)
	}
	_, err = e.api.Submit(ctx, control.SubmitRequest{Spec: withStop("5"), RestoreFrom: "7"})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("submit from the checkpoint with a later stop: %v, want ErrInvalid saying %q", err, want)
	}
	_, err = e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "fin", ""), RestoreFrom: "7"})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "source in would give it more records: it is unbounded in the spec (no stop)") {
		t.Fatalf("submit from the checkpoint without a stop: %v", err)
	}
	// The check weir job restore -spec asks before it builds the
	// spec's modules refuses it in the same words, and passes the same
	// stop; it starts nothing either way.
	if err := e.api.CheckRestore(ctx, control.RestoreRequest{Job: "fin", From: "7", Spec: withStop("5")}); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("check of the restore with a later stop: %v, want ErrInvalid saying %q", err, want)
	}
	if err := e.api.CheckRestore(ctx, control.RestoreRequest{Job: "fin", From: "7", Spec: withStop("3")}); err != nil {
		t.Fatalf("check of the restore with the same stop: %v", err)
	}
	if err := e.api.CheckRestore(ctx, control.RestoreRequest{Job: "fin", From: "8", Spec: withStop("3")}); !errors.Is(err, control.ErrNotFound) ||
		!strings.HasPrefix(err.Error(), "restore from fin/8: there is no such checkpoint") {
		t.Fatalf("check of the restore from a checkpoint that is not there: %v", err)
	}
	if _, err := e.api.Job(ctx, "fin"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("a refused restore, or a check, created the job: %v", err)
	}
	// The stop the checkpoint was taken with: the job runs (and would
	// end at once).
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "fin", From: "7", Spec: withStop("3")}); err != nil {
		t.Fatalf("restore with the same stop: %v", err)
	}
	st := waitFor(t, ctx, e, "fin", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if st.RestoredFrom != 7 {
		t.Fatalf("restored from %d, want 7", st.RestoredFrom)
	}
}

// A restore starts and stops where the run that took the checkpoint was
// resolved to, which the checkpoint records: not where a later run of the
// job's name was (stop: end resolved when the stream had grown), whose
// spec the job has now. The refusal says "as resolved for this restore"
// only of a stop resolved for the restore: that of a checkpoint that does
// not record its run's (written before it was recorded, by an earlier
// run), not one the request gave as a sequence.
func TestRestoreKeepsTheStopOfTheCheckpointsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, publish := streamsEnv(t, ctx)
	withStop := func(stop string, seq uint64) *jobspec.Spec {
		s := spec(t, "fin", "checkpointing: {disabled: true}\n")
		s.Sources[0].Stop, s.Sources[0].StopSequence = stop, seq
		return s
	}
	// The final savepoint of a run whose stop: end resolved to 3 (id 7),
	// and one written before metadata recorded the run's sources (id 6).
	savepoint := func(id int64, sources []jobspec.Source) {
		md := endedMetadata(map[string]ended{"in-0": {stop: 3, read: true}, "in-1": {stop: 3, read: true},
			"count-0": {ports: 1, keyed: true}, "count-1": {ports: 1, keyed: true}, "out-0": {ports: 1}})
		md.Job, md.ID, md.Savepoint, md.Sources = "fin", id, true, sources
		for task := range md.Handles {
			md.Handles[task] = checkpoint.StateKey("fin", id, task)
			if err := e.fleet.store.Put(ctx, md.Handles[task], strings.NewReader("state")); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.mgr.opts.Catalog.Write(ctx, md); err != nil {
			t.Fatal(err)
		}
	}
	publish(3)
	savepoint(6, nil)
	savepoint(7, withStop("end", 3).Sources)

	// A later run of the name, submitted anew once the stream had grown:
	// its stop: end resolves to 5.
	publish(2)
	e.submitRunning(t, ctx, withStop("end", 0))
	// Its checkpoints record its sources as it resolved them.
	id := e.savepoint(t, ctx, "fin")
	if md, err := e.mgr.opts.Catalog.Read(ctx, "fin", id); err != nil || len(md.Sources) != 1 || md.Sources[0].StopSequence != 5 {
		t.Errorf("savepoint %d of the later run: %+v, %v; want its source recorded with stop sequence 5", id, md, err)
	}
	if _, err := e.api.CancelJob(ctx, "fin"); err != nil {
		t.Fatal(err)
	}

	// Restored with the job's spec, savepoint 7 stops at 3, where its run
	// did: the job would finish at once.
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "fin", From: "7"}); err != nil {
		t.Fatalf("restore of savepoint 7 with the job's spec: %v", err)
	}
	st := waitFor(t, ctx, e, "fin", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if g := fmt.Sprint(st.Guarantees); !strings.Contains(g, "stops after sequence 3 (stop: end)") {
		t.Errorf("restored job's guarantees %q, want it to stop after sequence 3", g)
	}
	if _, err := e.api.CancelJob(ctx, "fin"); err != nil {
		t.Fatal(err)
	}

	// Savepoint 6 records no run: its stop: end is resolved for the
	// restore, and the refusal says so.
	_, err := e.api.Restore(ctx, control.RestoreRequest{Job: "fin", From: "6"})
	want := "source in would give it more records: it stops at sequence 5 in the spec (stop: end, as resolved for this restore), after sequence 3, where it stopped in the checkpoint"
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("restore of savepoint 6: %v, want ErrInvalid saying %q", err, want)
	}
	// A stop sequence the request gives is not one resolved for it.
	_, err = e.api.Restore(ctx, control.RestoreRequest{Job: "fin", From: "7", Spec: withStop("end", 5)})
	want = "it stops at sequence 5 in the spec (stop: end), after sequence 3"
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("restore of savepoint 7 with stop_sequence 5: %v, want ErrInvalid saying %q", err, want)
	}
}

// streamsEnv starts a job manager on a JetStream of the test's own with
// one worker, w1, and the streams IN (subject in) and OUT (out, ids kept
// 10 minutes); publish stores n records on in.
func streamsEnv(t *testing.T, ctx context.Context) (e *env, publish func(n int)) {
	t.Helper()
	nc, js := embeddedtest.JetStream(t)
	e = setupWith(t, ctx, Options{NC: nc, JetStream: js})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	for _, c := range []jetstream.StreamConfig{{Name: "IN", Subjects: []string{"in"}}, {Name: "OUT", Subjects: []string{"out"}, Duplicates: 10 * time.Minute}} {
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return e, func(n int) {
		for range n {
			if _, err := js.Publish(ctx, "in", []byte("w")); err != nil {
				t.Fatal(err)
			}
		}
	}
}
