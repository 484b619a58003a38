package wasm

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"
)

// TestLoopingGuestDoesNotBlockGC runs a guest in an endless loop while the
// host collects garbage over and over. A guest that never left compiled
// code would hold up the collector's stop-the-world, and with it the
// watchdog and the whole process; the loop check visits Go regularly, so
// every collection finishes and the deadline still fires.
func TestLoopingGuestDoesNotBlockGC(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "spin", misbehave(t), Limits{CallTimeout: 2 * time.Second}, InstanceConfig{Config: []byte("l")})
	in := batchOf(kv{"a", "1", 1})
	done := make(chan error, 1)
	go func() { done <- inst.Process(context.Background(), 0, in, newOut().emit) }()
	// Collect garbage over and over in a goroutine of its own, so that a
	// collection stuck behind the guest fails this test instead of hanging it.
	gcDone := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			goruntime.GC()
			gcDone <- struct{}{}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	gcs := 0
	deadline := time.After(time.Minute)
	for {
		select {
		case err := <-done:
			var de *DeadlineError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a deadline error", err)
			}
			// A collection that finished as the deadline fired may be
			// waiting beside done: select picked either at random.
			select {
			case <-gcDone:
				gcs++
			default:
			}
			if gcs == 0 {
				t.Fatal("no collection finished while the guest looped")
			}
			return
		case <-gcDone:
			gcs++
		case <-deadline:
			t.Fatalf("after a minute the looping guest still runs (%d collections finished)", gcs)
		}
	}
}
