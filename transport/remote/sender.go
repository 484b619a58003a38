package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
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
	probe     []byte // a probe frame's data

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
	window      int // the receiver's window as its credit says; 0: not said (an older receiver), -1: no credit yet
	need        int // the frame the queue's first element needs, while it waits for credit for it
	needSaid    int // the largest need a probe said
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
		cfg:    cfg,
		nc:     nc,
		data:   cfg.dataSubject(),
		wake:   make(chan struct{}),
		window: -1,
		probe:  EncodeFrame(0, FlagProbe, nil),
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
	if err := nc.PublishMsg(s.probeMsg(0)); err != nil {
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

// probeMsg is a probe frame whose headers say that the sender cuts frames
// to its credit and, when need > 0, the frame it waits for credit for. A
// receiver that predates the headers reads the frame only.
func (s *Sender) probeMsg(need int) *nats.Msg {
	h := nats.Header{headerCuts: []string{"1"}}
	if need > 0 {
		h[headerNeed] = []string{strconv.Itoa(need)}
	}
	return &nats.Msg{Subject: s.data, Data: s.probe, Header: h}
}

func (s *Sender) onCredit(m *nats.Msg) {
	if len(m.Data) != 8 {
		s.fail(fmt.Errorf("malformed credit message of %d bytes", len(m.Data)))
		return
	}
	g := binary.LittleEndian.Uint64(m.Data)
	window := 0
	if v := m.Header.Get(headerWindow); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.fail(fmt.Errorf("malformed credit message: window %q", v))
			return
		}
		window = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if g > s.granted || window != s.window {
		s.granted = max(s.granted, g)
		s.window = window
		s.flushLocked(s.lingerDue)
		s.broadcastLocked()
	}
}

// frameCapLocked is the most a frame holds, and what the queue holds before
// a Send waits: MaxFrameBytes, or half the receiver's window if less, so
// that a window shrunk below a frame (buffer debloating) holds about as
// much at the sender as at the receiver.
// Before the first credit it is startFrameBytes: the receiver may start
// small (Config.StartWindow), and what the sender queues waits ahead of a
// barrier as what the receiver holds does.
func (s *Sender) frameCapLocked() int {
	switch {
	case s.window > 0:
		return min(s.cfg.MaxFrameBytes, max(s.window/2, FrameHeaderSize+64))
	case s.window < 0:
		return min(s.cfg.MaxFrameBytes, startFrameBytes)
	}
	return s.cfg.MaxFrameBytes
}

