package local

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

func rec(v string) stream.Element {
	return stream.Records(abi.EncodeBatch(abi.Record{Value: []byte(v)}))
}

func val(t *testing.T, e stream.Element) string {
	t.Helper()
	if e.Kind != stream.KindRecords {
		return e.String()
	}
	rs, err := abi.DecodeBatch(e.Batch)
	if err != nil || len(rs) != 1 {
		t.Fatalf("bad batch: %v", err)
	}
	return string(rs[0].Value)
}

func drain(t *testing.T, r *Receiver) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := r.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, val(t, d.Element))
	}
}

func TestOrderAndBackpressure(t *testing.T) {
	s, r := New(Options{Name: "a->b", CapacityElements: 2})
	ctx := context.Background()
	for _, v := range []string{"1", "2"} {
		if err := s.Send(ctx, rec(v)); err != nil {
			t.Fatal(err)
		}
	}
	// The third send has no credit: it must give up on ctx without sending.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Send(cctx, rec("3")); !errors.Is(err, context.Canceled) {
		t.Fatalf("send without credit: %v", err)
	}
	done := make(chan error)
	go func() { done <- s.Send(ctx, rec("3")) }()
	// Polling frees credit, so the blocked send may complete while the
	// first drain is still polling: "3" comes in either drain, once.
	got := drain(t, r)
	if len(got) < 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("got %v", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got = append(got, drain(t, r)...); strings.Join(got, ",") != "1,2,3" {
		t.Fatalf("got %v, want [1 2 3], each once", got)
	}
}

func TestPrioritySenderSide(t *testing.T) {
	s, r := New(Options{})
	ctx := context.Background()
	_ = s.Send(ctx, rec("1"))
	_ = s.Send(ctx, rec("2"))
	b := stream.BarrierElement(stream.Barrier{ID: 7, Unaligned: true})
	over, err := s.SendPriority(ctx, b)
	if err != nil || len(over) != 2 || val(t, over[0]) != "1" || val(t, over[1]) != "2" {
		t.Fatalf("overtaken %v %v", over, err)
	}
	d, ok, _ := r.PollPriority()
	if !ok || d.Kind != stream.KindBarrier || len(d.Overtaken) != 0 {
		t.Fatalf("priority poll: %v %v", d, ok)
	}
	if _, ok, _ := r.PollPriority(); ok {
		t.Fatal("records are not priority")
	}
	if got := drain(t, r); len(got) != 2 {
		t.Fatalf("overtaken data still delivered: %v", got)
	}
}

func TestPriorityReceiverSide(t *testing.T) {
	s, r := New(Options{PriorityAtReceiver: true})
	ctx := context.Background()
	_ = s.Send(ctx, rec("1"))
	over, _ := s.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Unaligned: true}))
	over2, _ := s.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 2, Unaligned: true}))
	_ = s.Send(ctx, rec("2"))
	if len(over) != 0 || len(over2) != 0 {
		t.Fatal("receiver-side channel returned overtaken data to the sender")
	}
	d, _, _ := r.Poll()
	if d.Barrier.ID != 1 || len(d.Overtaken) != 1 || val(t, d.Overtaken[0]) != "1" {
		t.Fatalf("first: %v %v", d, d.Overtaken)
	}
	d, _, _ = r.Poll()
	if d.Barrier.ID != 2 {
		t.Fatalf("priority elements keep their order: %v", d)
	}
	if got := drain(t, r); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("got %v", got)
	}
}

func TestPrioritizeBarrier(t *testing.T) {
	s, r := New(Options{})
	ctx := context.Background()
	_ = s.Send(ctx, rec("1"))
	_ = s.Send(ctx, rec("2"))
	_ = s.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 4}))
	_ = s.Send(ctx, rec("3"))
	if b, ok := r.QueuedBarrier(); !ok || b.ID != 4 {
		t.Fatalf("queued barrier %v %v", b, ok)
	}
	if ok, _ := r.PrioritizeBarrier(5); ok {
		t.Fatal("found a barrier that is not queued")
	}
	if ok, err := r.PrioritizeBarrier(4); !ok || err != nil {
		t.Fatal("barrier 4 not found")
	}
	if n, _ := s.Queued(); n != 4 {
		t.Fatalf("queued %d", n)
	}
	if _, ok := r.QueuedBarrier(); ok {
		t.Fatal("a prioritized barrier is no longer an ordinary queued one")
	}
	d, _, _ := r.Poll()
	if d.Kind != stream.KindBarrier || !d.Barrier.Unaligned || len(d.Overtaken) != 2 || val(t, d.Overtaken[1]) != "2" {
		t.Fatalf("prioritized: %v overtaken %v", d, d.Overtaken)
	}
	if got := drain(t, r); len(got) != 3 || got[2] != "3" {
		t.Fatalf("rest %v", got)
	}
}

