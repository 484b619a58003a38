package job

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// checkEnded refuses to start spec (planned as p) from checkpoint md when
// an input port that had ended in the checkpoint could receive records:
// the task's operator handled that port's end already (EndOfInput: its
// final windows, totals and the like are out, committed with the
// checkpoint), so records after it could not be processed — the task
// would fail at the first one (host.ErrPortEnded) — and a finished job
// restored with more input is refused here instead, before it is created,
// after Flink's VertexFinishedStateChecker. It complements checkRestore and
// is called where it is.
//
// A task's ended ports are the checkpoint's metric ended_ports
// (control.MetricEndedPorts) of the checkpointed task or tasks it restores
// from (restoreFor). The rule: an ended port of a task of vertex V is safe
// only if every task of the vertex U that feeds that port in the spec's
// plan (on a forward edge the subtask of U of the task's index alone, so a
// subtask of U that had not finished yet but feeds other tasks of V does
// not count) has finished in the checkpoint and stays finished under the
// spec:
//
//   - a source U whose input a drain ended (control.MetricSourceDrained:
//     weir job stop -drain) never is, whatever the spec says of it now: it
//     would read on from where it was drained. The refusal then says first
//     that the job was drained;
//   - a source U is a JetStream source bounded in the spec (a stop), and
//     every checkpointed task U's tasks restore from was bounded then too
//     (control.MetricStopSequence) at a stop no earlier than the spec's
//     resolved one (StopSequence): a restored source whose offset is at
//     or past its stop ends at once, reading nothing. A core NATS source,
//     a source without a stop, one whose stop resolves later (a later
//     stop:, or stop: end resolved anew after the stream grew), one that
//     was unbounded in the checkpoint, and one with the same stop whose
//     offset in the checkpoint did not reach it (control.MetricSourceEnded
//     0: a subtask still reading, which a changed edge now sends to the
//     ended port) are refused;
//   - an operator U's task has every input port of the spec ended in
//     every checkpointed task it restores from: it emitted its
//     end-of-input output before the checkpoint and will take only the
//     end of its input again. Its own ended ports are checked the same
//     way, so the rule holds transitively, up to the sources;
//   - U is not new: a vertex the checkpoint does not hold, or a feeding
//     task of U that restores nothing (a stateless operator that grew), starts from
//     nothing and would read, or at least emit its end-of-input output,
//     after the port's end.
//
// A restore that merges several old subtasks into one task (a rescale of
// keyed state, a JetStream source or a shrinking sink) is refused when
// they disagree about a port's end, as the host would refuse it
// (host.ErrCannotRescale): ending the port again would repeat the output
// of the ones that ended it, not ending it would lose the others'.
//
// Restoring a finished job with the spec it ran (its stops kept, see
// keepResolved) passes: it finishes again at once and publishes nothing.
// A checkpoint without ended_ports (written before it was recorded, or
// under at-least-once) counts as one in which no port ended. What the
// metrics cannot tell — a source that had not reached its stop in a
// checkpoint written before source_ended was recorded, or restored with
// an earlier stop than it had — is still caught at the first record
// (host.ErrPortEnded).
//
// resolvedNow holds the sources whose stop was resolved for this restore
// (stopsResolvedNow), which a refusal says: a stop: end that resolved past
// the checkpoint's because the stream grew since.
func checkEnded(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata, resolvedNow map[string]bool) error {
	c := newEndedCheck(spec, p, md)
	c.resolvedNow = resolvedNow
	var problems []string
	portProblems := false
	for _, v := range p.Vertices {
		if len(v.Inputs) == 0 {
			continue
		}
		for _, task := range v.Tasks {
			if why := c.disagree(v, task, c.from[task]); why != "" {
				problems = append(problems, why)
				break // one task of v names it
			}
		}
		for port, in := range v.Inputs {
			for _, task := range v.Tasks {
				ids := c.from[task]
				if !c.ended(ids, port) {
					continue
				}
				if why := c.unfinishedFeeders(task, port, in.From); why != "" {
					where := "" // the checkpointed tasks it restores from, when not its own
					if len(ids) > 1 || ids[0] != task {
						where = " (in " + strings.Join(ids, ", ") + ")"
					}
					problems = append(problems, fmt.Sprintf("task %s's input port %d ended in the checkpoint%s, but %s", task, port, where, why))
					portProblems = true
					break // one task of v names the port
				}
			}
		}
	}
	if len(problems) > 0 {
		if portProblems && c.drained() {
			return control.Errorf(control.ErrInvalid, "restore %s from checkpoint %d: job %s was drained with it (weir job stop -drain): its input ended there, and its operators' end-of-input output is out, committed with it; %s (%s)",
				spec.Name, md.ID, md.Job, moreInput(sourceEnds(spec, p, md.Metrics)), strings.Join(problems, "; "))
		}
		why := ""
		if portProblems {
			why = " (records after the end of a port cannot be processed: its operator's end-of-input output is out already; submit a new job for them)"
		}
		return control.Errorf(control.ErrInvalid, "restore %s from checkpoint %d: %s%s", spec.Name, md.ID, strings.Join(problems, "; "), why)
	}
	return nil
}

