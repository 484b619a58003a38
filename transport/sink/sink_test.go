package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// startServer and connect start a real embedded server for the test and
// connect to it (the server may restart; connections reconnect).
func startServer(t testing.TB) *embedded.Server { return embeddedtest.Server(t, embedded.Config{}) }

func connect(t testing.TB, srv *embedded.Server) (*nats.Conn, jetstream.JetStream) {
	return embeddedtest.Connect(t, srv)
}

// batchOf returns records with keys k<i%3> and values v<i> for i in [from,to).
func batchOf(from, to int) []byte {
	var b abi.Builder
	for i := from; i < to; i++ {
		b.Add([]byte("k"+strconv.Itoa(i%3)), []byte("v"+strconv.Itoa(i)), int64(i))
	}
	return append([]byte(nil), b.Bytes()...)
}

// stored is a message of a stream as the tests look at it.
type stored struct{ id, subject, key, value string }

// readStream reads every message of stream in order.
func readStream(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []stored {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Msgs)
	if n == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	for len(out) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of the %d messages stream %s held: %v", len(out), n, stream, ctx.Err())
		}
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, stored{id: m.Headers().Get(jetstream.MsgIDHeader), subject: m.Subject(), key: m.Headers().Get(KeyHeader), value: string(m.Data())})
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// awaitStored waits until stream holds at least n messages, as its info
// says, asking again while the stream has no leader: a sink's flush
// returns once a quorum of a replicated stream stored its messages, and
// the server that answers the info next (a leader just elected, or a
// replica) may not have applied them all yet. It fails t once ctx ends,
// saying how many the stream held.
func awaitStored(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, n uint64) {
	t.Helper()
	var held uint64
	for {
		err := natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, func(ctx context.Context) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			held = info.State.Msgs
			return nil
		})
		if err != nil {
			t.Fatalf("stream %s, waiting for %d messages (%d held): %v", stream, n, held, err)
		}
		if held >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s holds %d messages; want %d: %v", stream, held, n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// streamValues reads every message of stream in order; each must carry
// its record's key.
func streamValues(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []string {
	t.Helper()
	var out []string
	for _, m := range readStream(t, ctx, js, stream) {
		if m.key == "" {
			t.Fatalf("message %q without key", m.value)
		}
		out = append(out, m.value)
	}
	return out
}

func wantValues(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, "v"+strconv.Itoa(i))
	}
	return out
}

func TestCoreSink(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := nc.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewCore(nc, "out")
	if err != nil {
		t.Fatal(err)
	}
	var b abi.Builder
	b.Add(nil, []byte("a"), 0)
	b.Add([]byte("k"), []byte("b"), 0)
	if err := s.Write(ctx, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	// A task's context has no deadline (nats.go's FlushWithContext
	// refuses such a context).
	if _, err := s.PreCommit(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	m1, err := sub.NextMsg(30 * time.Second)
	if err != nil || string(m1.Data) != "a" || m1.Header.Get(KeyHeader) != "" {
		t.Fatalf("first %v %v", m1, err)
	}
	m2, err := sub.NextMsg(30 * time.Second)
	if err != nil || string(m2.Data) != "b" || m2.Header.Get(KeyHeader) != "k" {
		t.Fatalf("second %v %v", m2, err)
	}
}

func TestAtLeastOnceSink(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(mode))
			// No stream given: the sink finds the one that captures the
			// subject, and auto picks the mode the stream allows.
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Subject: "out", MaxPending: 64, IdleCommit: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Mode() != mode {
				t.Fatalf("mode %s, want %s", s.Mode(), mode)
			}
			for i := 0; i < 500; i += 100 {
				if err := s.Write(ctx, batchOf(i, i+100)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.PreCommit(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// After PreCommit returns, everything is stored, in order,
			// each message with its record's key.
			if got := streamValues(t, ctx, js, "OUT"); fmt.Sprint(got) != fmt.Sprint(wantValues(0, 500)) {
				t.Fatalf("stored %d messages: %v", len(got), got)
			}
			// The next checkpoint's records go out the same way; a record
			// without a key gets no key header.
			if err := s.Write(ctx, batchOf(500, 600)); err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, abi.EncodeBatch(abi.Record{Value: []byte("v600")})); err != nil {
				t.Fatal(err)
			}
			if err := s.EndOfInput(ctx); err != nil {
				t.Fatal(err)
			}
			msgs := readStream(t, ctx, js, "OUT")
			if len(msgs) != 601 {
				t.Fatalf("stored %d messages, want 601", len(msgs))
			}
			for i, m := range msgs {
				key := "k" + strconv.Itoa(i%3)
				if i == 600 {
					key = ""
				}
				if m.value != "v"+strconv.Itoa(i) || m.key != key || m.id != "" {
					t.Fatalf("message %d: %+v, want value v%d key %q", i, m, i, key)
				}
			}
		})
	}
}

