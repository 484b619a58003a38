package remote

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/transport/stream"
)

// Receiver is the consuming end of a remote channel. It implements
// stream.Receiver.
type Receiver struct {
	cfg       Config
	nc        *nats.Conn
	control   string
	sub       *nats.Subscription
	stopWatch func()

	mu          sync.Mutex
	q           []entry
	qhead       int
	queuedBytes int // credited bytes received but not polled
	maxQueued   int
	records     int    // records in the entries queued (QueuedRecords)
	expect      uint64 // next frame sequence
	consumed    uint64 // credited bytes polled
	announced   uint64 // highest cumulative grant published
	window      int    // the window in effect (SetBuffer); cfg.Window at most
	cuts        bool   // the sender said it cuts frames to its credit
	old         bool   // the sender probed without saying so: one frame at least
	need        int    // the least window a record the sender waits on needs
	err         error
	closed      bool
	notify      func()
}

type entry struct {
	d        stream.Delivery
	priority bool
	credit   int // bytes of credit returned when this entry is polled
}

var (
	_ stream.Receiver           = (*Receiver)(nil)
	_ stream.PriorityPoller     = (*Receiver)(nil)
	_ stream.BarrierPrioritizer = (*Receiver)(nil)
	_ stream.QueueReporter      = (*Receiver)(nil)
	_ stream.Resizer            = (*Receiver)(nil)
)

// NewReceiver opens the consuming end of the channel cfg.Subject on nc and
// grants the sender its initial window (Config.StartWindow).
//
// Until it hears from the sender, the receiver takes it for one that cuts
// frames to its credit, and may grant less than a frame: an older sender
// that waits for a whole frame's credit probes while it waits, and its
// probe, without the header that a newer one sets, raises the window to a
// frame at once.
func NewReceiver(nc *nats.Conn, cfg Config) (*Receiver, error) {
	cfg, err := cfg.withDefaults(nc)
	if err != nil {
		return nil, err
	}
	r := &Receiver{cfg: cfg, nc: nc, control: cfg.controlSubject(), expect: 1}
	r.window = r.clampLocked(cfg.StartWindow)
	r.sub, err = nc.Subscribe(cfg.dataSubject(), r.onFrame)
	if err != nil {
		return nil, fmt.Errorf("remote channel %s: subscribe: %w", cfg.Channel, err)
	}
	// Credit bounds what can be pending; the library limits only add a
	// way to drop, which the sequence check would report anyway.
	if err := r.sub.SetPendingLimits(-1, -1); err != nil {
		_ = r.sub.Unsubscribe()
		return nil, fmt.Errorf("remote channel %s: pending limits: %w", cfg.Channel, err)
	}
	if err := nc.Flush(); err != nil {
		_ = r.sub.Unsubscribe()
		return nil, fmt.Errorf("remote channel %s: flush subscription: %w", cfg.Channel, err)
	}
	r.stopWatch = watchConn(nc, r.fail)
	r.mu.Lock()
	r.announceLocked()
	r.mu.Unlock()
	return r, nil
}

