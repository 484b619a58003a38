package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
	"github.com/weirhq/weir/transport/source"
)

// TestRunWordcountExample runs the README's first command: the wordcount
// example on the embedded default, and checks the counts it prints.
func TestRunWordcountExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two Go guests and runs a job: skipped in -short")
	}
	got, root := runExample(t, "run", "-idle", "1s", "-show", "-1",
		"examples/wordcount/job.yaml", "-input", "examples/wordcount/input.txt")
	for _, want := range []string{
		"created stream LINES", "published 6 input records",
		"[counts] weir\t5\n", // "weir" occurs five times in input.txt
		"[counts] the\t9\n", "latest value per key:",
		"sink counts: exactly-once", "publish mode fast on stream COUNTS",
		"job wordcount submitted: created\n", "job wordcount: running (attempt 1)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The submit line says "created"; the first attempt's number is no news.
	if strings.Contains(got, "created (attempt") {
		t.Errorf("output repeats the created state:\n%s", got)
	}
	if !regexp.MustCompile(`checkpoint \d+ completed in`).MatchString(got) {
		t.Errorf("no completed checkpoint in the output:\n%s", got)
	}
	// Exactly-once: every count of every word appears once.
	seen := map[string]bool{}
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "[counts] ") {
			if seen[line] {
				t.Errorf("output repeated: %q", line)
			}
			seen[line] = true
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".weir")); err == nil {
		t.Log("note: a .weir directory exists in the repo root (from weir up), untouched")
	}
}

// runExample runs weir with args from the repository root (returned),
// where the examples' paths are relative, and returns what it printed; it
// fails the test unless weir exits 0.
func runExample(t *testing.T, args ...string) (out, root string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	// No deadline of its own: in a full race run on 2 busy cores, building
	// the word count's two Go guests and pushing them outlasted the 3
	// minutes this had, and weir run failed with "context deadline
	// exceeded". go test's -timeout is the guard against a hang.
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), args, Stdio{In: strings.NewReader(""), Out: &stdout, Err: &stderr}); code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, stderr.String(), stdout.String())
	}
	return stdout.String(), root
}

// TestRunBatchWordcountExample runs examples/wordcount/batch.yaml, the
// bounded word count: it ends by itself, and prints each word's total
// once.
func TestRunBatchWordcountExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two Go guests and runs a job: skipped in -short")
	}
	// No -idle: weir run ends because the job does.
	got, _ := runExample(t, "run", "-show", "-1", "examples/wordcount/batch.yaml", "-input", "examples/wordcount/input.txt")
	for _, want := range []string{"[totals] weir\t5\n", "[totals] the\t9\n", "stops after sequence 6 (stop: end)",
		"job wordcount-batch: finished (attempt 1): every source read up to its stop"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	words := map[string]int{}
	for _, line := range strings.Split(got, "\n") {
		if w, _, ok := strings.Cut(strings.TrimPrefix(line, "[totals] "), "\t"); ok && strings.HasPrefix(line, "[totals] ") {
			words[w]++
		}
	}
	for w, n := range words {
		if n != 1 {
			t.Errorf("word %q has %d totals, want one", w, n)
		}
	}
	if len(words) < 40 {
		t.Errorf("%d words totalled:\n%s", len(words), got)
	}
}

