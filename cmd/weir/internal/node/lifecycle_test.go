package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// misbehaveJob submits a job named name: a core NATS source on subject
// in-NAME (parallelism par) → the misbehave test operator with config →
// a core NATS sink on out-NAME, with restart strategy restart.
func misbehaveJob(t *testing.T, ctx context.Context, n *Node, name string, par int, config, restart string) {
	t.Helper()
	mis, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
sources: [{name: in, kind: nats, subject: in-%[1]s, parallelism: %[2]d}]
operators: [{name: op, module: %[3]s, config: "%[4]s", inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-%[1]s, input: {from: op}}]
checkpointing: {disabled: true}
restart: %[5]s
`, name, par, mis, config, restart)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

// TestFailedDeployReleasesSources: a deploy that fails at a later task
// (here an operator whose weir_init fails) must release what it had
// already built for earlier ones. A core NATS source subscribes as it is
// built; left behind, its subscription buffered messages nobody reads and,
// in a parallel source's queue group, took its share of the messages of
// the job's next run under the same name: they were lost.
func TestFailedDeployReleasesSources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	if _, err := n.API.Jobs(ctx); err != nil { // the API's reply subscription is set up
		t.Fatal(err)
	}
	subs := n.Conn.NumSubscriptions()

	misbehaveJob(t, ctx, n, "q", 2, "i", "{strategy: none}")
	st := waitJob(t, ctx, n, "q", "the failed deploy to end the job", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed {
		t.Fatalf("status %+v, want failed at deploy", st)
	}
	settle, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if !poll(settle, func() bool { return n.Conn.NumSubscriptions() == subs }) {
		t.Errorf("after the failed deploy the connection has %d subscriptions, %d before", n.Conn.NumSubscriptions(), subs)
	}

	// The same job again, with an operator that passes records through:
	// its source subtasks must get every message.
	out, err := n.Conn.SubscribeSync("out-q")
	if err != nil {
		t.Fatal(err)
	}
	misbehaveJob(t, ctx, n, "q", 2, "p", "{strategy: none}")
	waitJob(t, ctx, n, "q", "the job running again", running)
	// The source tasks subscribe as they are built, before the job runs.
	const count = 200
	for i := 0; i < count; i++ {
		if err := n.Conn.Publish("in-q", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for got < count {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := out.NextMsgWithContext(c)
		cancel()
		if err != nil {
			break
		}
		got++
	}
	if got != count {
		t.Errorf("the job's next run got %d of %d messages", got, count)
	}
}

// TestCanceledJobLeavesNoConsumers: a JetStream source's ordered consumer
// must go with its task. Left on the server (until its five-minute
// inactivity threshold), the consumers of canceled and failed-over
// attempts count against the stream's consumer limit (and an account's):
// here the third run of a job on a stream allowing two consumers could not
// start.
func TestCanceledJobLeavesNoConsumers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "uppercase")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "LIMITED", Subjects: []string{"limited"}, MaxConsumers: 2})
	stream, err := n.JS.Stream(ctx, "LIMITED")
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	spec, err := jobspec.Parse("limited.yaml", []byte(`name: limited
sources: [{name: in, kind: jetstream, stream: LIMITED}]
operators: [{name: upper, module: `+mods["uppercase"]+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-limited, input: {from: upper}}]
checkpointing: {disabled: true}
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.Conn.SubscribeSync("out-limited")
	if err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 3; run++ {
		if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("run %d", run)
		if _, err := n.JS.Publish(ctx, "limited", []byte(msg)); err != nil {
			t.Fatal(err)
		}
		// Each run reads the stream from its start: the last message is
		// this run's.
		var got string
		for got != strings.ToUpper(msg) {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := out.NextMsgWithContext(c)
			cancel()
			if err != nil {
				st, _ := n.API.Job(ctx, "limited")
				t.Fatalf("run %d: no output %q (job %s: %s)", run, strings.ToUpper(msg), st.State, st.Reason)
			}
			got = string(m.Data)
		}
		if st, err := n.API.CancelJob(ctx, "limited"); err != nil || st.State != control.JobCanceled {
			t.Fatalf("run %d: cancel: %+v, %v", run, st, err)
		}
		settle, stop := context.WithTimeout(ctx, 10*time.Second)
		ok := poll(settle, func() bool { return consumers() == 0 })
		stop()
		if !ok {
			t.Errorf("run %d canceled: the stream has %d consumers", run, consumers())
		}
	}
}

// restartable starts a node (coordinator and one worker on an embedded
// server) on dir; start again after Close is a coordinator restart.
func restartable(t *testing.T, ctx context.Context, dir string) *Node {
	t.Helper()
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoordinatorRestartKeepsTheModule: a job runs the module it was
// submitted with, pinned by digest, also after the coordinator restarts.
// A resumed job resolved its module reference again: a name without a
// version then took the newest version pushed since, and the job silently
// went on with other code over the old one's state.
func TestCoordinatorRestartKeepsTheModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	n := restartable(t, ctx, dir)
	defer func() { n.Close() }()
	upper := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase")
	mis, err := os.ReadFile("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Registry.Push(ctx, "op", upper, 0, nil); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("pinned.yaml", []byte(`name: pinned
sources: [{name: in, kind: nats, subject: in-pinned}]
operators: [{name: op, module: op, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-pinned, input: {from: op}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 100}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	// echo publishes v until the job outputs something, and returns that.
	echo := func(v string) string {
		t.Helper()
		out, err := n.Conn.SubscribeSync("out-pinned")
		if err != nil {
			t.Fatal(err)
		}
		defer out.Unsubscribe()
		var got string
		waitUntil(t, ctx, "output of "+v, func() bool {
			if err := n.Conn.Publish("in-pinned", []byte(v)); err != nil {
				t.Fatal(err)
			}
			m, err := out.NextMsg(200 * time.Millisecond)
			if err == nil {
				got = string(m.Data)
			}
			return err == nil
		})
		return got
	}
	waitJob(t, ctx, n, "pinned", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	if got := echo("before"); got != "BEFORE" {
		t.Fatalf("output %q, want BEFORE", got)
	}
	// A new version of op (misbehave passes records through unchanged).
	if _, err := n.Registry.Push(ctx, "op", mis, 0, nil); err != nil {
		t.Fatal(err)
	}
	before, err := n.API.Job(ctx, "pinned")
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	n = restartable(t, ctx, dir)
	waitJob(t, ctx, n, "pinned", "the job resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > before.Attempt && st.LatestCheckpoint > before.LatestCheckpoint
	})
	if got := echo("after"); got != "AFTER" {
		t.Errorf("after the coordinator restart the job outputs %q for %q: it runs another module than it was submitted with", got, "after")
	}

	// A restore of the job's own spec (no -spec) runs the code the ended
	// run ran; one given the spec resolves its references anew.
	restore := func(with *jobspec.Spec) control.JobStatus {
		t.Helper()
		st, err := n.API.CancelJob(ctx, "pinned")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "pinned", From: fmt.Sprint(st.LatestCheckpoint), Spec: with}); err != nil {
			t.Fatal(err)
		}
		return waitJob(t, ctx, n, "pinned", "restored", func(now control.JobStatus) bool {
			return now.State == control.JobRunning && now.Attempt > st.Attempt
		})
	}
	if st := restore(nil); st.Modules["op"] != before.Modules["op"] {
		t.Errorf("restored without a spec, the job runs %+v; want %+v", st.Modules["op"], before.Modules["op"])
	}
	if got := echo("again"); got != "AGAIN" {
		t.Errorf("restored without a spec, the job outputs %q for %q", got, "again")
	}
	if st := restore(spec); st.Modules["op"] == before.Modules["op"] {
		t.Errorf("restored with the spec, the job still runs %+v", st.Modules["op"])
	}
	if got := echo("new"); got != "new" {
		t.Errorf("restored with the spec, the job outputs %q for %q; want the newest module's", got, "new")
	}
}

// TestCoordinatorRestartKeepsAJobWhoseStreamIsGone: a job whose source
// stream was deleted fails over per its restart strategy until the stream
// is back. A restarted coordinator checked the stream as
// at a submit and dropped the job: it was no longer listed, with no
// reason, and did not run when the stream came back.
func TestCoordinatorRestartKeepsAJobWhoseStreamIsGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	n := restartable(t, ctx, dir)
	defer func() { n.Close() }()
	upper := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(upper, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	streamCfg := jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone"}}
	mustStream(t, ctx, n.JS, streamCfg)
	spec, err := jobspec.Parse("gone.yaml", []byte(`name: gone
sources: [{name: in, kind: jetstream, stream: GONE}]
operators: [{name: upper, module: `+upper+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-gone, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 200ms, attempts: 1000}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "gone", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 1 })
	// Nothing was read: the checkpoints' offset fits the new stream.
	if err := n.JS.DeleteStream(ctx, "GONE"); err != nil {
		t.Fatal(err)
	}

	n.Close()
	n = restartable(t, ctx, dir)
	settle, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	var st control.JobStatus
	if !poll(settle, func() bool {
		s, err := n.API.Job(ctx, "gone")
		st = s
		return err == nil && s.Restarts >= 1 // failing over in the new coordinator
	}) {
		_, err := n.API.Job(ctx, "gone")
		t.Fatalf("after the coordinator restart: %+v, %v; want the job restarting until its stream is back", st, err)
	}
	t.Logf("without its stream: %s, %s", st.State, st.Reason)
	out, err := n.Conn.SubscribeSync("out-gone")
	if err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, streamCfg)
	if _, err := n.JS.Publish(ctx, "gone", []byte("back")); err != nil {
		t.Fatal(err)
	}
	if m, err := out.NextMsgWithContext(ctx); err != nil || string(m.Data) != "BACK" {
		t.Fatalf("once the stream is back: %v, %v", m, err)
	}
}
