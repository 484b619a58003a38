package host

import (
	"time"

	"github.com/weirhq/weir/transport/stream"
)

// Debloat configures buffer debloating, as Flink's: a task with input
// channels measures how fast it takes input while it works (the bytes of
// the record batches it polls, over the time it spends processing them
// or blocked on its output, so that waiting for input does not count) and
// sizes each input channel's buffer (stream.Resizer) to its share of what
// it takes in Target. Under backpressure an aligned barrier then waits
// behind about Target of data at each task instead of behind full
// buffers, and an unaligned checkpoint stores about that much; a task
// that keeps up is left with the channels' configured sizes, which are
// the most a buffer grows to.
//
// Each buffer starts at the least (MinBytes), a slow start: a new attempt
// (a deploy, a restore) whose input has a backlog does not fill full-size
// buffers before the task measured its pace, so that its first barrier
// does not wait behind them. A task that keeps up measures a high pace in
// its first Period with input and grows its buffers to their configured
// size then; a remote channel must be told to start small too, as it
// grants its sender credit when it opens (remote.Config.StartWindow).
type Debloat struct {
	// Target is how long a task should take to work through what its
	// input channels hold; 0 turns debloating off.
	Target time.Duration
	// MinBytes is the least a channel's buffer shrinks to, and its size
	// at the start; 0 means DefaultDebloatMin. A transport may keep more
	// (a remote channel holds at least remote.Config.MinWindow, and a
	// frame with an older sender).
	MinBytes int
	// Period is how often the task measures and resizes; 0 means
	// DefaultDebloatPeriod.
	Period time.Duration
}

// Defaults of Debloat.
const (
	DefaultDebloatMin    = 16 << 10
	DefaultDebloatPeriod = 200 * time.Millisecond
)

// debloatAlpha weighs a period's throughput in the running average: with
// periods of 200ms the average forgets a change over about a second.
const debloatAlpha = 0.3

// debloatThreshold is the relative change of a channel's size below which
// the task leaves the size as it is (as Flink's threshold-percentages).
const debloatThreshold = 0.25

// debloatGrowth is the most a channel's buffer grows by in one
// measurement, while it shrinks to the size measured at once. A task's
// first measurements may see a pace it cannot keep: the empty buffers
// downstream take its output at first, and a task ahead of a slow one
// measured as fast as its own operator, grew its input to full size in
// one step and let a source fill it with a backlog — the whole of a
// 30 000-record backlog ahead of the first barrier, 28 s of the slow
// operator's work. Doubling, the buffers of a task that keeps up reach
// their full size within a few periods (16 KiB to 1 MiB: six), and one
// behind a slow task measures the backpressure before they are large.
const debloatGrowth = 2

// debloater is a task's buffer debloating state, used by the task's
// goroutine only.
type debloater struct {
	cfg    Debloat
	next   time.Time     // when to measure next
	bytes  int64         // record bytes polled from the input channels so far
	seen   int64         // bytes at the last measurement
	active time.Duration // busy + backpressured at the last measurement
	rate   float64       // running average, bytes per second of active time
	sizes  []int         // per input channel: the size in effect, 0 for one that is not a stream.Resizer
	// start is, until the first measurement, what the buffers held at the
	// start: the task measures once it took that much, not a Period later.
	start int64
}

// debloatStart sizes every input channel to the least, before the task
// takes anything: the slow start.
func (t *Task) debloatStart() {
	d := t.debloat
	var sum int64
	for ch, in := range t.cfg.Inputs {
		if r, ok := in.Receiver.(stream.Resizer); ok {
			d.sizes[ch] = r.SetBuffer(d.cfg.MinBytes)
		}
		sum += int64(d.sizes[ch])
	}
	d.start = max(sum, 1)
	t.debloatSize.Store(sum)
}

// debloatTick measures and resizes once a period has passed since the
// last time; the task calls it from its input loop.
func (t *Task) debloatTick() {
	d := t.debloat
	if d == nil {
		return
	}
	now := time.Now()
	// The first measurement comes as soon as the task took what its
	// starting buffers held: a task that keeps up grows them at once
	// rather than working a Period through buffers of the least size.
	if now.Before(d.next) && (d.start == 0 || d.bytes-d.seen < d.start) {
		return
	}
	early := d.start > 0 && now.Before(d.next) // the slow start's first, before a Period
	d.next = now.Add(d.cfg.Period)
	s := t.Stats()
	active := s.Busy + s.Backpressured
	dt, db := active-d.active, d.bytes-d.seen
	d.active, d.seen = active, d.bytes
	// A period without input says nothing about the pace; one spent
	// mostly waiting for input gives the pace of the little time worked,
	// which is high: a task that keeps up keeps large buffers.
	if dt <= 0 || db <= 0 {
		return
	}
	d.start = 0
	rate := float64(db) / dt.Seconds()
	avg := rate
	switch {
	case early:
		// The task took what its starting buffers held, in a time the
		// empty buffers downstream may have made short: a pace it need
		// not keep once they fill. It grows the buffers (by
		// debloatGrowth) but stays out of the average, which would take
		// seconds to forget it.
	case d.rate == 0:
		d.rate = rate
	default:
		d.rate += debloatAlpha * (rate - d.rate)
		avg = d.rate
	}
	live := 0
	for ch := range t.cfg.Inputs {
		if !t.drained[ch] {
			live++
		}
	}
	if live == 0 {
		return
	}
	want := max(int(avg*d.cfg.Target.Seconds())/live, d.cfg.MinBytes)
	// A buffer grows only while the latest period's pace asks for more
	// too: the average of a task that has just met backpressure still
	// remembers its pace before.
	latest := max(int(rate*d.cfg.Target.Seconds())/live, d.cfg.MinBytes)
	var sum int64
	for ch, in := range t.cfg.Inputs {
		r, ok := in.Receiver.(stream.Resizer)
		if !ok || t.drained[ch] {
			sum += int64(d.sizes[ch])
			continue
		}
		cur, size := d.sizes[ch], want
		if cur > 0 && size > cur {
			size = max(min(want, latest, debloatGrowth*cur), cur)
		}
		if float64(abs(size-cur)) > debloatThreshold*float64(cur) {
			d.sizes[ch] = r.SetBuffer(size)
		}
		sum += int64(d.sizes[ch])
	}
	t.debloatSize.Store(sum)
}

// debloatCount counts the bytes of a delivery polled from an input channel.
func (t *Task) debloatCount(d stream.Delivery) {
	if t.debloat != nil && d.Kind == stream.KindRecords {
		t.debloat.bytes += int64(len(d.Batch))
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
