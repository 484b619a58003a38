package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/sourcebuild"
)

// countingWat2wasm makes the source builds of this test run wat2wasm
// through a script that notes each run, with the build cache off (a
// cached module is no compile), and returns how many runs it noted.
func countingWat2wasm(t *testing.T) (runs func() int) {
	t.Helper()
	w2w, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skip("no wat2wasm: install wabt")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "runs")
	script := filepath.Join(dir, "wat2wasm")
	body := "#!/bin/sh\necho run >> '" + log + "'\nexec '" + w2w + "' \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEIR_WAT2WASM", script)
	t.Setenv(sourcebuild.CacheDirEnv, "off")
	return func() int {
		b, err := os.ReadFile(log)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
}

// weir run refuses a job the submit would refuse — one of the name that
// has not ended, one naming a stream that does not exist (with
// -create-streams=false), a source's filter or a sink's subject its
// stream does not store (a stream there, or one weir run would create) —
// before it builds the job's operator sources
// and pushes their modules: it built (seconds, a minute for Rust) and
// pushed a module for nothing first. The refusal is the coordinator's,
// word for word. So does weir job restore -spec of a job that runs. The operator is a WAT source file, built through a
// wat2wasm that notes each run.
func TestRunRefusesBeforeBuildingOrPushing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runs := countingWat2wasm(t)
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	wat, err := os.ReadFile("../../guests/wat/uppercase.wat")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.WriteFile("op.wat", wat, 0o644); err != nil {
		t.Fatal(err)
	}
	// refused runs weir with args on a spec of yaml, and checks that it
	// exits 1 with the coordinator's refusal of the spec as one line,
	// having built and pushed nothing.
	refused := func(yaml string, args ...string) {
		t.Helper()
		if err := os.WriteFile("job.yaml", []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "job.yaml"), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
		if err == nil {
			t.Fatalf("the coordinator took the job weir run refused: weir run exited %d with %q", code, errb.String())
		}
		var wantb bytes.Buffer
		printErr(&wantb, err) // as weir prints it: further lines indented
		want := wantb.String()
		if strings.Contains(want, " has not ended (it is ") {
			// weir run adds how to run the spec beside that job.
			want = strings.TrimSuffix(want, "\n") + "; to run a second job beside it, its output going to the same sinks, give the spec another name (name: busy in job.yaml)\n"
		}
		if code != 1 || errb.String() != want || !strings.HasPrefix(want, "weir: "+strings.SplitN(err.Error(), "\n", 2)[0]) {
			t.Errorf("weir %s: exit %d, stderr %q; want 1 and the submit's refusal %q", strings.Join(args, " "), code, errb.String(), want)
		}
		if c := runs(); c != 0 {
			t.Errorf("weir %s: wat2wasm ran %d times before the refusal; want none", strings.Join(args, " "), c)
		}
		if mods, err := n.Registry.List(ctx); err != nil || len(mods) != 0 {
			t.Errorf("weir %s: module registry holds %v (%v); want nothing pushed", strings.Join(args, " "), mods, err)
		}
	}

	// A job of the name runs (another spec of it: the name is what counts).
	running := `name: busy
sources: [{name: in, kind: nats, subject: busy-in}]
sinks: [{name: out, kind: nats, subject: busy-out, input: {from: in}}]
`
	spec, err := jobspec.Parse("running.yaml", []byte(running), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "busy", control.JobRunning)
	refused(`name: busy
sources: [{name: in, kind: nats, subject: busy-in}]
operators: [{name: op, module: op.wat, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: busy-out, input: {from: op}}]
`, "run", "-nats", url)

	// weir job restore -spec of the job that runs: refused as the
	// coordinator refuses it, before the build and the push.
	busy := `name: busy
sources: [{name: in, kind: nats, subject: busy-in}]
operators: [{name: op, module: op.wat, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: busy-out, input: {from: op}}]
`
	restoreRefused := func(what, want string) {
		t.Helper()
		if err := os.WriteFile("job.yaml", []byte(busy), 0o644); err != nil {
			t.Fatal(err)
		}
		var rout, rerr bytes.Buffer
		code := run(ctx, []string{"job", "restore", "-nats", url, "busy", "-from", "1", "-spec", "job.yaml"}, Stdio{In: strings.NewReader(""), Out: &rout, Err: &rerr})
		spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = n.API.Restore(ctx, control.RestoreRequest{Job: "busy", From: "1", Spec: spec})
		if !errors.Is(err, control.ErrConflict) && !errors.Is(err, control.ErrNotFound) {
			t.Fatalf("the coordinator's restore of %s: %v; want a refusal", what, err)
		}
		if want := "weir: " + want + "\n"; code != 1 || rerr.String() != want || rout.String() != "" {
			t.Errorf("weir job restore -spec of %s: exit %d, stdout %q, stderr %q; want 1, nothing on stdout and %q", what, code, rout.String(), rerr.String(), want)
		}
		if c := runs(); c != 0 {
			t.Errorf("weir job restore -spec of %s: wat2wasm ran %d times before the refusal; want none", what, c)
		}
		if mods, err := n.Registry.List(ctx); err != nil || len(mods) != 0 {
			t.Errorf("weir job restore -spec of %s: module registry holds %v (%v); want nothing pushed", what, mods, err)
		}
	}
	restoreRefused("a job that runs", "job busy has not ended (it is running): cancel or stop it first")

	// With -input to a source with a stop, whose input went out before
	// the submit: nothing is created, published, built or pushed. The
	// source stops at the end, which the job that runs reads no further:
	// the refusal offers no weir input.
	if err := os.WriteFile("in.txt", []byte("a\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("job.yaml", []byte(`name: busy
sources: [{name: in, kind: jetstream, stream: BUSYIN, stop: end}]
operators: [{name: op, module: op.wat, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: BUSYOUT, subject: busy-out, input: {from: op}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", url, "-input", "in.txt", "job.yaml"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := "weir: job busy has not ended (it is running): cancel or stop it first; to run a second job beside it, its output going to the same sinks, give the spec another name (name: busy in job.yaml)\n"
	if code != 1 || errb.String() != want || out.String() != "" {
		t.Errorf("weir run -input: exit %d, stdout %q, stderr %q; want 1, nothing on stdout and %q", code, out.String(), errb.String(), want)
	}
	for _, name := range []string{"BUSYIN", "BUSYOUT"} {
		if _, err := n.JS.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after the refused run: %v; want %v", name, err, jetstream.ErrStreamNotFound)
		}
	}
	if c := runs(); c != 0 {
		t.Errorf("weir run -input: wat2wasm ran %d times before the refusal; want none", c)
	}

	// Streams that are not there, with -create-streams=false: the
	// sink's, and a source's (another source's stream is there).
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "HERE", Subjects: []string{"here.>"}}); err != nil {
		t.Fatal(err)
	}
	refused(`name: lost
sources:
  - {name: in, kind: jetstream, stream: HERE}
  - {name: more, kind: jetstream, stream: NOIN}
operators: [{name: op, module: op.wat, inputs: [{from: in}, {from: more}]}]
sinks: [{name: out, kind: jetstream, stream: NOOUT, subject: out, input: {from: op}}]
`, "run", "-nats", url, "-create-streams=false")

	// A source's filter that matches none of its stream's subjects and a
	// sink's subject its stream does not store, the streams there: with
	// -create-streams, which leaves a stream that is there as it is, and
	// without.
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "THERE", Subjects: []string{"there"}}); err != nil {
		t.Fatal(err)
	}
	astray := `name: astray
sources: [{name: in, kind: jetstream, stream: HERE, filter: nope.>}]
operators: [{name: op, module: op.wat, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: THERE, subject: elsewhere, input: {from: op}}]
`
	refused(astray, "run", "-nats", url)
	refused(astray, "run", "-nats", url, "-create-streams=false")

	// Ended, from a checkpoint it never took: weir job restore -spec
	// is refused as the coordinator refuses it, before the build and
	// the push too.
	if _, err := n.API.CancelJob(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "busy", control.JobCanceled)
	restoreRefused("a checkpoint that is not there", "restore from busy/1: there is no such checkpoint; job busy completed no checkpoint before it ended (canceled), so there is nothing to restore: weir run SPEC starts it afresh")

	// The compiler noted is the one a build runs.
	if _, err := sourcebuild.Build(ctx, "op.wat", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if c := runs(); c != 1 {
		t.Fatalf("wat2wasm ran %d times for a build; want 1 (the script is not the compiler the build runs)", c)
	}
}
