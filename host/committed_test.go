package host_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// A job that fails over again and again restores the same checkpoint each
// time, long after its output was first published — past the stream's
// duplicate window, after which JetStream no longer recognizes a
// re-commit as a duplicate. Once the commit is stored the task records so
// next to the snapshot (host.CommitReporter), and every later restore of
// that checkpoint publishes nothing again: the stream holds the output
// once.
func TestRestoreAfterTheDuplicateWindowRepeatsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	const window = 300 * time.Millisecond
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: window, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc, acks := ackWaiter()
	run := func(restore string, input ...stream.Element) (*host.Task, func()) {
		sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "out-0"})
		if err != nil {
			t.Fatal(err)
		}
		si, ri := local.New(local.Options{Name: "up->out-0"})
		for _, e := range input {
			if err := si.Send(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rc, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- task.Run(rctx) }()
		return task, func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("run: %v", err)
			}
		}
	}
	values := func() []string {
		st, err := js.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(m.Data))
		}
		return out
	}

	// Attempt 1: a, b, c, checkpoint 1 completes and is committed.
	var b abi.Builder
	for _, v := range []string{"a", "b", "c"} {
		b.Add(nil, []byte(v), 1)
	}
	task, stop := run("", stream.Records(append([]byte(nil), b.Bytes()...)), stream.BarrierElement(stream.Barrier{ID: 1}))
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	handle := rc.handle(1, "out-0")
	task.NotifyCheckpointComplete(1)
	waitUntil(t, "the commit's marker", func() bool {
		r, err := store.Get(ctx, host.CommittedMarker(handle))
		if err == nil {
			r.Close()
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return false
	})
	stop()
	// Attempts 2 and 3 restore checkpoint 1, each after the window.
	for range 2 {
		time.Sleep(2 * window)
		_, stop := run(handle)
		stop()
	}
	if got := strings.Join(values(), ","); got != "a,b,c" {
		t.Fatalf("stream holds %q, want a,b,c once", got)
	}
}

// A restore hands the sink the state of its snapshot unless the marker of
// that snapshot's commit is there; a marker of another job's snapshot (a
// restore from another job's checkpoint) does not count.
func TestRestoreSkipsACommittedSinkState(t *testing.T) {
	ctx := context.Background()
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, task string) {
		snap := &snapshot.Task{Task: task, CheckpointID: 4, SinkState: []byte("staged")}
		if err := store.Put(ctx, key, bytesReader(snapshot.Encode(snap))); err != nil {
			t.Fatal(err)
		}
	}
	put("j/chk-4/out-0", "out-0")
	put("other/chk-4/out-0", "out-0")
	for _, c := range []struct {
		handle, marker, want string
	}{
		{"j/chk-4/out-0", "", "staged"},
		{"j/chk-4/out-0", "j/chk-4/out-0", ""},
		{"other/chk-4/out-0", "other/chk-4/out-0", "staged"},
	} {
		if c.marker != "" {
			if err := store.Put(ctx, host.CommittedMarker(c.marker), bytesReader(nil)); err != nil {
				t.Fatal(err)
			}
		}
		sk := &reportingSink{}
		_, ri := local.New(local.Options{})
		task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
			Store: store, Restore: c.handle})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		cancel()
		task.Run(rctx)
		if string(sk.recovered) != c.want {
			t.Errorf("restore of %s with marker %q: Recover got %q, want %q", c.handle, c.marker, sk.recovered, c.want)
		}
	}
}

// reportingSink is a CommitReporter that keeps what Recover gets.
type reportingSink struct {
	recovered []byte
}

func (s *reportingSink) OnCommitted(func(string, int64))                  {}
func (s *reportingSink) Write(context.Context, []byte) error              { return nil }
func (s *reportingSink) PreCommit(context.Context, int64) ([]byte, error) { return nil, nil }
func (s *reportingSink) Commit(context.Context, int64) error              { return nil }
func (s *reportingSink) EndOfInput(context.Context) error                 { return nil }
func (s *reportingSink) Close() error                                     { return nil }
func (s *reportingSink) Recover(_ context.Context, _ int64, state []byte) error {
	s.recovered = append([]byte(nil), state...)
	return nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
	}
}

// A job restored from another job's checkpoint has its sink commit what
// that checkpoint staged, but writes no marker of it under its own keys:
// the marker would claim the commit of the job's own checkpoint of that
// ID, which it may well take later (its IDs number from its own), and a
// restore of that one would then skip its re-commit.
func TestRestoreFromAnotherJobMarksNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js := embeddedtest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc, acks := ackWaiter()
	run := func(job, restore string, input ...stream.Element) func() {
		sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: job, Task: "out-0"})
		if err != nil {
			t.Fatal(err)
		}
		si, ri := local.New(local.Options{Name: "up->out-0"})
		for _, e := range input {
			if err := si.Send(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		task, err := host.New(host.Config{Name: "out-0", KeyPrefix: job + "/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rc, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- task.Run(rctx) }()
		return func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("run: %v", err)
			}
		}
	}
	marked := func(handle string) bool {
		r, err := store.Get(ctx, host.CommittedMarker(handle))
		if err == nil {
			r.Close()
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return false
	}

	// Job a stages a, b for its checkpoint 7, which is never committed.
	var b abi.Builder
	b.Add(nil, []byte("a"), 1)
	b.Add(nil, []byte("b"), 1)
	stop := run("a", "", stream.Records(append([]byte(nil), b.Bytes()...)), stream.BarrierElement(stream.Barrier{ID: 7}))
	if id := waitAck(t, acks, rc); id != 7 {
		t.Fatalf("ack %d", id)
	}
	from := rc.handle(7, "out-0")
	stop()

	// Job b restores it: its sink commits a, b (Recover waits for the
	// commit and its report), then b acks its checkpoint 1.
	stop = run("b", from, stream.BarrierElement(stream.Barrier{ID: 1}))
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	stop()
	if st, err := js.Stream(ctx, "OUT"); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("OUT: %+v, %v; want a and b committed", info, err)
	}
	if marked("b/chk-7/out-0") {
		t.Error("job b marked its checkpoint 7 committed, which it has not taken")
	}
	if marked(from) {
		t.Error("job b marked job a's checkpoint 7 committed, under a's keys")
	}
}
