package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/stream"
)

func startServer(t testing.TB) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func connect(t testing.TB, srv *embedded.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := srv.Connect(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// seqBatch returns a batch of n records whose values are 8-byte sequence
// numbers from first on, padded to size bytes.
func seqBatch(first uint64, n, size int) []byte {
	var b abi.Builder
	v := make([]byte, size)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(v, first+uint64(i))
		b.Add(nil, v, 0)
	}
	return append([]byte(nil), b.Bytes()...)
}

// collector polls a receiver from a goroutine, calling slow before each Poll.
type collector struct {
	mu    sync.Mutex
	elems []stream.Delivery
	err   error
	done  chan struct{}
}

func collect(ctx context.Context, r *Receiver, slow func()) *collector {
	c := &collector{done: make(chan struct{})}
	wake := make(chan struct{}, 1)
	r.Notify(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	go func() {
		defer close(c.done)
		for {
			if slow != nil {
				slow()
			}
			d, ok, err := r.Poll()
			if err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				return
			}
			if !ok {
				select {
				case <-wake:
					continue
				case <-ctx.Done():
					return
				}
			}
			c.mu.Lock()
			c.elems = append(c.elems, d)
			c.mu.Unlock()
			if d.Kind == stream.KindEndOfPartition {
				return
			}
		}
	}()
	return c
}

func recordsIn(t *testing.T, ds []stream.Element) []uint64 {
	t.Helper()
	var out []uint64
	for _, e := range ds {
		if e.Kind != stream.KindRecords {
			continue
		}
		recs, err := abi.DecodeBatch(e.Batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, binary.LittleEndian.Uint64(r.Value))
		}
	}
	return out
}

func elementsOf(ds []stream.Delivery) []stream.Element {
	out := make([]stream.Element, len(ds))
	for i, d := range ds {
		out[i] = d.Element
	}
	return out
}

// pair opens a Receiver and then a Sender with cfg on a fresh embedded
// server; both close with the test, and ctx ends after 20 s.
func pair(t *testing.T, cfg Config) (context.Context, *Sender, *Receiver) {
	t.Helper()
	nc := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rcv, err := NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcv.Close() })
	snd, err := NewSender(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snd.Close() })
	return ctx, snd, rcv
}