// A fast batch left open on a quiet input is committed after IdleCommit,
// before the server would drop it.
func TestAtLeastOnceIdleCommit(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishFast))
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(ctx, batchOf(0, 10)); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 10 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the idle batch was not committed: %d messages stored", info.State.Msgs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The sink goes on with a new batch.
	if err := s.Write(ctx, batchOf(10, 20)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := streamValues(t, ctx, js, "OUT"); fmt.Sprint(got) != fmt.Sprint(wantValues(0, 20)) {
		t.Fatalf("stored %v", got)
	}
}

// Messages the stream refuses fail the checkpoint, in either mode: a
// completed checkpoint must never cover output that was not stored.
func TestAtLeastOnceRefusedFailsTheCheckpoint(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startServer(t)
			nc, js := connect(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := outStream(mode)
			cfg.MaxMsgs, cfg.Discard = 50, jetstream.DiscardNew
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Write(ctx, batchOf(0, 100))
			if err == nil {
				_, err = s.PreCommit(ctx, 1)
			}
			if err == nil {
				t.Fatal("a checkpoint covered messages the stream refused")
			}
			// The error says the stream is full, which limit, and what to change.
			if want := "(stream OUT is full: it reached its max_msgs limit and discards new messages; raise the limit, or make it discard old ones)"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
			if full := (*StreamFullError)(nil); !errors.As(err, &full) || full.Stream != "OUT" || full.Limit != "max_msgs" {
				t.Errorf("error %v is no *StreamFullError of OUT's max_msgs", err)
			}
		})
	}
}

func TestAtLeastOnceRefusedConfigs(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishAsync))
	for _, cfg := range []AtLeastOnceConfig{
		{Subject: "nowhere"},                                  // no stream captures it
		{Stream: "MISSING", Subject: "out"},                   // captured by another stream
		{Stream: "OUT", Subject: "out", Publish: PublishFast}, // the stream does not allow batched publish
		{Stream: "OUT", Subject: "out", Publish: PublishAtomic},
		{Stream: "OUT", Subject: "out", Publish: "eventually"},
	} {
		if _, err := NewAtLeastOnce(ctx, nc, cfg); err == nil {
			t.Fatalf("%+v accepted", cfg)
		} else {
			t.Log(err)
		}
	}
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out"})
	if err != nil || s.Mode() != PublishAsync {
		t.Fatalf("auto on a plain stream: %v, %v", s, err)
	}
}

func TestDuplicateWindowRefused(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	need := RequiredDuplicateWindow(time.Minute, 10*time.Minute, time.Minute)
	_, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", MinDuplicateWindow: need})
	if !errors.Is(err, ErrDuplicateWindowTooShort) {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
	if _, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", MinDuplicateWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []PublishMode{PublishAtomic, PublishFast, "eventually"} {
		_, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: mode})
		if err == nil {
			t.Fatalf("publish mode %s accepted on a stream that allows neither atomic nor batched publish", mode)
		}
		t.Log(err)
	}
	s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0"})
	if err != nil || s.Mode() != PublishAsync {
		t.Fatalf("auto on a plain stream: %v, %v", s, err)
	}
}

// A stream that acknowledges messages before writing them can lose output
// a completed checkpoint counted: both JetStream sinks refuse it.
func TestAsyncPersistStreamRefused(t *testing.T) {
	cfg := outStream(PublishFast)
	cfg.PersistMode = jetstream.AsyncPersistMode
	nc, _, ctx := outSetup(t, cfg)
	_, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0"})
	if !errors.Is(err, ErrStreamNotDurable) {
		t.Fatalf("exactly-once: %v", err)
	}
	t.Log(err)
	_, err = NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out"})
	if !errors.Is(err, ErrStreamNotDurable) {
		t.Fatalf("at-least-once: %v", err)
	}
	t.Log(err)
}