func (r *Receiver) fail(err error) {
	r.mu.Lock()
	if r.err == nil && !r.closed {
		r.err = chanErr(r.cfg, err)
	}
	fn := r.notify
	r.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// clampLocked returns n within the least window the sender allows and
// Config.Window.
func (r *Receiver) clampLocked(n int) int {
	least := r.cfg.MinWindow
	if r.old {
		least = r.cfg.MaxFrameBytes
	}
	return min(max(n, least, r.need), r.cfg.Window)
}

// onProbeLocked learns from a probe's headers whether the sender cuts
// frames to its credit, and how much a record it waits on needs, and
// keeps the window at least what that allows.
func (r *Receiver) onProbeLocked(h nats.Header) {
	if h.Get(headerCuts) != "" {
		r.cuts = true
	} else if !r.cuts {
		r.old = true
	}
	if n, err := strconv.Atoi(h.Get(headerNeed)); err == nil && 2*n > r.window {
		// Twice what it needs, as a frame is at most half the window:
		// the grant then returns before the queue runs dry.
		r.need = min(2*n, r.cfg.Window)
	}
	r.window = r.clampLocked(r.window)
}

// announceLocked publishes the grant: the window in effect beyond what
// the task polled, or the highest grant published if the window shrank
// below it since (a grant is never taken back; the sender keeps the
// highest it heard). Its header says the window in effect, to which a
// sender sizes its frames.
func (r *Receiver) announceLocked() {
	g := max(uint64(r.window)+r.consumed, r.announced)
	m := &nats.Msg{Subject: r.control, Data: binary.LittleEndian.AppendUint64(make([]byte, 0, 8), g),
		Header: nats.Header{headerWindow: []string{strconv.Itoa(r.window)}}}
	if err := r.nc.PublishMsg(m); err != nil {
		if r.err == nil {
			r.err = chanErr(r.cfg, fmt.Errorf("publish credit: %w", err))
		}
		return
	}
	r.announced = g
}

func (r *Receiver) onFrame(m *nats.Msg) {
	f, err := DecodeFrame(m.Data)
	if err != nil {
		r.fail(err)
		return
	}
	r.mu.Lock()
	if r.err != nil || r.closed {
		r.mu.Unlock()
		return
	}
	if f.Flags&FlagProbe != 0 {
		r.onProbeLocked(m.Header)
		r.announceLocked()
		r.mu.Unlock()
		return
	}
	if f.Seq != r.expect {
		r.err = chanErr(r.cfg, fmt.Errorf("%w: got frame %d, want %d", ErrSequenceGap, f.Seq, r.expect))
	} else {
		r.expect++
		if f.Flags&FlagPriority != 0 {
			r.pushPriorityLocked(f.Elements[0])
		} else {
			for i, e := range f.Elements {
				en := entry{d: stream.Delivery{Element: e}}
				if i == len(f.Elements)-1 {
					en.credit = len(m.Data)
				}
				r.q = append(r.q, en)
				r.records += e.Count()
			}
			r.queuedBytes += len(m.Data)
			if r.queuedBytes > r.maxQueued {
				r.maxQueued = r.queuedBytes
			}
		}
	}
	fn := r.notify
	r.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// pushPriorityLocked queues e ahead of every ordinary element queued, after
// the priority elements already at the head (they keep their order), with
// the ordinary elements it jumped as its Overtaken.
func (r *Receiver) pushPriorityLocked(e stream.Element) {
	at := r.qhead
	for at < len(r.q) && r.q[at].priority {
		at++
	}
	var overtaken []stream.Element
	if queued := r.q[at:]; len(queued) > 0 {
		overtaken = make([]stream.Element, len(queued))
		for i, en := range queued {
			overtaken[i] = en.d.Element
		}
	}
	en := entry{d: stream.Delivery{Element: e, Overtaken: overtaken}, priority: true}
	if at == r.qhead && r.qhead > 0 {
		r.qhead--
		r.q[r.qhead] = en
		return
	}
	r.q = append(r.q, entry{})
	copy(r.q[at+1:], r.q[at:])
	r.q[at] = en
}

// QueuedRecords returns how many records have arrived that the receiver
// has not taken: what its task has still to process of this input, but
// for frames on their way (stream.QueueReporter).
func (r *Receiver) QueuedRecords() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records
}

// Poll returns the next element without blocking. Taking an element returns
// its credit to the sender.
func (r *Receiver) Poll() (stream.Delivery, bool, error) {
	return r.poll(false)
}

// PollPriority returns the next element only if it is a priority
// (unaligned) barrier that overtook the queue.
func (r *Receiver) PollPriority() (stream.Delivery, bool, error) {
	return r.poll(true)
}

func (r *Receiver) poll(priorityOnly bool) (stream.Delivery, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return stream.Delivery{}, false, r.err
	}
	if r.closed {
		return stream.Delivery{}, false, stream.ErrClosed
	}
	if r.qhead == len(r.q) || priorityOnly && !r.q[r.qhead].priority {
		return stream.Delivery{}, false, nil
	}
	en := r.q[r.qhead]
	r.q[r.qhead] = entry{}
	r.qhead++
	r.records -= en.d.Count()
	if r.qhead == len(r.q) {
		r.q, r.qhead = r.q[:0], 0
	} else if r.qhead > 64 && r.qhead*2 > len(r.q) {
		// A task that is always behind never empties its queue: drop the
		// polled prefix so memory stays bounded by the window.
		n := copy(r.q, r.q[r.qhead:])
		clear(r.q[n:])
		r.q, r.qhead = r.q[:n], 0
	}
	if en.credit > 0 {
		r.consumed += uint64(en.credit)
		r.queuedBytes -= en.credit
		if g := uint64(r.window) + r.consumed; g > r.announced && g-r.announced >= uint64(r.window/4) {
			r.announceLocked()
		}
	}
	return en.d, true, nil
}

