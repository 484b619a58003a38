package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// checkRestore refuses to start spec (planned as p) from checkpoint md
// when doing so would drop state or hand it to the wrong subtask. Tasks
// restore state by task ID, so
//
//   - a vertex of the checkpoint that the spec no longer has loses its
//     state: refused when it had any, unless allowNonRestored;
//   - a vertex whose parallelism changed is refused when it holds state
//     that depends on which subtask owns which records: opaque operator
//     state (it would stay with the subtask that had the key's old hash).
//     An operator whose every input is key-partitioned and whose state is
//     in the keyed layout (abi.KeyedStateMagic, metric keyed_state) may
//     change parallelism: every new subtask takes the entries of all old
//     ones whose key routes to it. So may a JetStream source: every new
//     subtask merges the offsets of all old ones (restoreFor) — each
//     partition was read by exactly one, or, read whole by each, the old
//     offsets say which messages of which subject were read. A sink may shrink: the
//     staged output of a subtask that no longer exists is re-committed, as
//     that subtask would have, by the new subtask of its index modulo the
//     new parallelism. The in-flight channel data of an unaligned
//     checkpoint is redistributed when any parallelism changed
//     (channelMoves): every old channel's records — what its consumer had
//     received and not processed, then what its producer had not sent —
//     are replayed, before any new input, by the new subtask of the
//     consumer that the edge's partitioning now sends them to: by key for
//     a key-partitioned input, the whole channel, in order, to the
//     subtask of the old consumer's index modulo the new parallelism
//     otherwise. Refused: a checkpoint that does not record its channels'
//     layout (Metadata.Edges, written by an older weir), a broadcast edge
//     with in-flight records whose ends' parallelism changed, and an
//     input with in-flight records that the spec no longer has.
//
// Vertices new in the spec start empty, as on a first run. A checkpoint
// without metrics (written before they were recorded) counts as holding
// state everywhere.
func checkRestore(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata, allowNonRestored bool) error {
	had := map[string][]ckTask{} // vertex -> its checkpointed tasks
	moves, chanProblems := channelMoves(p, md, allowNonRestored)
	for id := range md.Handles {
		vertex, _, ok := splitTaskID(id)
		if !ok {
			return control.Errorf(control.ErrInvalid, "restore %s from checkpoint %d: task %q in the checkpoint is not VERTEX-INDEX", spec.Name, md.ID, id)
		}
		t := ckTask{id: id, state: -1, chans: -1}
		if m, ok := md.Metrics[id]; ok {
			t.state, t.chans = m[control.MetricStateBytes], m[control.MetricChannelStateBytes]
			t.keyed = m[control.MetricKeyedState] == 1
		}
		if moves != nil {
			t.chans = 0 // channelMoves redistributes it, or says why not
		}
		had[vertex] = append(had[vertex], t)
	}
	planned := map[string]plan.Vertex{}
	for _, v := range p.Vertices {
		planned[v.Name] = v
	}
	// stateful names the first task of ts that holds state, or "".
	stateful := func(ts []ckTask) string {
		for _, t := range ts {
			if t.state != 0 || t.chans != 0 {
				return t.id
			}
		}
		return ""
	}
	problems := chanProblems
	vertices := make([]string, 0, len(had))
	for v := range had {
		vertices = append(vertices, v)
	}
	slices.Sort(vertices)
	for _, name := range vertices {
		ts := had[name]
		slices.SortFunc(ts, func(a, b ckTask) int { return strings.Compare(a.id, b.id) })
		v, ok := planned[name]
		if !ok {
			if t := stateful(ts); t != "" && !allowNonRestored {
				problems = append(problems, fmt.Sprintf("%s is in the checkpoint but not in the spec, and its state (task %s) would be dropped (allow that with -allow-non-restored-state)", name, t))
			}
			continue
		}
		if v.Parallelism == len(ts) {
			if v.Kind == plan.Operator && v.Parallelism > 1 && stateful(ts) != "" {
				if in := unkeyedNow(md.Inputs[name], v); in != "" {
					problems = append(problems, fmt.Sprintf("operator %s keeps state by key in its %d subtasks (its input from %s was partitioned by key when checkpoint %d was taken), "+
						"but the spec partitions that input otherwise, so a key's records would reach subtasks that do not hold its state: keep partition: key for it",
						name, len(ts), in, md.ID))
				}
			}
			continue
		}
		changed := fmt.Sprintf("%s %s has parallelism %d in the checkpoint and %d in the spec", v.Kind, name, len(ts), v.Parallelism)
		switch {
		case v.Kind == plan.Operator:
			if stateful(ts) == "" {
				break
			}
			if opaque := opaqueState(ts); opaque != "" {
				problems = append(problems, fmt.Sprintf("%s and keeps state (task %s) in a layout of its own, which weir cannot split by key: "+
					"keep parallelism %d, or have the operator snapshot its state in the keyed layout (abi/ABI.md §8, the SDKs' keyed state writers) "+
					"and restore from a checkpoint it took since", changed, opaque, len(ts)))
			} else if in := unkeyedInput(v); in != "" {
				// Partitioning the input by key now mends only a
				// checkpoint taken with it so: one taken without has a
				// key's entries in several subtasks' states, which the
				// split on a rescale refuses (abi.MergeKeyedState).
				problems = append(problems, fmt.Sprintf("%s and keeps keyed state, but its input from %s is not partitioned by key, so a key's records do not all reach the subtask that holds its state: "+
					"give that input partition: key if the job that took the checkpoint did; if it did not, a key's state is spread over its %d subtasks, and only parallelism %d restores it",
					changed, in, len(ts), len(ts)))
			}
		}
	}
	if len(problems) > 0 {
		return control.Errorf(control.ErrInvalid, "restore %s from checkpoint %d: %s", spec.Name, md.ID, strings.Join(problems, "; "))
	}
	return nil
}

