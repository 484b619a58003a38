package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// oneNode starts a node with the coordinator and one worker on an
// embedded server, closed when the test ends, and builds the named Go
// example guests: it returns the node and each guest's .wasm path.
func oneNode(t *testing.T, ctx context.Context, examples ...string) (*Node, map[string]string) {
	t.Helper()
	return oneNodeHooked(t, ctx, nil, examples...)
}

// oneNodeHooked is oneNode with the worker's parts wrapped by hooks (nil:
// none).
func oneNodeHooked(t *testing.T, ctx context.Context, hooks *worker.Hooks, examples ...string) (*Node, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	mods := map[string]string{}
	for _, name := range examples {
		p := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/"+name), 0o644); err != nil {
			t.Fatal(err)
		}
		mods[name] = p
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Hooks: hooks, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n, mods
}

// testHeartbeatTimeout declares a worker of a test node lost. A crash is
// noticed after it, so it is short; a loaded machine can starve a live
// worker's heartbeats (every 100 ms) for a second, and with a timeout of
// 1 s a scenario failed over again and again and never took a checkpoint.
const testHeartbeatTimeout = 3 * time.Second

// waitJob waits until job's status satisfies cond and returns it. Timed
// out, it says where the job stood.
func waitJob(t *testing.T, ctx context.Context, n *Node, job, what string, cond func(control.JobStatus) bool) control.JobStatus {
	t.Helper()
	var (
		st  control.JobStatus
		err error
	)
	if !poll(ctx, func() bool {
		st, err = n.API.Job(ctx, job)
		return err == nil && cond(st)
	}) {
		t.Fatalf("timed out waiting for %s; job %s: %s (%s), attempt %d, %d restarts, latest checkpoint %d, failures %+v (err %v)",
			what, job, st.State, st.Reason, st.Attempt, st.Restarts, st.LatestCheckpoint, st.Failures, err)
	}
	return st
}

func running(st control.JobStatus) bool { return st.State == control.JobRunning }

// stopWithSavepoint stops job with a savepoint (StopJob) and returns the
// savepoint's ID to restore from. It waits for the job to run first: its
// tasks may process input before the coordinator has every deploy's
// answer, and a stop before then is refused ("created, not running").
func stopWithSavepoint(t *testing.T, ctx context.Context, n *Node, job string) string {
	t.Helper()
	waitJob(t, ctx, n, job, job+" running", running)
	sp, err := n.API.StopJob(ctx, job)
	if err != nil || sp.Status != control.CheckpointCompleted {
		t.Fatalf("stop: %+v, %v", sp, err)
	}
	st, err := n.API.Job(ctx, job)
	if err != nil || st.State != control.JobCanceled || st.StoppedWithSavepoint != sp.ID || st.Reason != fmt.Sprintf("stopped with savepoint %d", sp.ID) {
		t.Fatalf("stopped job: %+v, %v", st, err)
	}
	return fmt.Sprint(sp.ID)
}

// keyedInput publishes records keyed k00, k01, ... (cycling through keys of
// them) to subjects in.KEY of stream IN, with the Weir-Key header, and
// counts what it sent per key as the job's output names it (outKey).
type keyedInput struct {
	t      *testing.T
	ctx    context.Context
	js     jetstream.JetStream
	keys   int
	value  func(key string) []byte
	outKey func(key string) string
	sent   map[string]int
	total  int
	// diagnose, when set, tells what the job is doing when await times
	// out.
	diagnose func() string
}

func newKeyedInput(t *testing.T, ctx context.Context, js jetstream.JetStream, keys int) *keyedInput {
	return &keyedInput{t: t, ctx: ctx, js: js, keys: keys, sent: map[string]int{},
		value: func(k string) []byte { return []byte(k) }, outKey: func(k string) string { return k }}
}

// publish sends count records and waits until OUT holds an output for
// every record sent so far.
func (in *keyedInput) publish(count int) {
	in.t.Helper()
	in.send(count)
	in.await()
}

// send sends count records.
func (in *keyedInput) send(count int) {
	in.t.Helper()
	for i := 0; i < count; i++ {
		k := fmt.Sprintf("k%02d", (in.total+i)%in.keys)
		in.sent[in.outKey(k)]++
		m := nats.NewMsg("in." + k)
		m.Header.Set("Weir-Key", k)
		m.Data = in.value(k)
		if _, err := in.js.PublishMsg(in.ctx, m); err != nil {
			in.t.Fatal(err)
		}
	}
	in.total += count
}

// await waits until OUT holds an output for every record sent so far.
func (in *keyedInput) await() {
	in.t.Helper()
	stream, err := in.js.Stream(in.ctx, "OUT")
	if err != nil {
		in.t.Fatal(err)
	}
	var (
		msgs uint64
		last error
	)
	if !poll(in.ctx, func() bool {
		info, err := stream.Info(in.ctx)
		if last = err; err != nil {
			return false
		}
		msgs = info.State.Msgs
		return int(msgs) >= in.total
	}) {
		why := ""
		if in.diagnose != nil {
			why = "; " + in.diagnose()
		}
		in.t.Fatalf("timed out waiting for %d outputs: OUT holds %d (last error %v)%s", in.total, msgs, last, why)
	}
}

// checkCounts reads OUT (exactly one output per record sent) and requires
// every key's running counts to go 1..n with no gap and no repeat.
func (in *keyedInput) checkCounts() {
	in.t.Helper()
	checkRunningCounts(in.t, readCounts(in.t, in.ctx, in.js, in.total, true), in.sent)
}