// publishModes are the sink's publish modes; each commit test runs in all.
var publishModes = []PublishMode{PublishFast, PublishAtomic, PublishAsync}

// outStream is the configuration of an output stream OUT on which the
// sink's PublishAuto chooses mode.
func outStream(mode PublishMode) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 10 * time.Minute,
		AllowAtomicPublish: mode == PublishAtomic, AllowBatchPublish: mode == PublishFast}
}

// outSetup starts a server, connects, and creates stream cfg; the context
// ends with the test, after at most 20 s.
func outSetup(t *testing.T, cfg jetstream.StreamConfig) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	nc, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return nc, js, ctx
}

// PublishAuto prefers fast batches, then atomic batches, then plain async
// publish, by what the stream allows.
func TestPublishAuto(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, c := range []struct {
		atomic, batched bool
		want            PublishMode
	}{{true, true, PublishFast}, {false, true, PublishFast}, {true, false, PublishAtomic}, {false, false, PublishAsync}} {
		// A stream of its own per case: re-creating a just-deleted stream
		// can race the server's removal of its files.
		name := fmt.Sprintf("OUT%d", i)
		cfg := jetstream.StreamConfig{Name: name, Subjects: []string{"out" + strconv.Itoa(i)}, AllowAtomicPublish: c.atomic, AllowBatchPublish: c.batched}
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: name, Subject: cfg.Subjects[0], Job: "j", Task: "sink0"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Mode() != c.want {
			t.Errorf("allow_atomic=%v allow_batched=%v: mode %s, want %s", c.atomic, c.batched, s.Mode(), c.want)
		}
		s.Close()
	}
}

// The exactly-once sink across crashes: between a checkpoint's completion
// and its commit, and in the middle of a commit. The recovered sink
// re-commits from the snapshot state and the stream holds every output
// record once, in order.
func TestExactlyOnceCrashBetweenCompletionAndCommit(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			srv := startServer(t)
			nc, js := connect(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, outStream(mode)); err != nil {
				t.Fatal(err)
			}
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "sink[0]", BatchSize: 100, MinDuplicateWindow: 5 * time.Minute}
			open := func() *ExactlyOnce {
				s, err := NewExactlyOnce(ctx, nc, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if s.Mode() != mode {
					t.Fatalf("publish mode %s, want %s", s.Mode(), mode)
				}
				return s
			}

			// Checkpoint 1 completes and commits normally.
			s := open()
			must(t, s.Write(ctx, batchOf(0, 150)))
			_, err := s.PreCommit(ctx, 1)
			must(t, err)
			must(t, s.Commit(ctx, 1))
			must(t, s.Wait(ctx))
			if got := streamValues(t, ctx, js, "OUT"); len(got) != 150 {
				t.Fatalf("after commit 1: %d messages", len(got))
			}
			// Checkpoint 2 completes, then the task crashes before Commit(2).
			must(t, s.Write(ctx, batchOf(150, 300)))
			state2, err := s.PreCommit(ctx, 2)
			must(t, err)
			must(t, s.Write(ctx, batchOf(300, 320))) // lost with the crash; replayed later
			if got := streamValues(t, ctx, js, "OUT"); len(got) != 150 {
				t.Fatalf("uncommitted output visible: %d messages", len(got))
			}

			// Recovery from checkpoint 2 re-commits its staged output.
			s = open()
			must(t, s.Recover(ctx, 2, state2))
			// Replay after checkpoint 2; checkpoint 3 completes, and the task
			// crashes in the middle of Commit(3): the first chunk is stored.
			must(t, s.Write(ctx, batchOf(300, 560)))
			state3, err := s.PreCommit(ctx, 3)
			must(t, err)
			cutCommit(t, ctx, s, mode, 3, 130)
			// Recover from checkpoint 3: the whole of 3 is committed again.
			s = open()
			must(t, s.Recover(ctx, 3, state3))
			// Recovering a second time from the same state is harmless too.
			s = open()
			must(t, s.Recover(ctx, 3, state3))
			must(t, s.Write(ctx, batchOf(560, 600)))
			must(t, s.EndOfInput(ctx))

			got := streamValues(t, ctx, js, "OUT")
			if fmt.Sprint(got) != fmt.Sprint(wantValues(0, 600)) {
				t.Fatalf("stream holds %d messages, want v0..v599 once each in order:\n%v", len(got), got)
			}
		})
	}
}

