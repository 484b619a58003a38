package node

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
)

// heldPreCommit holds the exactly-once sinks' PreCommit once armed, until
// the task stops: the checkpoint stays pending, with the snapshots of the
// tasks before the sink stored.
type heldPreCommit struct {
	mu      sync.Mutex
	armed   bool
	id      int64         // the checkpoint held
	entered chan struct{} // closed when a PreCommit is held
}

type holdingPreCommit struct {
	*sink.ExactlyOnce
	h *heldPreCommit
}

func (s holdingPreCommit) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := s.hold(ctx, id); err != nil {
		return nil, err
	}
	return s.ExactlyOnce.PreCommit(ctx, id)
}

// PreCommitIncremental is what the task calls (host.IncrementalSink).
func (s holdingPreCommit) PreCommitIncremental(ctx context.Context, id int64, selfContained bool) ([]byte, int64, error) {
	if err := s.hold(ctx, id); err != nil {
		return nil, 0, err
	}
	return s.ExactlyOnce.PreCommitIncremental(ctx, id, selfContained)
}

// hold holds checkpoint id until the task stops, once armed.
func (s holdingPreCommit) hold(ctx context.Context, id int64) error {
	s.h.mu.Lock()
	armed := s.h.armed
	if armed && s.h.id == 0 {
		s.h.id = id
		close(s.h.entered)
	}
	s.h.mu.Unlock()
	if armed {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// A coordinator stopping while its NATS server is gone does not wait for
// the checkpoint discards it cannot do (each took the store's timeouts:
// 40 s for three jobs, 30 s of them the discards' bound): it gives them
// up at once, saying how many it left, and the next coordinator to resume
// the job does them — here the objects of the checkpoint that was
// pending, which never completes. The workers' unregistration does not
// wait for the server either (nats.go's flush waited 10 s).
func TestShutdownWithNATSGone(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a NATS server under a running job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{Port: natsconntest.FreePort(t)})
	h := &heldPreCommit{entered: make(chan struct{})}
	hooks := &worker.Hooks{Sink: func(_, _ string, s host.Sink) host.Sink {
		if e, ok := s.(*sink.ExactlyOnce); ok {
			return holdingPreCommit{e, h}
		}
		return s
	}}
	const undone = "checkpoint discards left undone: the checkpoint store is out of reach; a coordinator that resumes the job does them"
	said := make(chan struct{})
	log := slog.New(&messageWatch{Handler: testLog().Handler(), msg: undone, seen: said, once: new(sync.Once)})
	n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: srv.ClientURL()}, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Hooks: hooks, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			n.Close()
		}
	}()
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	mod, err := filepath.Abs("../../../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("gone.yaml", []byte(fmt.Sprintf(`name: gone
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: pass, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: pass}}]
checkpointing: {interval: 50ms}
`, mod)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "gone", "two checkpoints", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 2 })
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	select {
	case <-h.entered:
	case <-ctx.Done():
		t.Fatal("no checkpoint reached the sink")
	}
	// The source's and the operator's snapshots of the held checkpoint
	// are stored once the coordinator has their acks.
	waitUntil(t, ctx, "the acks of the held checkpoint's first two tasks", func() bool {
		cps, err := n.API.Checkpoints(ctx, "gone")
		for _, c := range cps {
			if c.ID == h.id {
				return err == nil && c.Acked == 2
			}
		}
		return false
	})

	srv.Shutdown()
	done := make(chan time.Duration, 1)
	start := time.Now()
	go func() { n.Close(); done <- time.Since(start) }()
	select {
	case d := <-done:
		closed = true
		t.Logf("shut down in %s with NATS gone", d)
	case <-ctx.Done():
		t.Fatal("the node did not shut down with NATS gone")
	}
	select {
	case <-said:
	default:
		t.Fatalf("the node did not say that it left checkpoint discards undone")
	}

	// The next start resumes the job and removes what the held
	// checkpoint stored.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	_, js := embeddedtest.Connect(t, srv)
	cat := openCatalog(t, ctx, js)
	if left, err := cat.Leftovers(ctx, "gone"); err != nil || len(left[h.id]) == 0 {
		t.Fatalf("the held checkpoint %d left no objects (%v): %v", h.id, err, left)
	}
	n2, err := Start(ctx, Options{NATS: &natsconn.Options{URL: srv.ClientURL()}, Coordinator: true, Workers: 1, WorkerID: "w2",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	waitUntil(t, ctx, fmt.Sprintf("the objects of held checkpoint %d removed", h.id), func() bool {
		left, err := cat.Leftovers(ctx, "gone")
		return err == nil && len(left[h.id]) == 0
	})
	waitJob(t, ctx, n2, "gone", "the resumed job running", running)
}

// openCatalog opens the checkpoints a coordinator keeps in JetStream.
func openCatalog(t *testing.T, ctx context.Context, js jetstream.JetStream) *checkpoint.Catalog {
	t.Helper()
	state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &checkpoint.Catalog{Meta: meta, State: state}
}