// ckTask is what a checkpoint says about one task: its state and channel
// state sizes (-1: not recorded) and whether its state is keyed.
type ckTask struct {
	id           string
	state, chans int64
	keyed        bool
}

// opaqueState names the first task of ts whose state the host cannot split
// by key: it has state, and not in the keyed layout.
func opaqueState(ts []ckTask) string {
	for _, t := range ts {
		if (t.state != 0 || t.chans != 0) && !t.keyed {
			return t.id
		}
	}
	return ""
}

// unkeyedInput names the first input of v that is not partitioned by key.
func unkeyedInput(v plan.Vertex) string {
	for _, e := range v.Inputs {
		if e.Partition != jobspec.KeyHash {
			return e.From
		}
	}
	return ""
}

// unkeyedNow names the first input of v that was partitioned by key as
// the checkpoint's run had it (was: Metadata.Inputs of v) and is not in
// the spec, or "".
func unkeyedNow(was []jobspec.Input, v plan.Vertex) string {
	for _, in := range was {
		if in.Partition != jobspec.KeyHash {
			continue
		}
		for _, e := range v.Inputs {
			if e.From == in.From && e.Partition != jobspec.KeyHash {
				return in.From
			}
		}
	}
	return ""
}

// operatorInputs returns spec's operators' inputs by operator, as a
// checkpoint records them (checkpoint.Metadata.Inputs).
func operatorInputs(spec *jobspec.Spec) map[string][]jobspec.Input {
	in := make(map[string][]jobspec.Input, len(spec.Operators))
	for _, op := range spec.Operators {
		ins := slices.Clone(op.Inputs)
		for i := range ins {
			ins[i].Line = 0
		}
		in[op.Name] = ins
	}
	return in
}

// restoreFor returns the restore instructions for deploying spec (planned
// as p) from checkpoint md: each task's own handle, except for the tasks of
// a vertex whose parallelism differs from the checkpoint's and whose state
// can be merged — a JetStream source or an operator with keyed state —
// which get the handles of all the vertex's old subtasks in subtask
// order, and for a sink that shrank, whose subtask j also
// gets the handles of the vanished subtasks i with i % parallelism == j
// (checkRestore refused every other change that moves state).
func restoreFor(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata) *control.Restore {
	r := md.Restore()
	old := map[string][]string{} // vertex -> its checkpointed task IDs
	for id := range md.Handles {
		if vertex, _, ok := splitTaskID(id); ok {
			old[vertex] = append(old[vertex], id)
		}
	}
	jetStreamSource := map[string]bool{}
	for _, s := range spec.Sources {
		jetStreamSource[s.Name] = s.Kind == jobspec.KindJetStream
	}
	for _, v := range p.Vertices {
		ids := old[v.Name]
		if len(ids) == 0 || v.Parallelism == len(ids) {
			continue
		}
		if v.Kind == plan.Sink {
			if len(ids) > v.Parallelism {
				shrinkSink(r, v, md)
			}
			continue
		}
		merge := v.Kind == plan.Source && jetStreamSource[v.Name]
		if v.Kind == plan.Operator {
			for _, id := range ids {
				merge = merge || md.Metrics[id][control.MetricKeyedState] == 1
			}
		}
		if !merge {
			continue
		}
		slices.SortFunc(ids, byIndex)
		handles := make([]string, len(ids))
		for i, id := range ids {
			handles[i] = md.Handles[id]
			delete(r.Handles, id)
		}
		if r.Merged == nil {
			r.Merged = map[string][]string{}
		}
		for _, task := range v.Tasks {
			r.Merged[task] = slices.Clone(handles)
		}
	}
	if moves, problems := channelMoves(p, md, true); moves != nil && len(problems) == 0 {
		r.ChannelPlan = true
		for task, pieces := range moves {
			if len(pieces) == 0 {
				continue
			}
			if r.Channels == nil {
				r.Channels = map[string][]control.ChannelPiece{}
			}
			r.Channels[task] = pieces
		}
	}
	return r
}

