package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// A barrier that arrives behind data at a task whose output is blocked,
// before its alignment timeout passes, goes unaligned once the timeout
// passes — the task, blocked sending, is woken for it. It waited until the
// output drained before (a trial: aligned-timeout 500ms, checkpoints of
// 2.3–5 s listed as unaligned).
func TestAlignmentTimeoutWhileOutputBlocked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->x"})
	so, ro := local.New(local.Options{Name: "x->down", CapacityBytes: 1})
	rc, acks := ackWaiter()
	task, err := host.New(host.Config{Name: "x", Operator: &passOp{}, Inputs: []host.Input{{Receiver: ri}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: 50 * time.Millisecond},
		Store:         store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// a fills the output; b blocks the task sending it; c waits at the
	// input, with the barrier behind it, triggered just now.
	for _, v := range []string{"a", "b", "c"} {
		if err := si.Send(ctx, stream.Records(batchOf(v))); err != nil {
			t.Fatal(err)
		}
	}
	waitBlocked(t, task)
	if err := si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: time.Now().UnixMilli()})); err != nil {
		t.Fatal(err)
	}
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "x"))
	if !snap.Unaligned {
		t.Fatal("the snapshot is aligned; want it unaligned")
	}
	if len(snap.Inputs) != 1 || render(t, snap.Inputs[0].Elements) != "c" {
		t.Fatalf("input channel state %+v; want c", snap.Inputs)
	}
	// The barrier overtook what the output held (its channel state).
	if s := render(t, drainAll(t, ro, 4)); s != "B1 a b c" {
		t.Fatalf("output %q; want the barrier first", s)
	}
	cancel()
	<-done
}

// waitBlocked waits until task is blocked sending its output.
func waitBlocked(t *testing.T, task *host.Task) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for task.Stats().Backpressured == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the task never blocked on its output")
		}
		time.Sleep(time.Millisecond)
	}
}