// endedCheck is what checkEnded works from.
type endedCheck struct {
	spec     *jobspec.Spec
	md       *checkpoint.Metadata
	vertices map[string]plan.Vertex
	// from maps each task of the plan to the checkpointed tasks it
	// restores from (none: it starts empty), in subtask order.
	from map[string][]string
	// held holds the vertices the checkpoint has tasks of.
	held map[string]bool
	// feeders maps each task and input port of the plan to the tasks
	// that send to it (a forward edge: the upstream subtask of the same
	// index only).
	feeders map[string]map[int][]string
	// why memoizes unfinished, by upstream task.
	why map[string]*string
	// resolvedNow holds the sources whose stop was resolved for the
	// restore (checkEnded).
	resolvedNow map[string]bool
}

func newEndedCheck(spec *jobspec.Spec, p *plan.Plan, md *checkpoint.Metadata) *endedCheck {
	c := &endedCheck{spec: spec, md: md, vertices: map[string]plan.Vertex{}, from: map[string][]string{}, why: map[string]*string{}}
	r := restoreFor(spec, p, md)
	byHandle := make(map[string]string, len(md.Handles))
	c.held = map[string]bool{}
	for id, h := range md.Handles {
		byHandle[h] = id
		if vertex, _, ok := splitTaskID(id); ok {
			c.held[vertex] = true
		}
	}
	c.feeders = map[string]map[int][]string{}
	for _, ch := range p.Channels {
		if c.feeders[ch.To] == nil {
			c.feeders[ch.To] = map[int][]string{}
		}
		c.feeders[ch.To][ch.InPort] = append(c.feeders[ch.To][ch.InPort], ch.From)
	}
	for _, v := range p.Vertices {
		c.vertices[v.Name] = v
		for _, task := range v.Tasks {
			if hs, ok := r.Merged[task]; ok {
				for _, h := range hs {
					c.from[task] = append(c.from[task], byHandle[h])
				}
			} else if h, ok := r.Handles[task]; ok {
				c.from[task] = []string{byHandle[h]}
			}
		}
	}
	return c
}

// drained reports whether a source task of the checkpoint had its input
// ended by a drain (control.MetricSourceDrained: weir job stop -drain).
func (c *endedCheck) drained() bool {
	for _, m := range c.md.Metrics {
		if m[control.MetricSourceDrained] == 1 {
			return true
		}
	}
	return false
}

// mask is checkpointed task id's ended_ports (0 when not recorded).
func (c *endedCheck) mask(id string) int64 {
	return c.md.Metrics[id][control.MetricEndedPorts]
}

// ended reports whether port ended in every one of the checkpointed tasks
// ids (a merged restore keeps a port ended only then).
func (c *endedCheck) ended(ids []string, port int) bool {
	for _, id := range ids {
		if !control.PortEnded(c.mask(id), port) {
			return false
		}
	}
	return len(ids) > 0
}

// disagree says why task of v cannot merge the checkpointed tasks ids,
// when some of them ended an input port the others had not, or "".
func (c *endedCheck) disagree(v plan.Vertex, task string, ids []string) string {
	if len(ids) < 2 {
		return ""
	}
	for _, id := range ids[1:] {
		a, b := c.mask(ids[0]), c.mask(id)
		if a == b {
			continue
		}
		for port := range 64 {
			ea, eb := control.PortEnded(a, port), control.PortEnded(b, port)
			if ea == eb {
				continue
			}
			yes, no := ids[0], id
			if eb {
				yes, no = id, ids[0]
			}
			return fmt.Sprintf("task %s would merge the state of %s, and its input port %d ended in %s and not in %s (the end-of-input output of the one is out, the other's is not): restore %s with its parallelism in the checkpoint and let the job finish",
				task, strings.Join(ids, ", "), port, yes, no, v.Name)
		}
	}
	return ""
}