// startFrameBytes caps a frame before the receiver's first credit: half the
// default Config.MinWindow.
const startFrameBytes = 8 << 10

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
	s.mu.Lock()
	fcap := s.frameCapLocked()
	s.mu.Unlock()
	if e.Kind == stream.KindRecords && FrameHeaderSize+ElementWireSize(e) > fcap {
		batches, err := splitBatch(e.Batch, roomOf(fcap), s.cfg.batchRoom())
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
	for s.err == nil && s.queuedBytes+FrameHeaderSize >= s.frameCapLocked() {
		s.flushLocked(false)
		if s.queuedBytes+FrameHeaderSize < s.frameCapLocked() {
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
// is behind, and may have shrunk its window (buffer debloating; a frame is
// then at most half the window) — else 0 (stream.ElementLimiter). The
// producing task then sends such batches in frame-sized pieces, each once
// there is room for it, instead of handing over a whole batch whose frames
// would wait here, ahead of a barrier.
func (s *Sender) MaxElementBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	fcap := s.frameCapLocked()
	if s.granted-s.sent >= uint64(fcap) {
		return 0
	}
	return roomOf(fcap)
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
		s.mu.Lock()
		need := s.need
		s.mu.Unlock()
		if perr := s.nc.PublishMsg(s.probeMsg(need)); perr != nil {
			s.fail(fmt.Errorf("publish probe: %w", perr))
		}
	}
	t.Stop()
	s.mu.Lock()
	return err
}

// flushLocked publishes frames from the queue while credit allows: full
// frames always, the last partial frame only when all is set or a control
// element is queued. A frame the credit does not cover is cut to what it
// covers, at an element or a record boundary, rather than wait for a
// whole frame's credit (the window may be smaller than a frame).
func (s *Sender) flushLocked(all bool) {
	all = all || s.ctlQueued > 0
	fcap := s.frameCapLocked()
	progressed := false
	s.need = 0
	for s.err == nil && s.qhead < len(s.queue) {
		size, n := FrameHeaderSize, 0
		for i := s.qhead; i < len(s.queue); i++ {
			w := ElementWireSize(s.queue[i])
			if n > 0 && size+w > fcap {
				break
			}
			size += w
			n++
		}
		if !all && s.qhead+n == len(s.queue) {
			break // partial frame: wait for more elements or the linger timer
		}
		if avail := s.granted - s.sent; uint64(size) > avail {
			// Cut the frame to the elements the credit covers.
			size, n = FrameHeaderSize, 0
			for i := s.qhead; ; i++ {
				w := ElementWireSize(s.queue[i])
				if uint64(size+w) > avail {
					break
				}
				size += w
				n++
			}
			if n == 0 {
				if !s.cutHeadLocked(int(avail)) {
					break // no credit
				}
				progressed = true
				continue
			}
		}
		buf := AppendFrameHeader(s.buf[:0], s.seq+1, 0, n)
		ctl := 0
		for i := s.qhead; i < s.qhead+n; i++ {
			if s.queue[i].Kind != stream.KindRecords {
				ctl++
			}
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

// cutHeadLocked publishes, in a frame of its own, the records at the start
// of the queue's first element (a record batch) that avail bytes of credit
// cover, and leaves the rest queued; the element counts as published only
// once its last piece is. When not even its first record (or the control
// element) fits, it notes the frame the element needs (s.need) and, when
// the receiver's window is too small to ever cover it, says so at once in
// a probe, and returns false.
func (s *Sender) cutHeadLocked(avail int) bool {
	e := s.queue[s.qhead]
	need := FrameHeaderSize + ElementWireSize(e)
	if e.Kind == stream.KindRecords {
		piece, rest, first, err := cutBatch(e.Batch, roomOf(avail))
		if err != nil {
			s.failLocked(chanErr(s.cfg, fmt.Errorf("cut record batch: %w", err)))
			return false
		}
		if piece != nil {
			buf := AppendFrameHeader(s.buf[:0], s.seq+1, 0, 1)
			buf = AppendElement(buf, stream.Records(piece))
			s.buf = buf
			if err := s.nc.Publish(s.data, buf); err != nil {
				s.failLocked(chanErr(s.cfg, fmt.Errorf("publish frame %d: %w", s.seq+1, err)))
				return false
			}
			s.seq++
			s.sent += uint64(len(buf))
			s.queue[s.qhead] = stream.Records(rest)
			s.queuedBytes -= len(e.Batch) - len(rest)
			return true
		}
		need = FrameHeaderSize + 5 + first
	}
	s.need = need
	// A receiver that said its window takes a record needing more than
	// half of it only once it heard so (a frame is at most half the
	// window, so that credit returns before its queue runs dry).
	if s.window > 0 && 2*need > s.window && need > s.needSaid {
		s.needSaid = need
		if err := s.nc.PublishMsg(s.probeMsg(need)); err != nil {
			s.failLocked(chanErr(s.cfg, fmt.Errorf("publish probe: %w", err)))
		}
	}
	return false
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

// splitBatch cuts a record batch into batches whose size stays within
// room, but for a record larger than room, which goes alone; a record
// larger than max is an error.
func splitBatch(batch []byte, room, max int) ([][]byte, error) {
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
		if b.Len() > 0 && b.Size()+rs > room {
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

// cutBatch cuts the records of batch that fit in room bytes (a batch of
// them) from the rest. piece is nil when not even the first record fits;
// first is then the size of a batch of that record alone. rest is nil
// when every record fits.
func cutBatch(batch []byte, room int) (piece, rest []byte, first int, err error) {
	it, err := abi.NewIter(batch)
	if err != nil {
		return nil, nil, 0, err
	}
	n, end := 0, abi.BatchHeaderSize
	for it.Next() {
		if it.Offset() > room {
			if n == 0 {
				return nil, nil, it.Offset(), nil
			}
			break
		}
		n, end = n+1, it.Offset()
	}
	if err := it.Err(); err != nil {
		return nil, nil, 0, err
	}
	if n == it.Count() {
		return batch, nil, 0, nil
	}
	piece = make([]byte, end)
	binary.LittleEndian.PutUint32(piece, uint32(n))
	copy(piece[abi.BatchHeaderSize:], batch[abi.BatchHeaderSize:end])
	rest = make([]byte, abi.BatchHeaderSize+len(batch)-end)
	binary.LittleEndian.PutUint32(rest, uint32(it.Count()-n))
	copy(rest[abi.BatchHeaderSize:], batch[end:])
	return piece, rest, 0, nil
}
