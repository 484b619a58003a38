package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// heldAcks is a recorder whose acknowledgements wait for their answer
// until their context is done, as a report to a coordinator out of reach
// does (a NATS reconnect).
type heldAcks struct {
	*recorder
	entered chan int64
	ended   chan error
}

func (h *heldAcks) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	h.entered <- id
	<-ctx.Done()
	h.ended <- ctx.Err()
	return ctx.Err()
}

// A canceled task ends without waiting for the answer to a snapshot's
// acknowledgement: Run waits for its snapshot writes, and an ack that
// waited on held up the cancel of its attempt on the worker (its tasks
// are waited for) for as long as the request's timeout.
func TestCanceledTaskCutsItsAckShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	si, ri := local.New(local.Options{Name: "up->x"})
	so, _ := local.New(local.Options{Name: "x->down"})
	l := &heldAcks{recorder: newRecorder(), entered: make(chan int64, 1), ended: make(chan error, 1)}
	task, err := host.New(host.Config{Name: "x", Inputs: []host.Input{{Receiver: ri}}, Operator: &joinOp{},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- task.Run(rctx) }()
	if err := si.Send(ctx, rec("a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.entered:
	case <-ctx.Done():
		t.Fatal("no acknowledgement")
	}
	stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled task: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the canceled task waited for its acknowledgement's answer")
	}
	if err := <-l.ended; err != context.Canceled {
		t.Fatalf("acknowledgement ended with %v, want it cut short by the cancel", err)
	}
}