// weir run -nats pushes a module given as a file into the registry and
// submits the job with its digest: a worker on another machine, which
// cannot read the file, runs the job. Here the file is deleted once weir run
// returned, before the first worker joins.
func TestRunPushesLocalModules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go guest and runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	coord, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true,
		CheckpointStore: node.StoreJetStream, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	url := coord.Server.ClientURL()

	wasm := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase")
	t.Chdir(t.TempDir())
	if err := os.Mkdir("mod", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("mod/uppercase.wasm", wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	job := `name: up
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: mod/uppercase.wasm, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {disabled: true}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 100}
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"run", "-nats", url, "-for", "200ms", "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
	}
	want := "module mod/uppercase.wasm → sha256:" + registry.Digest(wasm) + " (pushed as uppercase@1)\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if err := os.RemoveAll("mod"); err != nil {
		t.Fatal(err)
	}

	w, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: url}, DataDir: t.TempDir(), Workers: 1,
		WorkerID: "elsewhere", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan string, 100)
	sub, err := coord.Conn.Subscribe("out", func(m *nats.Msg) { got <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case v := <-got:
			if v != "HELLO" {
				t.Fatalf("output %q, want HELLO", v)
			}
			return
		case <-tick.C:
			// Core NATS: a record sent before the job runs is lost; send until one comes out.
			if err := coord.Conn.Publish("in", []byte("hello")); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			st, _ := coord.API.Job(context.Background(), "up")
			t.Fatalf("no output from the worker that cannot see the module file: job %s: %s", st.State, st.Reason)
		}
	}
}

// A JetStream source split by partitions: two subtasks read the four
// partitions weir run spreads the input over (by key), the server sends
// each subtask only its own, and the exactly-once sink gets every line
// once.
func TestRunPartitionedSource(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	job := `name: orders
sources:
  - name: orders
    kind: jetstream
    stream: ORDERS
    parallelism: 2
    partitions: 4
    partition-filter: "orders.{p}.>"
sinks:
  - name: out
    kind: jetstream
    stream: OUT
    subject: out
    input: {from: orders}
checkpointing:
  interval: 200ms
`
	var in strings.Builder
	want := map[string]bool{}
	for i := 0; i < 200; i++ {
		line := fmt.Sprintf("c%d\torder-%d", i%11, i)
		in.WriteString(line + "\n")
		want["[out] "+line] = true
	}
	out := runWithInput(t, job, in.String())
	if !strings.Contains(out, "4 partitions (orders.{p}.>) split among 2 subtask(s) by the server") {
		t.Errorf("no word of the partitioned split in the output:\n%s", out)
	}
	outputOnce(t, out, want)
}

// runWithInput runs job (a spec) with weir run on the embedded default,
// publishing input to its first source, until the output is quiet, and
// returns what weir run printed.
func runWithInput(t *testing.T, job, input string) string {
	t.Helper()
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"run", "-idle", "1s", "-show", "-1", "job.yaml", "-input", "in.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
	}
	return out.String()
}

// outputOnce checks that weir run's output (out) holds each of the sink
// lines in want once and no other sink line.
func outputOnce(t *testing.T, out string, want map[string]bool) {
	t.Helper()
	got := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "[out] ") {
			got[line]++
		}
	}
	for line := range want {
		if got[line] != 1 {
			t.Errorf("%q in the output %d times, want once", line, got[line])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct output lines, want %d:\n%s", len(got), len(want), out)
	}
}

// -input publishes a keyed line on a subject of its key where the
// source's pattern leaves room for it, and on "input" elsewhere.
func TestInputSubject(t *testing.T) {
	for _, c := range []struct{ pattern, key, want string }{
		{"lines.>", "fox", "lines.fox"},
		{"lines.>", "eu.fr", "lines.eu.fr"},
		{"lines.>", "", "lines.input"},
		{"lines.>", "a b", "lines.input"},
		{"lines.>", "a..b", "lines.input"},
		{"lines.*", "fox", "lines.fox"},
		{"lines.*", "eu.fr", "lines.input"},
		{"lines", "fox", "lines"},
		{"in.*.x", "fox", "in.input.x"},
		{"orders.3.>", "c7", "orders.3.c7"},
		{">", "fox", "input"},
	} {
		if got := inputSubject(c.pattern, c.key); got != c.want {
			t.Errorf("inputSubject(%q, %q) = %q, want %q", c.pattern, c.key, got, c.want)
		}
	}
}

// A JetStream source with key: subject keys each record by the subject it
// was stored under, whatever Weir-Key header it has, and a key-partitioned
// edge after it routes by that: every line comes out once, keyed by the
// subject weir run published it on (its key's partition, then its key).
func TestRunSourceKeyedBySubject(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	t.Chdir(t.TempDir())
	job := `name: orders
sources:
  - name: orders
    kind: jetstream
    stream: ORDERS
    parallelism: 2
    partitions: 4
    partition-filter: "orders.{p}.>"
    key: subject
sinks:
  - name: out
    kind: jetstream
    stream: OUT
    subject: out
    parallelism: 2
    input: {from: orders, partition: key}
checkpointing:
  interval: 200ms
`
	var in strings.Builder
	want := map[string]bool{}
	for i := 0; i < 100; i++ {
		// weir run publishes a keyed line to its key's partition, on
		// orders.<p>.<key>, with the key in the Weir-Key header too, which
		// key: subject ignores.
		key := fmt.Sprintf("c%d", i%11)
		fmt.Fprintf(&in, "%s\torder-%d\n", key, i)
		want[fmt.Sprintf("[out] orders.%d.%s\torder-%d", source.PartitionOf(key, 4), key, i)] = true
	}
	out := runWithInput(t, job, in.String())
	outputOnce(t, out, want)
}

// A checkpoint's line names its slowest task by what the task itself
// spent, and the phase that took most of that, in weir run's output and
// in weir checkpoint ls: the operator whose barrier queued behind
// backpressure, not the idle sink after it, whose start delay is the
// longest (a user was sent to the sink).
func TestCheckpointLinesNameTheSlowestTask(t *testing.T) {
	c := control.CheckpointInfo{ID: 6, Status: control.CheckpointCompleted, Duration: 2748 * time.Millisecond,
		Size: 6 << 20, Alignment: 4 * time.Microsecond, Acked: 3, Total: 3,
		Tasks: map[string]map[string]int64{
			"lines-0":  {control.MetricStartDelayNanos: int64(time.Millisecond)},
			"count-0":  {control.MetricStartDelayNanos: int64(2701 * time.Millisecond), control.MetricSyncNanos: int64(4 * time.Millisecond)},
			"counts-0": {control.MetricStartDelayNanos: int64(2705 * time.Millisecond), control.MetricAsyncNanos: int64(22 * time.Millisecond)},
		},
		Inputs: map[string][]string{"lines": nil, "count": {"lines"}, "counts": {"count"}},
	}
	var line bytes.Buffer
	printCheckpointLine(&line, c)
	want := "checkpoint 6 completed in 2.748s: 6.0 MiB, aligned (longest alignment 4µs), 3 tasks; slowest count-0 (queued 2.7s of its own 2.704s)\n"
	if line.String() != want {
		t.Errorf("run line:\n%q\nwant\n%q", line.String(), want)
	}
	var ls bytes.Buffer
	printCheckpoints(&ls, []control.CheckpointInfo{c, {ID: 7, Status: control.CheckpointFailed, Reason: "expired"}})
	rows := strings.Split(strings.TrimSpace(ls.String()), "\n")
	if len(rows) != 3 || !strings.Contains(rows[0], "SLOWEST") ||
		!strings.Contains(rows[1], "count-0 (queued 2.7s of its own 2.704s)") || !strings.Contains(rows[2], " - ") {
		t.Errorf("checkpoint ls:\n%s", ls.String())
	}
}

// weir checkpoint ls shows a checkpoint that failed before any task acked
// it (a failover aborted it) with the job's mode, and task counts only
// where they are known.
func TestCheckpointLsFailedShowsTheMode(t *testing.T) {
	for _, c := range []struct {
		info control.CheckpointInfo
		want string
	}{
		{control.CheckpointInfo{ID: 3, Status: control.CheckpointFailed, Mode: jobspec.ModeUnaligned, Total: 5, Reason: "task count-1 failed"}, "unaligned 0/5"},
		{control.CheckpointInfo{ID: 3, Status: control.CheckpointFailed, Mode: jobspec.ModeExactlyOnce, Acked: 2, Total: 5}, "aligned 2/5"},
		{control.CheckpointInfo{ID: 3, Status: control.CheckpointCompleted, Mode: jobspec.ModeAtLeastOnce, Acked: 5, Total: 5}, "at-least-once 5/5"},
		{control.CheckpointInfo{ID: 3, Status: control.CheckpointCompleted, Unaligned: true, Acked: 5, Total: 5}, "unaligned 5/5"},
		// A savepoint is always aligned: a trial's failed one of an
		// unaligned job was listed unaligned.
		{control.CheckpointInfo{ID: 3, Savepoint: true, Status: control.CheckpointFailed, Mode: jobspec.ModeUnaligned, Acked: 2, Total: 5}, "aligned 2/5"},
		// Read back from storage and corrupt: neither is known.
		{control.CheckpointInfo{ID: 3, Status: control.CheckpointFailed, Reason: "stored, but cannot be restored"}, "- -"},
	} {
		var ls bytes.Buffer
		printCheckpoints(&ls, []control.CheckpointInfo{c.info})
		rows := strings.Split(strings.TrimSpace(ls.String()), "\n")
		// Fields: ID, KIND, STATUS, WHEN, DURATION, SIZE (two: "0 B"), ALIGNMENT, ALIGNED, TASKS.
		if got := strings.Join(strings.Fields(rows[len(rows)-1])[8:10], " "); got != c.want {
			t.Errorf("%+v: ALIGNED and TASKS %q, want %q\n%s", c.info, got, c.want, ls.String())
		}
	}
}

// TestRunShowsBuildErrors: a Go package module that does not compile fails
// weir run with the compiler's message, not only "exit status 1".
func TestRunShowsBuildErrors(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":   "module example.com/op\n\ngo 1.22\n",
		"main.go":  "package main\n\nfunc main() { undefinedThing() }\n",
		"job.yaml": "name: j\nsources: [{name: in, kind: nats, subject: in}]\noperators: [{name: op, module: ., inputs: [{from: in}]}]\nsinks: [{name: out, kind: nats, subject: out, input: {from: op}}]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(guestbuild.CacheDirEnv, t.TempDir())
	code, _, errs := weir(t, "", "run", filepath.Join(dir, "job.yaml"))
	if code != 1 || !strings.Contains(errs, "weir: operator op: build ") || !strings.Contains(errs, "\n  ") ||
		!strings.Contains(errs, "undefined: undefinedThing") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, the failed build and, indented, the compiler's message", code, errs)
	}
}

// A bounded job (stop: end) run with -input: weir run publishes the input
// before it submits, so the stop covers it; the job reads it, takes its
// final savepoint, and finishes by itself, and weir run ends with it.
func TestRunBoundedJobFinishes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	t.Chdir(t.TempDir())
	job := `name: backfill
sources:
  - {name: orders, kind: jetstream, stream: ORDERS, stop: end}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: orders}}
