// Package local provides in-process channels between tasks of one worker:
// one bounded queue per channel with credit-based backpressure. A Send waits
// (ctx-aware) while the queue holds its capacity in bytes or elements; Poll
// takes an element and returns its credit. Nothing is ever dropped and memory
// stays bounded by the capacity.
//
// A priority send (an unaligned barrier) jumps the queue. By default the whole
// queue counts as the sender's: SendPriority returns the overtaken elements
// (the upstream's output channel state) and the receiver sees no Overtaken.
// With Options.PriorityAtReceiver the queue counts as the receiver's instead:
// SendPriority returns nothing and the barrier's Delivery carries the
// overtaken elements (the downstream's input channel state), as a remote
// channel whose data already reached the receiver does.
package local

import (
	"context"
	"fmt"
	"sync"

	"github.com/weirhq/weir/transport/stream"
)

// Options configure a channel.
type Options struct {
	// Name identifies the channel in errors, e.g. "join[0] -> sink[0]".
	Name string
	// CapacityBytes bounds the queued bytes (Element.Size); 0 means 1 MiB. An
	// element larger than the capacity is admitted into an empty queue.
	CapacityBytes int
	// CapacityElements bounds the queued elements; 0 means no bound besides
	// the bytes.
	CapacityElements int
	// PriorityAtReceiver makes overtaken data the receiver's (see the
	// package comment).
	PriorityAtReceiver bool
}

type item struct {
	d        stream.Delivery
	priority bool
}

// Channel is the shared state of one channel.
type Channel struct {
	opts     Options
	mu       sync.Mutex
	q        []item // q[head:] is queued
	head     int
	bytes    int
	count    int // non-priority elements queued
	credit   chan struct{}
	notify   func()
	err      error
	sclosed  bool
	rclosed  bool
	capBytes int // the capacity in effect (SetBuffer)
	maxBytes int // the configured capacity
	waiting  int // Sends blocked for credit
	barriers int // ordinary (non-priority) barriers queued
	records  int // records in the elements queued (QueuedRecords)
}

// New returns the two ends of a new channel.
func New(opts Options) (*Sender, *Receiver) {
	c := &Channel{opts: opts, credit: make(chan struct{}), capBytes: opts.CapacityBytes}
	if c.capBytes <= 0 {
		c.capBytes = 1 << 20
	}
	c.maxBytes = c.capBytes
	return &Sender{c: c}, &Receiver{c: c}
}

// Sender is the producing end.
type Sender struct{ c *Channel }

// Receiver is the consuming end.
type Receiver struct{ c *Channel }

var (
	_ stream.Sender             = (*Sender)(nil)
	_ stream.ElementLimiter     = (*Sender)(nil)
	_ stream.Receiver           = (*Receiver)(nil)
	_ stream.PriorityPoller     = (*Receiver)(nil)
	_ stream.BarrierPrioritizer = (*Receiver)(nil)
	_ stream.QueueReporter      = (*Receiver)(nil)
	_ stream.Resizer            = (*Receiver)(nil)
)

func (c *Channel) chanErr(err error) error {
	return &stream.ChannelError{Channel: c.opts.Name, Err: err}
}

// fits reports whether an element of size n may be queued now.
func (c *Channel) fits(n int) bool {
	if c.count == 0 {
		return true
	}
	if c.opts.CapacityElements > 0 && c.count >= c.opts.CapacityElements {
		return false
	}
	return c.bytes+n <= c.capBytes
}

// wakeSenders wakes every blocked Send; c.mu is held.
func (c *Channel) wakeSenders() {
	close(c.credit)
	c.credit = make(chan struct{})
}

