package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// TestStartFailsCleanly: a node that cannot start returns the error
// (it used to panic on a nil *Node) and releases what it had started, so
// the same port can be used again at once.
func TestStartFailsCleanly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A worker whose NATS is not there (weir worker started while weir up
	// is down).
	port := natsconntest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Workers: 1, DataDir: t.TempDir()}); err == nil {
		n.Close()
		t.Fatal("started without a NATS server")
	}

	// The embedded server starts, then the coordinator fails (its context
	// is done): the server must be shut down again.
	dead, stop := context.WithCancel(ctx)
	stop()
	dir := t.TempDir()
	if n, err := Start(dead, Options{DataDir: dir, Port: port, Coordinator: true, Workers: 1}); err == nil {
		n.Close()
		t.Fatal("started with a canceled context")
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: port, Coordinator: true, Workers: 1, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start on the port of the failed start: %v", err)
	}
	n.Close()
}

// TestCheckpointStoreMismatch runs 'weir up -workers 0' (checkpoints in
// its data directory) with a 'weir worker' in another process (checkpoints
// in JetStream, its default). The coordinator could restore none of the
// worker's snapshots: the first failover would start the job over from
// nothing and its exactly-once sink would repeat everything it had
// committed. The worker is refused when it joins, saying why, and stops;
// no job is placed on it (one was, and failed for good: the worker
// refuses such a deploy); a worker on the coordinator's store runs the
// job.
func TestCheckpointStoreMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, startWorker := upWithoutWorkers(t, ctx)
	submit := func(name string) control.JobStatus {
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 100}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		return waitJob(t, ctx, up, name, "a checkpoint or the end", func(st control.JobStatus) bool {
			return st.LatestCheckpoint >= 1 || st.State.Terminal()
		})
	}

	var logged syncBuffer
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: up.Server.ClientURL()}, Workers: 1, WorkerID: "w1",
		DataDir: t.TempDir(), CheckpointStore: StoreJetStream, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	// The refusal is Start's error, which weir worker prints; the log
	// does not say it too.
	if strings.Contains(logged.String(), "places no tasks") {
		t.Errorf("the refusal is logged besides Start's error:\n%s", logged.String())
	}
	if err == nil {
		w.Close()
		t.Fatal("a worker on another checkpoint store joined")
	}
	// The line leads with the cause, naming the worker.
	if want := "worker w1: the coordinator places no tasks on it: it writes checkpoints to jetstream"; !strings.HasPrefix(err.Error(), want) ||
		!strings.Contains(err.Error(), "give 'weir up' and 'weir worker' the same -checkpoint-store: jetstream") {
		t.Fatalf("a worker on another checkpoint store: %v; want the coordinator's refusal, %q…", err, want)
	}
	t.Logf("refused: %v", err)
	if ws, err := up.API.Workers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("live workers %+v (%v); want none", ws, err)
	}

	startWorker("w2", StoreDir, 0)
	if st := submit("match"); st.State != control.JobRunning {
		t.Fatalf("a worker on the coordinator's checkpoint store: status %+v", st)
	}
}