// holdsChannels reports whether task id of checkpoint md may hold
// in-flight channel data: it says so, or its metrics were not recorded.
func holdsChannels(md *checkpoint.Metadata, id string) bool {
	m, ok := md.Metrics[id]
	return !ok || m[control.MetricChannelStateBytes] != 0
}

// channelMoves says where the in-flight channel data of checkpoint md goes
// when the job restarts as plan p with a changed parallelism. Each old
// channel (an edge of md.Edges from producer subtask k to consumer
// subtask j) holds, in order, the input channel state of consumer j (what
// it had received and not processed) and the output channel state of
// producer k (what it had not sent). Both are replayed as input by the new
// subtasks of the consumer, before any new input, on the input port the
// edge has now:
//
//   - an edge partitioned by key in the spec: by every new subtask, each
//     keeping the records whose key the partitioner routes to it (none
//     filtered when the edge was keyed over the same parallelism before);
//   - any other: by the new subtask j mod the consumer's new parallelism,
//     the whole channel in order.
//
// The producers send none of their output channel state again. moves is
// nil when nothing moves (no channel data, or no parallelism changed), and
// otherwise has an entry, maybe empty, for every task of p; problems says
// why data cannot be redistributed, one line each. An edge whose consumer
// the spec drops loses its records: a problem unless allowNonRestored.
func channelMoves(p *plan.Plan, md *checkpoint.Metadata, allowNonRestored bool) (moves map[string][]control.ChannelPiece, problems []string) {
	oldPar := map[string]int{}
	inFlight := ""
	for id := range md.Handles {
		v, _, ok := splitTaskID(id)
		if !ok {
			continue
		}
		oldPar[v]++
		if holdsChannels(md, id) && (inFlight == "" || id < inFlight) {
			inFlight = id
		}
	}
	if inFlight == "" {
		return nil, nil
	}
	now := map[string]plan.Vertex{}
	var changed *plan.Vertex
	for i, v := range p.Vertices {
		now[v.Name] = v
		if n, ok := oldPar[v.Name]; ok && n != v.Parallelism && changed == nil {
			changed = &p.Vertices[i]
		}
	}
	if changed == nil {
		return nil, nil
	}
	moves = make(map[string][]control.ChannelPiece, len(p.Tasks))
	for _, t := range p.Tasks {
		moves[t.ID] = nil
	}
	if md.Edges == nil {
		return moves, []string{fmt.Sprintf("%s %s has parallelism %d in the checkpoint and %d in the spec, and the checkpoint holds in-flight channel data (task %s, unaligned) "+
			"but not which channels it was on (an older weir wrote it): keep the parallelisms, or restore from a savepoint (always aligned)",
			changed.Kind, changed.Name, oldPar[changed.Name], changed.Parallelism, inFlight)}
	}
	old := oldLayout{par: oldPar, edges: md.Edges}
	for _, e := range md.Edges {
		m, n := oldPar[e.From], oldPar[e.To]
		if m == 0 || n == 0 {
			continue
		}
		part := old.partition(e)
		held := ""
		for j := 0; j < n && held == ""; j++ {
			if id := plan.TaskID(e.To, j); holdsChannels(md, id) {
				held = id
			}
		}
		for k := 0; k < m && held == ""; k++ {
			if id := plan.TaskID(e.From, k); holdsChannels(md, id) {
				held = id
			}
		}
		if held == "" {
			continue
		}
		to, ok := now[e.To]
		if !ok {
			if !allowNonRestored {
				problems = append(problems, fmt.Sprintf("%s is not in the spec, and the in-flight records of its input from %s (task %s, unaligned) would be dropped (allow that with -allow-non-restored-state)", e.To, e.From, held))
			}
			continue
		}
		var edge *plan.Edge
		for i, in := range to.Inputs {
			if in.From == e.From && in.InPort == e.InPort {
				edge = &to.Inputs[i]
			}
		}
		if edge == nil {
			problems = append(problems, fmt.Sprintf("the checkpoint holds in-flight records of %s's input %d from %s (task %s, unaligned), which the spec no longer has: keep that input, or restore from a savepoint (always aligned)",
				e.To, e.InPort, e.From, held))
			continue
		}
		if (part == jobspec.Broadcast || edge.Partition == jobspec.Broadcast) && (m != now[e.From].Parallelism || n != to.Parallelism) {
			problems = append(problems, fmt.Sprintf("the checkpoint holds in-flight records of the broadcast from %s to %s (task %s, unaligned), which weir cannot redistribute when a parallelism of either changes: keep both, or restore from a savepoint (always aligned)",
				e.From, e.To, held))
			continue
		}
		byKey := edge.Partition == jobspec.KeyHash && (part != jobspec.KeyHash || n != to.Parallelism)
		for j := 0; j < n; j++ {
			for k := 0; k < m; k++ {
				if part == jobspec.Forward && k != j {
					continue
				}
				var pieces []control.ChannelPiece
				if id := plan.TaskID(e.To, j); holdsChannels(md, id) && md.Handles[id] != "" {
					pieces = append(pieces, control.ChannelPiece{Handle: md.Handles[id], Channel: old.inIndex(e, k), Port: edge.InPort})
				}
				if id := plan.TaskID(e.From, k); holdsChannels(md, id) && md.Handles[id] != "" {
					pieces = append(pieces, control.ChannelPiece{Handle: md.Handles[id], Output: true, Channel: old.outIndex(e, j), Port: edge.InPort})
				}
				if !byKey {
					task := to.Tasks[j%to.Parallelism]
					moves[task] = append(moves[task], pieces...)
					continue
				}
				for _, task := range to.Tasks {
					for _, pc := range pieces {
						pc.ByKey = true
						moves[task] = append(moves[task], pc)
					}
				}
			}
		}
	}
	return moves, problems
}

