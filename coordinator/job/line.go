package job

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// The line of jobs waiting to be placed.
//
// A job that does not fit when it is placed (no live worker, too few free
// slots) joins the line; it leaves once placed, or when its goroutine
// ends (canceled, failed). The line's order: first the jobs that ran
// before — failing over, restarting, resumed by a restarted coordinator,
// placed again after a worker left —, then those never placed in their
// run; within each, the one that began waiting first. Nobody overtakes:
// a job is placed only while no job ahead of it is in line, even where
// it would fit in the free slots the one ahead cannot use — so that the
// slots that come free go to the job ahead, and smaller jobs that come
// later do not take them, one after the other, from a big one that would
// then wait for ever. The one exception is a job that does not fit on the
// workers that take it even with nothing else on them — more tasks than
// their slots together, or operator memory their memory budgets do not
// hold (tooBigError), or no live worker whose caps take it: nothing that
// ends makes room for it, and it holds up nobody. The room a job ahead
// needs is counted as placement counts it: slots and memory (weir worker
// -slots, -memory), on the workers whose caps take it.
//
// A job keeps its place while its wait runs out and its restart delay
// runs: its wait goes on. Its place is by when it joined: a failover
// joins anew, ahead of every job never placed.

// inLine is a job's place in the line.
type inLine struct {
	// ran: the job was placed before (in this run, or by the coordinator
	// before a restart).
	ran bool
	// since is when it began to wait, seq the order it joined in.
	since time.Time
	seq   uint64
}

// before reports whether a is ahead of b in the line.
func (a inLine) before(b inLine) bool {
	if a.ran != b.ran {
		return a.ran
	}
	return a.seq < b.seq
}

// joinLine puts j at the end of its part of the line, unless it is in
// line already.
func (m *Manager) joinLine(j *job) {
	ran := j.ranBefore()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.line[j]; ok {
		return
	}
	if m.line == nil {
		m.line = map[*job]inLine{}
	}
	m.lineSeq++
	m.line[j] = inLine{ran: ran, since: time.Now(), seq: m.lineSeq}
}

// leaveLine takes j out of the line; the jobs behind it may be placed
// now, so it wakes them (wake; place does itself).
func (m *Manager) leaveLine(j *job, wake bool) {
	m.mu.Lock()
	_, ok := m.line[j]
	delete(m.line, j)
	m.mu.Unlock()
	if ok && wake {
		m.roomMade()
	}
}

// ahead returns the job ahead of j in the line that holds it up, and
// its place, or nil: a job in line before j's place (or, for j not in
// line, before the place it would take now), that has not ended and that
// fits on the live workers (live) that take it with nothing else on them
// (emptyFor, tooBig), slots and memory.
func (m *Manager) ahead(j *job, live []control.Heartbeat) (*job, inLine) {
	ran := j.ranBefore()
	m.mu.Lock()
	mine, in := m.line[j]
	if !in {
		mine = inLine{ran: ran, since: time.Now(), seq: m.lineSeq + 1}
	}
	cands := make(map[*job]inLine, len(m.line))
	for k, p := range m.line {
		if k != j && p.before(mine) {
			cands[k] = p
		}
	}
	m.mu.Unlock()
	var best *job
	var bestAt inLine
	for k, p := range cands {
		k.mu.Lock()
		ended := k.st.State.Terminal()
		k.mu.Unlock()
		if ended {
			continue
		}
		if ws := m.emptyFor(k.spec, live); len(ws) == 0 || tooBig(k, ws) != nil {
			continue
		}
		if best == nil || p.before(bestAt) {
			best, bestAt = k, p
		}
	}
	return best, bestAt
}

// capacity returns the slots of workers ws together, used or not, and
// false when one of them has no limit.
func capacity(ws []plan.Worker) (int, bool) {
	n := 0
	for _, w := range ws {
		if w.Slots <= 0 {
			return 0, false
		}
		n += w.Slots
	}
	return n, true
}

// emptyFor returns the live workers (live) that spec's tasks may be
// placed on — taking tasks, not cordoned, their caps taking spec
// (control.Caps.Refuse) — each as if nothing were placed on it: its slots
// and memory budget, none used.
func (m *Manager) emptyFor(spec *jobspec.Spec, live []control.Heartbeat) []plan.Worker {
	var ws []plan.Worker
	for _, hb := range live {
		w := hb.Worker
		if m.unusable(w) != "" || m.cordoned(w.ID) || w.Caps.Refuse(w.ID, spec) != nil {
			continue
		}
		ws = append(ws, plan.Worker{ID: w.ID, Slots: w.Slots, Memory: w.Caps.Memory})
	}
	return ws
}

