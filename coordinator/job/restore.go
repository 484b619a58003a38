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
//     that depends on which subtask owns which records: operator state
//     (keyed state would stay with the subtask that had the key's old
//     hash), the offsets of a JetStream source read whole by each subtask,
//     and the staged output of a sink subtask that would no longer exist.
//     A partitioned JetStream source may change parallelism: every new
//     subtask merges the offsets of all old ones (restoreFor), each
//     partition having been read by exactly one. Nothing may
//     change parallelism while the checkpoint holds in-flight channel data
//     (unaligned): its channels would not match; a savepoint is always
//     aligned.
//
// Vertices new in the spec start empty, as on a first run. A checkpoint
// without metrics (written before they were recorded) counts as holding
// state everywhere.
func checkRestore(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata, allowNonRestored bool) error {
	type task struct {
		id           string
		state, chans int64
	}
	had := map[string][]task{} // vertex -> its checkpointed tasks
	inFlight := ""             // a task that persisted channel data
	for id := range md.Handles {
		vertex, _, ok := splitTaskID(id)
		if !ok {
			return fmt.Errorf("restore %s from checkpoint %d: task %q in the checkpoint is not VERTEX-INDEX: %w", spec.Name, md.ID, id, control.ErrInvalid)
		}
		t := task{id: id, state: -1, chans: -1}
		if m, ok := md.Metrics[id]; ok {
			t.state, t.chans = m[control.MetricStateBytes], m[control.MetricChannelStateBytes]
		}
		if t.chans != 0 && (inFlight == "" || id < inFlight) {
			inFlight = id
		}
		had[vertex] = append(had[vertex], t)
	}
	planned := map[string]plan.Vertex{}
	for _, v := range p.Vertices {
		planned[v.Name] = v
	}
	jetStreamSource, partitioned := map[string]bool{}, map[string]bool{}
	for _, s := range spec.Sources {
		jetStreamSource[s.Name] = s.Kind == jobspec.KindJetStream
		partitioned[s.Name] = s.Kind == jobspec.KindJetStream && s.Partitions > 0
	}
	// stateful names the first task of ts that holds state, or "".
	stateful := func(ts []task, from int) string {
		for _, t := range ts {
			if _, idx, _ := splitTaskID(t.id); idx >= from && (t.state != 0 || t.chans != 0) {
				return t.id
			}
		}
		return ""
	}
	var problems []string
	vertices := make([]string, 0, len(had))
	for v := range had {
		vertices = append(vertices, v)
	}
	slices.Sort(vertices)
	for _, name := range vertices {
		ts := had[name]
		slices.SortFunc(ts, func(a, b task) int { return strings.Compare(a.id, b.id) })
		v, ok := planned[name]
		if !ok {
			if t := stateful(ts, 0); t != "" && !allowNonRestored {
				problems = append(problems, fmt.Sprintf("%s is in the checkpoint but not in the spec, and its state (task %s) would be dropped (allow that with allow-non-restored-state)", name, t))
			}
			continue
		}
		if v.Parallelism == len(ts) {
			continue
		}
		changed := fmt.Sprintf("%s %s has parallelism %d in the checkpoint and %d in the spec", v.Kind, name, len(ts), v.Parallelism)
		switch {
		case inFlight != "":
			problems = append(problems, fmt.Sprintf("%s, but the checkpoint holds in-flight channel data (task %s, unaligned) that only the old channels can take: restore from a savepoint (always aligned) instead", changed, inFlight))
		case v.Kind == plan.Source && jetStreamSource[name] && !partitioned[name]:
			problems = append(problems, fmt.Sprintf("%s: its subtasks each read the whole stream and keep offsets that cannot be split or merged (a source with partitions can be rescaled)", changed))
		case v.Kind == plan.Operator:
			if t := stateful(ts, 0); t != "" {
				problems = append(problems, fmt.Sprintf("%s and keeps state (task %s): weir restores state per subtask and cannot redistribute it by key", changed, t))
			}
		case v.Kind == plan.Sink:
			if t := stateful(ts, v.Parallelism); t != "" {
				problems = append(problems, fmt.Sprintf("%s: task %s would no longer exist and its state (staged output) would be dropped", changed, t))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("restore %s from checkpoint %d: %s: %w", spec.Name, md.ID, strings.Join(problems, "; "), control.ErrInvalid)
	}
	return nil
}

// restoreFor returns the restore instructions for deploying spec (planned
// as p) from checkpoint md: each task's own handle, except for the source
// tasks of a partitioned JetStream source whose parallelism differs from
// the checkpoint's, which get the handles of all the vertex's old subtasks
// to merge their offsets (checkRestore refused every other change that
// moves state).
func restoreFor(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata) *control.Restore {
	r := md.Restore()
	old := map[string][]string{} // vertex -> its checkpointed handles
	for id, h := range md.Handles {
		if vertex, _, ok := splitTaskID(id); ok {
			old[vertex] = append(old[vertex], h)
		}
	}
	for _, s := range spec.Sources {
		if s.Kind != jobspec.KindJetStream || s.Partitions == 0 || len(old[s.Name]) == 0 {
			continue
		}
		i := slices.IndexFunc(p.Vertices, func(v plan.Vertex) bool { return v.Name == s.Name })
		if i < 0 || p.Vertices[i].Parallelism == len(old[s.Name]) {
			continue
		}
		v := p.Vertices[i]
		handles := old[s.Name]
		slices.Sort(handles)
		for id := range md.Handles {
			if vertex, _, _ := splitTaskID(id); vertex == s.Name {
				delete(r.Handles, id)
			}
		}
		if r.Merged == nil {
			r.Merged = map[string][]string{}
		}
		for _, task := range v.Tasks {
			r.Merged[task] = slices.Clone(handles)
		}
	}
	return r
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
