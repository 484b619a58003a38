package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// PublishAuto of an at-least-once sink picks atomic batches on a server
// that fsyncs every write, where the stream allows atomic publish; fast
// batches elsewhere where it allows batched publish; else async publish.
// Atomic batches asked for explicitly need allow_atomic.
func TestResolveAtLeastOnceMode(t *testing.T) {
	for _, c := range []struct {
		mode            PublishMode
		atomic, batched bool
		fsync           bool
		want            PublishMode
	}{
		{PublishAuto, true, true, false, PublishFast},
		{PublishAuto, true, true, true, PublishAtomic},
		{"", true, false, true, PublishAtomic},
		{PublishAuto, false, true, true, PublishFast},
		{PublishAuto, true, false, false, PublishAsync},
		{PublishAuto, false, false, true, PublishAsync},
		{PublishAtomic, true, false, false, PublishAtomic},
		{PublishAtomic, true, true, false, PublishAtomic},
		{PublishFast, true, true, true, PublishFast},
		{PublishAsync, true, true, true, PublishAsync},
	} {
		got, err := ResolveAtLeastOnceMode(c.mode, jetstream.StreamConfig{Name: "OUT", AllowAtomicPublish: c.atomic, AllowBatchPublish: c.batched}, c.fsync)
		if err != nil || got != c.want {
			t.Errorf("mode %q, allow_atomic %v, allow_batched %v, fsync each write %v: %s, %v; want %s", c.mode, c.atomic, c.batched, c.fsync, got, err, c.want)
		}
	}
}

// A stream that does not allow atomic publish refuses an at-least-once
// sink in publish mode atomic at once, in one line naming the stream and
// what to change.
func TestAtLeastOnceAtomicNeedsAllowAtomic(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishFast))
	_, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic})
	want := "at-least-once sink out (stream OUT): stream OUT does not allow atomic publish, which publish mode atomic needs: set allow_atomic on the stream, or use publish mode auto"
	if err == nil || err.Error() != want {
		t.Fatalf("publish mode atomic on a stream without allow_atomic: %v; want %q", err, want)
	}
	// Auto on the server that fsyncs every write keeps fast batches there.
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", FsyncEachWrite: true})
	must(t, err)
	defer s.Close()
	if s.Mode() != PublishFast || strings.Contains(s.Guarantee(), "atomic") {
		t.Fatalf("auto on a stream without allow_atomic: mode %s, guarantee %q", s.Mode(), s.Guarantee())
	}
}

// In atomic mode the sink publishes each batch as it fills, before any
// checkpoint, and the rest at the checkpoint: after PreCommit the stream
// holds every record, in order, each with its key, and only the first
// message of each batch carries a message id.
func TestAtLeastOnceAtomicBatches(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishAtomic))
	// Auto, on a server said to fsync every write.
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", FsyncEachWrite: true, BatchSize: 100, IdleCommit: time.Hour})
	must(t, err)
	defer s.Close()
	if s.Mode() != PublishAtomic || !strings.HasSuffix(s.Guarantee(), AtomicBatchesNote) {
		t.Fatalf("mode %s, guarantee %q; want atomic batches", s.Mode(), s.Guarantee())
	}
	for i := 0; i < 250; i += 70 {
		must(t, s.Write(ctx, batchOf(i, min(i+70, 250))))
	}
	// The two full batches go out without a checkpoint.
	awaitStored(t, ctx, js, "OUT", 200)
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	msgs := readStream(t, ctx, js, "OUT")
	if got := valuesOf(msgs); !slices.Equal(got, wantValues(0, 250)) {
		t.Fatalf("after checkpoint 1 the stream holds %v", got)
	}
	// The next checkpoint's records go out the same way.
	must(t, s.Write(ctx, batchOf(250, 310)))
	must(t, s.EndOfInput(ctx))
	msgs = readStream(t, ctx, js, "OUT")
	if got := valuesOf(msgs); !slices.Equal(got, wantValues(0, 310)) {
		t.Fatalf("after end of input the stream holds %v", got)
	}
	ids := map[string]bool{}
	for i, m := range msgs {
		if want := fmt.Sprintf("k%d", i%3); m.key != want {
			t.Fatalf("message %d: key %q, want %q", i, m.key, want)
		}
		// Batches: 0-99, 100-199, 200-249 (checkpoint 1), 250-309 (end of input).
		first := i == 0 || i == 100 || i == 200 || i == 250
		if first != (m.id != "") || first && ids[m.id] {
			t.Fatalf("message %d: id %q; want one id per batch, on its first message", i, m.id)
		}
		ids[m.id] = true
	}
}

// A quiet input does not keep records back: after IdleCommit without a
// record the batch being filled goes out short of its size.
func TestAtLeastOnceAtomicIdleCommit(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishAtomic))
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic, IdleCommit: 20 * time.Millisecond})
	must(t, err)
	defer s.Close()
	must(t, s.Write(ctx, batchOf(0, 10)))
	awaitStored(t, ctx, js, "OUT", 10)
	must(t, s.Write(ctx, batchOf(10, 20)))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	if got := streamValues(t, ctx, js, "OUT"); !slices.Equal(got, wantValues(0, 20)) {
		t.Fatalf("stored %v", got)
	}
}

