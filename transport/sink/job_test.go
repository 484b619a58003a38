package sink_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/stream"
)

// forward is an operator that emits its input unchanged, after a pause so
// that the input spans many checkpoints.
type forward struct{}

func (forward) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	time.Sleep(time.Millisecond)
	return emit(0, append([]byte(nil), batch...))
}
func (forward) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (forward) Snapshot(context.Context, io.Writer) error                      { return nil }
func (forward) Restore(context.Context, io.Reader) error                       { return nil }
func (forward) CheckpointComplete(context.Context, int64) error                { return nil }
func (forward) Close(context.Context) error                                    { return nil }

// oneTaskCoordinator completes every acknowledged checkpoint of a one-task
// job — except that, once armed, it "crashes" between a checkpoint's
// completion and the notification that would commit it.
type oneTaskCoordinator struct {
	mu        sync.Mutex
	task      *host.Task
	handles   map[int64]string
	completed []int64
	crashAt   int // crash on the completion of this many checkpoints
	crashed   chan int64
	dead      bool // crashed: completes nothing more
}

func (c *oneTaskCoordinator) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	c.mu.Lock()
	if c.dead {
		// The attempt crashed: checkpoints acknowledged after that never
		// complete (a later completed one would be the one to restore).
		c.mu.Unlock()
		return nil
	}
	if n := len(c.completed); n > 0 && id <= c.completed[n-1] {
		// Snapshots are written concurrently, so acknowledgements can come
		// out of order; a checkpoint older than a completed one is
		// subsumed, as the coordinator does, or the test would restore an
		// older checkpoint than the attempt committed.
		c.mu.Unlock()
		return nil
	}
	c.handles[id] = handle
	c.completed = append(c.completed, id)
	crash := len(c.completed) == c.crashAt
	c.dead = crash
	t := c.task
	c.mu.Unlock()
	if crash {
		c.crashed <- id // completed, durable, never committed by this attempt
		return nil
	}
	t.NotifyCheckpointComplete(id)
	return nil
}
func (c *oneTaskCoordinator) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	return nil
}
func (c *oneTaskCoordinator) Failed(ctx context.Context, task string, err error) error {
	return nil
}

// A job — JetStream source, operator, exactly-once sink in one task — that
// crashes between a checkpoint's completion and its commit and recovers
// from that checkpoint: the source rewinds to the checkpointed offset, the
// sink re-commits the staged output, and the output stream holds every
// input message exactly once, in order.
func TestJobExactlyOnceAcrossCrash(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) { jobAcrossCrash(t, mode) })
	}
}

