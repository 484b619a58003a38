package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// TestModuleGoneFailsAtOnce: a module file that is not there at deploy,
// or that was deleted or rebuilt while the job ran, fails the job at once
// with the reason instead of after ten restarts that all meet it again.
func TestModuleGoneFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	misbehave, err := os.ReadFile("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// submit runs the misbehave module from path with config "e" (every
	// process call fails with "boom": one record fails the job over).
	submit := func(name, path string) {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: `+name+`}]
operators: [{name: mis, module: `+path+`, config: e, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-`+name+`, input: {from: mis}}]
restart: {strategy: fixed-delay, delay: 50ms, attempts: 10}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	ended := func(name string) control.JobStatus {
		t.Helper()
		return waitJob(t, ctx, n, name, name+" to end", func(st control.JobStatus) bool { return st.State.Terminal() })
	}
	// failOver makes the running job fail over (its operator fails on the
	// first record) and returns its final status.
	failOver := func(name string) control.JobStatus {
		t.Helper()
		waitJob(t, ctx, n, name, name+" running", running)
		var st control.JobStatus
		waitUntil(t, ctx, name+" to end", func() bool {
			_ = n.Conn.Publish(name, []byte("x"))
			s, err := n.API.Job(ctx, name)
			st = s
			if err == nil && !s.State.Terminal() {
				time.Sleep(20 * time.Millisecond)
			}
			return err == nil && s.State.Terminal()
		})
		return st
	}
	check := func(st control.JobStatus, restarts int, want string) {
		t.Helper()
		t.Logf("%s: %s", st.Name, st.Reason)
		if st.State != control.JobFailed || st.Restarts != restarts || !strings.Contains(st.Reason, want) ||
			!strings.Contains(st.Reason, "not restarted") {
			t.Errorf("%s: state %s after %d restarts, reason %q; want failed after %d restarts, not restarted, with %q",
				st.Name, st.State, st.Restarts, st.Reason, restarts, want)
		}
		// Not the operator's failure: the deploy's.
		if len(st.Failures) == 0 || st.Failures[0].Kind != control.FailureDeploy {
			t.Errorf("%s: failures %+v; want the last of kind %q", st.Name, st.Failures, control.FailureDeploy)
		}
	}

	t.Run("missing at submit", func(t *testing.T) {
		submit("missing", filepath.Join(dir, "nosuch.wasm"))
		check(ended("missing"), 0, "no such file or directory")
	})
	t.Run("deleted while running", func(t *testing.T) {
		p := filepath.Join(dir, "deleted.wasm")
		if err := os.WriteFile(p, misbehave, 0o644); err != nil {
			t.Fatal(err)
		}
		submit("deleted", p)
		waitJob(t, ctx, n, "deleted", "deleted running", running)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		// One failover (the operator's failure), whose deploy finds no module.
		check(failOver("deleted"), 1, "no such file or directory")
	})
	t.Run("rebuilt while running", func(t *testing.T) {
		p := filepath.Join(dir, "rebuilt.wasm")
		if err := os.WriteFile(p, misbehave, 0o644); err != nil {
			t.Fatal(err)
		}
		submit("rebuilt", p)
		waitJob(t, ctx, n, "rebuilt", "rebuilt running", running)
		if err := os.WriteFile(p, append(misbehave[:len(misbehave):len(misbehave)], 0, 1, 'x'), 0o644); err != nil {
			t.Fatal(err)
		}
		check(failOver("rebuilt"), 1, "module changed since the job was submitted")
	})
	t.Run("removed from the registry", func(t *testing.T) {
		if _, err := n.Registry.Push(ctx, "mis", misbehave, 0, nil); err != nil {
			t.Fatal(err)
		}
		submit("removed", "mis@1")
		waitJob(t, ctx, n, "removed", "removed running", running)
		if _, err := n.Registry.Remove(ctx, "mis@1"); err != nil {
			t.Fatal(err)
		}
		check(failOver("removed"), 1, "not in the module registry")
	})
}

