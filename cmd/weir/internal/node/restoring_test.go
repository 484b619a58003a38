package node

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/sink"
)

// recoveryGate holds the recovery of every exactly-once sink task of a
// restored job (Sink.Recover, which re-publishes the output a checkpoint
// staged) until it is opened, as a large staged backlog would.
type recoveryGate struct {
	once    sync.Once
	entered chan struct{} // closed when a recovery first waits
	open    chan struct{}
}

type slowRecovery struct {
	*sink.ExactlyOnce
	g *recoveryGate
}

func (s slowRecovery) Recover(ctx context.Context, id int64, state []byte) error {
	s.g.once.Do(func() { close(s.g.entered) })
	select {
	case <-s.g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.ExactlyOnce.Recover(ctx, id, state)
}

// A job restored from a checkpoint whose sink takes longer to recover than
// the checkpoint timeout must not take checkpoints meanwhile: one would
// wait for the recovering sink and expire, the job (no checkpoint failure
// tolerated) would fail over, restore the same checkpoint and loop. The
// coordinator starts checkpointing once every task reported running;
// until then the job's status lists the restoring tasks, and a savepoint
// that cannot wait for them is refused, naming them.
func TestSlowRestoreTakesNoCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := &recoveryGate{entered: make(chan struct{}), open: make(chan struct{})}
	defer func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}()
	hooks := &worker.Hooks{Sink: func(_, _ string, s host.Sink) host.Sink {
		if e, ok := s.(*sink.ExactlyOnce); ok {
			return slowRecovery{e, g}
		}
		return s
	}}
	n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Hooks: hooks,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, js, "OUT", "out")
	mod, err := filepath.Abs("../../../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 500 * time.Millisecond
	spec, err := jobspec.Parse("slow.yaml", []byte(fmt.Sprintf(`name: slow
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: pass, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: pass}}]
checkpointing: {interval: 50ms, timeout: %s}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 100}
`, mod, timeout)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(count int) {
		t.Helper()
		for i := 0; i < count; i++ {
			if _, err := js.Publish(ctx, "in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	outHolds := func(want uint64) {
		t.Helper()
		waitUntil(t, ctx, fmt.Sprintf("OUT to hold %d messages", want), func() bool {
			s, err := js.Stream(ctx, "OUT")
			return err == nil && s.CachedInfo().State.Msgs >= want
		})
	}
	publish(20)
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	outHolds(20)
	from := stopWithSavepoint(t, ctx, n, "slow")
	publish(10)

	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "slow", From: from}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("the restored sink never recovered")
	}
	began := time.Now()
	// The source and operator run; the sink is the one task left restoring.
	st := waitJob(t, ctx, n, "slow", "the sink the only task restoring", func(st control.JobStatus) bool {
		return len(st.Failures) > 0 || st.State.Terminal() || (running(st) && len(st.Restoring) == 1)
	})
	if !running(st) || len(st.Failures) > 0 || len(st.Restoring) != 1 || !strings.HasPrefix(st.Restoring[0], "out") {
		t.Fatalf("while the sink restores: %s (%s), attempt %d, restoring %v, failures %+v",
			st.State, st.Reason, st.Attempt, st.Restoring, st.Failures)
	}
	attempt := st.Attempt
	// The savepoint waits for the restore as long as the checkpoint
	// timeout allows, then says what it waited for.
	if _, err := n.API.Savepoint(ctx, "slow"); err == nil || !strings.Contains(err.Error(), "still restore their state ("+st.Restoring[0]+")") {
		t.Errorf("savepoint while the sink restores: %v; want it refused, naming the sink", err)
	}
	// The recovery outlasts the checkpoint timeout several times over:
	// a checkpoint triggered during it would have expired.
	time.Sleep(time.Until(began.Add(4 * timeout)))
	close(g.open)

	st = waitJob(t, ctx, n, "slow", "a checkpoint after the restore", func(st control.JobStatus) bool {
		return st.State.Terminal() || st.Attempt != attempt || (running(st) && st.LatestCheckpoint > st.RestoredFrom)
	})
	if st.State != control.JobRunning || st.Attempt != attempt || len(st.Failures) > 0 || len(st.Restoring) > 0 {
		t.Fatalf("after the slow restore: %s (%s), attempt %d (want %d), restoring %v, failures %+v",
			st.State, st.Reason, st.Attempt, attempt, st.Restoring, st.Failures)
	}
	outHolds(30)
	stopWithSavepoint(t, ctx, n, "slow")
	s, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 30 {
		t.Errorf("OUT holds %d messages, want 30", got)
	}
}
