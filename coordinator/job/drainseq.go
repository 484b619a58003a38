package job

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// Draining a job to one stream sequence per source: the subtasks of a
// JetStream source read at their own pace (each has its own consumer, a
// share of the subjects or of the partitions), so that, ended where each
// had read to, they end at different sequences, and no start of a job
// that continues after the drain takes up exactly where they ended: from
// the lowest, what the others read after it is read again; from the
// highest, what the others had not read yet is skipped. holdSources
// brings them to one.

// minDrainHold is the least a held source waits for the drain's EndInput
// before it ends its input where it has read to: the drain's coordinator
// went away between the two, and no EndInput comes.
const minDrainHold = time.Minute

// holdSources holds the source tasks of attempt on workers ws (byWorker:
// their source tasks) whose sources read a JetStream stream
// (control.HoldInput), and returns the sequence each is to end at: for
// every source, the highest sequence any of its subtasks covered. None
// past it was taken in, and every subtask reads on to it. A source some of
// whose subtasks were not held is left out (they end where they have
// read to), and so is every source when a worker could not hold its tasks
// (an older worker, or one that did not answer): the EndInput that
// follows ends the held ones where they have read to as well.
func (j *job) holdSources(ctx context.Context, attempt int, ws []string, byWorker map[string][]string) map[string]uint64 {
	hold := max(minDrainHold, 4*j.m.opts.RequestTimeout)
	held := map[string]uint64{}
	for _, w := range ws {
		c, cancel := context.WithTimeout(ctx, j.m.opts.RequestTimeout)
		h, err := j.m.ctl.HoldInput(c, w, control.HoldInput{Job: j.spec.Name, Attempt: attempt, Tasks: byWorker[w], Millis: hold.Milliseconds()})
		cancel()
		if err != nil {
			j.m.log.Warn("drain: a worker could not hold its sources; each source ends where it has read to, its subtasks at different sequences",
				"job", j.spec.Name, "worker", w, "err", err)
			return nil
		}
		maps.Copy(held, h)
	}
	top := map[string]uint64{}
	whole := map[string]bool{}
	for _, id := range j.plan.SourceTasks() {
		t, _ := j.plan.Task(id)
		seq, ok := held[id]
		if _, seen := whole[t.Vertex]; !seen {
			whole[t.Vertex] = true
		}
		whole[t.Vertex] = whole[t.Vertex] && ok
		top[t.Vertex] = max(top[t.Vertex], seq)
	}
	at := map[string]uint64{}
	for _, id := range j.plan.SourceTasks() {
		if t, _ := j.plan.Task(id); whole[t.Vertex] {
			at[id] = top[t.Vertex]
		}
	}
	return at
}

// restoredEnds says where an attempt of a job being drained, deployed
// before the drain chose where its sources end (a failover or a
// coordinator restart between the drain's start and its hold), ends each
// JetStream source whose tasks all say, in the checkpoint it restores
// (metrics), the highest sequence they covered
// (control.MetricSourceCoveredSeq): at the highest of them, as the hold
// would have — every subtask reads on from its offset to it, none past
// it. A source some of whose tasks do not say (an older worker's), or
// that read nothing, is left out: its tasks end where the checkpoint had
// read to.
func restoredEnds(p *plan.Plan, metrics map[string]map[string]int64) map[string]uint64 {
	top := map[string]uint64{}
	whole := map[string]bool{}
	for _, id := range p.SourceTasks() {
		t, _ := p.Task(id)
		seq, ok := metrics[id][control.MetricSourceCoveredSeq]
		if _, seen := whole[t.Vertex]; !seen {
			whole[t.Vertex] = true
		}
		whole[t.Vertex] = whole[t.Vertex] && ok
		top[t.Vertex] = max(top[t.Vertex], uint64(max(seq, 0)))
	}
	at := map[string]uint64{}
	for _, id := range p.SourceTasks() {
		if t, _ := p.Task(id); whole[t.Vertex] && top[t.Vertex] > 0 {
			at[id] = top[t.Vertex]
		}
	}
	return at
}

// drainAtLog says where a drain ends each source, for the log: "in=1234".
func drainAtLog(p *plan.Plan, at map[string]uint64) string {
	by := map[string]uint64{}
	for id, seq := range at {
		t, _ := p.Task(id)
		by[t.Vertex] = seq
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s=%d", v, by[v]))
	}
	return strings.Join(parts, ",")
}

// moreInput says how a drained job whose sources ended at ends is
// continued: by a new job, from where each JetStream source ended.
func moreInput(ends []control.SourceEnd) string {
	if h := control.ContinueHint(ends); h != "" {
		return "submit a new job for more input: " + h
	}
	return "submit a new job for more input"
}

// chosenEnds says where a drain ends each JetStream source (at: its
// tasks' sequences, from holdSources), for the status of the job while it
// drains.
func chosenEnds(spec *jobspec.Spec, p *plan.Plan, at map[string]uint64) []control.SourceEnd {
	tasks := map[string]map[string]int64{}
	for id, seq := range at {
		tasks[id] = map[string]int64{control.MetricSourceReadSeq: int64(min(seq, math.MaxInt64))}
	}
	return sourceEnds(spec, p, tasks)
}

// sourceEnds reads from a drained job's final savepoint (tasks: its acked
// tasks' metrics) where each JetStream source of spec ended its input
// (control.MetricSourceReadSeq), in the spec's order.
func sourceEnds(spec *jobspec.Spec, p *plan.Plan, tasks map[string]map[string]int64) []control.SourceEnd {
	var out []control.SourceEnd
	for _, s := range spec.Sources {
		if s.Kind != jobspec.KindJetStream {
			continue
		}
		e := control.SourceEnd{Source: s.Name, Stream: s.Stream}
		seqs := map[string]uint64{}
		for _, id := range p.SourceTasks() {
			if t, _ := p.Task(id); t.Vertex != s.Name {
				continue
			}
			v, ok := tasks[id][control.MetricSourceReadSeq]
			if !ok {
				seqs = nil // an older worker's ack: where is not known
				break
			}
			seqs[id] = uint64(max(v, 0))
		}
		if len(seqs) == 0 {
			continue
		}
		e.Seq = slices.Min(slices.Collect(maps.Values(seqs)))
		if slices.Max(slices.Collect(maps.Values(seqs))) != e.Seq {
			e.Tasks = seqs
		}
		out = append(out, e)
	}
	return out
}