func TestOrderAndControlElements(t *testing.T) {
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.order", Window: 1 << 16, MaxFrameBytes: 4 << 10})
	c := collect(ctx, rcv, nil)

	want := []stream.Element{
		stream.Records(seqBatch(0, 3, 8)),
		stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: 42, Type: stream.Savepoint}),
		stream.Records(seqBatch(3, 2000, 8)), // larger than a frame: split
		stream.Cancel(7),
		stream.Records(abi.EmptyBatch),
		stream.EndOfPartition(),
	}
	for _, e := range want {
		if err := snd.Send(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	got := elementsOf(c.elems)
	seqs := recordsIn(t, got)
	if len(seqs) != 2003 {
		t.Fatalf("got %d records, want 2003", len(seqs))
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
	var kinds []stream.Kind
	for _, e := range got {
		if len(kinds) == 0 || e.Kind != stream.KindRecords || kinds[len(kinds)-1] != stream.KindRecords {
			kinds = append(kinds, e.Kind)
		}
	}
	wantKinds := []stream.Kind{stream.KindRecords, stream.KindBarrier, stream.KindRecords, stream.KindCancel, stream.KindRecords, stream.KindEndOfPartition}
	if fmt.Sprint(kinds) != fmt.Sprint(wantKinds) {
		t.Fatalf("kinds %v, want %v", kinds, wantKinds)
	}
	for _, e := range got {
		switch e.Kind {
		case stream.KindBarrier:
			if e.Barrier != want[1].Barrier {
				t.Fatalf("barrier %+v", e.Barrier)
			}
		case stream.KindCancel:
			if e.CheckpointID != 7 {
				t.Fatalf("cancel %d", e.CheckpointID)
			}
		}
	}
}

// A fast producer into a deliberately slow consumer: nothing is dropped,
// order holds and the receiver never holds more than its window.
func TestSlowConsumerBoundedNoLoss(t *testing.T) {
	srv := startServer(t)
	ncS := connect(t, srv)
	ncR := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = 64 << 10
	cfg := Config{Subject: "weir.test.slow", Window: window, MaxFrameBytes: 8 << 10}
	rcv, err := NewReceiver(ncR, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	snd, err := NewSender(ncS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	polls := 0
	c := collect(ctx, rcv, func() {
		polls++
		if polls%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	})
	const batches, per = 400, 100 // 40k records of 64 B, ~3.2 MB: 50 windows
	for i := 0; i < batches; i++ {
		if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i*per), per, 64))); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	seqs := recordsIn(t, elementsOf(c.elems))
	if len(seqs) != batches*per {
		t.Fatalf("received %d records, want %d", len(seqs), batches*per)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
	_, max := rcv.QueuedBytes()
	if max > window || max == 0 {
		t.Fatalf("receiver queued up to %d bytes, window %d", max, window)
	}
	t.Logf("receiver queued at most %d of %d window bytes", max, window)
	// The sender holds at most a frame plus the element being added.
	elem := ElementWireSize(stream.Records(seqBatch(0, per, 64)))
	if _, smax := snd.QueuedBytes(); smax > cfg.MaxFrameBytes+elem {
		t.Fatalf("sender queued up to %d bytes, bound %d", smax, cfg.MaxFrameBytes+elem)
	}
}

// A priority barrier overtakes what is queued at the sender (returned by
// SendPriority) and at the receiver (Delivery.Overtaken); both are still
// delivered afterwards, and together they are exactly what preceded the
// barrier.
func TestPriorityBarrierOvertakes(t *testing.T) {
	const window = 8 << 10
	cfg := Config{Subject: "weir.test.prio", Window: window, MaxFrameBytes: 2 << 10}
	ctx, snd, rcv := pair(t, cfg)

	// Fill the window and the sender's queue: the receiver does not poll.
	sent := 0
	sendErr := make(chan error, 1)
	blockCtx, unblock := context.WithCancel(ctx)
	go func() {
		for {
			err := snd.Send(blockCtx, stream.Records(seqBatch(uint64(sent*10), 10, 16)))
			if err != nil {
				sendErr <- err
				return
			}
			sent++
		}
	}()
	// Wait until the receiver holds a full window (the sender is blocked).
	for {
		now, _ := rcv.QueuedBytes()
		if now+cfg.MaxFrameBytes > window {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the producer fill its queue
	unblock()
	if err := <-sendErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked send ended with %v", err)
	}
	b := stream.Barrier{ID: 3, Unaligned: true}
	overtakenAtSender, err := snd.SendPriority(ctx, stream.BarrierElement(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(overtakenAtSender) == 0 {
		t.Fatal("nothing overtaken at the sender")
	}
	// PollPriority hands out the barrier once it arrived, and nothing else.
	var first stream.Delivery
	for {
		d, ok, err := rcv.PollPriority()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			first = d
			break
		}
		time.Sleep(time.Millisecond)
	}
	if first.Kind != stream.KindBarrier || first.Barrier != b {
		t.Fatalf("priority delivery %v, want the priority barrier", first.Element)
	}
	if len(first.Overtaken) == 0 {
		t.Fatal("nothing overtaken at the receiver")
	}
	if _, ok, _ := rcv.PollPriority(); ok {
		t.Fatal("PollPriority returned a data element")
	}
	// A control element that cannot be published before ctx ends is not sent.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	err = snd.Send(short, stream.Cancel(99))
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send without credit: %v", err)
	}
	c := collect(ctx, rcv, nil)
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	for _, d := range c.elems {
		if d.Kind == stream.KindCancel {
			t.Fatal("the cancelled control send was delivered")
		}
	}
	after := elementsOf(c.elems[:len(c.elems)-1])
	want := append(append([]stream.Element(nil), first.Overtaken...), overtakenAtSender...)
	if fmt.Sprint(recordsIn(t, after)) != fmt.Sprint(recordsIn(t, want)) {
		t.Fatalf("after the barrier came %d records, overtaken were %d", len(recordsIn(t, after)), len(recordsIn(t, want)))
	}
	seqs := recordsIn(t, after)
	if len(seqs) != sent*10 {
		t.Fatalf("received %d records, sent %d", len(seqs), sent*10)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
}

// A sender started before its receiver probes until the grant arrives.
func TestSenderBeforeReceiver(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{Subject: "weir.test.late", ProbeInterval: 10 * time.Millisecond}
	snd, err := NewSender(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	done := make(chan error, 1)
	go func() { done <- snd.Send(ctx, stream.EndOfPartition()) }()
	time.Sleep(30 * time.Millisecond)
	rcv, err := NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	c := collect(ctx, rcv, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil || len(c.elems) != 1 || c.elems[0].Kind != stream.KindEndOfPartition {
		t.Fatalf("got %v %v", c.elems, c.err)
	}
}

// A malformed frame fails the channel.
func TestMalformedFrameFailsChannel(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv)
	cfg := Config{Subject: "weir.test.bad"}
	rcv, err := NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	failed := make(chan struct{}, 1)
	rcv.Notify(func() {
		select {
		case failed <- struct{}{}:
		default:
		}
	})
	bad := EncodeFrame(1, 0, []stream.Element{stream.Records(seqBatch(0, 2, 8))})
	bad[len(bad)-20] ^= 0xff // corrupt a record length
	if err := nc.Publish(cfg.Subject+".d", bad); err != nil {
		t.Fatal(err)
	}
	select {
	case <-failed:
	case <-time.After(30 * time.Second):
		t.Fatal("no failure reported")
	}
	_, _, err = rcv.Poll()
	var ce *stream.ChannelError
	if !errors.As(err, &ce) || !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("got %v, want a ChannelError for a malformed frame", err)
	}
}

// A frame that skips a sequence number fails the channel.
func TestSequenceGapFailsChannel(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv)
	cfg := Config{Subject: "weir.test.gap"}
	rcv, err := NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	failed := make(chan struct{}, 1)
	rcv.Notify(func() {
		select {
		case failed <- struct{}{}:
		default:
		}
	})
	for _, seq := range []uint64{1, 3} {
		if err := nc.Publish(cfg.Subject+".d", EncodeFrame(seq, 0, []stream.Element{stream.Records(seqBatch(seq, 1, 8))})); err != nil {
			t.Fatal(err)
		}
	}
	var gotErr error
	for gotErr == nil {
		select {
		case <-failed:
		case <-time.After(30 * time.Second):
			t.Fatal("no failure reported")
		}
		for {
			_, ok, err := rcv.Poll()
			if err != nil {
				gotErr = err
			}
			if !ok {
				break
			}
		}
	}
	var ce *stream.ChannelError
	if !errors.As(gotErr, &ce) || !errors.Is(gotErr, ErrSequenceGap) {
		t.Fatalf("got %v, want a ChannelError for a sequence gap", gotErr)
	}
}

// A server restart mid-stream fails both ends with a ChannelError, even
// though the connections reconnect: the frames in flight may be gone.
func TestServerRestartFailsChannel(t *testing.T) {
	srv := startServer(t)
	opts := []nats.Option{nats.ReconnectWait(20 * time.Millisecond)}
	ncS := connect(t, srv, opts...)
	ncR := connect(t, srv, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Subject: "weir.test.restart", Window: 64 << 10, MaxFrameBytes: 8 << 10}
	rcv, err := NewReceiver(ncR, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	snd, err := NewSender(ncS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	c := collect(ctx, rcv, func() { time.Sleep(50 * time.Microsecond) })
	sendErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i*10), 10, 64))); err != nil {
				sendErr <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var ce *stream.ChannelError
	if err := <-sendErr; !errors.As(err, &ce) {
		t.Fatalf("sender ended with %v, want a ChannelError", err)
	}
	<-c.done
	if !errors.As(c.err, &ce) {
		t.Fatalf("receiver ended with %v, want a ChannelError", c.err)
	}
	// Whatever was delivered before the failure is a gap-free prefix.
	for i, s := range recordsIn(t, elementsOf(c.elems)) {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
}

// An aligned barrier already queued at the receiver can be turned into a
// priority one (aligned checkpoint timed out): it overtakes what is queued
// before it, and credit still flows.
func TestPrioritizeQueuedBarrier(t *testing.T) {
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.prioritize", Window: 64 << 10, MaxFrameBytes: 1 << 10})
	for i := 0; i < 10; i++ {
		if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i*10), 10, 16))); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 9})); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, stream.Records(seqBatch(100, 10, 16))); err != nil {
		t.Fatal(err)
	}
	if err := snd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if b, ok := rcv.QueuedBarrier(); ok {
			if b.ID != 9 {
				t.Fatalf("queued barrier %d", b.ID)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	if found, err := rcv.PrioritizeBarrier(8); found || err != nil {
		t.Fatalf("prioritized a barrier that is not queued: %v %v", found, err)
	}
	if found, err := rcv.PrioritizeBarrier(9); !found || err != nil {
		t.Fatalf("barrier 9: %v %v", found, err)
	}
	if _, ok := rcv.QueuedBarrier(); ok {
		t.Fatal("a prioritized barrier is still an ordinary one")
	}
	d, ok, err := rcv.PollPriority()
	if err != nil || !ok || d.Kind != stream.KindBarrier || !d.Barrier.Unaligned {
		t.Fatalf("got %v %v %v", d.Element, ok, err)
	}
	if got := recordsIn(t, d.Overtaken); len(got) != 100 || got[99] != 99 {
		t.Fatalf("overtaken %d records", len(got))
	}
	c := collect(ctx, rcv, nil)
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	got := recordsIn(t, elementsOf(c.elems))
	if len(got) != 110 {
		t.Fatalf("%d records after the barrier", len(got))
	}
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("record %d = %d", i, v)
		}
	}
	if now, _ := rcv.QueuedBytes(); now != 0 {
		t.Fatalf("%d credited bytes still queued after draining", now)
	}
}

