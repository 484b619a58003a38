package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/storage"
)

func TestModuleCommand(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	weir := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"module"}, args...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return out.String(), errb.String(), code
	}
	good := filepath.Join("..", "..", "guests", "wat", "passthrough.wasm")
	if _, err := os.Stat(good); err != nil {
		t.Skip("guests/wat/passthrough.wasm not built")
	}
	out, errs, code := weir("push", "pass", good, "-nats", url)
	if code != 0 || !strings.HasPrefix(out, "pushed pass@1 sha256:") {
		t.Fatalf("push: %d %q %q", code, out, errs)
	}
	if out, errs, code = weir("push", "-nats", url, "-version", "5", "pass", good); code != 0 || !strings.HasPrefix(out, "pushed pass@5 ") ||
		!strings.HasSuffix(out, " bytes): the same bytes as pass@1\n") {
		t.Fatalf("push -version of the same bytes: %d %q %q", code, out, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	if err := os.WriteFile(bad, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code = weir("push", "broken", bad, "-nats", url)
	if code != 1 || !strings.HasPrefix(errs, "weir: module broken refused: ") || strings.Count(errs, "\n") != 1 {
		t.Errorf("bad module: %d %q", code, errs)
	}
	out, _, code = weir("ls", "-nats", url)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "pass ") {
		t.Errorf("ls: %d %q", code, out)
	}
	out, _, code = weir("inspect", "pass", "-nats", url)
	if code != 0 || !strings.Contains(out, "ref:     pass@5") {
		t.Errorf("inspect: %d %q", code, out)
	}
	out, _, code = weir("rm", "pass@1", "-nats", url)
	if code != 0 || out != "removed pass@1\n" {
		t.Errorf("rm: %d %q", code, out)
	}
	_, errs, code = weir("inspect", "pass@1", "-nats", url)
	if code != 1 || errs != "weir: module pass@1: not in the module registry (pass has version 5 only)\n" {
		t.Errorf("inspect removed: %d %q", code, errs)
	}
	if _, _, code = weir("frob", "-nats", url); code != 2 {
		t.Errorf("unknown subcommand exit %d", code)
	}
	// A source file is built first (guests/sourcebuild), saying so (or
	// that the build cache had it).
	src := filepath.Join("..", "..", "guests", "wat", "passthrough.wat")
	out, errs, code = weir("push", "passwat", src, "-nats", url)
	if code != 0 || !strings.HasPrefix(out, "pushed passwat@1 sha256:") || !saidBuild(errs, src) {
		t.Errorf("push of a source file: %d %q %q", code, out, errs)
	}
	_, errs, code = weir("ls", "-nats", "nats://127.0.0.1:1")
	if code != 1 || !strings.HasPrefix(errs, "weir: cannot reach NATS at nats://127.0.0.1:1") {
		t.Errorf("no server: %d %q", code, errs)
	}
}

// weir module takes the NATS flags every command shares: it reaches a
// server that requires a token with -token, and names the server that
// refused it without one.
func TestModuleCommandAuthenticates(t *testing.T) {
	good := filepath.Join("..", "..", "guests", "wat", "passthrough.wasm")
	if _, err := os.Stat(good); err != nil {
		t.Skip("guests/wat/passthrough.wasm not built")
	}
	url := tokenServer(t)
	weir := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"module"}, args...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return out.String(), errb.String(), code
	}
	if out, errs, code := weir("push", "-nats", url, "-token", "s3cret", "pass", good); code != 0 || !strings.HasPrefix(out, "pushed pass@1 ") {
		t.Fatalf("push with -token: %d %q %q", code, out, errs)
	}
	if out, errs, code := weir("ls", "-nats", url, "-token", "s3cret"); code != 0 || !strings.Contains(out, "pass ") {
		t.Errorf("ls with -token: %d %q %q", code, out, errs)
	}
	_, errs, code := weir("ls", "-nats", url)
	if code != 1 || !strings.HasPrefix(errs, "weir: nats connect "+url) || !strings.Contains(errs, "Authorization Violation") {
		t.Errorf("ls without a token: %d %q", code, errs)
	}
}

// A local module is pushed under a registry name made from its file or
// package directory.
func TestRegistryName(t *testing.T) {
	for path, want := range map[string]string{
		"/x/wordcount.wasm":    "wordcount",
		"examples/join/joiner": "joiner",
		"/x/my op.v2.wasm":     "my-op-v2",
		"/x/2fast.wasm":        "m-2fast",
		"ops/upper.rs":         "upper",
		"ops/upper.ts":         "upper",
		"ops/my.pkg":           "my-pkg",
		"/x/" + strings.Repeat("a", 70) + ".wasm": strings.Repeat("a", 64),
	} {
		if got := registryName(path); got != want {
			t.Errorf("registryName(%q) = %q, want %q", path, got, want)
		}
	}
}

