package remote

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

func describe(ds []stream.Delivery) string {
	var out []string
	for _, d := range ds {
		s := d.Element.String()
		if d.Kind == stream.KindBarrier && d.Barrier.Unaligned {
			s += "u"
		}
		if len(d.Overtaken) > 0 {
			s += fmt.Sprintf("(over %d)", len(d.Overtaken))
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func drain(t *testing.T, r stream.Receiver) []stream.Delivery {
	t.Helper()
	var ds []stream.Delivery
	for {
		d, ok, err := r.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ds
		}
		ds = append(ds, d)
	}
}

// PrioritizeBarrier moves an ordinary barrier ahead of the ordinary
// elements before it only: a priority barrier that is already queued ahead
// keeps its place, as on a local channel.
func TestPrioritizeBarrierKeepsEarlierPriorityBarrier(t *testing.T) {
	ctx, snd, rcv := pair(t, Config{Subject: "weir.test.review.prio-then-prioritize", Window: 64 << 10, MaxFrameBytes: 1 << 10})
	r0 := stream.Records(seqBatch(0, 2, 16))
	r1 := stream.Records(seqBatch(2, 2, 16))
	if err := snd.Send(ctx, r0); err != nil {
		t.Fatal(err)
	}
	if err := snd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := snd.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 5, Unaligned: true})); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 6})); err != nil {
		t.Fatal(err)
	}
	for {
		if b, ok := rcv.QueuedBarrier(); ok && b.ID == 6 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if found, err := rcv.PrioritizeBarrier(6); !found || err != nil {
		t.Fatalf("prioritize: %v %v", found, err)
	}
	got := describe(drain(t, rcv))

	// The same on the in-process reference channel.
	ls, lr := local.New(local.Options{PriorityAtReceiver: true})
	_ = ls.Send(ctx, r0)
	_, _ = ls.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 5, Unaligned: true}))
	_ = ls.Send(ctx, r1)
	_ = ls.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 6}))
	if found, err := lr.PrioritizeBarrier(6); !found || err != nil {
		t.Fatalf("local prioritize: %v %v", found, err)
	}
	want := describe(drain(t, lr))
	if got != want {
		t.Fatalf("remote delivered\n  %s\nlocal delivers\n  %s", got, want)
	}
}

// A Send of a control element that returns an error did not send it, so
// the caller may send it again without a duplicate. Here ctx ends while
// Send waits for credit, and the credit arrives (the frame is published)
// before Send re-takes the lock.
func TestControlSendErrorButPublished(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv)
	cfg := Config{Subject: "weir.test.review.ctl-dup", ProbeInterval: time.Hour}
	wire, err := nc.SubscribeSync(cfg.Subject + ".d")
	if err != nil {
		t.Fatal(err)
	}
	snd, err := NewSender(nc, cfg) // no receiver: no credit
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- snd.Send(ctx, stream.Cancel(7)) }()
	time.Sleep(50 * time.Millisecond) // Send waits for credit

	// The credit callback holds the lock while ctx ends.
	snd.mu.Lock()
	cancel()
	time.Sleep(20 * time.Millisecond) // Send's wait returned; it waits for the lock
	snd.granted = 1 << 20             // what onCredit does with a grant
	snd.flushLocked(snd.lingerDue)
	snd.broadcastLocked()
	snd.mu.Unlock()

	err = <-done
	frames := 0
	for {
		m, err := wire.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		if f, _ := DecodeFrame(m.Data); len(f.Elements) > 0 {
			frames++
		}
	}
	if err != nil && frames > 0 {
		t.Fatalf("Send returned %v, yet the cancel marker went out in %d frame(s): a retry duplicates it", err, frames)
	}
}

// A receiver whose task is always behind (steady backpressure: its queue
// never runs empty) must keep its memory bounded by the window.
func TestReceiverQueueBoundedUnderBackpressure(t *testing.T) {
	srv := startServer(t)
	ncS := connect(t, srv)
	ncR := connect(t, srv)
	const window = 16 << 10
	cfg := Config{Subject: "weir.test.review.backlog", Window: window, MaxFrameBytes: 4 << 10}
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stop := make(chan struct{})
	polled := make(chan int, 1)
	go func() {
		n := 0
		defer func() { polled <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Keep a backlog: take an element only while half the
			// window is queued.
			if now, _ := rcv.QueuedBytes(); now < window/2 {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			if _, ok, err := rcv.Poll(); err != nil {
				t.Error(err)
				return
			} else if ok {
				n++
			}
		}
	}()
	const total = 50000
	maxLen, maxSndLen := 0, 0
	for i := 0; i < total; i++ {
		if err := snd.Send(ctx, stream.Records(seqBatch(uint64(i), 1, 8))); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			rcv.mu.Lock()
			maxLen = max(maxLen, len(rcv.q))
			rcv.mu.Unlock()
			snd.mu.Lock()
			maxSndLen = max(maxSndLen, len(snd.queue))
			snd.mu.Unlock()
		}
	}
	close(stop)
	n := <-polled
	perElem := FrameHeaderSize/8 + ElementWireSize(stream.Records(seqBatch(0, 1, 8)))
	bound := 2 * window / perElem
	t.Logf("polled %d of %d; receiver queue slice reached %d entries (window holds < %d elements); sender queue slice reached %d",
		n, total, maxLen, window/perElem, maxSndLen)
	if maxLen > bound {
		t.Fatalf("receiver queue slice grew to %d entries, bound %d: memory grows with the stream, not the window", maxLen, bound)
	}
	if maxSndLen > bound {
		t.Fatalf("sender queue slice grew to %d entries, bound %d", maxSndLen, bound)
	}
}