// Send appends e, waiting for credit.
func (s *Sender) Send(ctx context.Context, e stream.Element) error {
	c := s.c
	n := e.Size()
	for {
		c.mu.Lock()
		switch {
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return err
		case c.sclosed:
			c.mu.Unlock()
			return c.chanErr(stream.ErrClosed)
		case c.rclosed:
			c.mu.Unlock()
			return c.chanErr(stream.ErrClosed)
		}
		if c.fits(n) {
			// Notify only when the queue was empty: a receiver polls until
			// Poll finds nothing before it waits for the next notification.
			// And for a barrier: a receiver blocked sending its output
			// looks at the barriers queued at its inputs for an alignment
			// timeout (host's prioritizeLate), which nothing else tells it
			// of while its inputs stay full.
			wasEmpty := c.head == len(c.q)
			if e.Kind == stream.KindBarrier {
				c.barriers++
			}
			c.q = append(c.q, item{d: stream.Delivery{Element: e}})
			c.bytes += n
			c.count++
			c.records += e.Count()
			fn := c.notify
			if !wasEmpty && e.Kind != stream.KindBarrier {
				fn = nil
			}
			c.mu.Unlock()
			if fn != nil {
				fn()
			}
			return nil
		}
		wait := c.credit
		c.waiting++
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// SendPriority puts e ahead of every queued non-priority element.
func (s *Sender) SendPriority(ctx context.Context, e stream.Element) ([]stream.Element, error) {
	c := s.c
	c.mu.Lock()
	if c.err != nil || c.sclosed || c.rclosed {
		err := c.err
		c.mu.Unlock()
		if err == nil {
			err = c.chanErr(stream.ErrClosed)
		}
		return nil, err
	}
	// Skip priority elements already at the head: they keep their order.
	at := c.head
	for at < len(c.q) && c.q[at].priority {
		at++
	}
	var overtaken []stream.Element
	for _, it := range c.q[at:] {
		overtaken = append(overtaken, it.d.Element)
	}
	d := stream.Delivery{Element: e}
	if c.opts.PriorityAtReceiver {
		d.Overtaken = overtaken
		overtaken = nil
	}
	c.q = append(c.q, item{})
	copy(c.q[at+1:], c.q[at:])
	c.q[at] = item{d: d, priority: true}
	fn := c.notify
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
	return overtaken, nil
}

// Close releases the sender; queued elements are still delivered.
func (s *Sender) Close() error {
	c := s.c
	c.mu.Lock()
	c.sclosed = true
	c.wakeSenders()
	c.mu.Unlock()
	return nil
}

// Fail fails the channel with err: both ends return it from then on. It
// stands for a lost connection in tests.
func (s *Sender) Fail(err error) {
	c := s.c
	c.mu.Lock()
	c.err = c.chanErr(err)
	c.wakeSenders()
	fn := c.notify
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// MaxElementBytes returns half the channel's byte bound in effect (the
// capacity, or what its receiver made it, SetBuffer): a records element
// within it leaves room for the next while the receiver works on it, and
// a channel holds about its bound, not one large batch past it — an
// element of any size goes into an empty queue (stream.ElementLimiter).
func (s *Sender) MaxElementBytes() int {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.capBytes/2, 1)
}

// Waiting returns the number of Sends blocked for credit: the sender is
// backpressured.
func (s *Sender) Waiting() int {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// Queued returns the number of queued elements and their bytes.
func (s *Sender) Queued() (elements, bytes int) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q) - c.head, c.bytes
}

func (c *Channel) take() (stream.Delivery, bool, error) {
	if c.err != nil {
		return stream.Delivery{}, false, c.err
	}
	if c.rclosed {
		return stream.Delivery{}, false, c.chanErr(stream.ErrClosed)
	}
	if c.head == len(c.q) {
		return stream.Delivery{}, false, nil
	}
	it := c.q[c.head]
	c.q[c.head] = item{}
	c.head++
	if c.head == len(c.q) {
		c.q = c.q[:0]
		c.head = 0
	} else if c.head > 64 && c.head*2 > len(c.q) {
		n := copy(c.q, c.q[c.head:])
		clear(c.q[n:])
		c.q = c.q[:n]
		c.head = 0
	}
	if !it.priority {
		if it.d.Kind == stream.KindBarrier {
			c.barriers--
		}
		c.bytes -= it.d.Size()
		c.count--
		c.records -= it.d.Count()
		if c.waiting > 0 {
			c.wakeSenders()
		}
	}
	return it.d, true, nil
}

// QueuedRecords returns how many records the channel holds that the
// receiver has not taken: what its task has still to process of this
// input (stream.QueueReporter).
func (r *Receiver) QueuedRecords() int {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.records
}

// SetBuffer bounds the channel's queued bytes to n, at least 1 and at
// most Options.CapacityBytes (stream.Resizer), and returns the bound in
// effect. An element is still admitted into an empty queue whatever its
// size; a smaller bound lets senders in once the receiver took what is
// queued beyond it.
func (r *Receiver) SetBuffer(n int) int {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(max(n, 1), c.maxBytes)
	if n > c.capBytes && c.waiting > 0 {
		c.wakeSenders()
	}
	c.capBytes = n
	return n
}

// Poll takes the next element without blocking.
func (r *Receiver) Poll() (stream.Delivery, bool, error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.take()
}

// PollPriority takes the next element only if it is a priority element.
func (r *Receiver) PollPriority() (stream.Delivery, bool, error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !c.rclosed && (c.head == len(c.q) || !c.q[c.head].priority) {
		return stream.Delivery{}, false, nil
	}
	return c.take()
}

// QueuedBarrier returns the first ordinary barrier queued.
func (r *Receiver) QueuedBarrier() (stream.Barrier, bool) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.barriers == 0 {
		return stream.Barrier{}, false
	}
	for _, it := range c.q[c.head:] {
		if !it.priority && it.d.Kind == stream.KindBarrier {
			return it.d.Barrier, true
		}
	}
	return stream.Barrier{}, false
}