// tooBig returns why j does not fit on workers ws even with nothing else
// on them (their Used and MemoryUsed taken for 0), placed as placement
// places it (plan.AssignMemory: slots, and the operators' memory against
// the workers' budgets): no job that ends makes room for it. It returns
// nil when j fits, or when ws is empty (no worker to judge by).
func tooBig(j *job, ws []plan.Worker) *tooBigError {
	if len(ws) == 0 {
		return nil
	}
	empty := make([]plan.Worker, len(ws))
	for i, w := range ws {
		empty[i] = plan.Worker{ID: w.ID, Slots: w.Slots, Memory: w.Memory}
	}
	_, err := plan.AssignMemory(j.plan, empty, control.TaskMemory(j.spec))
	var short *plan.CapacityError
	if !errors.As(err, &short) {
		return nil
	}
	slots, _ := capacity(empty)
	return &tooBigError{tasks: short.Tasks, slots: slots, memory: short.Memory, workers: short.Workers}
}

// queuedError is place's error for a job that waits in line behind
// another: job, which waits for room too, and gets the slots that come
// free first.
type queuedError struct {
	job string
	// ran: job ran before, j did not (the line's first rule).
	ran   bool
	since time.Time
}

func (e *queuedError) Error() string {
	if e.ran {
		return fmt.Sprintf("job %s is ahead in line: it ran before (a job failing over is placed before one never placed), and the slots that come free go to it first", e.job)
	}
	return fmt.Sprintf("job %s is ahead in line: it has waited since %s, and the slots that come free go to it first", e.job, e.since.UTC().Format(time.TimeOnly))
}

// tooBigError is place's error for a job that does not fit on the
// workers that take it even with nothing else on them: more tasks than
// they have slots in all, used or not; or, when memory is set, operator
// memory (limits.memory) their memory budgets do not hold, empty — in
// all, or task by task (a task goes whole to one worker). No job that
// ends makes room for it.
type tooBigError struct {
	tasks, slots int
	// memory is the operator memory the job's tasks need, when that is
	// what does not fit.
	memory  int64
	workers []plan.Worker
}

// reason is the job's waiting reason for e: ReasonTooBigMemory or
// ReasonTooBig, and e.
func (e *tooBigError) reason() string {
	if e.memory > 0 {
		return ReasonTooBigMemory + e.Error()
	}
	return ReasonTooBig + e.Error()
}

func (e *tooBigError) Error() string {
	var b strings.Builder
	if e.memory > 0 {
		// "needs 3GiB of operator memory (limits.memory), which the live
		// workers' memory budgets do not hold with nothing else on them
		// (w1 1GiB, w2 1GiB: 2GiB in all): …"
		var all int64
		fmt.Fprintf(&b, "needs %s of operator memory (limits.memory), which the live workers' memory budgets do not hold with nothing else on them (", jobspec.FormatSize(e.memory))
		for i, w := range e.workers {
			all += w.Memory
			switch {
			case i == 10:
				fmt.Fprintf(&b, ", and %d more", len(e.workers)-10)
			case i > 10:
			case w.Memory <= 0:
				fmt.Fprintf(&b, "%s%s no budget, %s", sep(i), w.ID, plural(w.Slots, "slot"))
			default:
				fmt.Fprintf(&b, "%s%s %s", sep(i), w.ID, jobspec.FormatSize(w.Memory))
			}
		}
		fmt.Fprintf(&b, ": %s in all): lower the operators' limits.memory or their parallelism, or add workers or memory (weir worker -memory)", jobspec.FormatSize(all))
		return b.String()
	}
	fmt.Fprintf(&b, "needs %s, and the live workers have %s in all (", plural(e.tasks, "task"), plural(e.slots, "slot"))
	for i, w := range e.workers {
		if i == 10 {
			fmt.Fprintf(&b, ", and %d more", len(e.workers)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", w.ID, w.Slots)
	}
	b.WriteString("): lower the job's parallelism, or add workers or slots (weir worker -slots)")
	return b.String()
}

// sep is the separator before the i-th item of a list: none, then ", ".
func sep(i int) string {
	if i == 0 {
		return ""
	}
	return ", "
}
