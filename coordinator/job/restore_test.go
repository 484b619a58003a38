package job

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// Source kinds of restoreSpec.
const (
	coreSrc        = "nats"
	jsSrc          = "jetstream"
	partitionedSrc = "partitioned" // a JetStream source with 4 partitions
)

// restoreSpec is a job with a source of kind src (coreSrc, jsSrc or
// partitionedSrc), an operator and a sink of the given parallelisms.
func restoreSpec(t *testing.T, kind string, src, op, snk string) (*jobspec.Spec, *plan.Plan) {
	t.Helper()
	source := "{name: in, kind: nats, subject: in, parallelism: " + src + "}"
	switch kind {
	case jsSrc:
		source = "{name: in, kind: jetstream, stream: IN, parallelism: " + src + "}"
	case partitionedSrc:
		source = "{name: in, kind: jetstream, stream: IN, partitions: 4, partition-filter: \"in.{p}.*\", parallelism: " + src + "}"
	}
	return planned(t, `name: r
sources: [`+source+`]
operators:
  - {name: count, module: count@1, parallelism: `+op+`, inputs: [{from: in, partition: round-robin}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: `+snk+`, input: {from: count, partition: round-robin}}]
`)
}

// planned parses a job spec and plans it.
func planned(t *testing.T, yaml string) (*jobspec.Spec, *plan.Plan) {
	t.Helper()
	s, err := jobspec.Parse("r.yaml", []byte(yaml), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// taskState is what a checkpointed task held.
type taskState struct{ state, chans int64 }

func metadata(tasks map[string]taskState) *checkpoint.Metadata {
	md := &checkpoint.Metadata{ID: 7, Handles: map[string]string{}, Metrics: map[string]map[string]int64{}}
	for id, s := range tasks {
		md.Handles[id] = "r/chk-7/" + id
		md.Metrics[id] = map[string]int64{control.MetricStateBytes: s.state, control.MetricChannelStateBytes: s.chans}
	}
	return md
}

func TestCheckRestore(t *testing.T) {
	stateless := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}}
	keyed := map[string]taskState{"in-0": {}, "count-0": {state: 40}, "count-1": {}, "out-0": {state: 9}}
	unaligned := map[string]taskState{"in-0": {}, "count-0": {chans: 300}, "count-1": {}, "out-0": {}}
	gone := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}, "enrich-0": {state: 3}}
	goneEmpty := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}, "enrich-0": {}}
	twoSinks := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {state: 9}, "out-1": {state: 9}}
	for _, c := range []struct {
		name         string
		kind         string
		src, op, snk string
		tasks        map[string]taskState
		allow        bool
		want         string // "" accepted, else a part of the reason
	}{
		{"same plan", jsSrc, "1", "2", "1", keyed, false, ""},
		{"stateless operator rescaled", coreSrc, "1", "4", "1", stateless, false, ""},
		{"core source rescaled", coreSrc, "3", "2", "1", stateless, false, ""},
		{"stateful operator rescaled", coreSrc, "1", "3", "1", keyed, false, "operator count has parallelism 2 in the checkpoint and 3 in the spec and keeps state (task count-0)"},
		{"jetstream source rescaled", jsSrc, "2", "2", "1", stateless, false, ""},
		{"jetstream source rescaled with in-flight data", jsSrc, "2", "2", "1", unaligned, false, "in-flight channel data"},
		{"in-flight data", coreSrc, "1", "4", "1", unaligned, false, "in-flight channel data (task count-0, unaligned)"},
		{"sink grows", coreSrc, "1", "2", "3", keyed, false, ""},
		{"sink shrinks (its staged output is re-committed)", coreSrc, "1", "2", "1", twoSinks, false, ""},
		{"vertex removed", coreSrc, "1", "2", "1", gone, false, "enrich is in the checkpoint but not in the spec"},
		{"vertex removed, allowed", coreSrc, "1", "2", "1", gone, true, ""},
		{"stateless vertex removed", coreSrc, "1", "2", "1", goneEmpty, false, ""},
		{"partitioned source rescaled", partitionedSrc, "3", "2", "1", stateless, false, ""},
		{"partitioned source rescaled with in-flight data", partitionedSrc, "3", "2", "1", unaligned, false, "in-flight channel data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := restoreSpec(t, c.kind, c.src, c.op, c.snk)
			err := checkRestore(s, p, metadata(c.tasks), c.allow)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatal("accepted")
			case c.want != "" && (!strings.Contains(err.Error(), c.want) || !errors.Is(err, control.ErrInvalid)):
				t.Fatalf("got %v, want ErrInvalid saying %q", err, c.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// A checkpoint without metrics (written before they were recorded) counts
// as holding state everywhere.
func TestCheckRestoreWithoutMetrics(t *testing.T) {
	s, p := restoreSpec(t, coreSrc, "1", "3", "1")
	md := metadata(map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}})
	md.Metrics = nil
	if err := checkRestore(s, p, md, false); err == nil {
		t.Fatal("rescale accepted without metrics")
	}
}

// A JetStream source whose parallelism changed restores every new subtask
// from all old subtasks' snapshots (merged offsets); every other
// task keeps its own handle.
func TestRestoreFor(t *testing.T) {
	md := metadata(map[string]taskState{"in-0": {}, "in-1": {}, "count-0": {}, "count-1": {}, "out-0": {}})
	s, p := restoreSpec(t, partitionedSrc, "3", "2", "1")
	r := restoreFor(s, p, md)
	old := []string{"r/chk-7/in-0", "r/chk-7/in-1"}
	if len(r.Merged) != 3 {
		t.Fatalf("merged %v, want in-0..in-2", r.Merged)
	}
	for _, task := range []string{"in-0", "in-1", "in-2"} {
		if got := r.Merged[task]; strings.Join(got, ",") != strings.Join(old, ",") {
			t.Errorf("%s merges %v, want %v", task, got, old)
		}
		if _, ok := r.Handles[task]; ok {
			t.Errorf("%s also has its own handle", task)
		}
	}
	if r.Handles["count-1"] != "r/chk-7/count-1" || r.Handles["out-0"] != "r/chk-7/out-0" || r.CheckpointID != 7 {
		t.Errorf("restore %+v", r)
	}
	// Same parallelism: handles by task ID.
	for _, kind := range []string{partitionedSrc, jsSrc} {
		s, p := restoreSpec(t, kind, "2", "2", "1")
		if r := restoreFor(s, p, md); len(r.Merged) != 0 || r.Handles["in-1"] != "r/chk-7/in-1" {
			t.Errorf("%s at the same parallelism: %+v", kind, r)
		}
	}
	// A source whose subtasks each read the whole stream merges the old
	// offsets in subtask order, which it needs to tell whose they were:
	// in-2 before in-10.
	tasks := map[string]taskState{"count-0": {}, "count-1": {}, "out-0": {}}
	var want []string
	for i := range 11 {
		id := "in-" + strconv.Itoa(i)
		tasks[id] = taskState{}
		want = append(want, "r/chk-7/"+id)
	}
	s, p = restoreSpec(t, jsSrc, "3", "2", "1")
	r = restoreFor(s, p, metadata(tasks))
	if got := r.Merged["in-2"]; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("whole-stream source 11 → 3: in-2 merges %v, want %v", got, want)
	}
}