// PrioritizeBarrier moves the queued barrier of checkpoint id ahead of the
// ordinary elements before it; they become its Overtaken.
func (r *Receiver) PrioritizeBarrier(id int64) (bool, error) {
	c := r.c
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return false, err
	}
	at := c.head
	for at < len(c.q) && c.q[at].priority {
		at++
	}
	pos := -1
	for i := at; i < len(c.q); i++ {
		if e := c.q[i].d.Element; e.Kind == stream.KindBarrier && e.Barrier.ID == id {
			pos = i
			break
		}
	}
	if pos < 0 {
		c.mu.Unlock()
		return false, nil
	}
	d := c.q[pos].d
	d.Barrier.Unaligned = true
	for _, it := range c.q[at:pos] {
		d.Overtaken = append(d.Overtaken, it.d.Element)
	}
	// The barrier no longer occupies credit.
	c.bytes -= d.Element.Size()
	c.count--
	c.barriers--
	copy(c.q[at+1:pos+1], c.q[at:pos])
	c.q[at] = item{d: d, priority: true}
	if c.waiting > 0 {
		c.wakeSenders()
	}
	fn := c.notify
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
	return true, nil
}

// Notify registers fn, called when a Send finds the queue empty, after every
// SendPriority and on Fail: a receiver that polls until Poll finds nothing
// before it waits never misses an element.
func (r *Receiver) Notify(fn func()) {
	c := r.c
	c.mu.Lock()
	c.notify = fn
	pending := c.head < len(c.q) || c.err != nil
	c.mu.Unlock()
	if pending && fn != nil {
		fn()
	}
}

// Close releases the receiver: blocked and later Sends fail.
func (r *Receiver) Close() error {
	c := r.c
	c.mu.Lock()
	c.rclosed = true
	c.q, c.head, c.bytes, c.count, c.barriers = nil, 0, 0, 0, 0
	c.wakeSenders()
	c.mu.Unlock()
	return nil
}

// String names the channel.
func (c *Channel) String() string { return fmt.Sprintf("local channel %s", c.opts.Name) }