// TestSubmitRefusesMissingStream: a spec whose JetStream source or sink
// names a stream that does not exist is refused at submit, saying which;
// once the streams exist the same spec runs.
func TestSubmitRefusesMissingStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	spec, err := jobspec.Parse("streams.yaml", []byte(`name: streams
sources: [{name: in, kind: jetstream, stream: NOIN}]
sinks: [{name: out, kind: jetstream, stream: NOOUT, subject: noout, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
	t.Logf("submit: %v", err)
	if !errors.Is(err, control.ErrInvalid) ||
		!strings.Contains(err.Error(), "source in: stream NOIN does not exist") ||
		!strings.Contains(err.Error(), "sink out: stream NOOUT does not exist") {
		t.Fatalf("submit with missing streams: %v; want invalid, naming both", err)
	}
	if _, err := n.API.Job(ctx, "streams"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("the refused job exists: %v", err)
	}
	for name, subject := range map[string]string{"NOIN": "noin", "NOOUT": "noout"} {
		if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
			Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatalf("submit once the streams exist: %v", err)
	}
	waitJob(t, ctx, n, "streams", "the job running", running)
}

// TestSubmitRefusesSubjectsOutsideTheStream: a sink subject its stream does
// not store (its commits would find no stream, after weir run had shown the
// records) and a source filter matching none of the stream's subjects (the
// job would run on, reading nothing) are refused at submit, naming the
// sink or source, the subject and the stream's subjects.
func TestSubmitRefusesSubjectsOutsideTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	for name, subject := range map[string]string{"IN": "in.>", "OUT": "out"} {
		if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
			Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	parse := func(filter, subject string) *jobspec.Spec {
		spec, err := jobspec.Parse("subjects.yaml", fmt.Appendf(nil, `name: subjects
sources: [{name: in, kind: jetstream, stream: IN, filter: %q}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: %q, input: {from: in}}]
`, filter, subject), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	_, err := n.API.Submit(ctx, control.SubmitRequest{Spec: parse("nope.>", "other")})
	t.Logf("submit: %v", err)
	if !errors.Is(err, control.ErrInvalid) ||
		!strings.Contains(err.Error(), "source in: filter nope.> matches none of stream IN's subjects (in.>)") ||
		!strings.Contains(err.Error(), "sink out: stream OUT does not store subject other (its subjects: out)") {
		t.Fatalf("submit with subjects outside the streams: %v; want invalid, naming both", err)
	}
	// A keyed sink's subjects ("out.{key}": out.>) are not the stream's "out".
	_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: parse("in.>", "out.{key}")})
	if !errors.Is(err, control.ErrInvalid) ||
		!strings.Contains(err.Error(), "sink out: stream OUT does not store any subject of out.{key} (out.>) (its subjects: out)") {
		t.Fatalf("submit with a keyed sink outside its stream: %v", err)
	}
	if _, err := n.API.Job(ctx, "subjects"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("the refused job exists: %v", err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: parse("in.*.x", "out")}); err != nil {
		t.Fatalf("submit with subjects inside the streams: %v", err)
	}
	waitJob(t, ctx, n, "subjects", "the job running", running)
}

// TestWorkerWaitsForNATS starts a worker (WaitForNATS, as weir worker
// does) before its NATS server: it logs each failed attempt, keeps trying,
// and joins the coordinator once the server is up.
func TestWorkerWaitsForNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := natsconntest.FreePort(t)
	logs := &lockedBuffer{}
	started := make(chan error, 1)
	var w *Node
	go func() {
		var err error
		w, err = Start(ctx, Options{NATS: &natsconn.Options{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}, WaitForNATS: true,
			Workers: 1, WorkerID: "early", DataDir: t.TempDir(), HeartbeatInterval: 100 * time.Millisecond, CacheDir: t.TempDir(),
			Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		started <- err
	}()
	waitUntil(t, ctx, "two failed attempts logged", func() bool { return strings.Count(logs.String(), "NATS not reachable") >= 2 })
	select {
	case err := <-started:
		t.Fatalf("the worker's start returned without a server: %v", err)
	default:
	}
	t.Logf("worker log:\n%s", logs.String())
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(line, "NATS not reachable; retrying") || !strings.Contains(line, "attempt=") {
			t.Errorf("log line %q", line)
		}
	}

	// Checkpoints in JetStream, as the worker keeps them (a coordinator
	// on another store refuses the worker).
	up, err := Start(ctx, Options{DataDir: t.TempDir(), Port: port, Coordinator: true, HeartbeatTimeout: time.Second,
		CheckpointStore: StoreJetStream, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("worker start: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the worker did not connect once the server was up")
	}
	defer w.Close()
	waitUntil(t, ctx, "the worker to join", func() bool {
		return slices.Contains(up.Manager.Control().LiveWorkers(), "early")
	})
}

// lockedBuffer is a log destination safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMemoryLimitFailureKind: a real guest (the C SDK's wordcount, which
// keeps a copy of every word it saw) that allocates past its operator's
// small limits.memory fails its job with the kind memory-limit, not as a
// plain operator error: what to change is the limit, not the operator.
// Its reason stays the operator's own, with the host's note of the grow
// the limit refused.
func TestMemoryLimitFailureKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	wordcount, err := filepath.Abs("../../../../guests/c/examples/wordcount.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("oom.yaml", []byte(`name: oom
sources: [{name: in, kind: nats, subject: oom}]
operators: [{name: wc, module: `+wordcount+`, limits: {memory: 512KiB}, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-oom, input: {from: wc}}]
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "oom", "oom running", running)
	// Words never seen before, 100 of about 20 bytes a record, until the
	// table of them outgrows the limit.
	var st control.JobStatus
	next := 0
	waitUntil(t, ctx, "oom to fail", func() bool {
		var b strings.Builder
		for range 100 {
			fmt.Fprintf(&b, "word-%015d ", next)
			next++
		}
		_ = n.Conn.Publish("oom", []byte(b.String()))
		s, err := n.API.Job(ctx, "oom")
		st = s
		if err == nil && !s.State.Terminal() {
			time.Sleep(5 * time.Millisecond)
		}
		return err == nil && s.State.Terminal()
	})
	t.Logf("%s after %d words: %s", st.State, next, st.Reason)
	if st.State != control.JobFailed || len(st.Failures) == 0 {
		t.Fatalf("state %s with %d failures, want failed with one", st.State, len(st.Failures))
	}
	f := st.Failures[0]
	if f.Kind != control.FailureMemoryLimit || f.Task != "wc-0" ||
		!strings.Contains(f.Reason, "wordcount: out of memory") ||
		!strings.Contains(f.Reason, "refused: the operator's memory limit (limits.memory) is 512 KiB") {
		t.Errorf("failure %+v; want kind %q in task wc-0, naming the operator's out of memory and the refused grow", f, control.FailureMemoryLimit)
	}
}