// oldLayout is the channel layout of the run that took a checkpoint: its
// plan's edges and its vertices' parallelisms.
type oldLayout struct {
	par   map[string]int
	edges []plan.Edge
}

// partition returns e's partitioning, with plan.Build's default for none.
func (l oldLayout) partition(e plan.Edge) string {
	if e.Partition != "" {
		return e.Partition
	}
	if l.par[e.From] == l.par[e.To] {
		return jobspec.Forward
	}
	return jobspec.RoundRobin
}

// inIndex returns the index, among its consumer subtask's input channels,
// of the channel of e from producer subtask k: the ports in order, each
// with a channel per producer subtask (one on a forward edge).
func (l oldLayout) inIndex(e plan.Edge, k int) int {
	c := 0
	for _, f := range l.edges {
		if f.To != e.To || f.InPort >= e.InPort {
			continue
		}
		if l.partition(f) == jobspec.Forward {
			c++
		} else {
			c += l.par[f.From]
		}
	}
	if l.partition(e) == jobspec.Forward {
		return c
	}
	return c + k
}

// outIndex returns the index, among its producer subtask's output
// channels, of the channel of e to consumer subtask j: the output ports
// in order, each with a channel per consumer subtask (one on a forward
// edge).
func (l oldLayout) outIndex(e plan.Edge, j int) int {
	c := 0
	for _, f := range l.edges {
		if f.From != e.From || f.OutPort >= e.OutPort {
			continue
		}
		if l.partition(f) == jobspec.Forward {
			c++
		} else {
			c += l.par[f.To]
		}
	}
	if l.partition(e) == jobspec.Forward {
		return c
	}
	return c + j
}

// planEdges returns p's edges, each once (as its consumer's input), as a
// checkpoint records them (checkpoint.Metadata.Edges).
func planEdges(p *plan.Plan) []plan.Edge {
	var edges []plan.Edge
	for _, v := range p.Vertices {
		edges = append(edges, v.Inputs...)
	}
	return edges
}

// shrinkSink gives sink subtask j of v, besides its own handle, those of
// the checkpoint's subtasks i ≥ v.Parallelism with i % v.Parallelism == j.
func shrinkSink(r *control.Restore, v plan.Vertex, md *checkpoint.Metadata) {
	extra := map[int][]string{}
	for id := range md.Handles {
		if vertex, i, ok := splitTaskID(id); ok && vertex == v.Name && i >= v.Parallelism {
			extra[i%v.Parallelism] = append(extra[i%v.Parallelism], id)
		}
	}
	for j, ids := range extra {
		slices.SortFunc(ids, byIndex)
		task := v.Tasks[j]
		var handles []string
		if h, ok := r.Handles[task]; ok {
			handles = append(handles, h)
			delete(r.Handles, task)
		}
		for _, id := range ids {
			handles = append(handles, md.Handles[id])
			delete(r.Handles, id)
		}
		if r.Merged == nil {
			r.Merged = map[string][]string{}
		}
		r.Merged[task] = handles
	}
}

// splitTaskID splits a plan.TaskID into vertex and index.
func splitTaskID(id string) (vertex string, index int, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return id[:i], n, true
}

// byIndex orders task IDs of one vertex by subtask index ("op-2" before
// "op-10").
func byIndex(a, b string) int {
	_, x, _ := splitTaskID(a)
	_, y, _ := splitTaskID(b)
	return x - y
}