// SetBuffer sets the credit window in effect to n bytes, at most
// Config.Window (stream.Resizer), and returns it. It keeps at least
// Config.MinWindow, and twice the largest record the sender waited on; with
// an older sender, which waits for a whole frame's credit, at least the
// channel's largest frame. A larger window is granted at once; a smaller
// one as the task polls: the receiver grants nothing more until what it
// holds and what is in flight fall under it.
func (r *Receiver) SetBuffer(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n = r.clampLocked(n)
	grow := n > r.window
	r.window = n
	if grow && r.err == nil && !r.closed {
		if g := uint64(r.window) + r.consumed; g > r.announced && g-r.announced >= uint64(r.window/4) {
			r.announceLocked()
		}
	}
	return n
}

// QueuedBarrier returns the first ordinary barrier queued and not yet
// polled, if any.
func (r *Receiver) QueuedBarrier() (stream.Barrier, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, en := range r.q[r.qhead:] {
		if en.d.Kind == stream.KindBarrier && !en.priority {
			return en.d.Barrier, true
		}
	}
	return stream.Barrier{}, false
}

// PrioritizeBarrier moves the queued barrier of checkpoint id ahead of the
// elements queued before it: the next Poll returns it, marked Unaligned,
// with those elements as Delivery.Overtaken (still delivered after it).
// found is false when no such barrier is queued.
func (r *Receiver) PrioritizeBarrier(id int64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return false, r.err
	}
	// Priority elements already at the head keep their place (and order):
	// the barrier jumps the ordinary elements only.
	at := r.qhead
	for at < len(r.q) && r.q[at].priority {
		at++
	}
	k := -1
	for i := at; i < len(r.q); i++ {
		if en := r.q[i]; en.d.Kind == stream.KindBarrier && en.d.Barrier.ID == id {
			k = i
			break
		}
	}
	if k < 0 {
		return false, nil
	}
	en := r.q[k]
	var overtaken []stream.Element
	for _, o := range r.q[at:k] {
		overtaken = append(overtaken, o.d.Element)
	}
	// The frame's credit stays with the elements that came before the
	// barrier, so it returns only once they are polled.
	if en.credit > 0 && k > at {
		r.q[k-1].credit += en.credit
		en.credit = 0
	}
	copy(r.q[at+1:k+1], r.q[at:k])
	en.d.Barrier.Unaligned = true
	en.d.Overtaken = overtaken
	en.priority = true
	r.q[at] = en
	return true, nil
}

// Notify registers fn, called from any goroutine whenever Poll may have
// something new.
func (r *Receiver) Notify(fn func()) {
	r.mu.Lock()
	r.notify = fn
	r.mu.Unlock()
}

// QueuedBytes reports the credited frame bytes received but not yet polled,
// now and at most so far. Both never exceed the window.
func (r *Receiver) QueuedBytes() (now, max int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queuedBytes, r.maxQueued
}

// Close releases the receiver.
func (r *Receiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.q, r.qhead = nil, 0
	r.mu.Unlock()
	r.stopWatch()
	if err := r.sub.Unsubscribe(); err != nil && err != nats.ErrConnectionClosed && err != nats.ErrBadSubscription {
		return fmt.Errorf("remote channel %s: unsubscribe: %w", r.cfg.Channel, err)
	}
	return nil
}