// TestDeployPastTheMemoryLimitFailureKind: a real guest (the Go SDK's
// test operator) whose weir_init allocates past its operator's small
// limits.memory fails the deploy, and its job, with the kind
// memory-limit — what the worker makes of the operator's failure — not
// as a deploy that could not be set up (that stays for failures not the
// operator's: TestModuleGoneFailsAtOnce; one that refuses its config is
// operator-error: TestFailureReasonsNameEachThingOnce). The reason is
// the deploy's as before, naming the worker, the operator's trap and the
// refused grow. weir_init gets the same config on every restart: the job
// is not restarted.
func TestDeployPastTheMemoryLimitFailureKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	mod := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("initoom.yaml", []byte(`name: initoom
sources: [{name: in, kind: nats, subject: initoom}]
operators: [{name: op, module: `+mod+`, config: initoom, limits: {memory: 48MiB}, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out-initoom, input: {from: op}}]
restart: {strategy: fixed-delay, delay: 50ms, attempts: 5}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "initoom", "initoom to end", func(st control.JobStatus) bool { return st.State.Terminal() })
	t.Logf("%s: %s", st.State, st.Reason)
	if st.State != control.JobFailed || st.Restarts != 0 || len(st.Failures) != 1 {
		t.Fatalf("state %s after %d restarts with %d failures, want failed at once with one", st.State, st.Restarts, len(st.Failures))
	}
	f := st.Failures[0]
	if f.Kind != control.FailureMemoryLimit || f.Task != "op-0" || !strings.HasPrefix(f.Reason, "deploy to worker w1: task op-0: operator op[0]: weir_init: ") ||
		!strings.Contains(f.Reason, "out of memory") ||
		!strings.Contains(f.Reason, "refused: the operator's memory limit (limits.memory) is 48 MiB") {
		t.Errorf("failure %+v; want kind %q in task op-0, the deploy's reason naming weir_init's out of memory and the refused grow", f, control.FailureMemoryLimit)
	}
}
