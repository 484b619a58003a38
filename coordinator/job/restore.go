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
//     hash), a JetStream source's offsets (per subtask), and the staged
//     output of a sink subtask that would no longer exist. Nothing may
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
	jetStreamSource := map[string]bool{}
	for _, s := range spec.Sources {
		jetStreamSource[s.Name] = s.Kind == jobspec.KindJetStream
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
		case v.Kind == plan.Source && jetStreamSource[name]:
			problems = append(problems, fmt.Sprintf("%s: a JetStream source's offsets are kept per subtask and cannot be split or merged", changed))
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
