package job

import (
	"fmt"
	"sort"
	"strings"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// lostRecord says why a bad record (control.FailureBadRecord) that task
// refused does not fail the job for good, or "" where it does. A bad
// record is refused before anything of its batch is staged, so no
// checkpoint holds it: a restart meets it again only if a source upstream
// of task replays its input from the checkpoint — a JetStream stream. A
// task fed by core NATS subjects alone (at-most-once) reads on from what
// arrives after the restart: the record is gone, and failing the job for
// good would lose all input until someone stepped in. Such a failure
// follows the restart strategy, and its reason says the record is lost.
func lostRecord(s *jobspec.Spec, p *plan.Plan, task string) string {
	srcs := upstreamSources(p, task)
	if len(srcs) == 0 {
		return "" // not a task of the plan: keep the worker's judgment
	}
	kinds := map[string]string{}
	for _, src := range s.Sources {
		kinds[src.Name] = src.Kind
	}
	for _, v := range srcs {
		if kinds[v] != jobspec.KindNATS {
			return "" // a stream replays it (or a kind not known to replay nothing)
		}
	}
	what := "core NATS source " + srcs[0] + ", which"
	if len(srcs) > 1 {
		what = "core NATS sources " + strings.Join(srcs, ", ") + ", which"
	}
	return fmt.Sprintf("the record is lost: it came from %s cannot replay it, so a restart goes on without it", what)
}

// upstreamSources returns the names of the source vertices whose tasks
// feed task, directly or through other tasks, sorted; none for a task the
// plan does not hold.
func upstreamSources(p *plan.Plan, task string) []string {
	tasks := map[string]plan.Task{}
	for _, t := range p.Tasks {
		tasks[t.ID] = t
	}
	channels := map[string]plan.Channel{}
	for _, c := range p.Channels {
		channels[c.ID] = c
	}
	seen := map[string]bool{}
	found := map[string]bool{}
	var walk func(id string)
	walk = func(id string) {
		t, ok := tasks[id]
		if !ok || seen[id] {
			return
		}
		seen[id] = true
		if t.Kind == plan.Source {
			found[t.Vertex] = true
			return
		}
		for _, port := range t.Inputs {
			for _, ch := range port {
				if c, ok := channels[ch]; ok {
					walk(c.From)
				}
			}
		}
	}
	walk(task)
	out := make([]string, 0, len(found))
	for v := range found {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
