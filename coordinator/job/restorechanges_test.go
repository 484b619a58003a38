package job

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// ranAs is checkpoint 5 of job r as the run of spec s (planned as p)
// would record it, with a handle and metrics for each of tasks.
func ranAs(s *jobspec.Spec, p *plan.Plan, tasks map[string]map[string]int64) *checkpoint.Metadata {
	md := &checkpoint.Metadata{Job: "r", ID: 5, Handles: map[string]string{}, Metrics: map[string]map[string]int64{},
		Sources: s.Sources, Inputs: operatorInputs(s), Edges: planEdges(p)}
	for id, m := range tasks {
		md.Handles[id] = "r/chk-5/" + id
		md.Metrics[id] = m
	}
	return md
}

const splitJob = `name: r
sources: [{name: in, kind: nats, subject: in}]
operators:
  - {name: parse, module: parse@1, inputs: [{from: in}]}
`

// The trial's: a reader added before parse's sinks moves them a port on,
// which the restore names port by port; readers that give their ports
// keep them.
func TestPortChanges(t *testing.T) {
	was, wasPlan := planned(t, splitJob+`sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse}}
`)
	md := ranAs(was, wasPlan, nil)
	_, added := planned(t, splitJob+`  - {name: audit, module: audit@1, inputs: [{from: parse}]}
sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse}}
`)
	got := portChanges(added, md, md.Edges)
	want := "operator parse emits by output port, and its ports lead elsewhere than when checkpoint 5 was taken (port 0 was sink good, now operator audit; port 1 was sink rejects, now sink good), " +
		"so what it emits would reach other readers: give each reader the port it had (port: N on its input), or, if the operator now emits to the new ports, allow it with -allow-renumbered-ports"
	if len(got) != 1 || got[0] != want {
		t.Errorf("port changes %q, want %q", got, want)
	}

	_, pinned := planned(t, splitJob+`  - {name: audit, module: audit@1, inputs: [{from: parse}]}
sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: 0}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse, port: 1}}
`)
	if got := portChanges(pinned, md, md.Edges); len(got) != 0 {
		t.Errorf("pinned ports: %q", got)
	}

	_, dropped := planned(t, splitJob+`sinks:
  - {name: rejects, kind: nats, subject: r, input: {from: parse}}
`)
	if got := portChanges(dropped, md, md.Edges); len(got) != 1 || !strings.Contains(got[0], "(port 0 was sink good, now sink rejects; port 1 was sink rejects, now none)") {
		t.Errorf("a reader dropped: %q", got)
	}
}

const jsJob = `name: r
operators:
  - {name: count, module: count@1, inputs: [{from: in}]}
sinks: [{name: out, kind: nats, subject: out, input: {from: count}}]
sources: `

// A JetStream source whose offsets are of another stream, another
// partitioning or a narrower filter does not fit; a filter narrowed does.
func TestUnfitSourceOffsets(t *testing.T) {
	for _, c := range []struct {
		name, was, now, want string
	}{
		{"another stream", `[{name: in, kind: jetstream, stream: IN_GO}]`, `[{name: in, kind: jetstream, stream: IN_RS}]`,
			"source in read stream IN_GO when checkpoint 5 was taken, and the spec has it read stream IN_RS: the checkpoint's offsets are sequences of IN_GO"},
		{"partitioned now", `[{name: in, kind: jetstream, stream: IN}]`, `[{name: in, kind: jetstream, stream: IN, partitions: 4, partition-filter: "in.{p}"}]`,
			"source in read stream IN when checkpoint 5 was taken, and the spec has it read stream IN in 4 partitions by in.{p}: the offsets of one partitioning say nothing about another"},
		{"a wider filter", `[{name: in, kind: jetstream, stream: IN, filter: "in.eu.>"}]`, `[{name: in, kind: jetstream, stream: IN, filter: "in.>"}]`,
			"source in read stream IN filtered by in.eu.> when checkpoint 5 was taken, and the spec has it read stream IN filtered by in.>"},
		{"a narrower filter", `[{name: in, kind: jetstream, stream: IN, filter: "in.>"}]`, `[{name: in, kind: jetstream, stream: IN, filter: "in.eu.>"}]`, ""},
		{"the same", `[{name: in, kind: jetstream, stream: IN}]`, `[{name: in, kind: jetstream, stream: IN}]`, ""},
	} {
		was, wasPlan := planned(t, jsJob+c.was+"\n")
		md := ranAs(was, wasPlan, map[string]map[string]int64{"in-0": {control.MetricStateBytes: 8}})
		now, p := planned(t, jsJob+c.now+"\n")
		got := unfitStates(now, p, md, md.Sources)
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s: %+v", c.name, got)
		case c.want != "" && (len(got) != 1 || got[0].vertex != "in" || !strings.HasPrefix(got[0].why, c.want)):
			t.Errorf("%s: %+v, want %q", c.name, got, c.want)
		}
	}
}

const keyedJob = `name: r
sources: [{name: in, kind: nats, subject: in, parallelism: 2}]
sinks: [{name: out, kind: nats, subject: out, input: {from: sum}}]
operators:
  - {name: sum, module: sum@1, parallelism: `

