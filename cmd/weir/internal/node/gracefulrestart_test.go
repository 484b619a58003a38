package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// TestGracefulCoordinatorRestartKeepsTheTasks: a coordinator stopped on
// purpose (weir up's Ctrl-C or SIGTERM: Node.Close) leaves the tasks of
// its jobs on a worker of another process (weir worker) running, as a
// crash would, and the next coordinator resumes the jobs and takes the
// tasks over. A trial's planned restart of weir up cost a core NATS
// source 8-10 s of input, a kill -9 under 0.1 s: the stop canceled the
// worker's tasks, and nothing took the input until the next coordinator
// had deployed again.
//
// Two jobs run on the worker: a core NATS source through an operator to a
// core NATS sink (at most once), and keyed running counts from a
// JetStream stream to an exactly-once sink. Over the restart the worker
// sets up no operator and closes none until the new coordinator takes
// the jobs over: the takeover (the resumed jobs' first request to a
// worker) is held until the test lets it go, and before that every core
// message published once the worker is connected again reaches the sink
// through the old tasks. With NATS apart from the coordinator
// ("weir up -nats") the core messages published while no coordinator
// runs reach the sink too; with NATS embedded in the coordinator's
// process (plain weir up, as in the trial) nothing flows then, and the
// old tasks take the input again as soon as NATS is back. Afterwards the
// counts are exactly once (no gap, no repeat), and the core messages
// published after the takeover reach the sink too.
func TestGracefulCoordinatorRestartKeepsTheTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end coordinator restart: skipped in -short")
	}
	dir := t.TempDir()
	counts := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(counts, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	pass, err := filepath.Abs("../../../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("NATS apart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
		coordinator := func(f func(control.Fence) control.Fence) *Node {
			t.Helper()
			opts := coordinatorOn(t, url)
			opts.fence = f
			n, err := Start(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		gracefulRestart(t, ctx, url, true, coordinator, pass, counts)
	})
	t.Run("NATS embedded", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		data, port := t.TempDir(), freePort(t)
		coordinator := func(f func(control.Fence) control.Fence) *Node {
			t.Helper()
			// Workers 0: the jobs run on the other process's worker
			// only (an in-process one's tasks stop with it).
			n, err := Start(ctx, Options{DataDir: data, Port: port, Coordinator: true, CheckpointStore: StoreJetStream,
				HeartbeatTimeout: testHeartbeatTimeout, Log: testLog(), fence: f})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		gracefulRestart(t, ctx, fmt.Sprintf("nats://127.0.0.1:%d", port), false, coordinator, pass, counts)
	})
}

// gracefulRestart is TestGracefulCoordinatorRestartKeepsTheTasks on the
// NATS at url, whose coordinators coordinator starts (with a fence wrapper
// given; nil: none); apart says whether NATS runs on while no coordinator
// does.
func gracefulRestart(t *testing.T, ctx context.Context, url string, apart bool,
	coordinator func(func(control.Fence) control.Fence) *Node, pass, counts string) {
	up := coordinator(nil)
	defer func() { up.Close() }()
	ops := &operatorCount{}
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Workers: 1, WorkerID: "w1", DataDir: t.TempDir(),
		HeartbeatInterval: 100 * time.Millisecond, Log: testLog(), Hooks: ops.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The test's own connection, as a publisher's: it reconnects to an
	// embedded server that comes back, and so do its subscriptions.
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, js, "OUT", "out")
	core := newCoreWatch(t, ctx, nc, "core.in", "core.out")
	submit := func(name, yaml string) control.JobStatus {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(yaml), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		return waitJob(t, ctx, up, name, "a checkpoint", func(st control.JobStatus) bool {
			return st.State == control.JobRunning && st.LatestCheckpoint > 0
		})
	}
	beforeCore := submit("core", `name: core
sources: [{name: in, kind: nats, subject: core.in}]
operators: [{name: pass, module: `+pass+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: core.out, input: {from: pass}}]
checkpointing: {interval: 100ms}
`)
	beforeCounts := submit("counts", `name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+counts+`, parallelism: 2, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: count}}]
checkpointing: {interval: 100ms}
`)
	in := newKeyedInput(t, ctx, js, 8)
	in.publish(200)
	core.probe()
	core.round("before")
	tasks, setUp := w.Workers[0].Tasks(), ops.setUp.Load()
	if tasks != 7 || setUp != 3 {
		t.Fatalf("the worker holds %d tasks, %d operators set up; want 7 and 3", tasks, setUp)
	}
	unchanged := func(when string) {
		t.Helper()
		if n, s, c := w.Workers[0].Tasks(), ops.setUp.Load(), ops.closed.Load(); n != tasks || s != setUp || c != 0 {
			t.Fatalf("%s: the worker holds %d tasks, %d operators set up, %d closed; want its %d tasks and %d operators as they were, none closed",
				when, n, s, c, tasks, setUp)
		}
	}

	up.Close()
	unchanged("after the coordinator's graceful stop")
	if apart {
		// NATS is up: the old tasks go on taking the core input, and
		// the counts' input is read (committed only once the next
		// coordinator's attempt checkpoints it).
		core.round("while no coordinator runs")
		in.send(200)
		unchanged("while no coordinator runs")
	}

	gate := newTakeoverGate()
	defer gate.release()
	up = coordinator(gate.wrap)
	waitUntil(t, ctx, "the worker and the publisher connected again", func() bool { return w.Conn.IsConnected() && nc.IsConnected() })
	// The coordinator is back, and about to take the jobs over: the
	// moment a crash's takeover comes, too.
	select {
	case <-gate.reached:
	case <-ctx.Done():
		t.Fatal("the resumed jobs sent no request to the worker")
	}
	core.probe()
	core.round("after the coordinator came back")
	if !apart {
		in.send(200)
	}
	unchanged("after the coordinator came back, before it took the jobs over")

	gate.release()
	for _, before := range []control.JobStatus{beforeCore, beforeCounts} {
		waitJob(t, ctx, up, before.Name, "the job taken over", func(st control.JobStatus) bool {
			return st.State == control.JobRunning && st.Attempt > before.Attempt
		})
	}
	core.probe()
	core.round("after the takeover")
	in.publish(200)
	in.checkCounts()
	t.Logf("%d core messages through in all; %d counts exactly once; %d operators set up, %d closed",
		core.received(), in.total, ops.setUp.Load(), ops.closed.Load())
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// operatorCount counts the operators a worker set up and closed.
type operatorCount struct {
	setUp, closed atomic.Int64
}