// A sink that shrank on restore re-commits the staged output of a subtask
// that no longer exists (RecoverTask) under that subtask's message ids:
// what the vanished subtask had already published is deduplicated, the
// rest lands once; the sink's own state is recovered beside it.
func TestExactlyOnceRecoverAnotherTasksState(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			srv := startServer(t)
			nc, js := connect(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, outStream(mode)); err != nil {
				t.Fatal(err)
			}
			open := func(task string) *ExactlyOnce {
				s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: task,
					BatchSize: 100, MinDuplicateWindow: 5 * time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			// Two subtasks stage checkpoint 4; out-1 crashes in the middle
			// of its commit (its first records are stored), out-0 before
			// committing at all.
			s0, s1 := open("out-0"), open("out-1")
			must(t, s0.Write(ctx, batchOf(0, 100)))
			state0, err := s0.PreCommit(ctx, 4)
			must(t, err)
			must(t, s1.Write(ctx, batchOf(100, 250)))
			state1, err := s1.PreCommit(ctx, 4)
			must(t, err)
			cutCommit(t, ctx, s1, mode, 4, 60)

			// Restored at parallelism 1: out-0 recovers its own state and
			// out-1's.
			s := open("out-0")
			must(t, s.RecoverTask(ctx, "out-0", 4, state0))
			must(t, s.RecoverTask(ctx, "out-1", 4, state1))
			must(t, s.Write(ctx, batchOf(250, 260)))
			must(t, s.EndOfInput(ctx))

			got := streamValues(t, ctx, js, "OUT")
			seen := map[string]int{}
			for _, v := range got {
				seen[v]++
			}
			for _, v := range wantValues(0, 260) {
				if seen[v] != 1 {
					t.Errorf("%s stored %d times", v, seen[v])
				}
			}
			if len(got) != 260 {
				t.Fatalf("stream holds %d messages, want 260", len(got))
			}
		})
	}
}

// A RecoverTask whose context ends while its re-commit runs (the attempt
// is cancelled during its restore) returns at once, and the commit goes on
// in the background until Close: it must go on under the vanished task's
// message ids, not under the sink's own, or the next attempt's re-commit
// stores every record it published again.
func TestExactlyOnceRecoverTaskCancelledKeepsTheTasksIDs(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(mode))
			open := func(task string) *ExactlyOnce {
				s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: task, BatchSize: 100})
				must(t, err)
				return s
			}
			const n = 3000
			s1 := open("out-1")
			must(t, s1.Write(ctx, batchOf(0, n)))
			state1, err := s1.PreCommit(ctx, 4)
			must(t, err)
			s1.Close()

			// The attempt shrunk to one subtask is cancelled while it
			// re-commits out-1's state; Close lets the commit finish.
			s := open("out-0")
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.RecoverTask(cancelled, "out-1", 4, state1); !errors.Is(err, context.Canceled) {
				t.Fatalf("RecoverTask with its context cancelled: %v", err)
			}
			s.Close()
			// The next attempt recovers the same way.
			s = open("out-0")
			must(t, s.RecoverTask(ctx, "out-1", 4, state1))
			s.Close()

			ids, values := streamIDs(t, ctx, js, "OUT")
			for i, id := range ids {
				if strings.HasPrefix(id, "j/out-0/") {
					t.Fatalf("message %d (%s) published under out-0's id %s", i, values[i], id)
				}
			}
			if strings.Join(values, ",") != strings.Join(wantValues(0, n), ",") {
				t.Fatalf("stream holds %d messages, want v0..v%d once each in order", len(values), n-1)
			}
		})
	}
}