checkpointing:
  interval: 200ms
`
	var in strings.Builder
	want := map[string]bool{}
	for i := 0; i < 100; i++ {
		line := fmt.Sprintf("order-%d", i)
		in.WriteString(line + "\n")
		want["[out] "+line] = true
	}
	// No -idle: weir run ends because the job does.
	out, _ := runBoundedJob(t, job, in.String())
	for _, s := range []string{"published 100 input records from in.txt to orders\njob backfill submitted",
		"stops after sequence 100 (stop: end)", "job backfill: finished (attempt 1): every source read up to its stop; output committed with final savepoint"} {
		if !strings.Contains(out, s) {
			t.Errorf("output without %q:\n%s", s, out)
		}
	}
	outputOnce(t, out, want)
}

// runBoundedJob writes job as job.yaml and input as in.txt in the working
// directory, runs 'weir run -show -1 job.yaml -input in.txt' to its end (a
// job whose sources all have a stop) and returns what it printed; a run
// that fails fails the test.
func runBoundedJob(t *testing.T, job, input string) (stdout, stderr string) {
	t.Helper()
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"run", "-show", "-1", "job.yaml", "-input", "in.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
	}
	return out.String(), errb.String()
}

// A bounded job may be quiet until it ends (a count that emits its totals
// at the end of input): -idle does not end weir run while it runs, as it
// ended a word count of 300 000 lines after 3 s with "0 records out",
// canceling it. A job whose stop the stream has not reached says what it
// waits for.
func TestRunBoundedJobOutlastsIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	t.Chdir(t.TempDir())
	job := `name: wait