// unfinishedFeeders says why a task of vertex from that feeds input port
// port of task (in the plan: on a forward edge, the upstream subtask of
// the same index only; otherwise every subtask of from) has not finished in
// the checkpoint or would not stay finished under the spec, or "" when
// none would give the port more records. Only the plan's channels count:
// an upstream subtask that does not send to the task cannot reach its
// ended port, whatever it still reads.
func (c *endedCheck) unfinishedFeeders(task string, port int, from string) string {
	for _, up := range c.feeders[task][port] {
		if why := c.unfinished(from, up); why != "" {
			return why
		}
	}
	return ""
}

// unfinished says why task up of vertex name (an input of an ended port)
// has not finished in the checkpoint or would not stay finished under the
// spec — "source in would give it more records: …" — or "" when it has
// and would.
func (c *endedCheck) unfinished(name, up string) string {
	if w, ok := c.why[up]; ok {
		return *w
	}
	w := c.whyUnfinished(name, up)
	c.why[up] = &w
	return w
}

func (c *endedCheck) whyUnfinished(name, task string) string {
	v := c.vertices[name]
	what := fmt.Sprintf("%s %s would give it more records", v.Kind, name)
	var src *jobspec.Source
	if v.Kind == plan.Source {
		for _, id := range c.from[task] {
			if c.md.Metrics[id][control.MetricSourceDrained] == 1 {
				// Whatever the spec says of it now: its input ended by
				// a drain, not at a stop, so it would read on.
				return what + fmt.Sprintf(": it was drained: task %s's input ended where it had read to, and it would read on from there", id)
			}
		}
		i := slices.IndexFunc(c.spec.Sources, func(s jobspec.Source) bool { return s.Name == name })
		if i < 0 {
			return what + ": it is not in the spec's sources"
		}
		src = &c.spec.Sources[i]
		switch {
		case src.Kind != jobspec.KindJetStream:
			return what + ": it is a core NATS source, which is never bounded"
		case src.StopSequence == 0:
			return what + ": it is unbounded in the spec (no stop)"
		}
	}
	if !c.held[name] {
		return what + fmt.Sprintf(": it is new in the spec (the checkpoint holds no task of it), so it would %s", startsOver(v.Kind))
	}
	ids := c.from[task]
	if len(ids) == 0 {
		return what + fmt.Sprintf(": its task %s is new (its parallelism grew to %d) and restores no state, so it would %s", task, v.Parallelism, startsOver(v.Kind))
	}
	for _, id := range ids {
		if src != nil {
			stop, bounded := c.md.Metrics[id][control.MetricStopSequence]
			switch {
			case !bounded || stop <= 0:
				return what + fmt.Sprintf(": it was unbounded when the checkpoint was taken (task %s records no stop), so it had not ended there", id)
			case uint64(stop) < src.StopSequence:
				resolved := ""
				if c.resolvedNow[src.Name] {
					resolved = ", as resolved for this restore"
				}
				return what + fmt.Sprintf(": it stops at sequence %d in the spec (stop: %s%s), after sequence %d, where it stopped in the checkpoint (task %s)",
					src.StopSequence, cmp.Or(src.Stop, fmt.Sprint(src.StopSequence)), resolved, stop, id)
			case uint64(stop) == src.StopSequence && c.md.Metrics[id][control.MetricSourceEnded] == 0 && hasMetric(c.md.Metrics[id], control.MetricSourceEnded):
				return what + fmt.Sprintf(": its task %s had not read up to its stop (sequence %d) in the checkpoint, and the rest of its input would follow", id, stop)
			}
			continue
		}
		for port, in := range v.Inputs {
			if !control.PortEnded(c.mask(id), port) {
				return what + fmt.Sprintf(": it had not finished in the checkpoint (task %s's input port %d, from %s, had not ended), and what it emits for the rest of its input would follow", id, port, in.From)
			}
		}
	}
	return ""
}

// hasMetric reports whether metrics has name.
func hasMetric(metrics map[string]int64, name string) bool {
	_, ok := metrics[name]
	return ok
}

// startsOver says what a task of a vertex of kind k that restores nothing
// does.
func startsOver(k plan.Kind) string {
	if k == plan.Source {
		return "read from its start"
	}
	return "end its input again and may emit its end-of-input output"
}