func TestFailAndClose(t *testing.T) {
	s, r := New(Options{Name: "x"})
	s.Fail(errors.New("boom"))
	var ce *stream.ChannelError
	if _, _, err := r.Poll(); !errors.As(err, &ce) || ce.Channel != "x" {
		t.Fatalf("poll after fail: %v", err)
	}
	s2, r2 := New(Options{CapacityElements: 1})
	_ = s2.Send(context.Background(), rec("1"))
	done := make(chan error)
	go func() { done <- s2.Send(context.Background(), rec("2")) }()
	time.Sleep(time.Millisecond)
	_ = r2.Close()
	if err := <-done; !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("blocked send after receiver close: %v", err)
	}
}

// TestConcurrent moves many elements through a small channel with a
// Notify-driven consumer; run under -race.
func TestConcurrent(t *testing.T) {
	s, r := New(Options{CapacityBytes: 64})
	wake := make(chan struct{}, 1)
	r.Notify(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	const n = 5000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if err := s.Send(context.Background(), rec("x")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	got := 0
	for got < n {
		d, ok, err := r.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			<-wake
			continue
		}
		if d.Kind == stream.KindRecords {
			got++
		}
	}
	wg.Wait()
}

// BenchmarkChannel moves 1 KiB record batches through a local channel with
// a Notify-driven consumer; the baseline is a plain buffered Go channel of
// the same depth.
func BenchmarkChannel(b *testing.B) {
	batch := rec(string(make([]byte, 1000)))
	b.Run("local", func(b *testing.B) {
		s, r := New(Options{CapacityElements: 64})
		wake := make(chan struct{}, 1)
		r.Notify(func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got := 0; got < b.N; {
				_, ok, _ := r.Poll()
				if !ok {
					<-wake
					continue
				}
				got++
			}
		}()
		b.SetBytes(int64(len(batch.Batch)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := s.Send(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	})
	b.Run("go-chan-baseline", func(b *testing.B) {
		c := make(chan stream.Element, 64)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < b.N; i++ {
				<-c
			}
		}()
		b.SetBytes(int64(len(batch.Batch)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c <- batch
		}
		<-done
	})
}

// A receiver says how many records the channel holds that it has not
// taken: records sent, less those polled; barriers and a priority barrier
// that overtakes the queue count none.
func TestQueuedRecords(t *testing.T) {
	ctx := context.Background()
	s, r := New(Options{Name: "q"})
	two := stream.Records(abi.EncodeBatch(abi.Record{Value: []byte("a")}, abi.Record{Value: []byte("b")}))
	for _, e := range []stream.Element{two, stream.BarrierElement(stream.Barrier{ID: 1}), rec("c")} {
		if err := s.Send(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 2, Unaligned: true})); err != nil {
		t.Fatal(err)
	}
	if n := r.QueuedRecords(); n != 3 {
		t.Fatalf("queued %d records, want 3", n)
	}
	for _, want := range []int{3, 1, 1, 0} { // the priority barrier, the batch of two, the barrier, "c"
		if _, _, err := r.Poll(); err != nil {
			t.Fatal(err)
		}
		if n := r.QueuedRecords(); n != want {
			t.Errorf("after a poll: %d queued, want %d", n, want)
		}
	}
}

// SetBuffer bounds the queued bytes between 1 and the configured capacity:
// a smaller bound holds senders back until the receiver took what is
// queued beyond it, a larger one lets a blocked sender in at once, and
// nothing queued is lost either way.
func TestSetBuffer(t *testing.T) {
	s, r := New(Options{Name: "a->b", CapacityBytes: 4096})
	ctx := context.Background()
	if got := r.SetBuffer(1 << 30); got != 4096 {
		t.Fatalf("SetBuffer above the capacity = %d, want 4096", got)
	}
	if got := r.SetBuffer(-5); got != 1 {
		t.Fatalf("SetBuffer(-5) = %d, want 1", got)
	}
	e := rec(strings.Repeat("x", 1000))
	n := e.Size()
	if got := r.SetBuffer(n + n/2); got != n+n/2 {
		t.Fatalf("SetBuffer = %d, want %d", got, n+n/2)
	}
	// An element goes into the empty queue; the second does not fit.
	if err := s.Send(ctx, e); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Send(cctx, e); !errors.Is(err, context.Canceled) {
		t.Fatalf("send beyond the smaller buffer: %v", err)
	}
	done := make(chan error)
	go func() { done <- s.Send(ctx, e) }()
	for s.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Growing the buffer lets the blocked send in without a poll.
	r.SetBuffer(4 * n)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if els, _ := s.Queued(); els != 2 {
		t.Fatalf("%d elements queued, want 2", els)
	}
	// Shrinking below what is queued keeps it: both still come, in order.
	r.SetBuffer(1)
	if got := drain(t, r); len(got) != 2 {
		t.Fatalf("drained %d elements, want 2", len(got))
	}
}
