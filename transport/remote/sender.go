package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/stream"
)

// Sender is the producing end of a remote channel. It implements
// stream.Sender. Send and SendPriority are meant to be called from one
// goroutine (the producing task).
type Sender struct {
	cfg       Config
	nc        *nats.Conn
	data      string
	sub       *nats.Subscription
	stopWatch func()
	timer     *time.Timer
	probe     []byte

	mu          sync.Mutex
	queue       []stream.Element // not yet published, from qhead on
	qhead       int
	queuedBytes int // wire size of the queued elements
	maxQueued   int
	ctlQueued   int // control elements among them
	enqueued    uint64
	published   uint64
	granted     uint64 // cumulative bytes the receiver granted
	sent        uint64 // cumulative bytes of credited frames published
	seq         uint64
	timerArmed  bool
	lingerDue   bool
	err         error
	wake        chan struct{}
	buf         []byte
}

var (
	_ stream.Sender         = (*Sender)(nil)
	_ stream.ElementLimiter = (*Sender)(nil)
)

// NewSender opens the producing end of the channel cfg.Subject on nc. It
// needs no receiver yet: Send blocks until the receiver granted credit.
func NewSender(nc *nats.Conn, cfg Config) (*Sender, error) {
	cfg, err := cfg.withDefaults(nc)
	if err != nil {
		return nil, err
	}
	s := &Sender{
		cfg:   cfg,
		nc:    nc,
		data:  cfg.dataSubject(),
		wake:  make(chan struct{}),
		probe: EncodeFrame(0, FlagProbe, nil),
	}
	s.timer = time.AfterFunc(time.Hour, s.onLinger)
	s.timer.Stop()
	s.sub, err = nc.Subscribe(cfg.controlSubject(), s.onCredit)
	if err != nil {
		return nil, fmt.Errorf("remote channel %s: subscribe to credit: %w", cfg.Channel, err)
	}
	if err := nc.Flush(); err != nil {
		_ = s.sub.Unsubscribe()
		return nil, fmt.Errorf("remote channel %s: flush credit subscription: %w", cfg.Channel, err)
	}
	s.stopWatch = watchConn(nc, s.fail)
	// Ask a receiver that is already there for its grant; one that comes
	// later announces it when it starts, and the credit subscription is in
	// place to hear it.
	if err := nc.Publish(s.data, s.probe); err != nil {
		s.Close()
		return nil, fmt.Errorf("remote channel %s: probe: %w", cfg.Channel, err)
	}
	return s, nil
}

func (s *Sender) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLocked(chanErr(s.cfg, err))
}

func (s *Sender) failLocked(err error) {
	if s.err == nil {
		s.err = err
	}
	s.broadcastLocked()
}

func (s *Sender) broadcastLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *Sender) onCredit(m *nats.Msg) {
	if len(m.Data) != 8 {
		s.fail(fmt.Errorf("malformed credit message of %d bytes", len(m.Data)))
		return
	}
	g := binary.LittleEndian.Uint64(m.Data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if g > s.granted {
		s.granted = g
		s.flushLocked(s.lingerDue)
		s.broadcastLocked()
	}
}

func (s *Sender) onLinger() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timerArmed = false
	if s.err != nil {
		return
	}
	s.flushLocked(true)
	s.lingerDue = s.qhead < len(s.queue)
}

// Send queues e and publishes full frames as credit allows. It blocks while
// a full frame is queued without credit. A control element (barrier, cancel
// marker, end-of-partition, end-of-data) is published at once, and Send returns only
// after it was handed to the NATS connection.
func (s *Sender) Send(ctx context.Context, e stream.Element) error {
	parts := []stream.Element{e}
	if e.Kind == stream.KindRecords && FrameHeaderSize+ElementWireSize(e) > s.cfg.MaxFrameBytes {
		batches, err := splitBatch(e.Batch, s.cfg.batchRoom())
		if err != nil {
			return fmt.Errorf("remote channel %s: %w", s.cfg.Channel, err)
		}
		parts = parts[:0]
		for _, b := range batches {
			parts = append(parts, stream.Records(b))
		}
	}
	return s.send(ctx, parts)
}

