package job

import (
	"fmt"
	"strings"
	"time"

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
// then wait for ever. The one exception is a job bigger than all the
// workers' slots together (tooBigError): nothing that ends makes room
// for it, and it holds up nobody.
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
// line, before the place it would take now), that has not ended and
// that fits in the slots of workers ws together (capacity).
func (m *Manager) ahead(j *job, ws []plan.Worker) (*job, inLine) {
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
	slots, limited := capacity(ws)
	var best *job
	var bestAt inLine
	for k, p := range cands {
		k.mu.Lock()
		ended := k.st.State.Terminal()
		k.mu.Unlock()
		if ended || limited && len(k.plan.Tasks) > slots {
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

// tooBigError is place's error for a job with more tasks than the
// workers that take tasks have slots in all, used or not: no job that
// ends makes room for it.
type tooBigError struct {
	tasks, slots int
	workers      []plan.Worker
}

func (e *tooBigError) Error() string {
	var b strings.Builder
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