// An operator with keyed state (metric keyed_state) may change
// parallelism when all its inputs are partitioned by key: every new
// subtask restores from all old subtasks' snapshots and keeps its keys.
func TestRescaleKeyedState(t *testing.T) {
	build := func(partition string, count int) (*jobspec.Spec, *plan.Plan) {
		return planned(t, `name: r
sources: [{name: in, kind: nats, subject: in}]
operators:
  - {name: count, module: count@1, parallelism: `+strconv.Itoa(count)+`, inputs: [{from: in, partition: `+partition+`}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`)
	}
	md := metadata(map[string]taskState{"in-0": {}, "count-0": {state: 40}, "count-1": {state: 4}, "out-0": {}})
	md.Metrics["count-0"][control.MetricKeyedState] = 1
	md.Metrics["count-1"][control.MetricKeyedState] = 1
	s, p := build("key", 3)
	if err := checkRestore(s, p, md, false); err != nil {
		t.Fatalf("keyed state rescaled: %v", err)
	}
	r := restoreFor(s, p, md)
	for _, task := range []string{"count-0", "count-1", "count-2"} {
		if got := strings.Join(r.Merged[task], ","); got != "r/chk-7/count-0,r/chk-7/count-1" {
			t.Errorf("%s merges %q", task, got)
		}
		if _, ok := r.Handles[task]; ok {
			t.Errorf("%s also has its own handle", task)
		}
	}
	if r.Handles["in-0"] != "r/chk-7/in-0" || r.Handles["out-0"] != "r/chk-7/out-0" {
		t.Errorf("restore %+v", r)
	}
	s, p = build("round-robin", 3)
	if err := checkRestore(s, p, md, false); err == nil || !strings.Contains(err.Error(), "its input from in is not partitioned by key, so a key's records do not all reach the subtask that holds its state: give that input partition: key if the job that took the checkpoint did; "+
		"if it did not, a key's state is spread over its 2 subtasks, and only parallelism 2 restores it") {
		t.Errorf("keyed state behind round-robin: %v", err)
	}
	md.Metrics["count-1"][control.MetricKeyedState] = 0
	s, p = build("key", 3)
	if err := checkRestore(s, p, md, false); err == nil || !strings.Contains(err.Error(), "keeps state (task count-1) in a layout of its own, which weir cannot split by key: "+
		"keep parallelism 2, or have the operator snapshot its state in the keyed layout (abi/ABI.md §8, the SDKs' keyed state writers) and restore from a checkpoint it took since") {
		t.Errorf("one subtask's state opaque: %v", err)
	}
}