// send queues parts — one element, or the pieces of one split batch — all
// at once, so that an error means nothing of the element was sent.
func (s *Sender) send(ctx context.Context, parts []stream.Element) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.err == nil && s.queuedBytes+FrameHeaderSize >= s.cfg.MaxFrameBytes {
		s.flushLocked(false)
		if s.queuedBytes+FrameHeaderSize < s.cfg.MaxFrameBytes {
			break
		}
		if err := s.waitLocked(ctx); err != nil {
			return err
		}
	}
	if s.err != nil {
		return s.err
	}
	for _, e := range parts {
		s.queue = append(s.queue, e)
		s.queuedBytes += ElementWireSize(e)
		s.enqueued++
	}
	s.maxQueued = max(s.maxQueued, s.queuedBytes)
	if e := parts[0]; e.Kind != stream.KindRecords {
		s.ctlQueued++
		target := s.enqueued
		s.flushLocked(true)
		for s.err == nil && s.published < target {
			if err := s.waitLocked(ctx); err != nil {
				if s.published >= target {
					// Published while ctx ended: it was sent, and an
					// error would make the caller send it twice.
					return nil
				}
				// Not published: take it back, so the caller may send
				// it again without duplicating it.
				s.queue[len(s.queue)-1] = stream.Element{}
				s.queue = s.queue[:len(s.queue)-1]
				s.queuedBytes -= ElementWireSize(e)
				s.ctlQueued--
				s.enqueued--
				return err
			}
		}
		return s.err
	}
	s.flushLocked(false)
	if s.qhead < len(s.queue) && !s.timerArmed {
		s.timerArmed = true
		s.timer.Reset(s.cfg.Linger)
	}
	return nil
}

// MaxElementBytes returns what a frame holds of a record batch while the
// receiver's credit is short — less than a frame's worth left: its task
// is behind, and may have shrunk its window (buffer debloating) — else 0
// (stream.ElementLimiter). The producing task then sends such batches in
// frame-sized pieces, each once there is room for it, instead of handing
// over a whole batch whose frames would wait here, ahead of a barrier.
func (s *Sender) MaxElementBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.granted-s.sent >= uint64(s.cfg.MaxFrameBytes) {
		return 0
	}
	return s.cfg.batchRoom()
}

// waitLocked waits for a state change, ctx or the probe interval; on the
// latter it asks the receiver to repeat its grant.
func (s *Sender) waitLocked(ctx context.Context) error {
	wake := s.wake
	s.mu.Unlock()
	t := time.NewTimer(s.cfg.ProbeInterval)
	var err error
	select {
	case <-ctx.Done():
		err = fmt.Errorf("remote channel %s: waiting for credit: %w", s.cfg.Channel, ctx.Err())
	case <-wake:
	case <-t.C:
		if perr := s.nc.Publish(s.data, s.probe); perr != nil {
			s.fail(fmt.Errorf("publish probe: %w", perr))
		}
	}
	t.Stop()
	s.mu.Lock()
	return err
}

// flushLocked publishes frames from the queue while credit allows: full
// frames always, the last partial frame only when all is set or a control
// element is queued.
func (s *Sender) flushLocked(all bool) {
	all = all || s.ctlQueued > 0
	progressed := false
	for s.err == nil && s.qhead < len(s.queue) {
		size, n, ctl := FrameHeaderSize, 0, 0
		for i := s.qhead; i < len(s.queue); i++ {
			w := ElementWireSize(s.queue[i])
			if n > 0 && size+w > s.cfg.MaxFrameBytes {
				break
			}
			size += w
			n++
			if s.queue[i].Kind != stream.KindRecords {
				ctl++
			}
		}
		if !all && s.qhead+n == len(s.queue) {
			break // partial frame: wait for more elements or the linger timer
		}
		if s.sent+uint64(size) > s.granted {
			break // no credit
		}
		buf := AppendFrameHeader(s.buf[:0], s.seq+1, 0, n)
		for i := s.qhead; i < s.qhead+n; i++ {
			buf = AppendElement(buf, s.queue[i])
			s.queue[i] = stream.Element{}
		}
		s.buf = buf
		if err := s.nc.Publish(s.data, buf); err != nil {
			s.failLocked(chanErr(s.cfg, fmt.Errorf("publish frame %d: %w", s.seq+1, err)))
			return
		}
		s.seq++
		s.sent += uint64(size)
		s.qhead += n
		s.queuedBytes -= size - FrameHeaderSize
		s.ctlQueued -= ctl
		s.published += uint64(n)
		progressed = true
	}
	if s.qhead == len(s.queue) {
		s.queue, s.qhead = s.queue[:0], 0
		s.lingerDue = false
	} else if s.qhead > 64 && s.qhead*2 > len(s.queue) {
		// Under steady backpressure the queue may never run empty: drop
		// the published prefix so memory stays bounded.
		n := copy(s.queue, s.queue[s.qhead:])
		clear(s.queue[n:])
		s.queue, s.qhead = s.queue[:n], 0
	}
	if progressed {
		s.broadcastLocked()
	}
}