// firstChunk is the first atomic batch of the output s staged first, for
// checkpoint id.
func firstChunk(t *testing.T, s *ExactlyOnce, id int64) atomicChunk {
	t.Helper()
	e := s.staged[0]
	cuts, err := e.cuts()
	must(t, err)
	if e.id != id || len(cuts) == 0 {
		t.Fatalf("staged first: checkpoint %d in %d batches, want checkpoint %d", e.id, len(cuts), id)
	}
	return atomicChunk{rt: &s.route, ckpt: id, batch: e.batch, chunkCut: cuts[0]}
}

// cutCommit publishes the start of checkpoint id's staged output, as a
// commit cut by a crash leaves it in each publish mode: the first n
// records (fast, async), or the first atomic batch of 100 (atomic; the
// sink's BatchSize must be 100).
func cutCommit(t *testing.T, ctx context.Context, s *ExactlyOnce, mode PublishMode, id int64, n int) {
	t.Helper()
	recs, err := abi.DecodeBatch(s.staged[0].batch)
	must(t, err)
	switch mode {
	case PublishAtomic:
		_, err := s.commitChunk(ctx, s.prefix, firstChunk(t, s, id), nil, nil)
		must(t, err)
	case PublishFast:
		var part abi.Builder
		for _, r := range recs[:n] {
			part.AddRecord(r)
		}
		must(t, s.publishFast(ctx, &s.target, s.prefix, []staged{{id: id, batch: part.Bytes()}}))
	default:
		must(t, s.publishAsync(ctx, &s.target, &s.route, s.prefix, id, recs[:n], nil))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	st := []staged{{id: 1, batch: batchOf(0, 3)}, {id: 5, batch: abi.EmptyBatch}}
	got, err := decodeState(encodeState(st))
	if err != nil || len(got) != 2 || got[1].id != 5 || string(got[0].batch) != string(st[0].batch) {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := decodeState([]byte("WEOS\x01\xff\xff\xff\xff")); !errors.Is(err, ErrMalformedState) {
		t.Fatalf("got %v", err)
	}
}

// A server restart in the middle of a commit: the commit may fail or not,
// the recovered sink re-commits the checkpoint after the client reconnected,
// and the stream — whose dedup state survives the restart — holds every
// record once.
func TestExactlyOnceServerRestartDuringCommit(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			srv := startServer(t)
			nc, js := embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, outStream(mode)); err != nil {
				t.Fatal(err)
			}
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "sink[0]", BatchSize: 50, Timeout: time.Second}
			s, err := NewExactlyOnce(ctx, nc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			must(t, s.Write(ctx, batchOf(0, 2000)))
			state, err := s.PreCommit(ctx, 1)
			must(t, err)
			must(t, s.Commit(ctx, 1))
			// Restart once part of the checkpoint is stored.
			for {
				st, err := js.Stream(ctx, "OUT")
				must(t, err)
				info, err := st.Info(ctx)
				must(t, err)
				if info.State.Msgs >= 200 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			embeddedtest.Restart(t, srv, nc)
			werr := s.Wait(ctx)
			t.Logf("commit across the restart: %v", werr)
			s.Close()

			// The task recovers; retry as the job would until it succeeds,
			// each attempt bounded as a deploy is.
			for {
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				s, err = NewExactlyOnce(actx, nc, cfg)
				if err == nil {
					err = s.Recover(actx, 1, state)
					s.Close()
				}
				acancel()
				if err == nil {
					break
				}
				t.Logf("recover: %v", err)
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			got := streamValues(t, ctx, js, "OUT")
			if mode == PublishAsync {
				// With plain async publish the interrupted checkpoint may be
				// stored out of order; each record is still there once.
				slices.SortFunc(got, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
			}
			if fmt.Sprint(got) != fmt.Sprint(wantValues(0, 2000)) {
				t.Fatalf("stream holds %d messages, want v0..v1999 once each", len(got))
			}
		})
	}
}

// A task cancelled with a fast batch open (every recovery cancels one)
// must not leave the batch's acknowledgement subscription — and the
// goroutine nats.go runs for it — on the worker's shared connection.
func TestAtLeastOnceCloseReleasesTheBatch(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishFast))
	before := nc.NumSubscriptions()
	for i := 0; i < 3; i++ {
		s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		must(t, s.Write(ctx, batchOf(0, 10)))
		must(t, s.Close())
	}
	if after := nc.NumSubscriptions(); after != before {
		t.Fatalf("%d subscriptions on the connection after closing, %d before", after, before)
	}
}