// A server restart while the sink's atomic batches go out loses nothing:
// a batch it cut is sent again whole, by the sink (its commit got no
// answer, or the new server did not know the batch) or, when the sink
// failed, by the job's replay from the last checkpoint. The stream then
// holds every record, the first copies in order.
func TestAtLeastOnceAtomicServerRestart(t *testing.T) {
	srv := startServer(t)
	nc, js := embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := js.CreateStream(ctx, outStream(PublishAtomic))
	must(t, err)
	cfg := AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic, BatchSize: 50, Timeout: time.Second, IdleCommit: time.Hour}
	s, err := NewAtLeastOnce(ctx, nc, cfg)
	must(t, err)
	must(t, s.Write(ctx, batchOf(0, 100)))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)

	// Checkpoint 2's records, cut into batches of 50 as they are written;
	// the server restarts once part of them is stored.
	const n = 3000
	werr := make(chan error, 1)
	go func() {
		err := s.Write(ctx, batchOf(100, n))
		if err == nil {
			_, err = s.PreCommit(ctx, 2)
		}
		werr <- err
	}()
	awaitStored(t, ctx, js, "OUT", 300)
	embeddedtest.Restart(t, srv, nc)
	err = <-werr
	s.Close()
	if err != nil {
		// The job recovers from checkpoint 1 and replays what came after
		// it, as often as it takes.
		t.Logf("checkpoint 2 across the restart: %v; the job replays it", err)
		for {
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			s, err = NewAtLeastOnce(actx, nc, cfg)
			if err == nil {
				err = s.Write(actx, batchOf(100, n))
				if err == nil {
					_, err = s.PreCommit(actx, 2)
				}
				s.Close()
			}
			acancel()
			if err == nil {
				break
			}
			t.Logf("replay: %v", err)
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		t.Log("checkpoint 2 completed across the restart: the sink sent again what the restart cut")
	}
	got := streamValues(t, ctx, js, "OUT")
	first := firstCopies(got)
	t.Logf("%d records stored twice", len(got)-len(first))
	if !slices.Equal(first, wantValues(0, n)) {
		t.Fatalf("stream holds %d records, %d different; want v0..v%d, the first copies in order", len(got), len(first), n-1)
	}
}

// A batch sent again after a try that was stored after all (its answer
// lost: a restart, a leader gone) is refused whole for its first message's
// id, and counts as stored: the stream holds it once.
func TestAtLeastOnceAtomicBatchSentAgainIsStoredOnce(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishAtomic))
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic, IdleCommit: time.Hour})
	must(t, err)
	defer s.Close()
	b := &atomicBatch{id: "batch-1"}
	for i := range 20 {
		b.recs.add([]byte("k"), []byte(fmt.Sprint("v", i)), 0)
	}
	must(t, s.sendBatch(ctx, b))
	must(t, s.sendBatch(ctx, b))
	if got := streamValues(t, ctx, js, "OUT"); !slices.Equal(got, wantValues(0, 20)) {
		t.Fatalf("a batch sent twice: the stream holds %v", got)
	}
}

// A batch the stream refuses (it is full) fails the checkpoint, naming the
// stream and the limit, and the sink fails from then on.
func TestAtLeastOnceAtomicRefusedFailsTheSink(t *testing.T) {
	cfg := outStream(PublishAtomic)
	cfg.MaxMsgs, cfg.Discard = 50, jetstream.DiscardNew
	nc, _, ctx := outSetup(t, cfg)
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic, BatchSize: 30, IdleCommit: time.Hour})
	must(t, err)
	defer s.Close()
	must(t, s.Write(ctx, batchOf(0, 30)))
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	must(t, s.Write(ctx, batchOf(30, 60)))
	_, err = s.PreCommit(ctx, 2)
	if full := (*StreamFullError)(nil); !errors.As(err, &full) || full.Stream != "OUT" || full.Limit != "max_msgs" {
		t.Fatalf("checkpoint 2 past the stream's max_msgs: %v; want a *StreamFullError of OUT's max_msgs", err)
	}
	if err := s.Write(ctx, batchOf(60, 61)); err == nil {
		t.Fatal("a write after the failure was taken")
	}
}

// A sink closed with batches queued stops its sender: Close returns, and
// the connection is left as the sink found it.
func TestAtLeastOnceAtomicClose(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishAtomic))
	before := nc.NumSubscriptions()
	for i := 0; i < 3; i++ {
		s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: PublishAtomic, BatchSize: 10, IdleCommit: time.Hour})
		must(t, err)
		must(t, s.Write(ctx, batchOf(0, 15)))
		must(t, s.Close())
		if _, err := s.PreCommit(ctx, 1); err == nil {
			t.Fatal("a checkpoint of a closed sink completed")
		}
	}
	if after := nc.NumSubscriptions(); after != before {
		t.Fatalf("%d subscriptions on the connection after closing, %d before", after, before)
	}
}

// valuesOf is the values of msgs.
func valuesOf(msgs []stored) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.value
	}
	return out
}