// Two priority barriers queued at the receiver keep their order, as on a
// local channel: the second jumps the ordinary elements only, not the first
// barrier (which would then arrive stale, its checkpoint lost at the task).
func TestPriorityBarriersKeepOrder(t *testing.T) {
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.prio-order", Window: 64 << 10, MaxFrameBytes: 1 << 10})
	recs := stream.Records(seqBatch(0, 2, 16))
	if err := snd.Send(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := snd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 2; id++ {
		if over, err := snd.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: id, Unaligned: true})); err != nil || len(over) != 0 {
			t.Fatalf("priority %d: overtaken %d at the sender, %v", id, len(over), err)
		}
	}
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	// The end-of-partition frame comes after both priority frames: once its
	// credited bytes are queued, so are they.
	want := 2*FrameHeaderSize + ElementWireSize(recs) + ElementWireSize(stream.EndOfPartition())
	for now, _ := rcv.QueuedBytes(); now < want; now, _ = rcv.QueuedBytes() {
		time.Sleep(time.Millisecond)
	}
	var got []string
	for {
		d, ok, err := rcv.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		s := d.Element.String()
		if len(d.Overtaken) > 0 {
			s += fmt.Sprintf("(over %d)", len(d.Overtaken))
		}
		got = append(got, s)
	}
	if s := strings.Join(got, " "); s != "barrier(1)(over 1) barrier(2)(over 1) "+recs.String()+" end-of-partition" {
		t.Fatalf("delivered %s", s)
	}
}