// SendPriority publishes e — an unaligned barrier — ahead of every element
// still queued at the sender and returns those elements; they are still
// delivered, after e. A priority frame needs no credit.
func (s *Sender) SendPriority(ctx context.Context, e stream.Element) ([]stream.Element, error) {
	if e.Kind != stream.KindBarrier {
		return nil, fmt.Errorf("remote channel %s: priority element must be a barrier, got %s", s.cfg.Channel, e.Kind)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	overtaken := append([]stream.Element(nil), s.queue[s.qhead:]...)
	frame := EncodeFrame(s.seq+1, FlagPriority, []stream.Element{e})
	if err := s.nc.Publish(s.data, frame); err != nil {
		s.failLocked(chanErr(s.cfg, fmt.Errorf("publish priority frame %d: %w", s.seq+1, err)))
		return nil, s.err
	}
	s.seq++
	return overtaken, nil
}

// QueuedBytes reports the wire bytes of the elements queued at the sender
// (not yet published), now and at most so far. It stays below
// MaxFrameBytes plus one element: a Send waits while a full frame is queued.
func (s *Sender) QueuedBytes() (now, max int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queuedBytes, s.maxQueued
}

// Flush publishes everything queued (waiting for credit) and flushes the
// NATS connection.
func (s *Sender) Flush(ctx context.Context) error {
	s.mu.Lock()
	target := s.enqueued
	s.flushLocked(true)
	for s.err == nil && s.published < target {
		s.lingerDue = true
		if err := s.waitLocked(ctx); err != nil {
			s.mu.Unlock()
			return err
		}
		s.flushLocked(true)
	}
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := natsconn.Flush(ctx, s.nc); err != nil {
		return fmt.Errorf("remote channel %s: flush: %w", s.cfg.Channel, err)
	}
	return nil
}

// Close releases the sender. Elements still queued are discarded; send
// EndOfPartition (which Send publishes before returning) or call Flush
// first to deliver everything.
func (s *Sender) Close() error {
	s.mu.Lock()
	if s.err == stream.ErrClosed {
		s.mu.Unlock()
		return nil
	}
	s.err = stream.ErrClosed
	s.broadcastLocked()
	s.mu.Unlock()
	s.timer.Stop()
	s.stopWatch()
	if err := s.sub.Unsubscribe(); err != nil && err != nats.ErrConnectionClosed && err != nats.ErrBadSubscription {
		return fmt.Errorf("remote channel %s: unsubscribe: %w", s.cfg.Channel, err)
	}
	return nil
}

// splitBatch cuts a record batch into batches whose size stays within max.
func splitBatch(batch []byte, max int) ([][]byte, error) {
	it, err := abi.NewIter(batch)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	var b abi.Builder
	for it.Next() {
		r := it.Record()
		rs := abi.RecordSize(len(r.Key), len(r.Value))
		if abi.BatchHeaderSize+rs > max {
			return nil, fmt.Errorf("%w: record %d of %d bytes, frame room %d", ErrRecordTooLarge, it.Index(), rs, max)
		}
		if b.Len() > 0 && b.Size()+rs > max {
			out = append(out, append([]byte(nil), b.Bytes()...))
			b.Reset()
		}
		b.AddRecord(r)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if b.Len() > 0 {
		out = append(out, append([]byte(nil), b.Bytes()...))
	}
	return out, nil
}