// The trial's keyed state behind a round-robin input: the status warns of
// it; partitioning the input by key at the same parallelism, or at
// another, is refused, saying why and what to do; the same partitioning
// at the same parallelism goes on as it was.
func TestSpreadKeyedState(t *testing.T) {
	was, wasPlan := planned(t, keyedJob+`2, inputs: [{from: in, partition: round-robin}]}
`)
	keyed := map[string]int64{control.MetricStateBytes: 40, control.MetricKeyedState: 1}
	md := ranAs(was, wasPlan, map[string]map[string]int64{"in-0": {}, "in-1": {}, "sum-0": keyed, "sum-1": keyed, "out-0": {}})

	warn := spreadKeyedState(md)
	if len(warn) != 1 || !strings.HasPrefix(warn[0], "operator sum keeps keyed state in its 2 subtasks (checkpoint 5), but its input from in is not partitioned by key (round-robin): a key's records reach several subtasks") {
		t.Errorf("warnings %q", warn)
	}
	// weir run prints it once: its key is the same at a later checkpoint,
	// and no other warning has one.
	md.ID = 6
	later := spreadKeyedState(md)
	k5, ok5 := SpreadStateKey(warn[0])
	k6, ok6 := SpreadStateKey(later[0])
	if !ok5 || !ok6 || k5 != k6 || strings.Contains(k5, "checkpoint") {
		t.Errorf("keys %q (%v) and %q (%v) of %q and %q; want one without the checkpoint", k5, ok5, k6, ok6, warn[0], later[0])
	}
	if _, ok := SpreadStateKey("sink out writes stream SHARED subject shared, which job first writes too (its sink out, subject shared): " + SharedSinkMark); ok {
		t.Error("a shared sink's warning has a key of spread state")
	}
	md.ID = 5

	for _, c := range []struct{ name, op, want string }{
		{"keyed at the same parallelism", `2, inputs: [{from: in, partition: key}]}`,
			"operator sum keeps keyed state in its 2 subtasks, but checkpoint 5 was taken with its input from in not partitioned by key (round-robin), so a key's records reached several subtasks and its state is spread over them: " +
				"partitioned by key now, no subtask would hold all of a key's state; keep that input's partitioning (and parallelism 2), or start sum without its state (-allow-non-restored-state)"},
		{"keyed at parallelism 3", `3, inputs: [{from: in, partition: key}]}`, "no subtask would hold all of a key's state (nor split over 3)"},
		{"as it was", `2, inputs: [{from: in, partition: round-robin}]}`, ""},
	} {
		now, p := planned(t, keyedJob+c.op+"\n")
		got := unfitStates(now, p, md, md.Sources)
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s: %+v", c.name, got)
		case c.want != "" && (len(got) != 1 || got[0].vertex != "sum" || !strings.Contains(got[0].why, c.want)):
			t.Errorf("%s: %+v, want %q", c.name, got, c.want)
		}
	}

	// Behind a keyed operator, a forward input keeps the keys: no warning.
	fwd, fwdPlan := planned(t, `name: r
sources: [{name: in, kind: nats, subject: in, parallelism: 2}]
operators:
  - {name: route, module: m@1, parallelism: 2, inputs: [{from: in, partition: key}]}
  - {name: sum, module: sum@1, parallelism: 2, inputs: [{from: route}]}
sinks: [{name: out, kind: nats, subject: out, input: {from: sum}}]
`)
	if w := spreadKeyedState(ranAs(fwd, fwdPlan, map[string]map[string]int64{"sum-0": keyed, "sum-1": keyed})); len(w) != 0 {
		t.Errorf("forward behind a keyed input: %q", w)
	}
}

// A restore refuses what does not fit, or, allowed, starts it without its
// state: the deploy leaves out its handles and the status says why.
func TestCheckChangesAllowed(t *testing.T) {
	was, wasPlan := planned(t, jsJob+`[{name: in, kind: jetstream, stream: IN_GO}]`+"\n")
	md := ranAs(was, wasPlan, map[string]map[string]int64{"in-0": {control.MetricStateBytes: 8}, "count-0": {control.MetricStateBytes: 8}, "out-0": {}})
	now, p := planned(t, jsJob+`[{name: in, kind: jetstream, stream: IN_RS}]`+"\n")
	m := &Manager{jobs: map[string]*job{}}
	if _, _, err := m.checkChanges(now, p, md, restoreAllow{}); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "restore r from checkpoint 5: source in read stream IN_GO") {
		t.Fatalf("refusal: %v", err)
	}
	without, notes, err := m.checkChanges(now, p, md, restoreAllow{NonRestored: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(without) != 1 || without[0] != "in" || len(notes) != 1 ||
		notes[0] != "restored from checkpoint r/5: source in reads stream IN_RS from its start (all), not on from checkpoint 5's offsets, which were of stream IN_GO (-allow-non-restored-state)" {
		t.Errorf("without %q, notes %q", without, notes)
	}
	r := restoreFor(now, p, withoutState(md, without))
	if _, ok := r.Handles["in-0"]; ok || r.Handles["count-0"] == "" {
		t.Errorf("restore %+v", r)
	}
	if _, ok := md.Handles["in-0"]; !ok {
		t.Error("withoutState changed the checkpoint it was given")
	}
}
