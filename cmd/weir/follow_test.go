package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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

// startUp starts what weir up starts, on a temp directory, closed when the
// test ends (closing it twice is fine). Its worker is declared lost after
// 3 s without a heartbeat: a loaded machine can starve a live worker's
// heartbeats (every 100 ms) for a second, and a timeout of 1 s then fails
// its job over for no reason.
func startUp(t *testing.T, ctx context.Context) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// tapSpec writes a job spec running module between a core NATS subject
// and another, and returns its path.
func tapSpec(t *testing.T, name, module, extra string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".yaml")
	spec := "name: " + name + "\nsources: [{name: in, kind: nats, subject: " + name + "-in}]\n" +
		"operators: [{name: op, module: " + module + ", inputs: [{from: in}]}]\n" +
		"sinks: [{name: out, kind: nats, subject: " + name + "-out, input: {from: op}}]\n" + extra
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// weir run -nats follows a job that fails to its end: it exits 1 with
// the reason, and does not claim that the job keeps running. (A module
// that does not load is pushed to the registry unchecked: a local file is
// validated when weir run pushes it, before the job is submitted.)
func TestRunRemoteJobThatFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	notWasm := filepath.Join(t.TempDir(), "op.wasm")
	if err := os.WriteFile(notWasm, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), tapSpec(t, "refused", notWasm, "")},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || !strings.HasPrefix(errb.String(), "weir: operator op: push "+notWasm+": module op refused: ") ||
		strings.Contains(out.String(), "submitted") {
		t.Fatalf("a local file that is no module: exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}

	if _, err := n.Registry.Push(ctx, "notwasm", []byte("hello\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code = run(ctx, []string{"run", "-nats", n.Server.ClientURL(), tapSpec(t, "doomed", "notwasm@1", "")},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || !strings.Contains(errb.String(), "weir: job doomed failed: ") ||
		!strings.Contains(errb.String(), "not a WebAssembly module") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	if strings.Contains(out.String(), "keeps running") {
		t.Errorf("weir run says a failed job keeps running:\n%s", out.String())
	}
}

// weir run -nats whose coordinator goes away says so and exits, instead
// of waiting silently forever.
func TestRunRemoteCoordinatorGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "tap", mod, "")
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-wait", "2s", "-idle", "0", spec},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := n.API.Job(ctx, "tap")
		if err == nil && st.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job never ran: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.Close()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "weir: job tap: no answer from the coordinator for 2s") {
			t.Errorf("exit %d, stderr:\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("weir run still waits for a coordinator that is gone")
	}
}

// A record whose key cannot form its sink's subject fails the job at
// once (every replay meets it), and weir run says how to go on.
func TestRunRecordWithoutAKeyForAKeyedSink(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("in.txt", []byte("k1\t1\nno key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("keyed.yaml", []byte(`name: keyed
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: "out.{key}", input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "keyed.yaml", "-input", "in.txt"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || !strings.Contains(errb.String(), `weir: job keyed failed: `) || !strings.Contains(errb.String(), `key "": the record has no key`) {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"a sink refused a record it cannot publish; the checkpoints hold none of it, and every replay would meet it again\n",
		"to go on: fix the operator that emits the record (a key that forms the sink's subject, a smaller value) or the sink's subject (one without {key} takes any key)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
}

// A trap in a job names the operator and record on one line; the worker's
// log (shown by weir run) has the wasm stack trace beside it.
func TestRunTrapLogsTheStack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mod, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "trap.yaml")
	if err := os.WriteFile(spec, []byte(`name: trap
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: op, module: `+mod+`, config: t, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
restart: {strategy: none}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", spec, "-input", in}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	last := lines[len(lines)-1]
	// Each thing named once, outside in: job, task, operator, export,
	// record, cause; then why it was not restarted. (The module traps "at
	// record 3" of any batch; the record is named when the batch has it:
	// the source may deliver the three lines in more than one batch, and
	// of a shorter one the message says the cursor is past its records.)
	want := regexp.MustCompile(`^weir: job trap failed: task op-0 failed: operator op\[0\]: weir_process: trap at record 3 of the batch( \(value "c"\)| \(past the batch's [12] records?: [^)]*\))?: wasm error: unreachable` +
		` \(not restarted: the restart strategy is none\)$`)
	if !want.MatchString(last) {
		t.Errorf("last line %q, want it to match %s", last, want)
	}
	if !strings.Contains(errb.String(), `msg="task failed"`) || !strings.Contains(errb.String(), `stack="wasm stack trace:`) ||
		!strings.Contains(errb.String(), `\n\tprocess(i32,i32,i32)`) {
		t.Errorf("no stack trace in the log:\n%s", errb.String())
	}
}

// weir run says a restart loop as weir job status does: a job whose
// operator traps on a record fails the same way after every restore, and
// weir run, which printed only each restart, says once that the failures
// in a row read the same (and, seen while the job restarts, how many the
// restart strategy allows), and how to go on: the job goes with the run,
// so with a fixed operator it is run again.
func TestRunSaysARestartLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mod, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "loop.yaml")
	if err := os.WriteFile(spec, []byte(`name: loop
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: op, module: `+mod+`, config: t, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
restart: {strategy: fixed-delay, delay: 300ms, attempts: 2}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", spec, "-input", in}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	same := regexp.MustCompile(`(?m)^ *the last [23] failed the same way: restarting does not help while the cause stays \(an operator that traps`)
	if n := len(same.FindAllString(out.String(), -1)); n != 1 {
		t.Errorf("weir run said the restart loop %d times, want once:\n%s", n, out.String())
	}
	if !regexp.MustCompile(`(?m)^ *to go on: fix the operator and run the job again$`).MatchString(out.String()) {
		t.Errorf("weir run did not say how to go on:\n%s", out.String())
	}
	if row := regexp.MustCompile(`(?m)^failures in a row: `).FindAllString(out.String(), -1); len(row) > 1 {
		t.Errorf("weir run said the failures in a row %d times, want once at most:\n%s", len(row), out.String())
	}
}

// weir run -data keeps its job, its checkpoints and its input in the
// data directory: run again, a job that traps on a record would repeat
// the output it committed. weir run says to restore it where weir up
// -data serves the directory instead, and the command it prints, run
// there, restores the job from its latest checkpoint.
func TestRunDataSaysToRestoreATrappingJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mis, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	job := func(module string) string {
		p := filepath.Join(dir, filepath.Base(module)+".yaml")
		spec := `name: dtrap
sources: [{name: in, kind: jetstream, stream: DIN, subject: din}]
operators: [{name: op, module: ` + module + `, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: DOUT, subject: dout, input: {from: op}}]
checkpointing: {interval: 200ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 2}
`
		if module == mis {
			// misbehave's config "d" and a count of 0: it traps on a
			// record whose value starts with "!".
			spec = strings.Replace(spec, "inputs: [{from: in}]}]", `config: "d\0\0\0\0", inputs: [{from: in}]}]`, 1)
		}
		if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	go func() {
		f.done <- run(ctx, []string{"run", "-data", data, "-create-streams", job(mis)},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.said("checkpoint 1 completed")
	url := regexp.MustCompile(`embedded NATS on (\S+),`).FindStringSubmatch(f.out.String())
	if url == nil {
		t.Fatalf("weir run did not say its NATS:\n%s", f.out.String())
	}
	nc, err := natsconn.Connect(natsconn.Options{URL: url[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "din", []byte("!x")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-f.done:
		if code != 1 {
			t.Fatalf("weir run exited %d, want 1:\n%s\n%s", code, f.out.String(), f.errb.String())
		}
	case <-ctx.Done():
		t.Fatalf("weir run did not end with its job:\n%s", f.out.String())
	}
	nc.Close()
	m := regexp.MustCompile(`(?m)^ *to go on: fix the operator, then, with weir up -data (\S+) running, (weir job restore dtrap -from (\d+)) -spec SPEC, .*$`).
		FindStringSubmatch(f.out.String())
	if m == nil || m[1] != data {
		t.Fatalf("weir run did not say to restore the job where weir up -data %s serves it:\n%s", data, f.out.String())
	}
	// weir up -data, on a port of its own: the command as printed, with
	// that port, and SPEC a spec with the fixed build.
	n, err := node.Start(ctx, node.Options{DataDir: data, Port: -1, Coordinator: true, Workers: 1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	args := append(strings.Fields(strings.TrimPrefix(m[2], "weir ")), "-nats", n.Server.ClientURL(), "-spec", job(fixed))
	var out, errb bytes.Buffer
	if code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	from, _ := strconv.ParseInt(m[3], 10, 64)
	for {
		st, err := n.API.Job(ctx, "dtrap")
		if err == nil && st.State == control.JobRunning && st.RestoredFrom == from {
			break
		}
		if err == nil && st.State.Terminal() || ctx.Err() != nil {
			t.Fatalf("restored job: %+v, %v; want it running, restored from %d", st, err, from)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// weir run -data with -input to a JetStream source stores the input in
// the data directory: a job that traps on a record before any checkpoint
// is told to run again without -input, which would store it a second time,
// and run so, the job reads its stream, which holds the input once.
func TestRunDataSaysToRunATrappingJobAgainWithoutInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mis, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\n!b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := func(module, config string) string {
		p := filepath.Join(dir, filepath.Base(module)+".yaml")
		spec := `name: itrap
sources: [{name: in, kind: jetstream, stream: IIN, subject: iin}]
operators: [{name: op, module: ` + module + config + `, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: iout, input: {from: op}}]
checkpointing: {interval: 1h}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}
`
		if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// misbehave's config "d" and a count of 0: it traps on a record whose
	// value starts with "!".
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-data", data, "-input", in, job(mis, `, config: "d\0\0\0\0"`)},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := "to go on: fix the operator and run the job again without -input: its stream in -data " + data +
		" holds the input already, and -input would store it a second time\n"
	if code != 1 || !strings.Contains(out.String(), want) {
		t.Fatalf("weir run exited %d, want 1 saying %q:\n%s\n%s", code, want, out.String(), errb.String())
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	f := &following{t: t, ctx: ctx, cancel: stop, done: make(chan int, 1)}
	go func() {
		f.done <- run(rctx, []string{"run", "-data", data, job(fixed, "")}, Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.said("!b\n")
	url := regexp.MustCompile(`embedded NATS on (\S+),`).FindStringSubmatch(f.out.String())
	if url == nil {
		t.Fatalf("weir run did not say its NATS:\n%s", f.out.String())
	}
	nc, err := natsconn.Connect(natsconn.Options{URL: url[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "IIN")
	if err != nil {
		t.Fatal(err)
	}
	if msgs := s.CachedInfo().State.Msgs; msgs != 2 {
		t.Errorf("stream IIN holds %d messages, want the input's 2", msgs)
	}
	nc.Close()
	f.stop()
}

// weir run -input names the line that no NATS message can carry.
func TestRunInputLineTooLarge(t *testing.T) {
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(in, []byte("small\n"+strings.Repeat("x", 2<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	// No deadline, as a command's context has none: the core NATS flush
	// of what came before the line needs one of its own.
	code := run(context.Background(), []string{"run", tapSpec(t, "big", mod, ""), "-input", in}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := "weir: -input " + in + ": line 2: a record of 2097152 bytes does not fit in a NATS message (the server's max_payload is 1048576 bytes)" +
		" (the 1 records before it were published from " + in + " to in)\n"
	if code != 1 || errb.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errb.String(), want)
	}
}

// weir job restore -spec checks the new spec's module files before it
// asks the coordinator, as weir run does.
func TestRestoreSpecChecksModules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	spec := tapSpec(t, "tap", "./nosuch.wasm", "")
	var out, errb bytes.Buffer
	code := run(ctx, []string{"job", "restore", "-nats", n.Server.ClientURL(), "tap", "-from", "1", "-spec", spec},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := "weir: " + spec + `:3: operators[0].module: unknown module "` + filepath.Join(filepath.Dir(spec), "nosuch.wasm") + `": no such file` + "\n"
	if code != 1 || errb.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errb.String(), want)
	}
	// The spec's mistake is said before NATS is asked for: with no server
	// there, it is not hidden behind the connection's error.
	errb.Reset()
	code = run(ctx, []string{"job", "restore", "-nats", "nats://127.0.0.1:1", "tap", "-from", "1", "-spec", spec},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || errb.String() != want {
		t.Errorf("no server: exit %d, stderr %q, want %q", code, errb.String(), want)
	}
}

// weir job restore JOB -spec F refuses a spec of another job, which
// would start that job beside JOB: before NATS is asked for.
func TestRestoreSpecOfAnotherJob(t *testing.T) {
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "other", mod, "")
	code, _, errs := weir(t, "", "job", "restore", "-nats", "nats://127.0.0.1:1", "tap", "-from", "4", "-spec", spec)
	want := "weir: restore tap: the spec is of job other, not tap: give a spec named tap, or start job other from this checkpoint by its own name (restore other -from tap/4)\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errs, want)
	}
}

// weir run of a job whose name ran before prints the new run's
// checkpoints only: the earlier run's that weir checkpoint ls lists (still
// stored, restorable) are no news of this one.
func TestRunPrintsOnlyItsRunsCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	specFile := tapSpec(t, "again", mod, "checkpointing: {interval: 20ms, retained: 2}\n")
	spec, err := jobspec.ParseFile(specFile, jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	var first control.JobStatus
	for first, _ = n.API.Job(ctx, "again"); first.LatestCheckpoint < 3; first, _ = n.API.Job(ctx, "again") {
		if ctx.Err() != nil {
			t.Fatal("no third checkpoint")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if first, err = n.API.CancelJob(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	// Follow the new run until it printed two checkpoints (however long a
	// loaded machine takes), then stop.
	f := startFollowing(t, ctx, n.Server.ClientURL(), specFile)
	completed := regexp.MustCompile(`(?m)^checkpoint (\d+) completed`)
	for len(completed.FindAllString(f.out.String(), -1)) < 2 {
		select {
		case code := <-f.done:
			t.Fatalf("weir run exited %d before it printed two checkpoints:\n%s\n%s", code, f.out.String(), f.errb.String())
		case <-ctx.Done():
			t.Fatalf("weir run printed fewer than two checkpoints:\n%s\n%s", f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.stop()
	out := f.out.String()
	lines := completed.FindAllStringSubmatch(out, -1)
	for _, m := range lines {
		if id, _ := strconv.ParseInt(m[1], 10, 64); id <= first.LatestCheckpoint {
			t.Errorf("weir run printed checkpoint %d, of the earlier run (up to %d):\n%s", id, first.LatestCheckpoint, out)
		}
	}
}

// weir run reports a job's state changes in order, each once: after its
// coordinator restarted, a resumed job is restarting and then runs its
// next attempt; 'created (attempt 1)' (what a coordinator of an earlier
// version listed it as) is no state it goes back to. A running job's line
// says which failure it restarted after (its LastFailure, of the attempt
// before) unless the restarting line said so; the statuses of a
// coordinator that kept that failure as a running job's reason read the
// same.
func TestRunReportsStateChanges(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	fail := func(attempt int, reason string) control.Failure {
		return control.Failure{Time: at.Add(time.Duration(attempt) * time.Second), Attempt: attempt, Reason: reason}
	}
	st := func(state control.JobState, attempt int, reason string, failures ...control.Failure) control.JobStatus {
		s := control.JobStatus{Name: "crash", State: state, Attempt: attempt, Reason: reason, Failures: failures}
		if len(failures) > 0 {
			f := failures[0]
			s.LastFailure = &f
		}
		return s
	}
	old := func(s control.JobStatus) control.JobStatus { s.LastFailure = nil; return s }
	// skipped has s say that attempts were not started, their deploys
	// having lost worker w2 (given oldest first, listed newest first).
	skipped := func(s control.JobStatus, attempts ...int) control.JobStatus {
		for _, a := range attempts {
			s.Skipped = append([]control.SkippedAttempt{{Time: at, Attempt: a, Worker: "w2",
				Reason: "its worker w2 was lost while it was deployed"}}, s.Skipped...)
		}
		return s
	}
	notStarted := func(a int) string {
		return fmt.Sprintf("attempt %d was not started: its worker w2 was lost while it was deployed", a)
	}
	boom1, boom2 := fail(1, "task in-0 failed: boom"), fail(2, "task in-0 failed: boom")
	lost1, lost2, refused2 := fail(1, "worker w1 lost"), fail(2, "worker w1 lost"), fail(2, "deploy to worker w2: refused")
	for _, c := range []struct {
		name string
		seen []control.JobStatus // after the submit's created (attempt 0)
		want []string
	}{
		{"coordinator restarted", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRunning, 1, ""),
			st(control.JobRestarting, 1, "coordinator restarted"),
			st(control.JobRestarting, 2, "coordinator restarted"), // deploying attempt 2
			st(control.JobRunning, 2, ""),                         // running again: no reason
		}, []string{"running (attempt 1)", "restarting (attempt 1): coordinator restarted", "running (attempt 2)"}},
		{"an earlier version's coordinator restarted", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobCreated, 1, ""), st(control.JobRunning, 2, ""),
		}, []string{"running (attempt 1)", "running (attempt 2)"}},
		{"a restart between two looks", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRunning, 2, "", boom1),
		}, []string{"running (attempt 1)", "running (attempt 2), restarted after: task in-0 failed: boom"}},
		{"a restart between two looks whose deploy was planned again", []control.JobStatus{
			// Attempt 2's deploy lost its worker: attempt 3 was planned
			// without it, and attempt 1's failure is the latest.
			st(control.JobRunning, 1, ""), st(control.JobRunning, 3, "", boom1),
		}, []string{"running (attempt 1)", "running (attempt 3), restarted after: task in-0 failed: boom"}},
		{"a first deploy that lost its worker", []control.JobStatus{
			skipped(st(control.JobRunning, 2, ""), 1), skipped(st(control.JobRunning, 2, ""), 1),
		}, []string{"running (attempt 2); " + notStarted(1)}},
		{"a restart between two looks whose deploy lost its worker", []control.JobStatus{
			st(control.JobRunning, 1, ""), skipped(st(control.JobRunning, 3, "", boom1), 2),
		}, []string{"running (attempt 1)", "running (attempt 3), restarted after: task in-0 failed: boom; " + notStarted(2)}},
		{"a failover seen restarting whose deploys lost their worker", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRestarting, 1, boom1.Reason, boom1),
			skipped(st(control.JobRunning, 4, "", boom1), 2, 3),
			skipped(st(control.JobRestarting, 4, lost1.Reason, fail(4, lost1.Reason), boom1), 2, 3),
			skipped(st(control.JobRunning, 5, "", fail(4, lost1.Reason), boom1), 2, 3),
		}, []string{"running (attempt 1)", "restarting (attempt 1): task in-0 failed: boom",
			"running (attempt 4); " + notStarted(2) + "; " + notStarted(3),
			"restarting (attempt 4): worker w1 lost", "running (attempt 5)"}},
		{"a failover seen restarting", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRestarting, 1, boom1.Reason, boom1), st(control.JobRunning, 2, "", boom1),
		}, []string{"running (attempt 1)", "restarting (attempt 1): task in-0 failed: boom", "running (attempt 2)"}},
		{"the same failure twice", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRunning, 2, "", boom1), st(control.JobRunning, 3, "", boom2, boom1),
		}, []string{"running (attempt 1)", "running (attempt 2), restarted after: task in-0 failed: boom",
			"running (attempt 3), restarted after: task in-0 failed: boom"}},
		{"a coordinator restart after a failure", []control.JobStatus{
			st(control.JobRunning, 2, "", boom1), st(control.JobRestarting, 2, "coordinator restarted", boom1),
			st(control.JobRunning, 3, "", boom1),
		}, []string{"running (attempt 2), restarted after: task in-0 failed: boom", "restarting (attempt 2): coordinator restarted",
			"running (attempt 3)"}},
		{"a coordinator that kept the failure as the reason", []control.JobStatus{
			st(control.JobRunning, 1, ""), old(st(control.JobRunning, 2, boom1.Reason, boom1)),
			old(st(control.JobRunning, 3, "task in-0 failed: bang")), // older still: no failures
		}, []string{"running (attempt 1)", "running (attempt 2), restarted after: task in-0 failed: boom",
			"running (attempt 3), restarted after: task in-0 failed: bang"}},
		{"two failovers for the same cause", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRestarting, 1, lost1.Reason, lost1), st(control.JobRunning, 2, "", lost1),
			st(control.JobRestarting, 2, lost1.Reason, lost2, lost1), st(control.JobRunning, 3, "", lost2, lost1),
		}, []string{"running (attempt 1)", "restarting (attempt 1): worker w1 lost", "running (attempt 2)",
			"restarting (attempt 2): worker w1 lost", "running (attempt 3)"}},
		{"restarts that fail", []control.JobStatus{
			st(control.JobRunning, 1, ""), st(control.JobRestarting, 1, lost1.Reason, lost1),
			st(control.JobRestarting, 2, lost1.Reason, lost1), st(control.JobRestarting, 2, refused2.Reason, refused2, lost1),
			st(control.JobRestarting, 3, refused2.Reason, refused2, lost1),
			st(control.JobFailed, 3, "deploy to worker w2: refused (after 2 restart attempts)", fail(3, refused2.Reason), refused2, lost1),
		}, []string{"running (attempt 1)", "restarting (attempt 1): worker w1 lost", "restarting (attempt 2): deploy to worker w2: refused",
			"failed (attempt 3): deploy to worker w2: refused (after 2 restart attempts)"}},
	} {
		said := stateReport{state: control.JobCreated}
		var got []string
		for _, s := range c.seen {
			if line := said.news(s); line != "" {
				got = append(got, strings.TrimPrefix(line, "job crash: "))
			}
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: weir run printed\n  %s\nwant\n  %s", c.name, strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
		}
	}
}

// A job submitted again numbers its attempts on from its earlier runs
// and lists their failures: its first attempt was not restarted after the
// last run's failure, and weir run does not say it was; a restart within
// the run is said as always.
func TestRunSaysNoRestartForAJobSubmittedAgain(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	trap := control.Failure{Time: at, Attempt: 3, Reason: "task op-0 failed: trap (the earlier run's)"}
	boom := control.Failure{Time: at.Add(time.Minute), Attempt: 4, Reason: "task op-0 failed: boom"}
	submitted := at.Add(time.Second)
	said := stateReport{state: control.JobCreated, attempt: 4} // as weir run's submit saw it: the first deploy begun
	if got := said.news(control.JobStatus{Name: "again", State: control.JobRunning, Attempt: 4, Submitted: submitted,
		Failures: []control.Failure{trap}, LastFailure: &trap}); got != "job again: running (attempt 4)" {
		t.Errorf("first attempt of the run: %q", got)
	}
	if got := said.news(control.JobStatus{Name: "again", State: control.JobRunning, Attempt: 5, Restarts: 1, Submitted: submitted,
		Failures: []control.Failure{boom, trap}, LastFailure: &boom}); got != "job again: running (attempt 5), restarted after: task op-0 failed: boom" {
		t.Errorf("a restart within the run: %q", got)
	}
}

// The answer to weir run's submit may come after the job's first deploy
// began (attempt 1, still created): the restart after that attempt's
// failure is said all the same. (Taking the answer's attempt for the last
// of an earlier run, weir run left it out now and then:
// TestRunWaitsForTheInputsOutputThroughAFailover failed so under load.)
func TestRunSaysTheRestartAfterTheFirstAttempt(t *testing.T) {
	submitted := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	boom := control.Failure{Time: submitted.Add(time.Second), Attempt: 1, Reason: "task out-0 failed: boom"}
	said := stateReport{state: control.JobCreated, attempt: 1}
	if got := said.news(control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 1, Submitted: submitted}); got != "job j: running (attempt 1)" {
		t.Errorf("first attempt: %q", got)
	}
	if got := said.news(control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 2, Restarts: 1, Submitted: submitted,
		Failures: []control.Failure{boom}, LastFailure: &boom}); got != "job j: running (attempt 2), restarted after: task out-0 failed: boom" {
		t.Errorf("the restart: %q", got)
	}
}

// weir run prints what it learns of its job in the order it happened:
// a look at the job (its status, then its checkpoints) can find it failed
// and a checkpoint that completed before the failure, both new, and weir
// run printed the checkpoint after the failure, as if it came after. The
// lines of one look go by when each happened on the coordinator (a state
// since it was set, or since the failure it reports; a checkpoint since
// it completed or failed); a status without that time (an older
// coordinator) says its state first, as before.
func TestRunPrintsALooksLinesInTheOrderTheyHappened(t *testing.T) {
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	sec := func(n float64) time.Time { return at.Add(time.Duration(n * float64(time.Second))) }
	trap := control.Failure{Time: sec(4.9), Attempt: 1, Reason: "task op-0 failed: trap"}
	cp := func(id int64, status string, triggered, took float64) control.CheckpointInfo {
		return control.CheckpointInfo{Job: "j", ID: id, Status: status, Triggered: sec(triggered), Duration: time.Duration(took * float64(time.Second)),
			Acked: 3, Total: 3, Reason: "expired"}
	}
	running := control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 1, Updated: sec(0)}
	for _, c := range []struct {
		name string
		st   control.JobStatus
		cps  []control.CheckpointInfo
		want []string // the lines' beginnings
	}{
		{"failed after a checkpoint", control.JobStatus{Name: "j", State: control.JobFailed, Attempt: 1, Reason: trap.Reason, Updated: sec(5),
			Failures: []control.Failure{trap}, LastFailure: &trap},
			[]control.CheckpointInfo{cp(1, control.CheckpointCompleted, 1, 0.5), cp(2, control.CheckpointCompleted, 3, 0.5)},
			[]string{"checkpoint 2 completed", "job j: failed (attempt 1): task op-0 failed: trap"}},
		{"restarting after a checkpoint and one that failed", control.JobStatus{Name: "j", State: control.JobRestarting, Attempt: 1, Reason: trap.Reason,
			Updated: sec(5), Failures: []control.Failure{trap}, LastFailure: &trap},
			[]control.CheckpointInfo{cp(2, control.CheckpointCompleted, 3, 0.5), cp(3, control.CheckpointFailed, 3.6, 1)},
			[]string{"checkpoint 2 completed", "checkpoint 3 failed", "job j: restarting (attempt 1): task op-0 failed: trap"}},
		{"a restart between two looks", control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 2, Updated: sec(6),
			Failures: []control.Failure{trap}, LastFailure: &trap},
			[]control.CheckpointInfo{cp(2, control.CheckpointCompleted, 3, 0.5), cp(4, control.CheckpointCompleted, 7, 0.5)},
			[]string{"checkpoint 2 completed", "job j: running (attempt 2), restarted after: task op-0 failed: trap", "checkpoint 4 completed"}},
		{"a coordinator that sends no time", control.JobStatus{Name: "j", State: control.JobFailed, Attempt: 1, Reason: trap.Reason},
			[]control.CheckpointInfo{cp(2, control.CheckpointCompleted, 3, 0.5)},
			[]string{"job j: failed (attempt 1): task op-0 failed: trap", "checkpoint 2 completed"}},
	} {
		said := stateReport{state: running.State, attempt: running.Attempt}
		seen := map[int64]string{}
		// The look before saw the job running and checkpoint 1.
		lookNews(&said, seen, running, []control.CheckpointInfo{cp(1, control.CheckpointCompleted, 1, 0.5)})
		text, _ := lookNews(&said, seen, c.st, c.cps)
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		ok := len(lines) == len(c.want)
		for i := 0; ok && i < len(lines); i++ {
			ok = strings.HasPrefix(lines[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: weir run printed\n  %s\nwant lines beginning\n  %s", c.name, strings.Join(lines, "\n  "), strings.Join(c.want, "\n  "))
		}
	}
}

// weir run -nats follows its job across a restart of weir up (the node
// closed and started again on its data directory and port: its record
// says the job runs, as after a kill -9): it says the job is restarting
// because the coordinator restarted, then that its next attempt runs —
// not 'created (attempt 1)' in between.
func TestRunFollowsAJobAcrossACoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := natsconntest.FreePort(t)
	dir := t.TempDir()
	up := func() *node.Node {
		t.Helper()
		// With a heartbeat timeout of a second, a loaded machine starved
		// the worker's heartbeats past it again and again ("worker w1
		// lost", three failovers in two minutes), and each failover is a
		// state change the test does not expect. (The resumed job waits
		// one timeout for the workers to find the new coordinator.)
		n, err := node.Start(ctx, node.Options{DataDir: dir, Port: port, Coordinator: true, Workers: 1, WorkerID: "w1",
			HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	waitJob := func(n *node.Node, what string, cond func(control.JobStatus) bool) control.JobStatus {
		t.Helper()
		for {
			st, err := n.API.Job(ctx, "crash")
			if err == nil && cond(st) {
				return st
			}
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %+v, %v", what, st, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	n := up()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "crash", mod, "checkpointing: {interval: 50ms}\n")
	f := startFollowing(t, ctx, n.Server.ClientURL(), spec)
	// The attempt that runs when weir up goes down: on a loaded machine
	// the first deploy may have failed over already (its worker missed
	// its heartbeats: "worker lost while deploying"), and weir run may
	// not have seen the attempt before it running.
	st := waitJob(n, "a checkpoint", func(st control.JobStatus) bool { return st.State == control.JobRunning && st.LatestCheckpoint > 0 })
	a := f.running("crash", 0, st.Attempt)
	running := fmt.Sprintf("running (attempt %d)", a)
	// What weir run prints from here on comes of the restart.
	restart := len(f.out.String())
	n.Close()
	n = up()
	b := f.running("crash", restart, a+1)
	f.stop()
	var states []string
	for _, line := range strings.Split(f.out.String(), "\n") {
		if strings.HasPrefix(line, "job :") { // a status it did not get, interrupted
			t.Errorf("weir run printed %q", line)
		}
		if line == "job crash: "+running || strings.HasPrefix(line, "job crash: "+running+", restarted after: ") {
			// What came before is no part of the restart, nor is the
			// failover that made it attempt a.
			states = []string{running}
			continue
		}
		if strings.HasPrefix(line, "job crash: ") {
			states = append(states, strings.TrimPrefix(line, "job crash: "))
		}
	}
	// (A weir run that reconnects only once the resumed job runs again
	// sees no restarting, and no failure: a coordinator restart is none.)
	want := []string{running, fmt.Sprintf("restarting (attempt %d): coordinator restarted", a), fmt.Sprintf("running (attempt %d)", b)}
	late := []string{running, fmt.Sprintf("running (attempt %d)", b)} // a coordinator restart is no failure
	if got := strings.Join(states, "\n"); got != strings.Join(want, "\n") && got != strings.Join(late, "\n") {
		t.Errorf("weir run reported\n  %s\nwant\n  %s\n(all it printed:\n%s)", strings.Join(states, "\n  "), strings.Join(want, "\n  "), f.out.String())
	}
}

// weir run -nats follows its job through a restart of the coordinator
// alone (NATS and the worker stay up) that lasts longer than one read of
// the job API waits while nobody listens (control.DefaultReadAttempt):
// it asks again until the coordinator is back, and does not exit saying
// that no coordinator answers.
func TestRunFollowsAJobWhileTheCoordinatorIsAway(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a coordinator restart: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, coordinator := splitNode(t, ctx)
	c := coordinator()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "away", mod, "checkpointing: {interval: 50ms}\n")
	f := startFollowing(t, ctx, url, spec)
	a := f.running("away", 0, 1)
	c.Close()
	select {
	case code := <-f.done:
		t.Fatalf("weir run exited %d while the coordinator was away:\n%s\n%s", code, f.out.String(), f.errb.String())
	case <-time.After(control.DefaultReadAttempt + time.Second):
	}
	// What weir run prints from here on it heard from the coordinator
	// that came back.
	away := len(f.out.String())
	c = coordinator()
	defer c.Close()
	f.running("away", away, a+1)
	f.stop()
}

// weir run -nats that gives up on a coordinator away for longer than
// -wait says what it last heard of its job, and that it cannot tell
// more: "job idc keeps running; …" followed by "no coordinator answers"
// asserted what it could not know.
func TestRunThatGivesUpOnTheCoordinatorSaysWhatItLastHeard(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out -wait with the coordinator away: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, coordinator := splitNode(t, ctx)
	c := coordinator()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "idc", mod, "")
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	go func() {
		f.done <- run(ctx, []string{"run", "-nats", url, "-idle", "0", "-wait", "2s", spec},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.running("idc", 0, 1)
	c.Close()
	code := <-f.done
	out := f.out.String()
	if want := "job idc was running when the coordinator last answered, "; code != 1 || !strings.Contains(out, want) ||
		!strings.Contains(out, "weir run cannot tell whether it still runs: weir job status -nats "+url+" idc says, once weir up answers again\n") ||
		strings.Contains(out, "keeps running") || !strings.Contains(f.errb.String(), "no coordinator answers") {
		t.Errorf("weir run with the coordinator gone: exit %d:\n%s\n%s\nwant exit 1, %q and no \"keeps running\"", code, out, f.errb.String(), want)
	}
}

// following is a weir run -nats -idle 0 -cancel of a spec, in the
// background (startFollowing).
type following struct {
	t         *testing.T
	ctx       context.Context
	cancel    context.CancelFunc
	out, errb syncBuffer
	done      chan int // its exit code
}

// splitNode starts NATS with one worker in a node of their own, and
// returns its URL and a function that starts a coordinator on it (the
// caller closes each), so that a test can stop and start the coordinator
// alone.
func splitNode(t *testing.T, ctx context.Context) (string, func() *node.Node) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Workers: 1, WorkerID: "w1",
		CheckpointStore: node.StoreJetStream, HeartbeatTimeout: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	url := srv.Server.ClientURL()
	return url, func() *node.Node {
		t.Helper()
		n, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: url}, Coordinator: true,
			CheckpointStore: node.StoreJetStream, HeartbeatTimeout: 2 * time.Second, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// startFollowing starts weir run -nats url -idle 0 -cancel spec; the test's end
// interrupts it.
func startFollowing(t *testing.T, ctx context.Context, url, spec string) *following {
	t.Helper()
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	rctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		f.done <- run(rctx, []string{"run", "-nats", url, "-idle", "0", "-cancel", spec},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	return f
}

// said waits until weir run printed what; it fails the test if weir run
// exits first.
func (f *following) said(what string) {
	f.t.Helper()
	for !strings.Contains(f.out.String(), what) {
		select {
		case code := <-f.done:
			f.t.Fatalf("weir run exited %d before it said %q:\n%s\n%s", code, what, f.out.String(), f.errb.String())
		case <-f.ctx.Done():
			f.t.Fatalf("weir run never said %q:\n%s\n%s", what, f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// running waits until weir run printed, past the first from bytes of its
// output, that job runs in attempt min or a later one, and returns the
// attempt it named. Which attempt that is the test cannot know: on a
// loaded machine a deploy may fail over (a worker's heartbeats starved
// past the timeout: "worker lost while deploying") before weir run
// looked, and weir run then never reports that attempt running.
func (f *following) running(job string, from, min int) int {
	f.t.Helper()
	re := regexp.MustCompile(`(?m)^job ` + regexp.QuoteMeta(job) + `: running \(attempt (\d+)\)`)
	for {
		out := f.out.String()
		for _, m := range re.FindAllStringSubmatch(out[from:], -1) {
			if a, err := strconv.Atoi(m[1]); err == nil && a >= min {
				return a
			}
		}
		select {
		case code := <-f.done:
			f.t.Fatalf("weir run exited %d before it said job %s runs in attempt %d or later:\n%s\n%s", code, job, min, f.out.String(), f.errb.String())
		case <-f.ctx.Done():
			f.t.Fatalf("weir run never said job %s runs in attempt %d or later:\n%s\n%s", job, min, f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop interrupts weir run (Ctrl-C) and checks that it exits 0.
func (f *following) stop() {
	f.t.Helper()
	f.cancel()
	select {
	case code := <-f.done:
		if code != 0 {
			f.t.Fatalf("weir run exited %d:\n%s\n%s", code, f.out.String(), f.errb.String())
		}
	case <-time.After(30 * time.Second):
		f.t.Fatal("weir run did not stop")
	}
}

// weir run -for stops following when its time is up also while the
// coordinator is away: it does not wait for the coordinator until it
// gives up on it, and exits 0, as it does with the coordinator there.
func TestRunForEndsWhileTheCoordinatorIsAway(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a coordinator: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, coordinator := splitNode(t, ctx)
	c := coordinator()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "brief", mod, "")
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	go func() {
		f.done <- run(ctx, []string{"run", "-nats", url, "-idle", "0", "-for", "3s", spec},
			Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.running("brief", 0, 1)
	c.Close()
	// The coordinator stays away: weir run ends by -for, or, without it,
	// once no coordinator answered for -wait (exit 1).
	code := <-f.done
	if code != 0 || strings.Contains(f.errb.String(), "no coordinator answers") {
		t.Errorf("weir run -for 3s with the coordinator away: exit %d:\n%s\n%s", code, f.out.String(), f.errb.String())
	}
}

// weir job restore -spec -create-streams creates the streams the new spec
// names that are not there (a sink moved to a new stream), as weir run
// does; without it the restore is refused, naming the stream.
func TestRestoreCreatesTheNewSpecsStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(""))
	for {
		st, err := n.API.Job(ctx, "jo")
		if err != nil {
			t.Fatal(err)
		}
		if st.LatestCheckpoint > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := n.API.CancelJob(ctx, "jo"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "jo", control.JobCanceled)
	st, err := n.API.Job(ctx, "jo")
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "moved.yaml")
	spec := strings.Replace(strings.Replace(jsJob(""), "stream: OUT", "stream: MOVED", 1), `"out.{key}"`, `"moved.{key}"`, 1)
	if err := os.WriteFile(moved, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	url, from := n.Server.ClientURL(), fmt.Sprint(st.LatestCheckpoint)
	code, out, errs := weir(t, "", "job", "restore", "-nats", url, "jo", "-from", from, "-spec", moved)
	if code != 1 || !strings.Contains(errs, "MOVED") || !strings.HasSuffix(errs, "; -create-streams creates the streams the spec names that do not exist\n") {
		t.Errorf("restore to a stream not there: exit %d, stdout %q, stderr %q; want it to name -create-streams", code, out, errs)
	}
	code, out, errs = weir(t, "", "job", "restore", "-nats", url, "jo", "-from", from, "-spec", moved, "-create-streams")
	if code != 0 || !strings.Contains(out, "created stream MOVED (subjects moved.>, 1 replica(s))\n") || !strings.Contains(out, "job jo: ") {
		t.Errorf("restore -create-streams: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := weir(t, "", "job", "restore", "-nats", url, "jo", "-from", from, "-create-streams"); code != 2 || !strings.Contains(errs, "give -spec") {
		t.Errorf("-create-streams without -spec: exit %d, stderr %q", code, errs)
	}
}