func (c *operatorCount) hooks() *worker.Hooks {
	return &worker.Hooks{Operator: func(_, _ string, op host.Operator) host.Operator {
		c.setUp.Add(1)
		return countedOperator{op, c}
	}}
}

type countedOperator struct {
	host.Operator
	c *operatorCount
}

func (o countedOperator) Close(ctx context.Context) error {
	o.c.closed.Add(1)
	return o.Operator.Close(ctx)
}

// RecordsWithin passes the wasm instance's pace on, so that the task cuts
// batches as it does without the hook.
func (o countedOperator) RecordsWithin(d time.Duration) int {
	if p, ok := o.Operator.(host.Paced); ok {
		return p.RecordsWithin(d)
	}
	return 0
}

// takeoverGate holds every request a coordinator sends to a worker (its
// fence) until released; reached is closed at the first.
type takeoverGate struct {
	reached, open chan struct{}
	once, opened  sync.Once
}

func newTakeoverGate() *takeoverGate {
	return &takeoverGate{reached: make(chan struct{}), open: make(chan struct{})}
}

func (g *takeoverGate) release() { g.opened.Do(func() { close(g.open) }) }

func (g *takeoverGate) wrap(f control.Fence) control.Fence {
	return func(ctx context.Context) (context.Context, context.CancelFunc, error) {
		g.once.Do(func() { close(g.reached) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("held by the test: %w", ctx.Err())
		}
		if f == nil {
			return ctx, func() {}, nil
		}
		return f(ctx)
	}
}

// coreWatch publishes to a core NATS job's input subject and collects
// what its output subject carries.
type coreWatch struct {
	t        *testing.T
	ctx      context.Context
	nc       *nats.Conn
	in       string
	mu       sync.Mutex
	got      map[string]int
	probes   int
	rounds   int
	perRound int
}

func newCoreWatch(t *testing.T, ctx context.Context, nc *nats.Conn, in, out string) *coreWatch {
	c := &coreWatch{t: t, ctx: ctx, nc: nc, in: in, got: map[string]int{}, perRound: 200}
	sub, err := nc.Subscribe(out, func(m *nats.Msg) {
		c.mu.Lock()
		c.got[string(m.Data)]++
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// probeWait is how long a probe is waited for before the next is sent:
// no bound on the whole, which only ctx sets.
const probeWait = 500 * time.Millisecond

// probe publishes a probe at a time until one comes out: the path from
// the publisher through the job to the watch is whole (subscriptions a
// reconnect sent again are in place), which a counted round needs.
func (c *coreWatch) probe() {
	c.t.Helper()
	waitUntil(c.t, c.ctx, "a probe through the core job", func() bool {
		c.probes++
		p := fmt.Sprintf("probe-%d", c.probes)
		if err := c.nc.Publish(c.in, []byte(p)); err != nil {
			c.t.Fatal(err)
		}
		// A probe lost on the way is followed by another.
		wait, cancel := context.WithTimeout(c.ctx, probeWait)
		defer cancel()
		return poll(wait, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.got[p] > 0
		})
	})
}

// round publishes perRound messages and waits until each came out once.
func (c *coreWatch) round(what string) {
	c.t.Helper()
	c.rounds++
	msgs := make([]string, c.perRound)
	for i := range msgs {
		msgs[i] = fmt.Sprintf("r%d-%d", c.rounds, i)
		if err := c.nc.Publish(c.in, []byte(msgs[i])); err != nil {
			c.t.Fatal(err)
		}
	}
	if !poll(c.ctx, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range msgs {
			if c.got[m] == 0 {
				return false
			}
		}
		return true
	}) {
		c.mu.Lock()
		defer c.mu.Unlock()
		missing := 0
		for _, m := range msgs {
			if c.got[m] == 0 {
				missing++
			}
		}
		c.t.Fatalf("%s: %d of %d core messages never reached the sink", what, missing, len(msgs))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		if c.got[m] != 1 {
			c.t.Errorf("%s: message %s reached the sink %d times", what, m, c.got[m])
		}
	}
}

// received counts the distinct messages that came out.
func (c *coreWatch) received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}
