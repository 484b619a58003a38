package host

import (
	"sort"
	"time"

	"github.com/weirhq/weir/transport/stream"
)

// blockedGap is the least time between two points of a blockedLog but the
// last: how finely it tells when the task was blocked.
const blockedGap = 10 * time.Millisecond

// blockedMaxPoints bounds a blockedLog: past it, every other point goes
// (the log tells the time more coarsely until a checkpoint prunes it).
const blockedMaxPoints = 4096

// blockedLog records how long a task was blocked sending its output
// (backpressured by the task it sends to), for each checkpoint's
// MetricOutputBlockedNanos: the part of the barrier's start delay the
// task spent so rather than processing input. Its points are (time,
// blocked time up to then), from the task's clock; between two points the
// blocked time grows evenly, exactly so within one blocked send. It also
// keeps each output channel's blocked time since the task's last
// snapshot, to name the channel it was blocked on longest. Only the
// task's goroutine uses it.
type blockedLog struct {
	at    []time.Time
	cum   []time.Duration
	total time.Duration
	// perOut is each output channel's blocked time since the last
	// snapshot (take).
	perOut []time.Duration
}

// mark records that up to now the task was blocked for l.total.
func (l *blockedLog) mark(now time.Time) {
	n := len(l.at)
	if n >= 2 && now.Sub(l.at[n-2]) < blockedGap {
		l.at[n-1], l.cum[n-1] = now, l.total
		return
	}
	if n >= blockedMaxPoints {
		j := 0
		for i := 0; i < n; i += 2 {
			l.at[j], l.cum[j] = l.at[i], l.cum[i]
			j++
		}
		l.at, l.cum = l.at[:j], l.cum[:j]
	}
	l.at, l.cum = append(l.at, now), append(l.cum, l.total)
}

// blocked records a send on output channel ch, blocked from start to end.
func (l *blockedLog) blocked(ch int, start, end time.Time) {
	l.mark(start)
	if d := end.Sub(start); d > 0 {
		l.total += d
		for len(l.perOut) <= ch {
			l.perOut = append(l.perOut, 0)
		}
		l.perOut[ch] += d
	}
	l.mark(end)
}

// upTo returns the blocked time up to t.
func (l *blockedLog) upTo(t time.Time) time.Duration {
	n := len(l.at)
	i := sort.Search(n, func(i int) bool { return l.at[i].After(t) })
	switch {
	case n == 0:
		return l.total
	case i == 0:
		return l.cum[0]
	case i == n:
		return l.total
	}
	lo, hi := l.at[i-1], l.at[i]
	d := l.cum[i] - l.cum[i-1]
	return l.cum[i-1] + time.Duration(float64(d)*float64(t.Sub(lo))/float64(hi.Sub(lo)))
}

// take returns how long the task was blocked from from to to and the
// output channel it was blocked on longest since the last take (-1: none),
// and drops what later checkpoints, triggered after from, need not know.
func (l *blockedLog) take(from, to time.Time) (time.Duration, int) {
	d := max(l.upTo(to)-l.upTo(from), 0)
	// Keep the last point before from: upTo interpolates from it.
	i := sort.Search(len(l.at), func(i int) bool { return l.at[i].After(from) })
	if i > 1 {
		l.at, l.cum = append(l.at[:0], l.at[i-1:]...), append(l.cum[:0], l.cum[i-1:]...)
	}
	ch := -1
	var most time.Duration
	for c, b := range l.perOut {
		if b > most {
			ch, most = c, b
		}
		l.perOut[c] = 0
	}
	return d, ch
}

// outputBlocked sets m's OutputBlocked, from the trigger of barrier b's
// checkpoint to its first barrier at the task (m.StartDelay after), and the
// output channel the task was blocked on longest.
func (t *Task) outputBlocked(m *CheckpointMetrics, b stream.Barrier) {
	if b.Timestamp <= 0 {
		return
	}
	from := time.UnixMilli(b.Timestamp)
	d, ch := t.blockedOut.take(from, from.Add(m.StartDelay))
	if d <= 0 || ch < 0 || ch >= len(t.outs) {
		return
	}
	p := t.outs[ch].port
	m.OutputBlocked, m.BlockedPort, m.BlockedChannel = d, p, ch-t.portBase[p]
}
