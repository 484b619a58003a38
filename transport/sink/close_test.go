package sink

import (
	"runtime"
	"testing"
	"time"
)

// A sink publishing async (its stream allows no batches, or publish:
// async) subscribes to its acknowledgements on the connection it is
// given, and nats.go listens to that connection's status for it with a
// goroutine of its own. The connection is the worker's, and outlives the
// sink: each task instance closed — every restart of a job — left its
// subscription and goroutine behind.
func TestClosedSinksLeaveNothingOnTheConnection(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishAsync))
	subs := nc.NumSubscriptions()
	goroutines := runtime.NumGoroutine()
	const n = 10
	for i := range n {
		s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", Publish: PublishAsync})
		must(t, err)
		must(t, s.Write(ctx, batchOf(0, 10)))
		_, err = s.PreCommit(ctx, 1)
		must(t, err)
		must(t, s.Close())

		e, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: PublishAsync})
		must(t, err)
		must(t, e.Write(ctx, batchOf(0, 10)))
		id := int64(i + 1)
		_, err = e.PreCommit(ctx, id)
		must(t, err)
		must(t, e.Commit(ctx, id))
		must(t, e.Wait(ctx))
		must(t, e.Close())
	}
	if got := nc.NumSubscriptions(); got != subs {
		t.Errorf("after %d sinks of each kind closed: %d subscriptions on the connection, want %d as before", n, got, subs)
	}
	// Goroutines end a moment after their subscription or listener goes:
	// a leak of one per sink shows as 2n more, the wait is a hang guard.
	for range 300 {
		if runtime.NumGoroutine() < goroutines+n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("after %d sinks of each kind closed: %d goroutines, %d before", n, runtime.NumGoroutine(), goroutines)
}