// A restore that keeps an operator's parallelism but no longer partitions
// by key an input the checkpoint's run did is refused when the operator
// holds state: a key's records would reach a subtask that does not hold
// its state (a trial's dedup operator, restored with round-robin at the
// same parallelism, output 5 671 ids again). Partitioning that was not by
// key before may change (a pre-aggregation's state is not a key's alone),
// and so may anything of a stateless operator, of one at parallelism 1,
// or of a checkpoint that did not record its inputs.
func TestRestoreKeepsKeyPartitioning(t *testing.T) {
	build := func(partition string, count int) (*jobspec.Spec, *plan.Plan) {
		return planned(t, `name: r
sources: [{name: in, kind: nats, subject: in}]
operators:
  - {name: count, module: count@1, parallelism: `+strconv.Itoa(count)+`, inputs: [{from: in, partition: `+partition+`}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`)
	}
	for _, c := range []struct {
		name        string
		was, now    string
		parallelism int
		state       int64
		unrecorded  bool
		want        string // "" accepted
	}{
		{"key to round-robin", "key", "round-robin", 2, 40, false, "operator count keeps state by key in its 2 subtasks (its input from in was partitioned by key when checkpoint 7 was taken), " +
			"but the spec partitions that input otherwise, so a key's records would reach subtasks that do not hold its state: keep partition: key for it"},
		{"key to broadcast", "key", "broadcast", 2, 40, false, "keep partition: key for it"},
		{"key kept", "key", "key", 2, 40, false, ""},
		{"round-robin to key", "round-robin", "key", 2, 40, false, ""},
		{"stateless", "key", "round-robin", 2, 0, false, ""},
		{"parallelism 1", "key", "round-robin", 1, 40, false, ""},
		{"not recorded", "key", "round-robin", 2, 40, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tasks := map[string]taskState{"in-0": {}, "out-0": {}}
			for i := range c.parallelism {
				tasks["count-"+strconv.Itoa(i)] = taskState{state: c.state}
			}
			md := metadata(tasks)
			was, _ := build(c.was, c.parallelism)
			if !c.unrecorded {
				md.Inputs = operatorInputs(was)
			}
			s, p := build(c.now, c.parallelism)
			err := checkRestore(s, p, md, false)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, control.ErrInvalid)):
				t.Fatalf("got %v, want ErrInvalid saying %q", err, c.want)
			}
		})
	}
}

// A sink that shrinks: subtask j re-commits, besides its own, the staged
// output of every vanished subtask i with i % parallelism == j.
func TestRestoreForShrunkSink(t *testing.T) {
	md := metadata(map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {},
		"out-0": {state: 9}, "out-1": {state: 9}, "out-2": {state: 9}, "out-3": {state: 9}, "out-4": {state: 9}})
	s, p := restoreSpec(t, coreSrc, "1", "2", "2")
	if err := checkRestore(s, p, md, false); err != nil {
		t.Fatal(err)
	}
	r := restoreFor(s, p, md)
	for task, want := range map[string]string{
		"out-0": "r/chk-7/out-0,r/chk-7/out-2,r/chk-7/out-4",
		"out-1": "r/chk-7/out-1,r/chk-7/out-3",
	} {
		if got := strings.Join(r.Merged[task], ","); got != want {
			t.Errorf("%s merges %q, want %q", task, got, want)
		}
	}
	for _, task := range []string{"out-0", "out-1", "out-2", "out-3", "out-4"} {
		if h, ok := r.Handles[task]; ok {
			t.Errorf("handle %s for %s besides the merged ones", h, task)
		}
	}
	if r.Handles["count-1"] != "r/chk-7/count-1" {
		t.Errorf("restore %+v", r)
	}
}

// Each checkpoint records how the run partitioned its operators' inputs,
// which the restore check above compares with the spec.
func TestCheckpointRecordsOperatorInputs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "parts", "checkpointing: {disabled: true}\n"))
	id := e.savepoint(t, ctx, "parts")
	md, err := e.mgr.opts.Catalog.Read(ctx, "parts", id)
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Inputs["count"]; len(got) != 1 || got[0].From != "in" || got[0].Partition != jobspec.KeyHash || got[0].Line != 0 {
		t.Errorf("recorded inputs %+v", md.Inputs)
	}
}
