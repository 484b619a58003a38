package sink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/natsconn"
)

// longAck is the sinks' ack timeout in the deleted-stream tests: a failure
// that waited for it would outlast the tests' hang guard (deletedGuard)
// by far, so a sink that waits for acknowledgements after the stream is
// gone fails them at the guard.
const (
	longAck      = 5 * time.Minute
	deletedGuard = time.Minute
)

// wantDeleted runs fail, a sink's calls that fail on a stream deleted
// under it, with a context that ends at the hang guard, and checks the
// failure: it names the stream and says it does not exist
// (jetstream.ErrStreamNotFound, and no election's), on one line. A sink
// call that waits without its context (a fast batch's acknowledgement)
// is left behind at the guard.
func wantDeleted(t *testing.T, stream string, fail func(ctx context.Context) error) {
	t.Helper()
	checkDeleted(t, stream, failWithinGuard(t, fail))
}

// wantDeletedOrStored is wantDeleted for a stream deleted while publishes
// were out, which the server may have stored (and acknowledged) every one
// of before the deletion came: then there is nothing to fail, and fail
// returns nil, as it should.
func wantDeletedOrStored(t *testing.T, stream string, fail func(ctx context.Context) error) {
	t.Helper()
	if err := failWithinGuard(t, fail); err != nil {
		checkDeleted(t, stream, err)
	} else {
		t.Log("the server stored every publish before the deletion: none was in flight")
	}
}

// failWithinGuard returns what fail returns, failing t if it returns
// nothing within deletedGuard.
func failWithinGuard(t *testing.T, fail func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deletedGuard)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- fail(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(deletedGuard + 5*time.Second):
		t.Fatalf("no failure within the hang guard (%s)", deletedGuard)
	}
	t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

// checkDeleted fails t unless err says that stream was not found, on one
// line, and is not the hang guard's.
func checkDeleted(t *testing.T, stream string, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no failure")
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) ||
		!strings.Contains(err.Error(), "stream "+stream) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("failed with %v; want stream not found, naming %s, on one line", err, stream)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("failed at the hang guard (%s): %v", deletedGuard, err)
	}
}

// An exactly-once sink whose stream is deleted between a checkpoint and
// its commit fails the commit as soon as the server says no stream takes
// its messages, in fast and atomic batches and by async publish: not
// after its ack timeout. (An atomic batch's commit is a request, which
// the 503 ends at once; a fast batch waited for acknowledgements up to
// the ack timeout; async publishes that got a 503 each were published
// again for seconds.)
func TestExactlyOnceCommitToADeletedStream(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAtomic, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, js, s := sinkOn(t, embedded.Config{}, mode, ExactlyOnceConfig{Timeout: longAck})
			must(t, s.Write(ctx, batchOf(0, 20000)))
			_, err := s.PreCommit(ctx, 1)
			must(t, err)
			must(t, js.DeleteStream(ctx, "OUT"))
			wantDeleted(t, "OUT", func(ctx context.Context) error {
				if err := s.Commit(ctx, 1); err != nil {
					return err
				}
				return s.Wait(ctx)
			})
		})
	}
}

// An at-least-once sink publishing fast batches whose stream is deleted
// while it runs fails its next write (or checkpoint) as soon as the server
// says no stream takes its messages, not after its ack timeout: with no
// batch open (the first message's acknowledgement never comes) and with
// one open (the flow-control acknowledgements never come).
func TestAtLeastOnceToADeletedStream(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "new-batch", true: "open-batch"}[open], func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(PublishFast))
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", Publish: PublishFast, Timeout: longAck, IdleCommit: time.Hour})
			must(t, err)
			defer s.Close()
			if open {
				must(t, s.Write(ctx, batchOf(0, 10)))
			}
			must(t, js.DeleteStream(ctx, "OUT"))
			wantDeleted(t, "OUT", func(ctx context.Context) error {
				if err := s.Write(ctx, batchOf(10, 20010)); err != nil {
					return err
				}
				_, err := s.PreCommit(ctx, 1)
				return err
			})
		})
	}
}

// An exactly-once sink publishing async whose stream is deleted while it
// commits a checkpoint fails the commit as soon as it finds the stream
// gone, not after its ack timeout: the publishes the server had taken
// and not stored when the stream went get no answer at all.
func TestExactlyOnceAsyncCommitWhileTheStreamIsDeleted(t *testing.T) {
	ctx, js, s := sinkOn(t, embedded.Config{}, PublishAsync, ExactlyOnceConfig{Timeout: longAck})
	const n = 100000
	must(t, s.Write(ctx, batchOf(0, n)))
	_, err := s.PreCommit(ctx, 1)
	must(t, err)
	// The stream goes once the commit has published some of its records.
	seen, err := js.Conn().SubscribeSync("out")
	must(t, err)
	must(t, seen.SetPendingLimits(-1, -1)) // never a slow consumer
	must(t, js.Conn().Flush())
	must(t, s.Commit(ctx, 1))
	for range 1000 {
		_, err := seen.NextMsgWithContext(ctx)
		must(t, err)
	}
	must(t, seen.Unsubscribe())
	must(t, js.DeleteStream(ctx, "OUT"))
	t.Logf("%d publishes out", s.js.PublishAsyncPending())
	wantDeleted(t, "OUT", s.Wait)
}

// An at-least-once sink publishing async whose stream is deleted while it
// runs fails its next write or checkpoint as soon as it finds the stream
// gone, not after its ack timeout: with nothing written before
// ("new-writes"), after a checkpoint ("after-a-checkpoint"), with
// publishes out when the stream went ("in-flight": those the server had
// taken and not stored get no answer at all), with writes after those
// ("in-flight-then-writes"), and with every publish the client allows out
// one of those, the writes after them stalled ("stalled").
func TestAtLeastOnceAsyncToADeletedStream(t *testing.T) {
	for _, c := range []struct {
		name       string
		maxPending int
		before     int  // records written before the deletion
		checkpoint bool // and checkpointed
		after      bool // records written after it
	}{
		{name: "new-writes", after: true},
		{name: "after-a-checkpoint", before: 10, checkpoint: true, after: true},
		{name: "in-flight", before: 20000},
		{name: "in-flight-then-writes", before: 20000, after: true},
		{name: "stalled", maxPending: 16, before: 20000, after: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(PublishAsync))
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", Publish: PublishAsync, Timeout: longAck, MaxPending: c.maxPending})
			must(t, err)
			defer s.Close()
			if c.before > 0 {
				must(t, s.Write(ctx, batchOf(0, c.before)))
			}
			if c.checkpoint {
				_, err := s.PreCommit(ctx, 1)
				must(t, err)
			}
			t.Logf("%d publishes out", s.js.PublishAsyncPending())
			must(t, js.DeleteStream(ctx, "OUT"))
			want := wantDeleted
			if !c.after {
				// On a loaded machine the server may have stored them
				// all before the deletion came.
				want = wantDeletedOrStored
			}
			want(t, "OUT", func(ctx context.Context) error {
				if c.after {
					if err := s.Write(ctx, batchOf(c.before, c.before+20000)); err != nil {
						return err
					}
				}
				_, err := s.PreCommit(ctx, 2)
				return err
			})
		})
	}
}