sources:
  - {name: orders, kind: jetstream, stream: ORDERS, stop: 1000}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: orders}}
checkpointing:
  interval: 100ms
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	begin := time.Now()
	if code := run(ctx, []string{"run", "-idle", "1ms", "-for", "3s", "job.yaml", "-input", "in.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
	}
	if d := time.Since(begin); d < 3*time.Second {
		t.Errorf("weir run ended after %s, before -for 3s: -idle ended it", d)
	}
	want := "job wait waits: source orders stops after sequence 1000, and stream ORDERS holds up to 3 (Ctrl-C cancels it)\n"
	if strings.Count(out.String(), want) != 1 {
		t.Errorf("output without %q once:\n%s", want, out.String())
	}
}

// TestRunInputNotStored: a record of -input that the source's stream
// refuses (here its message limit: publishing it again would not help)
// fails weir run, naming the file, the line and the stream, instead of
// counting it as published and leaving a gap in the job's input that
// nothing reports.
func TestRunInputNotStored(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"},
		MaxMsgs: 3, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	job := `name: capped
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {disabled: true}
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("in.txt", []byte("a\nb\nc\nd\ne\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-cancel", "job.yaml", "-input", "in.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code == 0 {
		t.Fatalf("weir run succeeded with 2 of 5 input records refused by the stream:\n%s", out.String())
	}
	want := "-input in.txt: line 4: stream IN did not acknowledge the record: "
	if got := errb.String(); !strings.Contains(got, want) || !strings.Contains(got, "maximum messages exceeded") ||
		strings.Count(strings.TrimSpace(got), "\n") != 0 {
		t.Errorf("weir run's error is not one line with %q and the server's reason:\n%s", want, got)
	}
	if strings.Contains(out.String(), "published 5 input records") {
		t.Errorf("weir run counts refused records as published:\n%s", out.String())
	}
}

// TestRunMissingModuleCreatesNoStreams: a module reference the registry
// lacks fails weir run before it creates the job's streams, which would
// be left behind by a job that never ran.
func TestRunMissingModuleCreatesNoStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	t.Chdir(t.TempDir())
	job := `name: nomod
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: op, module: nope@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if want := "weir: operator op: module nope@1: not in the module registry (it holds no module yet: weir module push NAME FILE stores one)\n"; code != 1 || errb.String() != want {
		t.Fatalf("weir run exited %d with %q, want 1 with %q\n%s", code, errb.String(), want, out.String())
	}
	for _, name := range []string{"IN", "OUT"} {
		if _, err := n.JS.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after the refused run: %v, want %v", name, err, jetstream.ErrStreamNotFound)
		}
	}
}