// TestNATSOutageDuringFailover keeps checkpoints in JetStream (as every
// multi-process setup does) and stops the NATS server for a few seconds:
// the coordinator declares the worker lost and fails the job over while
// the server is still down, so reading the latest checkpoint fails. The
// job must wait for its checkpoints instead of starting over from nothing
// (which replays the whole input and repeats every count the exactly-once
// sink had committed): afterwards every key's counts go 1..n once.
func TestNATSOutageDuringFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end NATS outage: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A fixed port: the server is started again on it after the outage.
	readFailed := make(chan struct{})
	log := slog.New(&messageWatch{Handler: testLog().Handler(), msg: "reading checkpoints failed", seen: readFailed, once: new(sync.Once)})
	n, err := Start(ctx, Options{DataDir: dir, Port: natsconntest.FreePort(t), Coordinator: true, Workers: 1, WorkerID: "w1",
		CheckpointStore: StoreJetStream, HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond,
		Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("counts.yaml", []byte(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+mod+`, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 100}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in := newKeyedInput(t, ctx, n.JS, 5)
	in.publish(200)
	before := waitJob(t, ctx, n, "counts", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })

	n.Server.Shutdown()
	// The worker is lost after the heartbeat timeout; the failover (job
	// record, cancel: 5s each to time out) reads the checkpoints while the
	// server is down, and fails.
	select {
	case <-readFailed:
	case <-ctx.Done():
		t.Fatal("the failover never read the checkpoints while the server was down")
	}
	if err := n.Server.Restart(); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "counts", "a checkpoint after the outage", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint > before.LatestCheckpoint || st.State.Terminal()
	})
	if st.State != control.JobRunning || st.Attempt < 2 {
		t.Fatalf("after the outage: %+v", st)
	}
	t.Logf("after the outage: attempt %d, restored from %d", st.Attempt, st.RestoredFrom)
	in.publish(100)
	in.checkCounts()
}

// messageWatch passes records on to Handler and closes seen at the first
// whose message is msg.
type messageWatch struct {
	slog.Handler
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (h *messageWatch) Enabled(context.Context, slog.Level) bool { return true }

func (h *messageWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *messageWatch) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &messageWatch{Handler: h.Handler.WithAttrs(attrs), msg: h.msg, seen: h.seen, once: h.once}
}

func (h *messageWatch) WithGroup(name string) slog.Handler {
	return &messageWatch{Handler: h.Handler.WithGroup(name), msg: h.msg, seen: h.seen, once: h.once}
}

// testLog discards, or logs to stderr when WEIR_E2E_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("WEIR_E2E_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A node logs its NATS connection dropping and coming back, one line each
// (the operator of a worker otherwise saw only nats.go's bare "write:
// broken pipe on connection [8]"), and nothing when it closes on purpose.
func TestNodeLogsNATSConnectionLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs syncBuffer
	n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: natsconntest.FreePort(t), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	awaitLog := func(want string) {
		t.Helper()
		for !strings.Contains(logs.String(), want) {
			select {
			case <-ctx.Done():
				t.Fatalf("no %q in the log:\n%s", want, logs.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	n.Server.Shutdown()
	awaitLog(`level=WARN msg="NATS connection lost; reconnecting"`)
	if err := n.Server.Restart(); err != nil {
		t.Fatal(err)
	}
	awaitLog(`level=WARN msg="NATS connection restored" server=nats://127.0.0.1:`)
	before := strings.Count(logs.String(), "NATS connection lost")
	n.Close()
	if after := strings.Count(logs.String(), "NATS connection lost"); after != before {
		t.Errorf("closing the node logged a lost connection:\n%s", logs.String())
	}
}

// A worker tells the coordinator the host it runs on (the coordinator
// logged host="" for every worker).
func TestWorkerReportsItsHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1", Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var ws []control.Heartbeat
	waitUntil(t, ctx, "the worker listed", func() bool {
		ws = n.Manager.Control().Workers()
		return len(ws) == 1
	})
	if ws[0].Worker.ID != "w1" || ws[0].Worker.Host != host {
		t.Errorf("worker listed as %+v, want w1 on %s", ws[0].Worker, host)
	}
}

// upWithoutWorkers starts 'weir up -workers 0' (NATS and the coordinator,
// checkpoints in its data directory) with the uppercase guest built beside
// it, for jobs to name as mod; startWorker starts a 'weir worker' in a
// node of its own, connected by URL, with checkpoints in store, taking at
// most slots tasks (0: no limit).
func upWithoutWorkers(t *testing.T, ctx context.Context) (up *Node, mod string, startWorker func(id, store string, slots int) *Node) {
	t.Helper()
	dir := t.TempDir()
	mod = filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	up, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, HeartbeatTimeout: testHeartbeatTimeout, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	startWorker = func(id, store string, slots int) *Node {
		t.Helper()
		w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: up.Server.ClientURL()}, Workers: 1, WorkerID: id,
			WorkerSlots: slots, DataDir: dir, CheckpointStore: store, HeartbeatInterval: 100 * time.Millisecond, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	return up, mod, startWorker
}

// The embedded server fsyncs as Options say (weir up -sync): every write
// before its acknowledgement, or at the interval given.
func TestEmbeddedServerSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		always   bool
		interval time.Duration
	}{{always: true}, {interval: 1500 * time.Millisecond}} {
		n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, SyncAlways: c.always, SyncInterval: c.interval})
		if err != nil {
			t.Fatal(err)
		}
		got := n.Server.NATSServer().JetStreamConfig()
		n.Close()
		if got.SyncAlways != c.always || c.interval > 0 && got.SyncInterval != c.interval {
			t.Errorf("Options{SyncAlways: %v, SyncInterval: %v}: the server runs with sync_always %v, sync_interval %v",
				c.always, c.interval, got.SyncAlways, got.SyncInterval)
		}
	}
}
