package job

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/subject"
)

// restoreAllow holds what a restore (or a submit from a checkpoint) lets
// go: NonRestored (-allow-non-restored-state) state the spec cannot take
// on, and RenumberedPorts (-allow-renumbered-ports) an operator's output
// ports that lead to other readers than when the checkpoint was taken.
type restoreAllow struct {
	NonRestored, RenumberedPorts bool
}

// unfitState is a vertex of both a checkpoint and a spec whose state the
// spec cannot take on as the checkpoint holds it: why says so, and note
// what a restore that starts it without its state does instead.
type unfitState struct {
	vertex, why, note string
}

// unfitStates returns the vertices of spec (planned as p) whose state in
// checkpoint md does not fit the spec, in vertex order:
//
//   - a JetStream source whose stream, partitioning, or filter (other
//     than narrowed) changed since the run that took md (run: its sources,
//     runSources; nil when not known): its offsets are sequences of
//     another stream, or of another partitioning, or say that messages
//     the new filter takes were read when they were not;
//   - an operator that kept keyed state in more than one subtask with an
//     input not partitioned by key (md.Inputs), which the spec partitions
//     by key: a key's records reached several subtasks, so its state is
//     spread over them, and no subtask holds all of it.
//
// A restore refuses them unless it is allowed to start them without
// their state (-allow-non-restored-state; withoutState).
func unfitStates(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata, run []jobspec.Source) []unfitState {
	var out []unfitState
	tasks := map[string][]string{} // vertex -> its checkpointed tasks
	for id := range md.Handles {
		if v, _, ok := splitTaskID(id); ok {
			tasks[v] = append(tasks[v], id)
		}
	}
	for _, src := range spec.Sources {
		if src.Kind != jobspec.KindJetStream || len(tasks[src.Name]) == 0 {
			continue
		}
		i := slices.IndexFunc(run, func(o jobspec.Source) bool { return o.Name == src.Name })
		if i < 0 || run[i].Kind != jobspec.KindJetStream {
			continue
		}
		if why := offsetsUnfit(run[i], src, md.ID); why != "" {
			out = append(out, unfitState{vertex: src.Name, why: why,
				note: fmt.Sprintf("source %s reads %s from its start (%s), not on from checkpoint %d's offsets, which were of %s",
					src.Name, readsWhat(src), cmpOr(src.Start, jobspec.StartAll), md.ID, readsWhat(run[i]))})
		}
	}
	for _, v := range p.Vertices {
		ts := tasks[v.Name]
		if v.Kind != plan.Operator || len(ts) < 2 {
			continue
		}
		keyed, stateful := false, false
		for _, id := range ts {
			m, ok := md.Metrics[id]
			if !ok {
				continue
			}
			keyed = keyed || m[control.MetricKeyedState] == 1
			stateful = stateful || m[control.MetricStateBytes] != 0
		}
		if !keyed || !stateful {
			continue
		}
		for _, was := range md.Inputs[v.Name] {
			if keyRouted(md.Inputs, was, 0) {
				continue
			}
			for _, e := range v.Inputs {
				if e.From != was.From || e.Partition != jobspec.KeyHash {
					continue
				}
				at := ""
				if v.Parallelism != len(ts) {
					at = fmt.Sprintf(" (nor split over %d)", v.Parallelism)
				}
				out = append(out, unfitState{vertex: v.Name,
					why: fmt.Sprintf("operator %s keeps keyed state in its %d subtasks, but checkpoint %d was taken with its input from %s not partitioned by key (%s), "+
						"so a key's records reached several subtasks and its state is spread over them: partitioned by key now, no subtask would hold all of a key's state%s; "+
						"keep that input's partitioning (and parallelism %d), or start %s without its state (-allow-non-restored-state)",
						v.Name, len(ts), md.ID, was.From, cmpOr(was.Partition, "by default"), at, len(ts), v.Name),
					note: fmt.Sprintf("operator %s starts without its state: checkpoint %d held it spread over its %d subtasks (its input from %s was not partitioned by key)",
						v.Name, md.ID, len(ts), was.From)})
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b unfitState) int { return strings.Compare(a.vertex, b.vertex) })
	return out
}

// offsetsUnfit says why the offsets of JetStream source old, as its run
// read it, do not apply to now, or "".
func offsetsUnfit(old, now jobspec.Source, id int64) string {
	switch {
	case old.Stream != now.Stream:
		return fmt.Sprintf("source %s read stream %s when checkpoint %d was taken, and the spec has it read stream %s: the checkpoint's offsets are sequences of %s, "+
			"and resumed on %s they would skip its messages up to them; read %s again from the old stream, or start the source on %s without its offsets (-allow-non-restored-state: it reads from its start)",
			now.Name, old.Stream, id, now.Stream, old.Stream, now.Stream, old.Stream, now.Stream)
	case old.Partitions != now.Partitions || old.PartitionFilter != now.PartitionFilter:
		return fmt.Sprintf("source %s read %s when checkpoint %d was taken, and the spec has it read %s: the offsets of one partitioning say nothing about another; "+
			"keep the partitioning, or start the source without its offsets (-allow-non-restored-state: it reads from its start)",
			now.Name, readsWhat(old), id, readsWhat(now))
	case old.Partitions == 0 && !subject.Covers(cmpOr(old.Filter, ">"), cmpOr(now.Filter, ">")):
		return fmt.Sprintf("source %s read %s when checkpoint %d was taken, and the spec has it read %s: the offsets say every message up to them was read, "+
			"so the messages up to them of subjects the old filter did not take would be skipped; keep the filter (or narrow it), or start the source without its offsets (-allow-non-restored-state: it reads from its start)",
			now.Name, readsWhat(old), id, readsWhat(now))
	}
	return ""
}

// readsWhat says what JetStream source s reads: "stream IN", "stream IN
// filtered by a.>", "stream IN in 4 partitions by in.{p}".
func readsWhat(s jobspec.Source) string {
	switch {
	case s.Partitions > 0:
		return fmt.Sprintf("stream %s in %d partitions by %s", s.Stream, s.Partitions, s.PartitionFilter)
	case s.Filter != "":
		return fmt.Sprintf("stream %s filtered by %s", s.Stream, s.Filter)
	}
	return "stream " + s.Stream
}

// cmpOr returns s, or or when s is empty.
func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// withoutState returns md without the state of vertices: a restore of it
// starts them as it starts a vertex new in the spec. md itself is not
// changed.
func withoutState(md *checkpoint.Metadata, vertices []string) *checkpoint.Metadata {
	if len(vertices) == 0 {
		return md
	}
	c := *md
	c.Handles = maps.Clone(md.Handles)
	c.Metrics = maps.Clone(md.Metrics)
	for id := range md.Handles {
		if v, _, ok := splitTaskID(id); ok && slices.Contains(vertices, v) {
			delete(c.Handles, id)
			delete(c.Metrics, id)
		}
	}
	return &c
}

// portChanges describes each operator of both the run that took
// checkpoint md (its plan's edges: edges) and the spec (planned as p)
// whose output ports lead to other readers than they did: the operator
// emits by port, so what it sends to a port would reach another reader.
// A port the operator did not have is no change; one it had and no
// longer has is (what it emits there fails the operator).
func portChanges(p *plan.Plan, md *checkpoint.Metadata, edges []plan.Edge) []string {
	old := map[string][]plan.Edge{} // producer -> its output edges by port
	for _, e := range edges {
		if _, op := md.Inputs[e.From]; md.Inputs != nil && !op {
			continue // a source sends every record to each reader
		}
		for len(old[e.From]) <= e.OutPort {
			old[e.From] = append(old[e.From], plan.Edge{})
		}
		old[e.From][e.OutPort] = e
	}
	kind := map[string]plan.Kind{}
	for _, v := range p.Vertices {
		kind[v.Name] = v.Kind
	}
	// reader names the reader of e, as the old run (wasOp: whether e.To
	// was an operator) or the spec has it.
	reader := func(e plan.Edge, wasOp bool) string {
		k := "sink"
		if wasOp {
			k = "operator"
		}
		if e.InPort > 0 {
			return fmt.Sprintf("%s %s's input %d", k, e.To, e.InPort)
		}
		return k + " " + e.To
	}
	wasOperator := func(name string) bool {
		if md.Inputs != nil {
			_, ok := md.Inputs[name]
			return ok
		}
		return kind[name] == plan.Operator
	}
	var out []string
	for _, v := range p.Vertices {
		was := old[v.Name]
		if v.Kind != plan.Operator || len(was) == 0 {
			continue
		}
		var changed []string
		for port, e := range was {
			if e.To == "" {
				continue
			}
			if port >= len(v.Outputs) {
				changed = append(changed, fmt.Sprintf("port %d was %s, now none", port, reader(e, wasOperator(e.To))))
				continue
			}
			if n := v.Outputs[port]; n.To != e.To || n.InPort != e.InPort {
				changed = append(changed, fmt.Sprintf("port %d was %s, now %s", port, reader(e, wasOperator(e.To)), reader(n, kind[n.To] == plan.Operator)))
			}
		}
		if len(changed) > 0 {
			out = append(out, fmt.Sprintf("operator %s emits by output port, and its ports lead elsewhere than when checkpoint %d was taken (%s), so what it emits would reach other readers: "+
				"give each reader the port it had (port: N on its input), or, if the operator now emits to the new ports, allow it with -allow-renumbered-ports",
				v.Name, md.ID, strings.Join(changed, "; ")))
		}
	}
	return out
}

// runEdges returns the edges of the plan of the run that took checkpoint
// md: those md records, else (metadata written before they were
// recorded) those of the job's stored spec if md is of its latest run,
// else nil: not known.
func (m *Manager) runEdges(md *checkpoint.Metadata) []plan.Edge {
	if md.Edges != nil {
		return md.Edges
	}
	j, err := m.job(md.Job)
	if err != nil {
		return nil
	}
	j.mu.Lock()
	own := md.ID >= j.firstID || md.ID == j.startID
	spec := j.spec
	j.mu.Unlock()
	if !own {
		return nil
	}
	p, err := plan.Build(spec)
	if err != nil {
		return nil
	}
	return planEdges(p)
}

// checkChanges refuses (ErrInvalid) to restore checkpoint md into spec
// (planned as p) when an operator's output ports lead to other readers
// (portChanges), unless allow.RenumberedPorts, or when state does not
// fit the spec (unfitStates), unless allow.NonRestored. Otherwise it
// returns the vertices that start without their state in md
// (withoutState), and a note for each.
func (m *Manager) checkChanges(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata, allow restoreAllow) (without, notes []string, err error) {
	var problems []string
	if !allow.RenumberedPorts {
		problems = portChanges(p, md, m.runEdges(md))
	}
	for _, u := range unfitStates(spec, p, md, m.runSources(md)) {
		if !allow.NonRestored {
			problems = append(problems, u.why)
			continue
		}
		without = append(without, u.vertex)
		notes = append(notes, fmt.Sprintf("restored from checkpoint %s/%d: %s (-allow-non-restored-state)", md.Job, md.ID, u.note))
	}
	if len(problems) > 0 {
		return nil, nil, control.Errorf(control.ErrInvalid, "restore %s from checkpoint %d: %s", spec.Name, md.ID, strings.Join(problems, "; "))
	}
	return without, notes, nil
}

// keyRouted reports whether input in (of a run whose operators' inputs
// were inputs) sends each key's records to one subtask: it is partitioned
// by key, or forward from an operator whose every input is so (which
// keeps the keys it reads, as most do).
func keyRouted(inputs map[string][]jobspec.Input, in jobspec.Input, depth int) bool {
	switch {
	case in.Partition == jobspec.KeyHash:
		return true
	case in.Partition != jobspec.Forward || depth > len(inputs):
		return false
	}
	up := inputs[in.From]
	if len(up) == 0 {
		return false // a source: it splits its input otherwise
	}
	for _, u := range up {
		if !keyRouted(inputs, u, depth+1) {
			return false
		}
	}
	return true
}

// SpreadStateMark is in every warning of keyed state behind an input not
// partitioned by key (spreadKeyedState), and in no other warning: weir
// run picks them out of the status's warnings by it (SpreadStateKey).
const SpreadStateMark = "so what it computes per key is wrong"

// SpreadStateKey returns warning without the checkpoint it names, which
// changes with each checkpoint while the operator and its input stay the
// same, and true, if warning is one of keyed state behind an input not
// partitioned by key (SpreadStateMark); else "" and false. weir run
// prints each such warning once by it.
func SpreadStateKey(warning string) (string, bool) {
	if !strings.Contains(warning, SpreadStateMark) {
		return "", false
	}
	before, after, ok := strings.Cut(warning, " (checkpoint ")
	if !ok {
		return warning, true
	}
	_, rest, _ := strings.Cut(after, ")")
	return before + rest, true
}

// spreadKeyedState warns of each operator that, in checkpoint md, kept
// keyed state in more than one subtask behind an input not partitioned by
// key (md.Inputs): a key's records reached several subtasks, each
// keeping a part of its state, so what it computes per key is wrong. The
// job's status lists it (Warnings) from the job's latest completed
// checkpoint on, and weir run prints it once.
func spreadKeyedState(md *checkpoint.Metadata) []string {
	if md == nil {
		return nil
	}
	type counts struct{ tasks, keyed int }
	count := map[string]*counts{}
	for id := range md.Handles {
		v, _, ok := splitTaskID(id)
		if !ok {
			continue
		}
		if count[v] == nil {
			count[v] = &counts{}
		}
		count[v].tasks++
		if m := md.Metrics[id]; m[control.MetricKeyedState] == 1 && m[control.MetricStateBytes] != 0 {
			count[v].keyed++
		}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(md.Inputs)) {
		c := count[name]
		if c == nil || c.tasks < 2 || c.keyed == 0 {
			continue
		}
		for _, in := range md.Inputs[name] {
			if keyRouted(md.Inputs, in, 0) {
				continue
			}
			out = append(out, fmt.Sprintf("operator %s keeps keyed state in its %d subtasks (checkpoint %d), but its input from %s is not partitioned by key (%s): "+
				"a key's records reach several subtasks, each keeping a part of the key's state, "+SpreadStateMark+"; "+
				"give the input partition: key and start the operator without this state (a restore that keeps it is refused)",
				name, c.tasks, md.ID, in.From, cmpOr(in.Partition, "by default")))
		}
	}
	return out
}