// The coordinator's checkpoint stores are the host's storage too.
var (
	_ host.Store = (*storage.Dir)(nil)
	_ host.Store = (*storage.ObjectStore)(nil)
	_ host.Store = (*storage.KV)(nil)
)

// A module that needs more memory than the host's default is pushed on
// its own (each job that runs it says how much its operator may have);
// weir run checks it against the operator's limits.memory, refusing it
// before it starts the job where the operator allows too little.
func TestModuleNeedingMoreMemoryThanTheDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("runs jobs: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	src, err := os.ReadFile(filepath.Join("..", "..", "guests", "wat", "passthrough.wat"))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(string(src), `(memory (export "memory") 2)`, `(memory (export "memory") 1600)`, 1) // 100 MiB
	if big == string(src) {
		t.Fatal("passthrough.wat declares its memory otherwise")
	}
	t.Chdir(t.TempDir())
	if err := os.WriteFile("big.wat", []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := weir(t, "", "module", "push", "-nats", url, "big", "big.wat"); code != 0 || !strings.HasPrefix(out, "pushed big@1 ") {
		t.Fatalf("push: exit %d %q %q", code, out, errs)
	}
	job := func(limits string) string {
		return `name: big` + limits[:0] + `
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: pass, module: big.wat, inputs: [{from: in}]` + limits + `}]
sinks: [{name: out, kind: nats, subject: out, input: {from: pass}}]
`
	}
	if err := os.WriteFile("small.yaml", []byte(job("")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "", "run", "-nats", url, "-for", "100ms", "small.yaml")
	if code != 1 || !strings.Contains(errs, "operator pass") || !strings.Contains(errs, "minimum memory of 100 MiB") ||
		!strings.Contains(errs, "limits: {memory: 100MiB}") || strings.Count(errs, "weir: ") != 1 {
		t.Errorf("default limits: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// Named from the registry, it is the job's deploy that refuses it,
	// saying the same.
	if err := os.WriteFile("named.yaml", []byte(strings.Replace(job(""), "module: big.wat", "module: big@1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its -input, published once the job runs, never was: said so.
	if err := os.WriteFile("in.txt", []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = weir(t, "", "run", "-nats", url, "-for", "10s", "named.yaml", "-input", "in.txt")
	if code != 1 || !strings.Contains(errs, "job big failed: ") || !strings.Contains(errs, "limits: {memory: 100MiB}") ||
		!strings.HasSuffix(errs, "; -input in.txt not published (the job failed before it ran)\n") {
		t.Errorf("named module, default limits: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if err := os.WriteFile("roomy.yaml", []byte(job(", limits: {memory: 128MiB}")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := weir(t, "", "run", "-nats", url, "-for", "100ms", "roomy.yaml"); code != 0 {
		t.Errorf("limits.memory 128MiB: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// weir module rm refuses to remove a module a job that has not ended
// runs (its next restart would not find it), unless given -force; a
// version left with the same bytes, or a job that ended, does not hold it.
func TestModuleRemoveOfAModuleAJobRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	good := filepath.Join("..", "..", "guests", "wat", "passthrough.wasm")
	for _, v := range []string{"1", "2"} {
		if code, out, errs := weir(t, "", "module", "push", "-nats", url, "-version", v, "pass", good); code != 0 {
			t.Fatalf("push: exit %d %q %q", code, out, errs)
		}
	}
	upper := filepath.Join("..", "..", "guests", "wat", "uppercase.wasm")
	if code, out, errs := weir(t, "", "module", "push", "-nats", url, "upper", upper); code != 0 {
		t.Fatalf("push: exit %d %q %q", code, out, errs)
	}
	spec, err := jobspec.Parse("job.yaml", []byte(`name: user
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: pass@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "user", control.JobRunning)
	// pass@2 holds the same bytes: removing pass@1 leaves the job them.
	if code, out, errs := weir(t, "", "module", "rm", "-nats", url, "pass@1"); code != 0 || out != "removed pass@1\n" {
		t.Errorf("rm of a version whose bytes another keeps: exit %d %q %q", code, out, errs)
	}
	code, out, errs := weir(t, "", "module", "rm", "-nats", url, "pass")
	want := "weir: module rm pass: job user (running) runs pass@2 as operator op: its next restart or failover would not find the module and would fail for good; stop or cancel the job first, or give -force\n"
	if code != 1 || out != "" || errs != want {
		t.Errorf("rm of a module a job runs: exit %d %q %q, want %q", code, out, errs, want)
	}
	// Several references: refused before anything is removed if one is
	// unknown or in use.
	for _, c := range []struct{ args, want string }{
		{"upper nope", "weir: remove nope: not in the module registry\n"},
		{"upper pass", "weir: module rm upper pass: job user (running) runs pass@2 as operator op: its next restart or failover would not find the module and would fail for good; stop or cancel the job first, or give -force\n"},
	} {
		code, out, errs := weir(t, "", append([]string{"module", "rm", "-nats", url}, strings.Fields(c.args)...)...)
		if code != 1 || out != "" || errs != c.want {
			t.Errorf("rm %s: exit %d %q %q, want %q", c.args, code, out, errs, c.want)
		}
	}
	if _, err := n.Registry.Inspect(ctx, "upper@1"); err != nil {
		t.Errorf("upper@1 after the refusals: %v", err)
	}
	if _, err := n.API.CancelJob(ctx, "user"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "user", control.JobCanceled)
	if code, out, errs := weir(t, "", "module", "rm", "-nats", url, "pass", "upper@1", "pass@2"); code != 0 || out != "removed pass@2\nremoved upper@1\n" {
		t.Errorf("rm once the job ended: exit %d %q %q", code, out, errs)
	}
}

// weir job status and restore name each operator's module as the job
// runs it: the reference, the registry version a name without one
// resolved to, and the digest's start (a trial's restore ran a version
// pushed since, and nothing said which).
func TestModuleLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v1, err := n.Registry.Push(ctx, "up", read("../../guests/wat/uppercase.wasm"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := n.Registry.Push(ctx, "up", read("../../guests/wat/passthrough.wasm"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	mods := map[string]control.Module{
		"b": {Ref: "up", Digest: v1.Digest},
		"a": {Ref: "up@2", Digest: v2.Digest},
		"c": {Ref: "sha256:" + v2.Digest, Digest: v2.Digest},
	}
	want := []string{
		"a: up@2 (sha256:" + v2.Digest[:12] + ")",
		"b: up → up@1 (sha256:" + v1.Digest[:12] + ")",
		"c: sha256:" + v2.Digest[:12] + "… → up@2",
	}
	if got := moduleLines(ctx, n.Registry, mods); !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := moduleLines(ctx, nil, mods)[1]; got != "b: up (sha256:"+v1.Digest[:12]+")" {
		t.Errorf("without a registry: %q", got)
	}
}

// TestRegistryNameBesideALocalModule: a spec's bare `module: NAME` is the
// registry's latest NAME even when a Go package directory NAME sits
// beside the spec; a note says which version runs and that ./NAME would
// build the local one, and a registry without NAME says so in its
// refusal.
func TestRegistryNameBesideALocalModule(t *testing.T) {
	good := filepath.Join("..", "..", "guests", "wat", "passthrough.wasm")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Skip("guests/wat/passthrough.wasm not built")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for range 2 {
		if _, err := n.Registry.Push(ctx, "dbgfilter", data, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "dbgfilter"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dbgfilter", "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.wat"), []byte("(module)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := func(module string) *jobspec.Spec {
		return &jobspec.Spec{Operators: []jobspec.Operator{{Name: "op", Module: module}}}
	}
	var notes bytes.Buffer
	if err := checkRegistryModules(ctx, &notes, n.Registry, spec("dbgfilter"), dir); err != nil {
		t.Fatal(err)
	}
	want := "weir: note: operator op: module: dbgfilter is the registry's latest, dbgfilter@2, not the ./dbgfilter beside the spec; write module: ./dbgfilter to build that one\n"
	if notes.String() != want {
		t.Errorf("note:\n got %q\nwant %q", notes.String(), want)
	}
	// A version is meant: no note.
	notes.Reset()
	if err := checkRegistryModules(ctx, &notes, n.Registry, spec("dbgfilter@1"), dir); err != nil || notes.Len() != 0 {
		t.Errorf("dbgfilter@1: %v, note %q", err, notes.String())
	}
	err = checkRegistryModules(ctx, &notes, n.Registry, spec("other"), dir)
	if err == nil || !strings.HasSuffix(err.Error(), "; to build ./other.wat beside the spec, write module: ./other.wat") {
		t.Errorf("a name the registry lacks, ./other.wat beside the spec: %v", err)
	}
}

// A push that Ctrl-C cuts short says so in one line naming the module,
// not with the chain of the requests the interrupt canceled.
func TestPushInterruptedSaysSo(t *testing.T) {
	good, err := filepath.Abs(filepath.Join("..", "..", "guests", "wat", "passthrough.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(good); err != nil {
		t.Skip("guests/wat/passthrough.wasm not built")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	spec := &jobspec.Spec{Operators: []jobspec.Operator{{Name: "op", Module: good}}}
	interruptedCtx, interrupt := context.WithCancel(ctx)
	interrupt()
	err = pushLocalModules(interruptedCtx, io.Discard, n.Registry, spec, nil)
	if want := "interrupted while pushing module " + displayPath(good); err == nil || err.Error() != want || !errors.Is(err, context.Canceled) {
		t.Errorf("push interrupted: %v, want %q wrapping context.Canceled", err, want)
	}
}
