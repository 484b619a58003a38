package source

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// orderedSetup starts a server with stream IN holding n messages ("0" ..
// "n-1", sequences 1..n) and a connection that counts the slow-consumer
// events of its subscriptions.
func orderedSetup(t *testing.T, ctx context.Context, n int) (jetstream.JetStream, *atomic.Int64) {
	t.Helper()
	slow := new(atomic.Int64)
	_, js := embeddedtest.Connect(t, startServer(t), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slow.Add(1)
		}
	}))
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, n)
	return js, slow
}

// readOrdered reads n messages from r and fails unless they are the
// stream's from sequence from on, in order.
func readOrdered(t *testing.T, r *orderedReader, from, n int) {
	t.Helper()
	for i := range n {
		m, a, err := r.Next()
		if err != nil {
			t.Fatalf("message %d: %v", from+i, err)
		}
		if want := from + i; a.seq != uint64(want) || string(m.Data) != strconv.Itoa(want-1) {
			t.Fatalf("message %d: sequence %d, data %q", want, a.seq, m.Data)
		}
	}
}

// A reader a whole pull behind, its subscription's buffer holding every
// message it asked for, also gets the status that ends a pull bounded by
// bytes (409 Batch Completed): the buffer has room for it. nats.go
// v1.56.0's ordered consumer dropped it, or a message, as a slow consumer
// and recreated the consumer (one benchmark run in ten).
func TestOrderedReaderOnePullBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, slow := orderedSetup(t, ctx, 100)
	r, err := newOrderedReader(ctx, js, "IN", nil, 0, "behind")
	must(t, err)
	defer r.Stop()
	must(t, r.Start(16, 1<<20))
	// The first pull asks for 16. The tenth Next, with 7 of them pending,
	// asks for 9 more, and takes the tenth message; the reader then waits
	// until the server delivered what it asked for: 6 messages left of the
	// first pull, its status, 9 of the second and its status, 17 in all.
	readOrdered(t, r, 1, 10)
	for len(r.msgs) < 17 {
		if ctx.Err() != nil {
			t.Fatalf("%d of 17 delivered", len(r.msgs))
		}
		time.Sleep(time.Millisecond)
	}
	readOrdered(t, r, 11, 90)
	if n := slow.Load(); n != 0 {
		t.Fatalf("%d slow-consumer events", n)
	}
	if r.serial != 1 {
		t.Fatalf("the consumer was created %d times, want once", r.serial)
	}
}

// A consumer deleted on the server (by an operator, or its inactivity
// threshold) is replaced by one starting after the last message read.
func TestOrderedReaderReplacesDeletedConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := orderedSetup(t, ctx, 100)
	r, err := newOrderedReader(ctx, js, "IN", []string{"in.a"}, 0, "deleted")
	must(t, err)
	defer r.Stop()
	must(t, r.Start(8, 0))
	readOrdered(t, r, 1, 10)
	must(t, js.DeleteConsumer(ctx, "IN", r.Name()))
	readOrdered(t, r, 11, 90)
	if r.serial < 2 {
		t.Fatal("the deleted consumer was not replaced")
	}
}

// A reader that hears nothing, not even heartbeats, for two heartbeat
// intervals while a pull waits replaces its consumer: here its
// subscription is cut behind its back.
func TestOrderedReaderMissedHeartbeats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := orderedSetup(t, ctx, 20)
	r, err := newOrderedReader(ctx, js, "IN", nil, 6, "silent")
	must(t, err)
	defer r.Stop()
	r.hb = 50 * time.Millisecond
	must(t, r.Start(4, 0))
	readOrdered(t, r, 6, 2) // 6, 7: two of the first pull's four
	r.mu.Lock()
	must(t, r.sub.Unsubscribe())
	r.mu.Unlock()
	// 8 and 9 may have arrived before the cut; the rest comes from the
	// new consumer, which starts at 8.
	readOrdered(t, r, 8, 13)
	if r.serial < 2 {
		t.Fatal("the silent consumer was not replaced")
	}
}

// Stop ends a Next that waits, and every later one.
func TestOrderedReaderStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := orderedSetup(t, ctx, 3)
	r, err := newOrderedReader(ctx, js, "IN", nil, 0, "stop")
	must(t, err)
	must(t, r.Start(8, 0))
	readOrdered(t, r, 1, 3)
	done := make(chan error, 1)
	go func() {
		_, _, err := r.Next()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, errReaderStopped) {
			t.Fatalf("Next after Stop: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Next did not return after Stop")
	}
	if _, _, err := r.Next(); !errors.Is(err, errReaderStopped) {
		t.Fatalf("second Next after Stop: %v", err)
	}
}