// A receiver says how many records have arrived that it has not taken.
func TestQueuedRecords(t *testing.T) {
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.queued", Window: 1 << 16, MaxFrameBytes: 4 << 10})
	if err := snd.Send(ctx, stream.Records(seqBatch(0, 5, 8))); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1})); err != nil { // flushes the frame
		t.Fatal(err)
	}
	for rcv.QueuedRecords() != 5 {
		select {
		case <-ctx.Done():
			t.Fatalf("queued %d records, want 5", rcv.QueuedRecords())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, ok, err := rcv.Poll(); err != nil || !ok {
		t.Fatalf("poll: %v %v", ok, err)
	}
	if n := rcv.QueuedRecords(); n != 0 {
		t.Errorf("after the batch was polled: %d queued, want 0", n)
	}
}

// SetBuffer shrinks the credit window while the channel runs: once the
// receiver's task took what the larger window let in, the receiver holds
// at most the smaller window; growing it lets the sender get ahead again.
// The window never goes under Config.MinWindow (here the frame, which
// caps it) nor over Config.Window, and every record arrives once, in order.
func TestSetBufferResizesTheWindow(t *testing.T) {
	const window, frame = 256 << 10, 8 << 10
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.resize", Window: window, MaxFrameBytes: frame})
	if got := rcv.SetBuffer(1); got != frame {
		t.Fatalf("SetBuffer(1) = %d, want MinWindow, capped at the frame, %d", got, frame)
	}
	if got := rcv.SetBuffer(1 << 30); got != window {
		t.Fatalf("SetBuffer(1 GiB) = %d, want the window %d", got, window)
	}
	const small = 32 << 10
	rcv.SetBuffer(small)

	var mu sync.Mutex
	polls, over, grownMax := 0, 0, 0
	grown := false
	c := collect(ctx, rcv, func() {
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		defer mu.Unlock()
		polls++
		now, _ := rcv.QueuedBytes()
		switch {
		case polls == 2000:
			// Grow: the sender may fill the whole window again.
			rcv.SetBuffer(window)
			grown = true
		case grown:
			grownMax = max(grownMax, now)
		case polls > 400 && now > small+frame:
			// By now the task took what the first grant let in.
			over = max(over, now)
		}
	})
	const batches, per = 4000, 16 // 64 000 records of 64 B: ~4.5 MB
	for i := 0; i < batches; i++ {
		if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i*per), per, 64))); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	seqs := recordsIn(t, elementsOf(c.elems))
	if len(seqs) != batches*per {
		t.Fatalf("received %d records, want %d", len(seqs), batches*per)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d", i, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if over > 0 {
		t.Errorf("the receiver held %d bytes with a window of %d (+ a frame of %d)", over, small, frame)
	}
	if grownMax <= small+frame {
		t.Errorf("after growing the window the receiver held at most %d bytes: the sender did not get ahead", grownMax)
	}
}