// A cancelled task's Write stops before the next record: the fast path
// cannot cancel a publish waiting on the server, so it looks at the
// context between records.
func TestAtLeastOnceWriteStopsWhenCancelled(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishFast))
	s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: time.Hour})
	must(t, err)
	defer s.Close()
	must(t, s.Write(ctx, batchOf(0, 10)))
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := s.Write(cctx, batchOf(10, 20)); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with a cancelled context: %v", err)
	}
	must(t, s.EndOfInput(ctx))
	if got := streamValues(t, ctx, js, "OUT"); len(got) != 10 {
		t.Fatalf("stream holds %d messages, want the 10 written before the cancel", len(got))
	}
}

// A record too large for one NATS message is refused when it is written,
// naming its size and the server's limit, and is never staged: staged, it
// would sit in a checkpoint whose commit always fails, and every recovery
// from that checkpoint would fail again. The largest record the check lets
// through is committed in every publish mode.
func TestExactlyOnceRefusesRecordsLargerThanAMessage(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(mode))
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "sink-0",
				MinDuplicateWindow: time.Minute})
			must(t, err)
			defer s.Close()
			max := int(nc.MaxPayload())
			record := func(valueLen int) []byte {
				var b abi.Builder
				b.Add([]byte("key"), make([]byte, valueLen), 1)
				return append([]byte(nil), b.Bytes()...)
			}
			err = s.Write(ctx, record(max))
			if !errors.Is(err, ErrRecordTooLarge) ||
				!strings.Contains(err.Error(), fmt.Sprintf("a record of %d bytes (key 3, value %d)", max+3, max)) ||
				!strings.Contains(err.Error(), fmt.Sprintf("max_payload of %d bytes", max)) {
				t.Fatalf("write of a %d-byte value: %v", max, err)
			}
			fits := max - 3 - len(KeyHeader) - len("job1/sink-0/") - MessageOverhead
			must(t, s.Write(ctx, record(fits)))
			state, err := s.PreCommit(ctx, 1)
			must(t, err)
			if len(state) > fits+4096 {
				t.Errorf("the refused record was staged: state of %d bytes", len(state))
			}
			must(t, s.Commit(ctx, 1))
			must(t, s.Wait(ctx))
			if got := readStream(t, ctx, js, "OUT"); len(got) != 1 || len(got[0].value) != fits {
				t.Fatalf("stream holds %d messages", len(got))
			}
		})
	}
}

// OnCommitted hears of each checkpoint once its commit is stored: the
// checkpoint Commit was called for (also one that added nothing, once the
// commit before it is stored), under the task whose ids the commit used
// (another one's in RecoverTask), and never the end-of-input commit.
func TestExactlyOnceReportsStoredCommits(t *testing.T) {
	nc, _, ctx := outSetup(t, outStream(PublishFast))
	var mu sync.Mutex
	var got []string
	record := func(task string, id int64) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s@%d", task, id))
		mu.Unlock()
	}
	open := func(task string) *ExactlyOnce {
		s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: task})
		must(t, err)
		s.OnCommitted(record)
		return s
	}
	other := open("out-1")
	must(t, other.Write(ctx, batchOf(0, 5)))
	state1, err := other.PreCommit(ctx, 1)
	must(t, err)
	other.Close()

	s := open("out-0")
	must(t, s.RecoverTask(ctx, "out-1", 1, state1))
	must(t, s.Write(ctx, batchOf(5, 10)))
	_, err = s.PreCommit(ctx, 2)
	must(t, err)
	must(t, s.Commit(ctx, 2))
	_, err = s.PreCommit(ctx, 3) // nothing new
	must(t, err)
	must(t, s.Commit(ctx, 3))
	must(t, s.Wait(ctx))
	must(t, s.Write(ctx, batchOf(10, 12)))
	must(t, s.EndOfInput(ctx))
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	// 3 added nothing: it is reported with 2's commit, or after it. Each
	// commit reports on its own goroutine once it ended, so the recovery's
	// report may come after the next commit's: the order is no contract.
	slices.Sort(got)
	if s := strings.Join(got, " "); s != "out-0@3 out-1@1" && s != "out-0@2 out-0@3 out-1@1" {
		t.Fatalf("reported %q", s)
	}
}