// TestRunOnADataDirThatResumedTheJob: weir run -data on the directory of
// an earlier run that was cut short finds its job resumed there; the
// refusal says so and how to let it go on or end it.
func TestRunOnADataDirThatResumedTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A directory the shell would split: the commands said quote it.
	data := filepath.Join(t.TempDir(), "it's data")
	t.Chdir(t.TempDir())
	job := `name: again
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The earlier run: its job submitted, the process gone without a cancel.
	n, err := node.Start(ctx, node.Options{DataDir: data, Port: -1, Coordinator: true, Workers: 1,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-data", data, "-for", "1s", "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	quoted := `'` + strings.ReplaceAll(data, `'`, `'\''`) + `'`
	want := "(resumed from -data " + quoted + ", where it ran before: weir up -data " + quoted + " lets it run on, and weir job cancel or stop there ends it"
	if code != 1 || !strings.Contains(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("weir run exited %d with %q, want 1 with one line holding %q\n%s", code, errb.String(), want, out.String())
	}

	// With -input, which it does not publish, it says where to give the
	// job more input: the NATS of weir up -data, not this run's.
	if err := os.WriteFile("more.txt", []byte("a\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code = run(ctx, []string{"run", "-data", data, "-for", "1s", "-input", "more.txt", "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	feed := "ends it; -input publishes only with a job weir run submits: while weir up runs it, give it more input with " +
		"weir input job.yaml more.txt)\n"
	if code != 1 || !strings.Contains(errb.String(), want) || !strings.HasSuffix(errb.String(), feed) ||
		strings.Count(errb.String(), "\n") != 1 || strings.Contains(out.String(), "published") {
		t.Fatalf("weir run -input exited %d with %q, want 1 with one line holding %q and ending %q\n%s", code, errb.String(), want, feed, out.String())
	}
}

// weir run -data on a directory that weir up -port P served names that
// port in what it says to run: the job resumed there goes on where
// 'weir up -data DIR -port P' serves it, and more input goes to its NATS
// on P. It said 127.0.0.1:4222 "unless weir up -port says otherwise",
// though weir up had said otherwise, and the nats pub it printed (weir input now) went to
// 4222.
func TestRunDataNamesThePortWeirUpServedItOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A directory the shell would split: the commands said quote it.
	data := filepath.Join(t.TempDir(), "weir data")
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(`name: again
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("more.txt", []byte("a\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// weir up -data DIR -port P, its job submitted, stopped (Ctrl-C)
	// with the job running: the job is resumed where DIR is served next.
	port := natsconntest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	up := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	uctx, stopUp := context.WithCancel(ctx)
	defer stopUp()
	go func() {
		up.done <- run(uctx, []string{"up", "-data", data, "-port", strconv.Itoa(port)}, Stdio{In: strings.NewReader(""), Out: &up.out, Err: &up.errb})
	}()
	up.said("weir is up")
	// While weir up holds the directory, weir run -data and a second weir
	// up on it are refused, naming where the first serves its jobs.
	for _, args := range [][]string{{"run", "-data", data, "job.yaml"}, {"up", "-data", data, "-port", "0"}} {
		var out, errb bytes.Buffer
		code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		want := fmt.Sprintf("; if it is weir up -data '%s' -port %d, reach its jobs on %s: weir job ls -nats %s\n", data, port, url, url)
		if code != 1 || !strings.Contains(errb.String(), "is in use by another weir process") || !strings.HasSuffix(errb.String(), want) ||
			strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("weir %s while weir up holds the directory: exit %d, stderr %q; want one line ending %q", args[0], code, errb.String(), want)
		}
	}
	n, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: url}, CheckpointStore: node.StoreJetStream})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	n.Close()
	stopUp()
	if code := <-up.done; code != 0 {
		t.Fatalf("weir up exited %d: %s", code, up.errb.String())
	}

	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-data", data, "-for", "1s", "-input", "more.txt", "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := fmt.Sprintf("(resumed from -data '%s', where it ran before: weir up -data '%s' -port %d lets it run on, and weir job cancel or stop there (-nats %s) ends it; "+
		"-input publishes only with a job weir run submits: while weir up runs it, give it more input with "+
		"weir input -nats %s job.yaml more.txt)\n", data, data, port, url, url)
	if code != 1 || !strings.HasSuffix(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("weir run exited %d with %q, want 1 with one line ending %q\n%s", code, errb.String(), want, out.String())
	}
}

// TestRunInputToAJobThatRuns: weir run -input with a job of that name
// running (restored from a checkpoint, say) submits nothing and publishes
// nothing; the refusal says how to publish the job more input instead.
func TestRunInputToAJobThatRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	t.Chdir(t.TempDir())
	job := `name: busy
sources: [{name: in, kind: nats, subject: busy-in}]
sinks: [{name: out, kind: nats, subject: busy-out, input: {from: in}}]
`
	if err := os.WriteFile("job.yaml", []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("more.txt", []byte("a\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-input", "more.txt", "job.yaml"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	// The job is created or running by now: either has not ended.
	want := regexp.MustCompile(`^weir: job busy has not ended \(it is (created|running)\): cancel or stop it first, ` +
		`or give it more input with weir input -nats ` + regexp.QuoteMeta(n.Server.ClientURL()) + ` job.yaml more.txt ` +
		`\(-input publishes only with a job weir run submits\); to run a second job beside it, its output going to the same sinks, ` +
		`give the spec another name \(name: busy in job.yaml\)\n$`)
	if code != 1 || !want.MatchString(errb.String()) || strings.Contains(out.String(), "published") {
		t.Fatalf("weir run exited %d with %q, want 1 with one line matching %s\n%s", code, errb.String(), want, out.String())
	}
}

// TestInputHint: the weir input command a refusal of weir run -input
// names, with its arguments quoted, and none where a source stops at the
// end (weir input refuses it: the job that runs reads it no further).
func TestInputHint(t *testing.T) {
	spec := &jobspec.Spec{Sources: []jobspec.Source{
		{Name: "in", Kind: jobspec.KindJetStream, Stream: "IN"},
		{Name: "core", Kind: jobspec.KindNATS, Subject: "core"},
		{Name: "ended", Kind: jobspec.KindJetStream, Stream: "OLD", Stop: jobspec.StopEnd},
		{Name: "until", Kind: jobspec.KindJetStream, Stream: "OLD", Stop: "5000"},
	}}
	for _, c := range []struct {
		spec   string
		inputs inputFlags
		hint   string
		timed  bool
		want   string
	}{
		{"job.yaml", nil, "", false, ""},
		{"job.yaml", inputFlags{"more.txt"}, "", false, "weir input job.yaml more.txt"},
		{"job.yaml", inputFlags{"more.txt"}, "", true, "weir input -time job.yaml more.txt"},
		{"my job.yaml", inputFlags{"core=a b.txt", "until=c.txt"}, " -nats nats://h:4333", true, "weir input -nats nats://h:4333 -time 'my job.yaml' 'core=a b.txt' until=c.txt"},
		{"job.yaml", inputFlags{"in=a.txt", "ended=b.txt"}, "", false, ""},
		{"job.yaml", inputFlags{"nope=a.txt"}, "", false, ""},
	} {
		if got := inputHint(spec, runOptions{spec: c.spec, inputs: c.inputs, time: c.timed}, c.hint); got != c.want {
			t.Errorf("inputHint(%q, %q, %q) = %q, want %q", c.spec, c.inputs, c.hint, got, c.want)
		}
	}
}

// weir run builds operators given as Rust, AssemblyScript and C source
// files (guests/sourcebuild), pushes what it built, and runs them: a job
// chaining all three counts its input exactly once in upper case.
func TestRunBuildsSourceFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three guests and runs a job: skipped in -short")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	job := fmt.Sprintf(`name: polyglot
sources:
  - {name: in, kind: jetstream, stream: IN, stop: end}
operators:
  - {name: rust, module: %s, inputs: [{from: in}]}
  - {name: as, module: %s, inputs: [{from: rust}]}
  - {name: c, module: %s, inputs: [{from: as}]}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: c}}