func jobAcrossCrash(t *testing.T, mode sink.PublishMode) {
	nc := embeddedtest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 3000
	fillJobStreams(t, ctx, js, mode, n)
	store := snapshot.NewMemStore()

	// attempt runs the job until stop says so; restore is a snapshot handle.
	attempt := func(restore string, coord *oneTaskCoordinator, stop func(id int64) bool) {
		src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN", MaxBatchRecords: 50})
		if err != nil {
			t.Fatal(err)
		}
		snk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "t[0]", BatchSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		if snk.Mode() != mode {
			t.Fatalf("publish mode %s, want %s", snk.Mode(), mode)
		}
		task, err := host.New(host.Config{Name: "t[0]", Source: src, Operator: forward{}, Sink: snk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: coord, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		coord.mu.Lock()
		coord.task = task
		coord.mu.Unlock()
		tctx, tcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- task.Run(tctx) }()
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for id := int64(1000 * len(restore)); ; id++ {
			select {
			case err := <-done:
				t.Fatalf("task ended: %v", err)
			case cid := <-coord.crashed:
				if stop(cid) {
					tcancel() // the crash
					<-done
					return
				}
			case <-tick.C:
				task.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
				if stop(0) {
					tcancel()
					<-done
					return
				}
			}
		}
	}

	// Attempt 1 crashes on the completion of its 10th checkpoint.
	c1 := &oneTaskCoordinator{handles: map[int64]string{}, crashAt: 10, crashed: make(chan int64, 1)}
	var lost int64
	attempt("", c1, func(id int64) bool {
		if id != 0 {
			lost = id
			return true
		}
		return false
	})
	before := streamLen(t, ctx, js, "OUT")
	t.Logf("crashed after checkpoint %d completed; %d messages committed before", lost, before)

	// Attempt 2 restores the completed-but-uncommitted checkpoint and runs
	// until the output is complete.
	c2 := &oneTaskCoordinator{handles: map[int64]string{}, crashed: make(chan int64, 1)}
	attempt(c1.handles[lost], c2, func(int64) bool { return streamLen(t, ctx, js, "OUT") >= n })
	time.Sleep(100 * time.Millisecond) // a duplicate would show up by now

	got := readAll(t, ctx, js, "OUT")
	for i, v := range got {
		if v != strconv.Itoa(i) {
			t.Fatalf("OUT holds %d messages (want %d); message %d is %q (loss, duplicate or reorder); around it: %v",
				len(got), n, i, v, got[max(0, i-3):min(len(got), i+4)])
		}
	}
	if len(got) != n {
		t.Fatalf("OUT holds %d messages, want %d", len(got), n)
	}
}

func streamLen(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) int {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

func readAll(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) []string {
	t.Helper()
	n := streamLen(t, ctx, js, name)
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for len(out) < n {
		batch, err := cons.Fetch(n-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, string(m.Data()))
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	return out
}

// completeAll completes every acknowledged checkpoint of a one-task job and
// remembers the latest one's handle.
type completeAll struct {
	mu     sync.Mutex
	task   *host.Task
	latest int64
	handle string
}

func (c *completeAll) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	c.mu.Lock()
	if id > c.latest {
		c.latest, c.handle = id, handle
	}
	t := c.task
	c.mu.Unlock()
	t.NotifyCheckpointComplete(id)
	return nil
}
func (c *completeAll) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	return nil
}
func (c *completeAll) Failed(ctx context.Context, task string, err error) error { return nil }

// The server restarts while the job runs. The client reconnects; the task
// either rides it out or fails and is restarted from its latest completed
// checkpoint, as often as needed. The output holds every input message
// exactly once, in order (fast batches: a commit cut by the restart leaves
// a prefix of itself stored).
func TestJobSurvivesServerRestart(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 3000
	fillJobStreams(t, ctx, js, sink.PublishFast, n)
	store := snapshot.NewMemStore()
	coord := &completeAll{}
	restarted, attempts := false, 0
	for streamLenRetry(ctx, js, "OUT") < n {
		if ctx.Err() != nil {
			t.Fatal("job did not finish")
		}
		for nc.Status() != nats.CONNECTED {
			time.Sleep(10 * time.Millisecond)
		}
		attempts++
		src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN", MaxBatchRecords: 50})
		if err != nil {
			t.Fatal(err)
		}
		// Bounded as a deploy is: a request lost to the restart must not
		// hold the attempt for the whole test.
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		snk, err := sink.NewExactlyOnce(dctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "t[0]", Timeout: time.Second})
		dcancel()
		if err != nil {
			t.Logf("attempt %d: %v", attempts, err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		coord.mu.Lock()
		restore := coord.handle
		coord.mu.Unlock()
		task, err := host.New(host.Config{Name: "t[0]", Source: src, Operator: forward{}, Sink: snk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: coord, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		coord.mu.Lock()
		coord.task = task
		coord.mu.Unlock()
		tctx, tcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- task.Run(tctx) }()
		tick := time.NewTicker(5 * time.Millisecond)
	run:
		for id := int64(attempts) * 100000; ; id++ {
			select {
			case err := <-done:
				t.Logf("attempt %d ended: %v", attempts, err)
				break run
			case <-tick.C:
			}
			task.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
			got := streamLenRetry(ctx, js, "OUT")
			if !restarted && got >= n/3 {
				restarted = true
				embeddedtest.Restart(t, srv, nc)
			}
			if got >= n {
				tcancel()
				<-done
				break run
			}
		}
		tick.Stop()
		tcancel()
	}
	if !restarted {
		t.Fatal("the server was never restarted")
	}
	got := readAll(t, ctx, js, "OUT")
	if len(got) != n {
		t.Fatalf("OUT holds %d messages, want %d", len(got), n)
	}
	for i, v := range got {
		if v != strconv.Itoa(i) {
			t.Fatalf("message %d is %q (loss, duplicate or reorder)", i, v)
		}
	}
	t.Logf("%d attempts", attempts)
}

// streamLenRetry is the stream's message count, 0 while the server is away.
func streamLenRetry(ctx context.Context, js jetstream.JetStream, name string) int {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return int(info.State.Msgs)
}

// publishModes are the exactly-once sink's publish modes; each test of a
// commit runs in all of them.
var publishModes = []sink.PublishMode{sink.PublishFast, sink.PublishAtomic, sink.PublishAsync}

// outStream is the configuration of the output stream OUT on which the
// exactly-once sink chooses mode (PublishAuto picks it).
func outStream(mode sink.PublishMode) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 10 * time.Minute,
		AllowAtomicPublish: mode == sink.PublishAtomic, AllowBatchPublish: mode == sink.PublishFast}
}

// fillJobStreams creates the job's input stream IN, holding the numbers
// 0..n-1, and its output stream OUT for an exactly-once sink publishing in
// mode.
func fillJobStreams(t *testing.T, ctx context.Context, js jetstream.JetStream, mode sink.PublishMode, n int) {
	t.Helper()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "IN", Subjects: []string{"in"}},
		outStream(mode),
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync("in", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
}