// The commit of an atomic batch waits for the server's answer as long as
// the ack timeout and a millisecond for each message of the batch, at most
// MaxAtomicCommitExtra more: the server answers only once it staged and
// stored them all.
func TestAtomicCommitWaitGrowsWithTheBatch(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, 10*time.Second + time.Millisecond},
		{10_000, 20 * time.Second},
		{20_000, 30 * time.Second},
		{1_000_000, 10*time.Second + MaxAtomicCommitExtra},
	} {
		if got := AtomicCommitWait(10*time.Second, tc.n); got != tc.want {
			t.Errorf("AtomicCommitWait(10s, %d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

// A commit to a stream that is full (a limit with discard new) fails
// saying so, with the limit and what to change, in every publish mode:
// the server's "maximum messages exceeded" named neither, and the job
// failed over into the same refusal until its restart attempts ran out.
func TestExactlyOnceCommitToAFullStream(t *testing.T) {
	for _, mode := range []PublishMode{PublishAsync, PublishFast, PublishAtomic} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := outStream(mode)
			cfg.MaxMsgs, cfg.Discard = 5, jetstream.DiscardNew
			nc, _, ctx := outSetup(t, cfg)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			must(t, s.Write(ctx, batchOf(0, 10)))
			if _, err := s.PreCommit(ctx, 1); err != nil {
				t.Fatal(err)
			}
			err = s.Commit(ctx, 1)
			if err == nil {
				err = s.Wait(ctx) // the commit runs in the background
			}
			want := "(stream OUT is full: it reached its max_msgs limit and discards new messages; raise the limit, or make it discard old ones)"
			if mode == PublishAtomic { // refused whole, none stored: the batch is too large (TestExactlyOnceAtomicBatchLargerThanTheStreamTakes)
				want = "(stream OUT refused an atomic batch of 10 messages whole: the batch is larger than the stream's max_msgs limit of 5"
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("commit of 10 messages to a stream of at most 5: %v; want it to say %q", err, want)
			}
			if full := (*StreamFullError)(nil); !errors.As(err, &full) || full.Stream != "OUT" || full.Limit != "max_msgs" {
				t.Errorf("commit of 10 messages to a stream of at most 5: %v is no *StreamFullError of OUT's max_msgs", err)
			}
		})
	}
}

// An exactly-once sink stages its output in memory until a checkpoint
// takes it: with no checkpoint completing (no coordinator, or every one
// failing), that grew without bound. Past MaxStagedBytes a write fails,
// saying why; a checkpoint starts the count again.
func TestExactlyOnceBoundsWhatItStages(t *testing.T) {
	nc, js, ctx := outSetup(t, outStream(PublishAuto))
	s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "sink-0",
		MinDuplicateWindow: time.Minute, MaxStagedBytes: 4 << 10})
	must(t, err)
	defer s.Close()
	batch := func(n int) []byte {
		var b abi.Builder
		for i := range n {
			b.Add([]byte("k"), []byte(fmt.Sprintf("value %04d", i)), 1)
		}
		return append([]byte(nil), b.Bytes()...)
	}
	must(t, s.Write(ctx, batch(100))) // ~2 KiB
	must(t, s.Write(ctx, batch(50)))
	err = s.Write(ctx, batch(100))
	if !errors.Is(err, ErrStagedTooMuch) || !strings.Contains(err.Error(), "250 records") ||
		!strings.Contains(err.Error(), "past the bound of 4.0 KiB: its checkpoints are not completing") {
		t.Fatalf("a write past the bound: %v", err)
	}
	// A checkpoint takes what was staged: the next writes fit again.
	_, err = s.PreCommit(ctx, 1)
	must(t, err)
	must(t, s.Write(ctx, batch(100)))
	must(t, s.Commit(ctx, 1))
	must(t, s.Wait(ctx))
	if got := readStream(t, ctx, js, "OUT"); len(got) != 150 {
		t.Fatalf("stream holds %d messages, want the 150 staged before the refused write", len(got))
	}
}