checkpointing:
  interval: 200ms
`, filepath.Join(repo, "guests/rust/examples/uppercase.rs"), filepath.Join(repo, "guests/sourcebuild/testdata/shout.ts"),
		filepath.Join(repo, "guests/sourcebuild/testdata/shout.c"))
	var in strings.Builder
	want := map[string]bool{}
	for i := 0; i < 50; i++ {
		in.WriteString(fmt.Sprintf("line %d\n", i))
		want[fmt.Sprintf("[out] LINE %d", i)] = true
	}
	out, errs := runBoundedJob(t, job, in.String())
	for _, s := range []string{"uppercase.rs (Rust)", "shout.ts (AssemblyScript)", "shout.c (C)"} {
		// Built, or taken from the build cache an earlier run filled.
		if !strings.Contains(errs, s+" …\n") && !strings.Contains(errs, s+": unchanged since it was built, the cached module\n") {
			t.Errorf("stderr says nothing of %q:\n%s", s, errs)
		}
	}
	for _, s := range []string{"(pushed as uppercase@1)", "(pushed as shout@1)", "(pushed as shout@2)"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	outputOnce(t, out, want)
}

// weir run refuses what it can at once — a data directory another weir
// holds, an -input it cannot publish — before it builds the job's Go
// modules: it built them first, which takes seconds, only to be refused.
// The operator here is a Go package that does not compile, so a build
// would end the run with its own error.
func TestRunRefusesBeforeBuilding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Chdir(t.TempDir())
	if err := os.Mkdir("op", 0o755); err != nil {
		t.Fatal(err)
	}
	for file, content := range map[string]string{
		"op/main.go": "package main\n\nthis does not compile\n",
		"in.txt":     "a\n",
		"job.yaml": "name: j\nsources: [{name: in, kind: nats, subject: in}]\noperators: [{name: op, module: ./op, inputs: [{from: in}]}]\n" +
			"sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	held := t.TempDir()
	n, err := node.Start(ctx, node.Options{DataDir: held, Port: -1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-data", held, "-input", "in.txt", "job.yaml"}, "is in use by another weir process"},
		{[]string{"run", "-input", "nosuch.txt", "job.yaml"}, "weir: -input: stat nosuch.txt: no such file or directory\n"},
		{[]string{"run", "-input", "op", "job.yaml"}, "weir: -input op: a directory, not a file of lines: give a file\n"},
		{[]string{"run", "-input", "other=in.txt", "job.yaml"}, `weir: -input other=in.txt: the job has no source "other" (its sources: in)` + "\n"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, c.args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != 1 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "building") {
			t.Errorf("weir %s: exit %d, stderr %q; want 1, %q and no build", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}

// weir run refuses to submit again a job stopped with a savepoint, before
// it builds anything: run again, the job reads its streams from the
// start, and its exactly-once sink's stream would hold the output the
// earlier run committed twice. It says how to go on from there. A job
// canceled after a checkpoint runs again, as it always did, with a note
// that says it repeats that output and how a restore goes on instead.
func TestRunRefusesARerunThatWouldRepeatOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(""))
	url := n.Server.ClientURL()
	hint := (&natsFlags{url: url}).hint()
	awaitState(t, ctx, n, "jo", control.JobRunning)
	publishKeyed(t, ctx, n.JS, "in.x", "a", "1")
	awaitStored(t, ctx, n.JS, "OUT", 1)
	sp, err := n.API.StopJob(ctx, "jo")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(jsJob("")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "", "run", "-nats", url, "-for", "1s", "job.yaml")
	want := fmt.Sprintf("weir: job jo stopped with savepoint %d: a new run reads its streams from the start and would repeat the output it committed; "+
		"go on from there with: weir job restore%s jo -from %d -spec job.yaml (or give the spec another name to start over)\n", sp.ID, hint, sp.ID)
	if code != 1 || errs != want || out != "" {
		t.Errorf("weir run of a stopped job: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errs, want)
	}
	if s, err := n.JS.Stream(ctx, "OUT"); err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Errorf("stream OUT after the refused run: %v; want the one record", err)
	}

	// Canceled after a checkpoint (restored from the savepoint first).
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "jo", From: strconv.FormatInt(sp.ID, 10)}); err != nil {
		t.Fatal(err)
	}
	var st control.JobStatus
	for st.State != control.JobRunning || st.LatestCheckpoint <= sp.ID {
		if st, err = n.API.Job(ctx, "jo"); err != nil || ctx.Err() != nil {
			t.Fatalf("waiting for a checkpoint of the restored job: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err = n.API.CancelJob(ctx, "jo"); err != nil {
		t.Fatal(err)
	}
	code, out, errs = weir(t, "", "run", "-nats", url, "-cancel", "-for", "1s", "job.yaml")
	note := fmt.Sprintf("weir: job jo canceled after checkpoint %d completed: this run reads its streams from the start and repeats the output committed up to it "+
		"(to go on from there instead with: weir job restore%s jo -from %d -spec job.yaml)\n", st.LatestCheckpoint, hint, st.LatestCheckpoint)
	if code != 0 || !strings.HasPrefix(errs, note) || !strings.Contains(out, "job jo submitted") {
		t.Errorf("weir run of a canceled job: exit %d, stdout %q, stderr %q; want exit 0 and stderr starting %q", code, out, errs, note)
	}
}
