package host_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// toPort1 forwards its input to output port 1.
type toPort1 struct{ passOp }

func (p *toPort1) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	return emit(1, append([]byte(nil), batch...))
}

// toLast sends every batch to the port's last channel.
type toLast struct{}

func (toLast) Partition(batch []byte, n int) ([][]byte, error) {
	out := make([][]byte, n)
	out[n-1] = batch
	return out, nil
}

// A task blocked sending its output while its checkpoint's barrier waited
// at its input reports that part of the start delay as blocked
// (MetricOutputBlockedNanos), and the output channel it was blocked on:
// the coordinator names the task downstream as where the time went, not
// the task's input. A checkpoint whose barrier found the task free
// reports none.
func TestOutputBlockedMetric(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	var mu sync.Mutex
	base := time.Unix(1_000_000, 0)
	now := base
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setClock := func(d time.Duration) { mu.Lock(); now = base.Add(d); mu.Unlock() }

	si, ri := local.New(local.Options{Name: "up->x"})
	sa, _ := local.New(local.Options{Name: "x->a"})
	sb0, _ := local.New(local.Options{Name: "x->b0"})
	sb1, rb1 := local.New(local.Options{Name: "x->b1", CapacityElements: 1})
	if err := sb1.Send(ctx, rec("k", "full")); err != nil { // b1 is full: the task's first send to it blocks
		t.Fatal(err)
	}
	rc, acks := ackWaiter()
	task, err := host.New(host.Config{Name: "x", Operator: &toPort1{}, Inputs: []host.Input{{Receiver: ri}},
		Outputs: []host.Output{{Senders: []stream.Sender{sa}},
			{Senders: []stream.Sender{sb0, sb1}, Partitioner: toLast{}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rc, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()

	if err := si.Send(ctx, rec("k", "r")); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, task)
	// Triggered 1s after the task blocked, the barrier waits at its input
	// until the send ends, 4s after the trigger. (The clock moves first:
	// the barrier's arrival interrupts the blocked send, which the task
	// then retries, and a send retried after the clock moved would leave
	// the time between out.)
	setClock(5 * time.Second)
	if err := si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: base.Add(time.Second).UnixMilli()})); err != nil {
		t.Fatal(err)
	}
	drained := make(chan struct{})
	passed := make(chan struct{}) // barrier 1 went through x->b1
	go func() {
		defer close(drained)
		for ctx.Err() == nil {
			d, ok, err := rb1.Poll()
			switch {
			case err != nil:
				return
			case !ok:
				time.Sleep(time.Millisecond)
			case d.Kind == stream.KindBarrier && d.Barrier.ID == 1:
				close(passed)
			}
		}
	}()
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	if got := time.Duration(rc.metric(1, "x", host.MetricStartDelayNanos)); got != 4*time.Second {
		t.Fatalf("checkpoint 1: start delay %s, want 4s", got)
	}
	if got := time.Duration(rc.metric(1, "x", host.MetricOutputBlockedNanos)); got != 4*time.Second {
		t.Errorf("checkpoint 1: %s = %s, want the 4s of the start delay the task was blocked", host.MetricOutputBlockedNanos, got)
	}
	if p, c := rc.metric(1, "x", host.MetricBlockedPort), rc.metric(1, "x", host.MetricBlockedChannel); p != 1 || c != 1 {
		t.Errorf("checkpoint 1: blocked on port %d channel %d, want port 1 channel 1 (x->b1)", p, c)
	}

	// Checkpoint 2's barrier finds the task free: nothing blocked. (The
	// task is free once barrier 1 went through x->b1, which holds one
	// element: until then it may still be blocked forwarding it.)
	<-passed
	setClock(6 * time.Second)
	if err := si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 2, Timestamp: base.Add(5500 * time.Millisecond).UnixMilli()})); err != nil {
		t.Fatal(err)
	}
	if id := waitAck(t, acks, rc); id != 2 {
		t.Fatalf("ack %d", id)
	}
	if got := rc.metric(2, "x", host.MetricOutputBlockedNanos); got != 0 {
		t.Errorf("checkpoint 2: %s = %s, want none", host.MetricOutputBlockedNanos, time.Duration(got))
	}
	cancel()
	<-done
	<-drained
}
