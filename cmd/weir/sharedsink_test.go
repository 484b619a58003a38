package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// sharedSpec writes the spec of a job named name that copies core NATS
// subject name-in to stream SHARED subject shared, and returns its path
// and the spec.
func sharedSpec(t *testing.T, name string) (string, *jobspec.Spec) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".yaml")
	text := "name: " + name + "\nsources: [{name: in, kind: nats, subject: " + name + "-in}]\n" +
		"sinks: [{name: out, kind: jetstream, stream: SHARED, subject: shared, guarantee: at-least-once, input: {from: in}}]\n"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile(p, jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p, spec
}

// saidErr waits until weir run wrote what on its standard error; it fails
// the test if weir run exits first.
func (f *following) saidErr(what string) {
	f.t.Helper()
	for !strings.Contains(f.errb.String(), what) {
		select {
		case code := <-f.done:
			f.t.Fatalf("weir run exited %d before it said %q:\n%s\n%s", code, what, f.out.String(), f.errb.String())
		case <-f.ctx.Done():
			f.t.Fatalf("weir run never said %q:\n%s\n%s", what, f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// weir run -nats warns of a sink subject a job that runs on that weir
// writes too, as weir job status does (a trial's weir run -nats said
// nothing of it), once.
func TestRunNATSWarnsOfASharedSinkSubject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "SHARED", Subjects: []string{"shared"}}); err != nil {
		t.Fatal(err)
	}
	_, first := sharedSpec(t, "first")
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: first}); err != nil {
		t.Fatal(err)
	}
	path, _ := sharedSpec(t, "second")
	f := startFollowing(t, ctx, n.Server.ClientURL(), path)
	want := "weir: warning: sink out writes stream SHARED subject shared, which job first writes too (its sink out, subject shared): "
	f.saidErr(want)
	f.running("second", 0, 1)
	f.stop()
	if c := strings.Count(f.errb.String(), want); c != 1 {
		t.Errorf("weir run warned %d times, want once:\n%s", c, f.errb.String())
	}
}

// weir run (its embedded weir) warns of a job submitted after its own
// whose sink writes a subject its sink writes: the warning is kept as
// jobs start, not computed at its submit only (a trial's first job said
// nothing of the second).
func TestRunWarnsOfASharedSinkSubjectOfAJobThatStartsLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := natsconntest.FreePort(t)
	path, _ := sharedSpec(t, "first")
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	rctx, stop := context.WithCancel(ctx)
	f.cancel = stop
	t.Cleanup(stop)
	go func() {
		f.done <- run(rctx, []string{"run", "-port", strconv.Itoa(port), "-data", t.TempDir(), "-idle", "0", path},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.running("first", 0, 1)
	if strings.Contains(f.errb.String(), "which job second") {
		t.Fatalf("warned of job second before it was submitted:\n%s", f.errb.String())
	}
	c, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}, CheckpointStore: node.StoreJetStream})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, second := sharedSpec(t, "second")
	if _, err := c.API.Submit(ctx, control.SubmitRequest{Spec: second}); err != nil {
		t.Fatal(err)
	}
	f.saidErr("weir: warning: sink out writes stream SHARED subject shared, which job second writes too (its sink out, subject shared): ")
	f.stop()
}
