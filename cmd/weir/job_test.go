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

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// tapNode starts a node with opts (a data directory and port of its own,
// coordinator on) and submits job tap — core subject in to core subject
// out — with the spec's extra lines; it returns the node and the spec.
func tapNode(t *testing.T, ctx context.Context, opts node.Options, extra string) (*node.Node, *jobspec.Spec) {
	t.Helper()
	opts.DataDir, opts.Port, opts.Coordinator, opts.Log = t.TempDir(), -1, true, slog.New(slog.DiscardHandler)
	n, err := node.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`+extra), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	return n, spec
}

// jobStatus runs weir job status JOB against n and returns what it printed.
func jobStatus(t *testing.T, ctx context.Context, n *node.Node, job string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"job", "status", "-nats", n.Server.ClientURL(), job},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job status exited %d: %s", code, errb.String())
	}
	return out.String()
}

// weir job status shows, besides the job's state, what each source and
// sink guarantees: a core-NATS source's at-most-once is in plain sight.
func TestJobStatusShowsGuarantees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{}, "checkpointing: {mode: at-least-once}\n")
	got := jobStatus(t, ctx, n, "tap")
	for _, want := range []string{
		"JOB", "tap", "guarantees:\n",
		"  source in: at-most-once: core NATS subject, no replay",
		"  sink out: at-most-once: core NATS subject",
		"  checkpointing at-least-once: after a failure, records may be processed twice\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// The coordinator's refusals read as English, once: weir job adds no
// "job status:" before a message that names the request, and no sentinel
// ("conflict", "not found") after it.
func TestJobErrorsSayWhatIsWrong(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, spec := tapNode(t, ctx, node.Options{}, "")
	url := n.Server.ClientURL()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "status", "-nats", url, "nosuch"}, `weir: no job "nosuch"` + "\n"},
		{[]string{"job", "restore", "-nats", url, "tap", "-from", "x"}, `weir: restore from "x": want a checkpoint ID or JOB/ID` + "\n"},
		{[]string{"job", "restore", "-nats", url, "tap", "-from", "9"}, "weir: restore from tap/9: there is no such checkpoint; job tap has completed no checkpoint yet\n"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, c.args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != 1 || errb.String() != c.want {
			t.Errorf("%v: exit %d, stderr %q; want exit 1, %q", c.args, code, errb.String(), c.want)
		}
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); !errors.Is(err, control.ErrConflict) ||
		!strings.HasPrefix(err.Error(), "job tap has not ended (it is ") || !strings.HasSuffix(err.Error(), "): cancel or stop it first") {
		t.Errorf("second submit: %v", err)
	}
}

// $WEIR_NATS stands for the -nats default of the commands that talk to a
// running weir: a weir up on another port needs no -nats on each, and
// -h says where the default came from.
func TestWeirNATSEnvironment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{}, "")
	t.Setenv(natsEnv, n.Server.ClientURL())
	if code, out, errs := weir(t, "", "job", "ls"); code != 0 || !strings.Contains(out, "tap") {
		t.Errorf("weir job ls with $%s: exit %d, stdout %q, stderr %q", natsEnv, code, out, errs)
	}
	if code, _, errs := weir(t, "", "job", "status", "-h"); code != 0 || !strings.Contains(errs, "(default from $WEIR_NATS)") {
		t.Errorf("weir job status -h with $%s: exit %d, %q", natsEnv, code, errs)
	}
	t.Setenv(natsEnv, "")
	if code, _, errs := weir(t, "", "job", "status", "-h"); code != 0 || !strings.Contains(errs, "($WEIR_NATS sets the default)") {
		t.Errorf("weir job status -h: exit %d, %q", code, errs)
	}
}

// Each subcommand of weir job takes its own flags: another's is refused
// before NATS is asked, on one line naming the flag, the subcommand that
// takes it and the one given it, and -h lists only the subcommand's.
// The flags every subcommand takes may still come before it.
func TestJobSubcommandsTakeTheirOwnFlags(t *testing.T) {
	down := fmt.Sprintf("nats://127.0.0.1:%d", natsconntest.FreePort(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-from", "3", "x"}, "weir: job status: -from is a flag of job restore, not of job status (run 'weir job status -h' for its flags)\n"},
		{[]string{"status", "x", "-from", "3"}, "weir: job status: -from is a flag of job restore, not of job status (run 'weir job status -h' for its flags)\n"},
		{[]string{"ls", "-spec", "job.yaml"}, "weir: job ls: -spec is a flag of job restore, not of job ls (run 'weir job ls -h' for its flags)\n"},
		{[]string{"stop", "-from-start", "x"}, "weir: job stop: -from-start is a flag of job output, not of job stop (run 'weir job stop -h' for its flags)\n"},
		{[]string{"restore", "x", "-from", "1", "-sink", "out"}, "weir: job restore: -sink is a flag of job output, not of job restore (run 'weir job restore -h' for its flags)\n"},
		{[]string{"output", "-nosuch", "x"}, "weir: job output: no flag -nosuch (run 'weir job output -h' for its flags)\n"},
		{[]string{"-from", "3", "restore", "x"}, "weir: job: -from is a flag of job restore: give it after the subcommand (weir job restore ... -from ...)\n"},
	} {
		code, stdout, stderr := weir(t, "", append([]string{"job", "-nats", down}, c.args...)...)
		if code != 2 || stdout != "" || stderr != c.want {
			t.Errorf("weir job %v: exit %d, stdout %q, stderr %q; want exit 2, %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// The connection flags and -wait before the subcommand, or after it.
	for _, args := range [][]string{{"job", "-nats", down, "ls"}, {"job", "-wait", "1s", "status", "-nats", down, "x"}} {
		want := "weir: cannot reach NATS at " + down + " (is 'weir up' running?)"
		if code, _, stderr := weir(t, "", args...); code != 1 || !strings.HasPrefix(stderr, want) {
			t.Errorf("weir %v: exit %d, stderr %q; want exit 1, %q", args, code, stderr, want)
		}
	}
	for sub, c := range map[string]struct{ has, hasNot []string }{
		"status":  {[]string{"-nats", "-wait"}, []string{"-from", "-spec", "-sink", "-from-start"}},
		"output":  {[]string{"-nats", "-sink", "-from-start", "-last", "-for", "-show"}, []string{"-from ", "-spec", "-allow-non-restored-state"}},
		"restore": {[]string{"-nats", "-from", "-spec", "-allow-non-restored-state"}, []string{"-sink", "-from-start", "-last"}},
	} {
		code, _, stderr := weir(t, "", "job", sub, "-h")
		if code != 0 || !strings.HasPrefix(stderr, "usage: weir job "+sub+" ") {
			t.Errorf("weir job %s -h: exit %d, stderr:\n%s", sub, code, stderr)
		}
		for _, f := range c.has {
			if !strings.Contains(stderr, "\n  "+f) {
				t.Errorf("weir job %s -h does not list %s:\n%s", sub, f, stderr)
			}
		}
		for _, f := range c.hasNot {
			if strings.Contains(stderr, "\n  "+f) {
				t.Errorf("weir job %s -h lists %s:\n%s", sub, f, stderr)
			}
		}
	}
}

// weir job status shows the running tasks as their workers report them:
// records in and out, rates, busy and backpressured time.
func TestJobStatusShowsTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond}, "")
	// Publish until the sink's counters say 100 records went through.
	for i := 0; ; i++ {
		st, err := n.API.Job(ctx, "tap")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Tasks) == 2 && st.Tasks[1].Stats.RecordsOut >= 100 {
			if st.Tasks[0].Task != "in-0" || st.Tasks[1].Task != "out-0" || st.Tasks[0].Worker != "w1" || st.Tasks[0].Stats.RunningNanos <= 0 {
				t.Fatalf("tasks %+v", st.Tasks)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no task counters reached 100 records: %+v", st.Tasks)
		}
		for range 10 {
			if err := n.Conn.Publish("in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := jobStatus(t, ctx, n, "tap")
	for _, want := range []string{"tasks:\n", "TASK", "RECORDS IN", "BACKPRESSURED", "UNREAD", "in-0", "out-0", "w1"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// weir job restore -spec takes a spec whose modules are Go package
// directories, as weir run does: it builds them and pushes the wasm to the
// module registry. The coordinator's workers cannot load a directory, so
// sending it as is left the restored job failing over until its restart
// attempts ran out.
func TestJobRestoreSpecBuildsGoPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go guest and restores a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pkg, err := filepath.Abs("../../guests/go/examples/uppercase")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n, err := node.Start(ctx, node.Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	yaml := func(module string) string {
		return `name: up
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: ` + module + `, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {disabled: true}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 3}
`
	}
	wasmFile := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(wasmFile, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("up.yaml", []byte(yaml(wasmFile)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	for st, _ := n.API.Job(ctx, "up"); st.State != control.JobRunning; st, _ = n.API.Job(ctx, "up") {
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	sp, err := n.API.Savepoint(ctx, "up")
	if err != nil || sp.Status != control.CheckpointCompleted {
		t.Fatalf("savepoint: %+v, %v", sp, err)
	}
	if _, err := n.API.CancelJob(ctx, "up"); err != nil {
		t.Fatal(err)
	}
	for st, _ := n.API.Job(ctx, "up"); !st.State.Terminal(); st, _ = n.API.Job(ctx, "up") {
		time.Sleep(20 * time.Millisecond)
	}

	specFile := filepath.Join(dir, "up-v2.yaml")
	if err := os.WriteFile(specFile, []byte(yaml(pkg)), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"job", "restore", "-nats", n.Server.ClientURL(), "up", "-from", fmt.Sprint(sp.ID), "-spec", specFile},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job restore exited %d: %s", code, errb.String())
	}
	// The built module went to the registry, for workers on any machine.
	if !regexp.MustCompile(`(?m)^module \S+/uppercase → sha256:[0-9a-f]{64} \(pushed as uppercase@1\)$`).MatchString(out.String()) {
		t.Errorf("no line of the pushed module:\n%s", out.String())
	}
	var st control.JobStatus
	for st, _ = n.API.Job(ctx, "up"); st.State != control.JobRunning && !st.State.Terminal(); st, _ = n.API.Job(ctx, "up") {
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != control.JobRunning || st.Attempt != 2 { // attempts number on across runs
		t.Fatalf("restored job: %+v", st)
	}
}

// weir job status lists a job's failures, newest first, with the attempt
// each one ended and its kind.
func TestJobStatusShowsFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mis, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec, err := jobspec.Parse("bad.yaml", []byte(`name: bad
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: `+mis+`, config: e, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	// The operator fails each batch it gets (config e): each attempt
	// fails once a message reaches it.
	feedUntilEnded(t, ctx, n, "bad", "x")
	got := jobStatus(t, ctx, n, "bad")
	want := regexp.MustCompile(`(?s)failures \(newest first\):\nTIME +ATTEMPT +KIND +REASON\n` +
		`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +2 +operator-error +[^\n]*weir_process: [^\n]*boom\n` +
		`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +1 +operator-error +[^\n]*weir_process: [^\n]*boom\n$`)
	if !want.MatchString(got) {
		t.Errorf("job status:\n%s", got)
	}
}

// weir job status of a job whose operator traps on a record says how to
// go on, and the commands it says reach the job's server: run as printed
// (SPEC naming a spec with a fixed build), the restore brings the job back
// from its latest checkpoint.
func TestJobStatusTrapRemedyRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, mis, fixed := trapNode(t, ctx)
	job := func(module string) string {
		return `name: trap
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: ` + module + `, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
checkpointing: {interval: 1h}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}
`
	}
	// misbehave's config "d" and a count of 0: it traps on a record whose
	// value starts with "!".
	spec, err := jobspec.Parse("trap.yaml", []byte(strings.Replace(job(mis), "inputs:", `config: "d\0\0\0\0", inputs:`, 1)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "trap", control.JobRunning)
	sp, err := n.API.Savepoint(ctx, "trap")
	if err != nil {
		t.Fatal(err)
	}
	feedUntilEnded(t, ctx, n, "trap", "!x")
	url := n.Server.ClientURL()
	got := jobStatus(t, ctx, n, "trap")
	line := regexp.MustCompile(`(?m)^to go on: fix the operator, then (weir job restore .*) -spec SPEC, .*$`).FindStringSubmatch(got)
	if line == nil {
		t.Fatalf("weir job status says no restore to go on with:\n%s", got)
	}
	if want := fmt.Sprintf("weir job restore -nats %s trap -from %d", url, sp.ID); line[1] != want {
		t.Errorf("weir job status says to run %q, want %q", line[1], want)
	}
	// The command as printed, its SPEC a spec with the fixed build,
	// against no server but through the flags it carries.
	specFile := filepath.Join(t.TempDir(), "fixed.yaml")
	if err := os.WriteFile(specFile, []byte(job(fixed)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(strings.Fields(strings.TrimPrefix(line[1], "weir ")), "-spec", specFile)
	var out, errb bytes.Buffer
	if code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	awaitState(t, ctx, n, "trap", control.JobRunning)
	if st, err := n.API.Job(ctx, "trap"); err != nil || st.RestoredFrom != sp.ID {
		t.Errorf("restored job: %+v, %v; want it restored from savepoint %d", st, err, sp.ID)
	}
}

// A job started from another job's checkpoint (weir job restore COPY
// -from ORIG/ID) that traps on a record before it completed a checkpoint
// of its own is told to restore from that checkpoint, ORIG/ID — what its
// failovers restore — not that it has none: weir job status said "no
// checkpoint completed to restore", and to submit it again, which would
// lose the state it started with. Run as printed, with a fixed build, the
// restore brings the job back from that checkpoint; weir job cancel of
// it then names that checkpoint too, as it names a job's latest.
func TestJobStatusTrapRemedyOfAJobStartedFromAnother(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, mis, fixed := trapNode(t, ctx)
	job := func(name, module string) *jobspec.Spec {
		yaml := `name: ` + name + `
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: ` + module + `, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
checkpointing: {interval: 1h}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}
`
		if module == mis {
			// misbehave's config "d" and a count of 0: it traps on a
			// record whose value starts with "!".
			yaml = strings.Replace(yaml, "inputs:", `config: "d\0\0\0\0", inputs:`, 1)
		}
		spec, err := jobspec.Parse(name+".yaml", []byte(yaml), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("orig", fixed)}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "orig", control.JobRunning)
	sp, err := n.API.Savepoint(ctx, "orig")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.CancelJob(ctx, "orig"); err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprintf("orig/%d", sp.ID)
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "copy", From: from, Spec: job("copy", mis)}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "copy", control.JobRunning)
	feedUntilEnded(t, ctx, n, "copy", "!x")
	url := n.Server.ClientURL()
	got := jobStatus(t, ctx, n, "copy")
	line := regexp.MustCompile(`(?m)^to go on: fix the operator, then (weir job restore .*) -spec SPEC, .*$`).FindStringSubmatch(got)
	if line == nil {
		t.Fatalf("weir job status says no restore to go on with:\n%s", got)
	}
	if want := fmt.Sprintf("weir job restore -nats %s copy -from %s", url, from); line[1] != want {
		t.Errorf("weir job status says to run %q, want %q", line[1], want)
	}
	specFile := filepath.Join(t.TempDir(), "fixed.yaml")
	if err := os.WriteFile(specFile, []byte("name: copy\nsources: [{name: in, kind: nats, subject: in}]\n"+
		"operators: [{name: op, module: "+fixed+", inputs: [{from: in}]}]\n"+
		"sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]\ncheckpointing: {interval: 1h}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(strings.Fields(strings.TrimPrefix(line[1], "weir ")), "-spec", specFile)
	var out, errb bytes.Buffer
	if code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	awaitState(t, ctx, n, "copy", control.JobRunning)
	if st, err := n.API.Job(ctx, "copy"); err != nil || st.RestoredFrom != sp.ID {
		t.Errorf("restored job: %+v, %v; want it restored from savepoint %d of orig", st, err, sp.ID)
	}
	// Canceled before a checkpoint of its own, it is told to restore
	// from that one too.
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"job", "cancel", "-nats", url, "copy"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job cancel: exit %d: %s", code, errb.String())
	}
	if want := fmt.Sprintf("job copy: canceled; restore it from the checkpoint it started from with: weir job restore -nats %s copy -from %s\n", url, from); out.String() != want {
		t.Errorf("weir job cancel printed %q, want %q", out.String(), want)
	}
}

// Commands weir prints for the user to run next reach the same server.
func TestNATSHint(t *testing.T) {
	t.Setenv(natsEnv, "") // TestNATSHintWithWeirNATS sets it
	for url, want := range map[string]string{
		"":                           "",
		defaultNATS:                  "",
		"nats://10.0.0.5:4222":       " -nats nats://10.0.0.5:4222",
		"nats://alice:secret@h:4222": " -nats nats://alice:xxxxx@h:4222",
		// A list as the user may give it, with spaces: one argument.
		"nats://a:4222, nats://b:4222": " -nats 'nats://a:4222, nats://b:4222'",
	} {
		f := natsFlags{url: url}
		if got := f.hint(); got != want {
			t.Errorf("hint for %q = %q, want %q", url, got, want)
		}
	}
	// The auth flags given go along (a trial's printed commands lacked
	// the -tlsca they needed), a secret's value never; those the
	// environment gave stay there.
	f := natsFlags{url: "tls://127.0.0.1:19010", tlsCA: "/etc/weir/ca.pem", user: "alice", password: "secret", token: "tok", creds: "my dir/u.creds"}
	if got, want := f.hint(), " -nats tls://127.0.0.1:19010 -creds 'my dir/u.creds' -user alice -password … -token … -tlsca /etc/weir/ca.pem"; got != want {
		t.Errorf("hint with auth flags = %q, want %q", got, want)
	}
	t.Setenv(authEnv("password"), "secret")
	f = natsFlags{url: defaultNATS, user: "alice"}
	f.fromEnv()
	if got, want := f.hint(), " -user alice"; got != want || f.password != "secret" {
		t.Errorf("hint with the password from the environment = %q (password %q), want %q", got, f.password, want)
	}
}

// A worker interrupted while it still waits for NATS stops cleanly.
func TestWorkerInterruptedBeforeJoining(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"worker", "-nats", "nats://127.0.0.1:1", "-data", t.TempDir()}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 0 || !strings.Contains(errb.String(), "weir worker: stopped before it joined") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// weir job cancel names the checkpoint to restore, and a restore from a
// checkpoint that retention discarded (weir checkpoint ls still lists it,
// as discarded) says which checkpoints can be restored.
func TestCancelAndRestoreNameTheCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond},
		"checkpointing: {interval: 20ms, retained: 1}\n")
	var latest int64
	for latest < 3 {
		st, err := n.API.Job(ctx, "tap")
		if err != nil {
			t.Fatal(err)
		}
		latest = st.LatestCheckpoint
		time.Sleep(10 * time.Millisecond)
	}
	// weir job cancel says which checkpoint to restore.
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"job", "cancel", "-nats", n.Server.ClientURL(), "tap"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job cancel exited %d: %s", code, errb.String())
	}
	st, err := n.API.Job(ctx, "tap")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("job tap: canceled; restore it from its latest checkpoint with: weir job restore -nats %s tap -from %d\n",
		n.Server.ClientURL(), st.LatestCheckpoint); out.String() != want {
		t.Errorf("weir job cancel printed %q, want %q", out.String(), want)
	}
	out.Reset()
	errb.Reset()
	code := run(ctx, []string{"job", "restore", "-nats", n.Server.ClientURL(), "tap", "-from", "1"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	// A checkpoint that completed as the cancel came may be listed too,
	// before the latest the status named.
	want := regexp.MustCompile(fmt.Sprintf(`^weir: restore from tap/1: there is no such checkpoint \(discarded, or never taken\); tap can be restored from (\d+, )?%d\n$`, st.LatestCheckpoint))
	if code != 1 || !want.MatchString(errb.String()) {
		t.Errorf("restore from a discarded checkpoint: exit %d, stderr %q; want exit 1, %s", code, errb.String(), want)
	}
}

// A job that ended has nothing to cancel, stop or take a savepoint of:
// weir job cancel, stop and savepoint say so, with when it ended, and exit
// 1, as kubectl and flink do for a request that finds nothing to act on
// (a second cancel did print 'job tap: canceled' and exit 0, as if it had
// canceled something).
func TestEndedJobHasNothingToCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, HeartbeatInterval: 50 * time.Millisecond}, "checkpointing: {interval: 20ms}\n")
	for st, _ := n.API.Job(ctx, "tap"); st.LatestCheckpoint == 0; st, _ = n.API.Job(ctx, "tap") {
		if ctx.Err() != nil {
			t.Fatal("no checkpoint completed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	url := n.Server.ClientURL()
	weir := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	if code, _, errs := weir("job", "cancel", "-nats", url, "tap"); code != 0 {
		t.Fatalf("first cancel: exit %d: %s", code, errs)
	}
	st, err := n.API.Job(ctx, "tap")
	if err != nil || st.State != control.JobCanceled || st.LatestCheckpoint == 0 {
		t.Fatalf("after the cancel: %+v, %v", st, err)
	}
	ended := fmt.Sprintf("weir: job tap already canceled at %s; nothing to ", st.Updated.UTC().Format(time.DateTime+" MST"))
	latest := fmt.Sprintf(" (its latest checkpoint, %d, can be restored)\n", st.LatestCheckpoint)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "cancel", "-nats", url, "tap"}, ended + "cancel\n"},
		{[]string{"job", "stop", "-nats", url, "tap"}, ended + "stop" + latest},
		{[]string{"job", "savepoint", "-nats", url, "tap"}, ended + "take a savepoint of" + latest},
	} {
		code, out, errs := weir(c.args...)
		if code != 1 || out != "" || errs != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", c.args[:2], code, out, errs, c.want)
		}
	}
	if now, err := n.API.Job(ctx, "tap"); err != nil || now.State != control.JobCanceled || !now.Updated.Equal(st.Updated) {
		t.Errorf("after the refused requests: %+v, %v", now, err)
	}
}

// weir job ls shows a dash for a job without a checkpoint, not a
// checkpoint 0 that does not exist, and for a job started from another
// job's checkpoint that completed none of its own, that one (what a
// failover restores), until it completes one.
func TestJobListCheckpointColumn(t *testing.T) {
	var b bytes.Buffer
	printJobs(&b, []control.JobStatus{{Name: "none", State: control.JobRunning, Attempt: 1},
		{Name: "some", State: control.JobFailed, Attempt: 2, LatestCheckpoint: 27},
		{Name: "other", State: control.JobRunning, Attempt: 1, StartedFrom: "orig/12"},
		{Name: "own", State: control.JobRunning, Attempt: 1, StartedFrom: "orig/12", LatestCheckpoint: 3},
		{Name: "stp", State: control.JobCanceled, Attempt: 1, LatestCheckpoint: 9, StoppedWithSavepoint: 9, Reason: "stopped with savepoint 9"}}, 0)
	lines := strings.Split(b.String(), "\n")
	// A job stopped with a savepoint shows as stopped, not canceled.
	if len(lines) != 7 || !regexp.MustCompile(`^stp +stopped +1 +0 +9 `).MatchString(lines[5]) {
		t.Errorf("weir job ls printed:\n%s", b.String())
	}
	if !regexp.MustCompile(`^none +running +1 +0 +- `).MatchString(lines[1]) ||
		!regexp.MustCompile(`^some +failed +2 +0 +27 `).MatchString(lines[2]) ||
		!regexp.MustCompile(`^other +running +1 +0 +orig/12 `).MatchString(lines[3]) ||
		!regexp.MustCompile(`^own +running +1 +0 +3 `).MatchString(lines[4]) {
		t.Errorf("weir job ls printed:\n%s", b.String())
	}
}

// weir job ls cuts a long reason and last failure short, and says
// where they are whole; weir job status does not cut them.
func TestJobListCutsLongReasons(t *testing.T) {
	long := "task out-0 failed: " + strings.Repeat("é", 100)
	st := control.JobStatus{Name: "long", State: control.JobFailed, Attempt: 1, Reason: long}
	var b bytes.Buffer
	printJobs(&b, []control.JobStatus{st}, lsReasonWidth)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if cut := []rune(long)[:lsReasonWidth-1]; len(lines) != 3 || !strings.Contains(lines[1], string(cut)+"…") || strings.Contains(lines[1], long) ||
		lines[2] != "(reasons cut short: weir job status JOB shows them whole)" {
		t.Errorf("weir job ls printed:\n%s", b.String())
	}
	b.Reset()
	printJobs(&b, []control.JobStatus{st}, 0)
	if !strings.Contains(b.String(), long) || strings.Contains(b.String(), "cut short") {
		t.Errorf("weir job status printed:\n%s", b.String())
	}
}

// weir job ls and status give a job's reason only for its state now, and
// its last failure as such, with when and in which attempt: a job running
// again after a failover has no reason, but a last failure; a failed or
// restarting job's reason is its last failure, which is not repeated; a
// coordinator that kept a running job's failure as its reason (and sent
// no LastFailure) reads the same.
func TestJobListLastFailure(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)
	lost := control.Failure{Time: at, Attempt: 1, Reason: "worker w1 lost"}
	bad := control.Failure{Time: at.Add(time.Minute), Attempt: 2, Reason: "task op-0 failed: bad config"}
	var b bytes.Buffer
	printJobs(&b, []control.JobStatus{
		{Name: "new", State: control.JobRunning, Attempt: 1},
		{Name: "again", State: control.JobRunning, Attempt: 2, Restarts: 1, Failures: []control.Failure{lost}, LastFailure: &lost},
		{Name: "older", State: control.JobRunning, Attempt: 2, Restarts: 1, Reason: lost.Reason, Failures: []control.Failure{lost}},
		{Name: "waits", State: control.JobRestarting, Attempt: 1, Reason: "waiting for a worker to join (none is live)",
			Failures: []control.Failure{lost}, LastFailure: &lost},
		{Name: "gone", State: control.JobFailed, Attempt: 2, Restarts: 1, Reason: bad.Reason + " (after 1 restart attempt)",
			Failures: []control.Failure{bad, lost}, LastFailure: &bad},
	}, lsReasonWidth)
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, want := range []string{
		`^JOB +STATE +ATTEMPT +RESTARTS +CHECKPOINT +SINCE +REASON +LAST FAILURE$`,
		`^new +running +1 +0 +- +\S+ +-$`,
		`^again +running +2 +1 +- +\S+ +2026-12-02 01:02:03 attempt 1: worker w1 lost$`,
		`^older +running +2 +1 +- +\S+ +2026-12-02 01:02:03 attempt 1: worker w1 lost$`,
		`^waits +restarting +1 +0 +- +\S+ +waiting for a worker to join \(none is live\) +2026-12-02 01:02:03 attempt 1: worker w1 lost$`,
		`^gone +failed +2 +1 +- +\S+ +task op-0 failed: bad config \(after 1 restart attempt\) +2026-12-02 01:03:03 attempt 2$`,
	} {
		if i >= len(got) || !regexp.MustCompile(want).MatchString(got[i]) {
			t.Errorf("weir job ls printed:\n%s\nline %d does not match %s", b.String(), i, want)
			break
		}
	}
	if len(got) != 6 {
		t.Errorf("weir job ls printed %d lines:\n%s", len(got), b.String())
	}
}

// weir job status says which tasks still restore their state, and that
// no checkpoint starts before they run; without such tasks it says nothing.
func TestJobStatusShowsRestoringTasks(t *testing.T) {
	var b bytes.Buffer
	st := control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 2, RestoredFrom: 7,
		Assignment: map[string]string{"in-0": "w1", "pass-0": "w1", "out-0": "w1"}, Restoring: []string{"out-0"}}
	printRestoring(&b, st)
	if want := "restoring: 1 of 3 tasks still restore their state from checkpoint 7 (out-0); checkpoints start once every task runs\n"; b.String() != want {
		t.Errorf("printed %q, want %q", b.String(), want)
	}
	b.Reset()
	st.Restoring = nil
	printRestoring(&b, st)
	if b.Len() > 0 {
		t.Errorf("printed %q for a job whose tasks all run", b.String())
	}
}

// After a restore whose job failed, weir job ls names the checkpoint the
// job was restored from (it showed 0), and weir checkpoint ls lists the
// checkpoints the job's earlier run left stored, which can be restored
// too (they vanished from the listing), as the earlier run's.
func TestFailedRestoreListsItsCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile(tapSpec(t, "rf", mod, "checkpointing: {interval: 20ms, retained: 2}\n"), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	for st, _ := n.API.Job(ctx, "rf"); st.LatestCheckpoint < 4; st, _ = n.API.Job(ctx, "rf") {
		if ctx.Err() != nil {
			t.Fatal("no fourth checkpoint")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := n.API.CancelJob(ctx, "rf"); err != nil {
		t.Fatal(err)
	}
	before, err := n.API.Checkpoints(ctx, "rf")
	if err != nil {
		t.Fatal(err)
	}
	var kept []int64 // newest first
	for _, c := range before {
		if c.Status == control.CheckpointCompleted {
			kept = append(kept, c.ID)
		}
	}
	if len(kept) != 2 {
		t.Fatalf("completed checkpoints after the first run: %v, want 2 (retained 2)", kept)
	}
	from := kept[1]

	// Restored under a spec whose module does not load: the job fails.
	if _, err := n.Registry.Push(ctx, "notwasm", []byte("hello\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	weir := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append(args[:2:2], append([]string{"-nats", url}, args[2:]...)...),
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("weir %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	weir("job", "restore", "rf", "-from", fmt.Sprint(from), "-spec", tapSpec(t, "rf", "notwasm@1", ""))
	for st, _ := n.API.Job(ctx, "rf"); st.State != control.JobFailed; st, _ = n.API.Job(ctx, "rf") {
		if ctx.Err() != nil {
			t.Fatalf("the restored job did not fail: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := weir("job", "ls"); !regexp.MustCompile(fmt.Sprintf(`(?m)^rf +failed +\d+ +0 +%d `, from)).MatchString(got) {
		t.Errorf("weir job ls after the failed restore from %d:\n%s", from, got)
	}
	got := weir("checkpoint", "ls", "rf")
	for _, c := range []struct {
		id     int64
		reason string
	}{{kept[0], "earlier run: still stored, can be restored"}, {from, ""}} {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^%d +checkpoint +completed .*  %s$`, c.id, regexp.QuoteMeta(c.reason))).MatchString(got) {
			t.Errorf("weir checkpoint ls lacks checkpoint %d (%q):\n%s", c.id, c.reason, got)
		}
	}
	// Those retention discarded are gone, and not listed. (One that
	// completed as the cancel came may be stored, and listed, too.)
	for _, m := range regexp.MustCompile(`(?m)^(\d+) `).FindAllStringSubmatch(got, -1) {
		if id, _ := strconv.ParseInt(m[1], 10, 64); id < from {
			t.Errorf("weir checkpoint ls lists checkpoint %d, discarded before %d:\n%s", id, from, got)
		}
	}
}

// With NATS up and no coordinator on it, the job and checkpoint commands
// say so, after a short wait for one that restarts: not a busy wait for
// their whole deadline that ends in "context deadline exceeded".
func TestNoCoordinator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	url := n.Server.ClientURL()
	const hint = "no coordinator answers (is 'weir up' running on this NATS?): "
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "ls", "-nats", url}, "weir: job ls: " + hint + "weir.ctl.api.jobs: nobody is listening (no responders)\n"},
		{[]string{"job", "status", "-nats", url, "wc"}, "weir: job status: " + hint + "weir.ctl.api.job: nobody is listening (no responders)\n"},
		{[]string{"checkpoint", "ls", "-nats", url, "wc"}, "weir: checkpoint ls: " + hint + "weir.ctl.api.checkpoints: nobody is listening (no responders)\n"},
		{[]string{"job", "cancel", "-nats", url, "wc"}, "weir: job cancel: " + hint + "weir.ctl.api.cancel: nobody is listening (no responders)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, c.args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		// A read waits seconds for a coordinator that restarts, and says
		// so after one.
		got := waitingLine.ReplaceAllString(errb.String(), "")
		if code != 1 || got != c.want {
			t.Errorf("%v: exit %d, stderr %q; want exit 1, %q", c.args, code, errb.String(), c.want)
		}
	}
	if ctx.Err() != nil {
		t.Error("the commands waited out the test's deadline")
	}
}

// waitingLine matches what a command says while the coordinator has not
// answered it for a second.
var waitingLine = regexp.MustCompile(`(?m)^weir: waiting for the coordinator to answer [a-z' ]+ \(for up to [0-9hms.]+\)\n`)

// weir job status names the task that limits the job's rate: the busiest,
// busy most of the time, with the tasks backpressured behind it, and what
// to change; else an exactly-once sink that waits on its commits most of
// the time; else nothing. The table alone made a user compare every row
// to find the slow operator in the middle of a pipeline.
func TestJobStatusNamesTheBottleneck(t *testing.T) {
	committed := int64(3)
	for _, c := range []struct {
		name  string
		tasks []control.TaskStatus
		want  string
	}{
		{"slow operator", []control.TaskStatus{
			{Task: "lines-0", Backpressured: 0.83},
			{Task: "first-0", Backpressured: 0.95},
			{Task: "slowop-0", Busy: 1},
			{Task: "last-0", Busy: 0.02},
			{Task: "out-0", Busy: 0.01, Stats: control.TaskStats{SinkCommitted: &committed}},
		}, "bottleneck: slowop-0 is busy 100% of the time; backpressured: first-0 95%, lines-0 83% — make slowop faster per record or raise its parallelism\n"},
		{"slow commits", []control.TaskStatus{
			{Task: "lines-0", Backpressured: 0.7},
			{Task: "count-10", Busy: 0.2, Backpressured: 0.75},
			{Task: "out-0", Backpressured: 0.9, Stats: control.TaskStats{SinkCommitted: &committed}},
		}, "bottleneck: sink out-0 waits on its commits 90% of the time — its stream takes the output slower than the job makes it\n"},
		// Busy all the time in one call: stuck or slow on one record, not
		// slow per record.
		{"stuck in a call", []control.TaskStatus{
			{Task: "lines-0", Backpressured: 0.83},
			{Task: "op-1", Busy: 0.73, Stats: control.TaskStats{InCallNanos: int64(3640 * time.Millisecond)}},
			{Task: "op-0", Busy: 0.2, Stats: control.TaskStats{InCallNanos: int64(10 * time.Millisecond)}},
		}, "stuck: op-1 has been in one call of its operator for 3.6s — stuck (a loop?) or very slow on one record; the call deadline (limits.timeout) fails it if it goes on\n"},
		// In weir_snapshot: the time goes to a large state, and its own
		// deadline; a trial's user saw "very slow on one record" with the
		// task at BUSY 0%, 7037 queued.
		{"in a snapshot", []control.TaskStatus{
			{Task: "agg-0", Stats: control.TaskStats{InCallNanos: int64(7900 * time.Millisecond), InCallExport: "weir_snapshot", InCallCheckpoint: 6, QueuedRecords: 7037}},
		}, "stuck: agg-0 has been in weir_snapshot for checkpoint 6 for 7.9s, writing its operator's state — a large state (many keys), or stuck; the snapshot deadline (limits.snapshot-timeout) fails it if it goes on\n"},
		{"in a restore", []control.TaskStatus{
			{Task: "agg-0", Stats: control.TaskStats{InCallNanos: int64(2 * time.Second), InCallExport: "weir_restore", InCallCheckpoint: 5}},
		}, "stuck: agg-0 has been in weir_restore of checkpoint 5 for 2s, reading its operator's state — a large state (many keys), or stuck; the snapshot deadline (limits.snapshot-timeout) fails it if it goes on\n"},
		{"in weir_init", []control.TaskStatus{
			{Task: "agg-0", Stats: control.TaskStats{InCallNanos: int64(2 * time.Second), InCallExport: "weir_init"}},
		}, "stuck: agg-0 has been in weir_init for 2s — stuck (a loop?) or very slow; the call deadline (limits.timeout) fails it if it goes on\n"},
		{"keeps up", []control.TaskStatus{
			{Task: "lines-0", Busy: 0.1},
			{Task: "count-0", Busy: 0.3},
			{Task: "out-0", Backpressured: 0.2, Stats: control.TaskStats{SinkCommitted: &committed}},
		}, ""},
	} {
		var b bytes.Buffer
		printBottleneck(&b, c.tasks)
		if b.String() != c.want {
			t.Errorf("%s: printed %q, want %q", c.name, b.String(), c.want)
		}
	}
}

// weir job status says how the job's checkpoints fare: how many completed
// and failed, the latest completed; while they fail, how many in a row
// and the newest failure's reason, what to change for one that expired,
// and that the job fails over onto the same checkpoint each time. A job
// whose checkpoints succeed again says nothing of failing, one that took
// none yet nothing at all.
func TestJobStatusSaysCheckpointsFail(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 14, 17, 0, time.UTC)
	cps := control.CheckpointStats{Completed: 1, Failed: 3, LastID: 1, LastDuration: 4346 * time.Millisecond, LastSize: 996823,
		LastCompleted: at, FailedInARow: 3, LastFailedID: 6, LastFailed: at.Add(19 * time.Second),
		LastFailure: "expired after 5s; no snapshot from slowop-0, last-0, out-0"}
	lost := control.Failure{Time: at.Add(19 * time.Second), Attempt: 3,
		Reason: "1 consecutive checkpoint failures exceed the 0 tolerated; last: checkpoint 6: expired after 5s; no snapshot from slowop-0, last-0, out-0"}
	var b bytes.Buffer
	printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 4, Checkpoints: cps, LastFailure: &lost}, "")
	want := "checkpoints: 1 completed, 3 failed since the coordinator started; latest completed: 1 at 14:14:17 (took 4.346s, 973.5 KiB)\n" +
		"checkpoints failing: 3 in a row, since 1 completed; the newest, 6 at 14:14:36: expired after 5s; no snapshot from slowop-0, last-0, out-0\n" +
		"  a checkpoint expires when its barriers do not get through in time: aligned ones queue behind the data in flight to a busy task (see bottleneck); " +
		"make it faster or raise its parallelism, raise checkpointing.timeout, or take checkpoints unaligned (checkpointing.mode: unaligned), " +
		"whose barriers overtake that data; weir checkpoint ls slow shows which tasks did not ack\n" +
		"  the job fails over for them, each attempt from checkpoint 1 again; checkpointing.tolerable-failures lets it run on through failed checkpoints\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
	// The command it names reaches the job's server, as weir job status
	// -nats did.
	b.Reset()
	printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 4, Checkpoints: cps}, " -nats nats://h:4222")
	if want := "weir checkpoint ls -nats nats://h:4222 slow shows which tasks did not ack\n"; !strings.Contains(b.String(), want) {
		t.Errorf("with -nats: printed\n%s\nwant %q in it", b.String(), want)
	}

	// The advice fits the job's mode: an unaligned job is not told to
	// take unaligned checkpoints, an at-least-once one not that its
	// barriers align, an aligned one with an aligned-timeout why that
	// did not help.
	for _, c := range []struct {
		mode    string
		aligned time.Duration
		want    []string
		not     []string
	}{
		{jobspec.ModeExactlyOnce, 0, []string{"aligned ones queue behind the data in flight", "checkpointing.aligned-timeout", "checkpointing.mode: unaligned"}, nil},
		{jobspec.ModeExactlyOnce, 200 * time.Millisecond, []string{"only once its barrier is 200ms late, queued or aligning", "checkpointing.mode: unaligned"}, nil},
		{jobspec.ModeUnaligned, 0, []string{"unaligned ones overtake the data in flight", "raise checkpointing.timeout"}, []string{"checkpointing.mode: unaligned", "queue behind"}},
		{jobspec.ModeAtLeastOnce, 0, []string{"at-least-once ones are not aligned", "checkpointing.mode: unaligned"}, []string{"aligned ones queue", "aligned-timeout"}},
	} {
		b.Reset()
		printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 4, Checkpoints: cps,
			CheckpointMode: c.mode, AlignedTimeout: c.aligned}, "")
		for _, want := range c.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("mode %s (aligned-timeout %s): printed\n%s\nwant %q in it", c.mode, c.aligned, b.String(), want)
			}
		}
		for _, not := range c.not {
			if strings.Contains(b.String(), not) {
				t.Errorf("mode %s: printed\n%s\nwith %q, which does not fit the mode", c.mode, b.String(), not)
			}
		}
	}

	// Declined, tolerated, none completed: no advice for an expiry nor a failover.
	b.Reset()
	printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 1, Checkpoints: control.CheckpointStats{
		Failed: 1, FailedInARow: 1, LastFailedID: 1, LastFailed: at, LastFailure: "declined by op-0 (failed): disk"}}, "")
	if want := "checkpoints: 0 completed, 1 failed since the coordinator started\n" +
		"checkpoints failing: 1 in a row, none completed yet; the newest, 1 at 14:14:17: declined by op-0 (failed): disk\n"; b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}

	// Completing again ends the failing.
	b.Reset()
	cps.FailedInARow, cps.Completed, cps.LastID = 0, 2, 7
	printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 4, Checkpoints: cps, LastFailure: &lost}, "")
	if want := "checkpoints: 2 completed, 3 failed since the coordinator started; latest completed: 7 at 14:14:17 (took 4.346s, 973.5 KiB)\n"; b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
	// Those a failover cut are counted apart: the figures add up.
	b.Reset()
	cps.Aborted = 1
	printCheckpointStats(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 4, Checkpoints: cps}, "")
	if want := "checkpoints: 2 completed, 3 failed, 1 aborted (cut by a failover, a stop or a newer checkpoint: no failure) since the coordinator started; latest completed: 7 at 14:14:17 (took 4.346s, 973.5 KiB)\n"; b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
	cps.Aborted = 0

	b.Reset()
	printCheckpointStats(&b, control.JobStatus{Name: "new", State: control.JobRunning, Attempt: 1}, "")
	if b.Len() > 0 {
		t.Errorf("printed %q for a job without checkpoints", b.String())
	}
}

// weir job status shows, beside a source's unread messages, whether the
// backlog shrinks and how fast, with about when it is caught up; or that
// the source falls behind — but not for fewer messages than it reads in
// a second, which are in flight. UNREAD alone did not say either.
func TestJobStatusShowsHowFastABacklogShrinks(t *testing.T) {
	pending := func(n int64) *int64 { return &n }
	rate := func(r float64) *float64 { return &r }
	var b bytes.Buffer
	printTasks(&b, []control.TaskStatus{
		{Task: "orders-0", Stats: control.TaskStats{SourcePending: pending(160000)}, UnreadRate: rate(-8000)},
		{Task: "payments-0", Stats: control.TaskStats{SourcePending: pending(2000)}, UnreadRate: rate(500)},
		{Task: "refunds-0", Stats: control.TaskStats{SourcePending: pending(10)}, UnreadRate: rate(-8000)},
		{Task: "audit-0", Stats: control.TaskStats{SourcePending: pending(0)}, UnreadRate: rate(-20)},
		{Task: "views-0", Stats: control.TaskStats{SourcePending: pending(42)}, UnreadRate: rate(7), InRate: 28000},
		{Task: "clicks-0", Stats: control.TaskStats{SourcePending: pending(300)}},
		{Task: "join-0"},
	})
	rows := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i, want := range []string{
		`^orders-0 .* 160000 \(-8000/s, caught up in ~20s\)$`,
		`^payments-0 .* 2000 \(\+500/s, falling behind\)$`,
		`^refunds-0 .* 10 \(-8000/s, caught up in ~1s\)$`,
		`^audit-0 .* 0$`,
		`^views-0 .* 42$`,
		`^clicks-0 .* 300$`,
		`^join-0 .* -$`,
	} {
		if len(rows) != 8 || !regexp.MustCompile(want).MatchString(rows[i+1]) {
			t.Errorf("job status tasks:\n%s\nrow %d does not match %s", b.String(), i+1, want)
		}
	}
}

// weir job status says how many failures in a row a job failing over has
// had and which one fails it for good; when the latest failures of the
// row read the same but for their numbers, that restarting does not help
// (for a trap, why). Fewer than two failures, or different ones, get no
// such line; a job that ended gets no count of what is left.
func TestJobStatusShowsARestartLoop(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 14, 46, 0, time.UTC)
	trap := func(attempt int) control.Failure {
		return control.Failure{Time: at.Add(time.Duration(attempt) * time.Second), Attempt: attempt,
			Reason: `task slowop-0 failed: operator slowop[0]: weir_process: trap at record 2 of the batch (value "!bad"): wasm error: unreachable`}
	}
	// onKey is a trap in weir_process at record ix of the batch, with
	// key key: a Go operator's panic, as a worker reports it.
	onKey := func(attempt, ix int, key string) control.Failure {
		rec := fmt.Sprintf("key %q, value %q", key, "v")
		return control.Failure{Time: at.Add(time.Duration(attempt) * time.Second), Attempt: attempt, Kind: control.FailureTrap, Task: "slowop-0", Record: rec,
			Reason: fmt.Sprintf(`task slowop-0 failed: operator slowop[0]: weir_process: trap at record %d of the batch (%s): panic: at random (wasm error: unreachable)`, ix, rec)}
	}
	const tooLarge = `task badop-0 failed: operator badop[0]: forwarding output to port 0: record 1 of an emitted batch (key "in.k"): record too large for an operator's input: ` +
		`a record of 10485764 bytes (key 4, value 10485760) makes a batch of 10485784 bytes, over the 4194304-byte (4 MiB) limit of operator passop's input batch; ` +
		`emit smaller records (split a large value across several)`
	expired := func(attempt, id int) control.Failure {
		return control.Failure{Attempt: attempt, Reason: fmt.Sprintf("1 consecutive checkpoint failures exceed the 0 tolerated; last: checkpoint %d: expired after 5s", id)}
	}
	lost := func(attempt int) control.Failure {
		return control.Failure{Attempt: attempt, Kind: control.FailureBadRecord, Task: "out-0",
			Reason: fmt.Sprintf(`task out-0 failed: core sink kk.{key}: record 1 of the batch: record key cannot form a subject: key "": empty; `+
				`the record is lost: it came from core NATS source in, which cannot replay it, so a restart goes on without it (attempt %d)`, attempt)}
	}
	full := func(attempt int) control.Failure {
		return control.Failure{Attempt: attempt, Kind: control.FailureSinkRefused, Task: "out-0",
			Reason: "task out-0 failed: commit: maximum messages exceeded (stream OUT5 refused an atomic batch of 20000 messages whole: …)"}
	}
	for _, c := range []struct {
		name string
		st   control.JobStatus
		want string
	}{
		{"trap loop", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 3, RestartAttempts: 3,
			Failures: []control.Failure{trap(3), trap(2), trap(1)}},
			"failures in a row: 3 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 3 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"  to go on: weir job cancel slow, fix the operator and submit the job again (no checkpoint completed to restore)\n"},
		{"traps on one record", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2, RestartAttempts: 3,
			Failures: []control.Failure{onKey(3, 4, "k99"), onKey(2, 17, "k99")}},
			"failures in a row: 2 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"  to go on: weir job cancel slow, fix the operator and submit the job again (no checkpoint completed to restore)\n"},
		{"traps on different records", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 3, RestartAttempts: 3,
			Failures: []control.Failure{onKey(3, 4, "k390"), onKey(2, 4, "k473"), onKey(1, 4, "k99")}},
			"failures in a row: 3 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 3 failed on different records: a fault that comes and goes, not one record\n"},
		{"failed on different records", control.JobStatus{Name: "slow", State: control.JobFailed, Attempt: 2, FailuresInARow: 2, RestartAttempts: 1,
			Failures: []control.Failure{onKey(2, 0, "k473"), onKey(1, 4, "k99")}},
			"the last 2 failed on different records: a fault that comes and goes, not one record\n"},
		{"trap loop after a checkpoint", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2, RestartAttempts: 3, LatestCheckpoint: 7,
			Failures: []control.Failure{trap(3), trap(2)}},
			"failures in a row: 2 since checkpoint 7 completed; restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"  to go on: weir job cancel slow, fix the operator, then weir job restore slow -from 7 -spec SPEC, the spec's module: naming the fixed build (its state and output carry over)\n"},
		{"trap loop of a job started from another's checkpoint", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2,
			RestartAttempts: 3, StartedFrom: "orig/5", Failures: []control.Failure{trap(3), trap(2)}},
			"failures in a row: 2 since the job started from checkpoint orig/5 (none of its own completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"  to go on: weir job cancel slow, fix the operator, then weir job restore slow -from orig/5 -spec SPEC, the spec's module: naming the fixed build " +
				"(the checkpoint it started from, as none of its own is stored: that state carries over)\n"},
		{"trap loop of a job started from another's checkpoint, after one of its own", control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3,
			FailuresInARow: 2, RestartAttempts: 3, StartedFrom: "orig/5", LatestCheckpoint: 9, Failures: []control.Failure{trap(3), trap(2)}},
			"failures in a row: 2 since checkpoint 9 completed; restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"  to go on: weir job cancel slow, fix the operator, then weir job restore slow -from 9 -spec SPEC, the spec's module: naming the fixed build (its state and output carry over)\n"},
		{"expiring checkpoints", control.JobStatus{State: control.JobRunning, Attempt: 3, FailuresInARow: 2, RestartAttempts: 5, LatestCheckpoint: 1,
			Failures: []control.Failure{expired(2, 4), expired(1, 2)}},
			"failures in a row: 2 since checkpoint 1 completed; restart.attempts allows 5 restarts, failure 6 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays\n"},
		{"only the row counts", control.JobStatus{State: control.JobRunning, Attempt: 3, FailuresInARow: 1, RestartAttempts: 5,
			Failures: []control.Failure{trap(2), trap(1)}},
			"failures in a row: 1 since the job started (no checkpoint completed); restart.attempts allows 5 restarts, failure 6 fails the job\n"},
		{"different failures", control.JobStatus{State: control.JobRunning, Attempt: 3, FailuresInARow: 2, RestartAttempts: 5,
			Failures: []control.Failure{trap(2), {Attempt: 1, Reason: "worker w1 lost"}}},
			"failures in a row: 2 since the job started (no checkpoint completed); restart.attempts allows 5 restarts, failure 6 fails the job\n"},
		{"failed", control.JobStatus{Name: "slow", State: control.JobFailed, Attempt: 4, FailuresInARow: 4, RestartAttempts: 3, LatestCheckpoint: 12,
			Failures: []control.Failure{trap(4), trap(3), trap(2), trap(1)}},
			"the last 4 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
				"to go on: fix the operator, then weir job restore slow -from 12 -spec SPEC, the spec's module: naming the fixed build (its state and output carry over)\n"},
		{"a record too large for the operator it goes to", control.JobStatus{Name: "big", State: control.JobFailed, Attempt: 1, FailuresInARow: 1, RestartAttempts: 3, LatestCheckpoint: 5,
			Reason:   tooLarge + " (not restarted: it would fail the same way again)",
			Failures: []control.Failure{{Attempt: 1, Kind: control.FailureBadRecord, Task: "badop-0", Reason: tooLarge}}},
			"an operator emitted a record too large for the operator it goes to; every replay would emit it again\n" +
				"to go on: fix the operator that emits the record (an operator's input batch takes a record of up to 4MiB less 20 bytes of framing: split a large value across several records), " +
				"then weir job restore big -from 5 -spec SPEC, the spec's module: naming the fixed build (its state and output carry over)\n"},
		{"records too large for the operator they go to, each lost", control.JobStatus{Name: "big", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2, RestartAttempts: 3,
			Failures: []control.Failure{{Attempt: 2, Kind: control.FailureBadRecord, Task: "badop-0", Reason: tooLarge}, {Attempt: 1, Kind: control.FailureBadRecord, Task: "badop-0", Reason: tooLarge}}},
			"failures in a row: 2 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (an operator emitted a record too large for the operator it goes to each time, and each such record is lost: the job's input cannot replay it)\n" +
				"  to go on: weir job cancel big, fix the operator that emits the record (an operator's input batch takes a record of up to 4MiB less 20 bytes of framing: split a large value across several records) and submit the job again (no checkpoint completed to restore)\n"},
		{"a record a sink cannot publish", control.JobStatus{Name: "slow", State: control.JobFailed, Attempt: 1, FailuresInARow: 1, RestartAttempts: 3, LatestCheckpoint: 5,
			Reason:   `task out-0 failed: record 1 of the batch: bad key: key "": the record has no key (not restarted: it would fail the same way again)`,
			Failures: []control.Failure{{Attempt: 1, Kind: control.FailureBadRecord, Reason: `task out-0 failed: record 1 of the batch: bad key: key "": the record has no key`}}},
			"a sink refused a record it cannot publish; the checkpoints hold none of it, and every replay would meet it again\n" +
				"to go on: fix the operator that emits the record (a key that forms the sink's subject, a smaller value) or the sink's subject (one without {key} takes any key), " +
				"then weir job restore slow -from 5 -spec SPEC, the spec naming the fixed build or subject (its state and output carry over)\n"},
		{"records lost, restarted", control.JobStatus{Name: "lossy", State: control.JobRunning, Attempt: 3, FailuresInARow: 2, RestartAttempts: 3,
			Failures: []control.Failure{lost(2), lost(1)}},
			"failures in a row: 2 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (a sink refused a record it cannot publish each time, and each such record is lost: the job's input cannot replay it)\n" +
				"  to go on: weir job cancel lossy, fix the operator that emits the record (a key that forms the sink's subject, a smaller value) or the sink's subject (one without {key} takes any key) " +
				"and submit the job again (no checkpoint completed to restore)\n"},
		{"records lost, restarts used up", control.JobStatus{Name: "lossy", State: control.JobFailed, Attempt: 2, FailuresInARow: 2, RestartAttempts: 1,
			Reason:   lost(2).Reason + " (after 1 restart attempt)",
			Failures: []control.Failure{lost(2), lost(1)}},
			"the last 2 failed the same way: restarting does not help while the cause stays (a sink refused a record it cannot publish each time, and each such record is lost: the job's input cannot replay it)\n" +
				"to go on: fix the operator that emits the record (a key that forms the sink's subject, a smaller value) or the sink's subject (one without {key} takes any key) " +
				"and submit the job again (no checkpoint completed to restore)\n"},
		{"an atomic batch larger than the sink stream's limit", control.JobStatus{Name: "big", State: control.JobFailed, Attempt: 1, FailuresInARow: 1, RestartAttempts: 10, LatestCheckpoint: 3,
			Reason:   "task out-0 failed: commit: maximum messages exceeded (stream OUT5 refused an atomic batch of 20000 messages whole: …) (not restarted: it would fail the same way again)",
			Failures: []control.Failure{full(1)}},
			"a sink's stream refused an atomic batch of a checkpoint's output larger than its limit; the batches are fixed when the output is staged, so every commit would meet the same refusal\n" +
				"to go on: raise the limit of the sink's stream that the failure names, as it says (weir stream edit STREAM -max-msgs N, -max-bytes SIZE or -max-msgs-per-subject N), " +
				"then weir job restore big -from 3 (its state and output carry over)\n"},
		{"a full sink stream, restarting", control.JobStatus{Name: "big", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2, RestartAttempts: 10, LatestCheckpoint: 3,
			Failures: []control.Failure{full(3), full(2)}},
			"failures in a row: 2 since checkpoint 3 completed; restart.attempts allows 10 restarts, failure 11 fails the job\n" +
				"  the last 2 failed the same way: restarting does not help while the cause stays (a sink's stream refused its output for one of its limits each time, and discards new messages)\n" +
				"  to go on: raise the limit of the sink's stream that the failure names, as it says (weir stream edit STREAM -max-msgs N, -max-bytes SIZE or -max-msgs-per-subject N); the next restart commits the output then\n"},
		{"a full sink stream, restarts used up", control.JobStatus{Name: "big", State: control.JobFailed, Attempt: 3, FailuresInARow: 3, RestartAttempts: 2, LatestCheckpoint: 3,
			Reason: full(3).Reason + " (after 2 restart attempts)", Failures: []control.Failure{full(3), full(2), full(1)}},
			"the last 3 failed the same way: restarting does not help while the cause stays (a sink's stream refused its output for one of its limits each time, and discards new messages)\n" +
				"to go on: raise the limit of the sink's stream that the failure names, as it says (weir stream edit STREAM -max-msgs N, -max-bytes SIZE or -max-msgs-per-subject N), " +
				"then weir job restore big -from 3 (its state and output carry over)\n"},
		{"no failure", control.JobStatus{State: control.JobRunning, Attempt: 1, RestartAttempts: 3}, ""},
	} {
		var b bytes.Buffer
		printInARow(&b, c.st, trapRemedy(""))
		if b.String() != c.want {
			t.Errorf("%s: printed\n%q\nwant\n%q", c.name, b.String(), c.want)
		}
	}
	// The commands said carry the -nats of the weir job status that said them.
	st := control.JobStatus{Name: "slow", State: control.JobRestarting, LatestCheckpoint: 7}
	want := "to go on: weir job cancel -nats nats://h:4222 slow, fix the operator, then weir job restore -nats nats://h:4222 slow -from 7 -spec SPEC, " +
		"the spec's module: naming the fixed build (its state and output carry over)"
	if got := trapRemedy(" -nats nats://h:4222")(st, remedyOperator); got != want {
		t.Errorf("with -nats: said\n%q\nwant\n%q", got, want)
	}
	// Past the memory limit: the same restore, with the limit raised.
	want = "to go on: weir job cancel slow, raise the operator's limits.memory in the spec, then weir job restore slow -from 7 -spec SPEC, " +
		"the spec's limits.memory raised (its state and output carry over)"
	if got := trapRemedy("")(st, remedyMemory); got != want {
		t.Errorf("past the memory limit: said\n%q\nwant\n%q", got, want)
	}
}

// weir job status tells the failures of a restart loop and a trap by
// their kinds (control.Failure.Kind) and tasks, not by the words of their
// reasons, which a reworded message no longer has: a trap whose reason
// lacks "trap" still gets the trap's hint and remedy, failures that read
// alike but are of other kinds or tasks are not the same, and a reason
// that happens to say "trap" is no trap. Failures without a kind (a job
// record of an older coordinator) are still read by their words.
func TestJobStatusReadsFailureKinds(t *testing.T) {
	failed := func(attempt int, kind control.FailureKind, task, reason string) control.Failure {
		return control.Failure{Attempt: attempt, Kind: kind, Task: task, Reason: reason}
	}
	const (
		row      = "failures in a row: 2 since the job started (no checkpoint completed); restart.attempts allows 3 restarts, failure 4 fails the job\n"
		same     = "  the last 2 failed the same way: restarting does not help while the cause stays\n"
		trapSame = "  the last 2 failed the same way: restarting does not help while the cause stays (an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)\n" +
			"  to go on: weir job cancel slow, fix the operator and submit the job again (no checkpoint completed to restore)\n"
		memSame = "  the last 2 failed the same way: restarting does not help while the cause stays (an operator that runs past its memory limit on a record does so each time the record is read again after a restore)\n" +
			"  to go on: weir job cancel slow, raise the operator's limits.memory in the spec and submit the job again (no checkpoint completed to restore)\n"
		failSame = "  the last 2 failed the same way: restarting does not help while the cause stays (an operator that fails on a record does so each time the record is read again after a restore)\n" +
			"  to go on: weir job cancel slow, fix the operator and submit the job again (no checkpoint completed to restore)\n"
		deadlineSame = "  the last 2 failed the same way: restarting does not help while the cause stays (an operator that runs past its call deadline on a record, in a loop say, does so each time the record is read again after a restore)\n" +
			"  to go on: weir job cancel slow, fix the operator (or raise its limits.timeout in the spec, if the call needs longer) and submit the job again (no checkpoint completed to restore)\n"
		refused = " (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 4 MiB and it had 2 MiB)"
	)
	for _, c := range []struct {
		name     string
		failures []control.Failure
		want     string
	}{
		{"a trap in other words", []control.Failure{
			failed(2, control.FailureTrap, "slowop-0", `task slowop-0 failed: operator slowop[0]: weir_process: at record 2 of the batch (value "!bad"): unreachable`),
			failed(1, control.FailureTrap, "slowop-0", `task slowop-0 failed: operator slowop[0]: weir_process: at record 8 of the batch (value "!worse"): integer divide by zero`)},
			row + trapSame},
		{"traps in two tasks", []control.Failure{
			failed(2, control.FailureTrap, "slowop-1", "task slowop-1 failed: trap"),
			failed(1, control.FailureTrap, "slowop-0", "task slowop-0 failed: trap")},
			row},
		{"alike in words, of other kinds", []control.Failure{
			failed(2, control.FailureDeadline, "slowop-0", "task slowop-0 failed: stuck"),
			failed(1, control.FailureTrap, "slowop-0", "task slowop-0 failed: stuck")},
			row},
		{"no trap but in words", []control.Failure{
			failed(2, control.FailureOperatorError, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: trap door 2 closed"),
			failed(1, control.FailureOperatorError, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: trap door 1 closed")},
			row + failSame},
		{"past the call deadline", []control.Failure{
			failed(2, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: deadline exceeded"),
			failed(1, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: deadline exceeded")},
			row + deadlineSame},
		{"an older coordinator's failure before a classified one", []control.Failure{
			failed(2, control.FailureTrap, "slowop-0", "task slowop-0 failed: trap at record 3 of the batch"),
			failed(1, control.FailureUnknown, "", "task slowop-0 failed: trap at record 2 of the batch")},
			row + trapSame},
		// Past the memory limit, whatever the words: the limit is what
		// to change, not the operator.
		{"past the memory limit", []control.Failure{
			failed(2, control.FailureMemoryLimit, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: out of memory"+refused),
			failed(1, control.FailureMemoryLimit, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_process: trap at record 2 of the batch: unreachable"+refused)},
			row + memSame},
		{"a trap, then past the memory limit", []control.Failure{
			failed(2, control.FailureMemoryLimit, "slowop-0", "task slowop-0 failed: trap at record 2 of the batch: unreachable"+refused),
			failed(1, control.FailureTrap, "slowop-0", "task slowop-0 failed: trap at record 2 of the batch: unreachable")},
			row},
		{"an older coordinator's trap after a refused grow", []control.Failure{
			failed(2, control.FailureUnknown, "", "task slowop-0 failed: operator slowop[0]: weir_process: trap at record 3 of the batch: unreachable"+refused),
			failed(1, control.FailureUnknown, "", "task slowop-0 failed: operator slowop[0]: weir_process: trap at record 2 of the batch: unreachable"+refused)},
			row + memSame},
		// Where the operator failed, if not on a record.
		// Past the snapshot deadline: the setting to raise is
		// limits.snapshot-timeout, not limits.timeout.
		{"past the snapshot deadline in weir_snapshot", []control.Failure{
			failed(2, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_snapshot: exceeded the 1m0s snapshot deadline (stuck) (checkpoint 2)"),
			failed(1, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_snapshot: exceeded the 1m0s snapshot deadline (stuck) (checkpoint 1)")},
			row + "  the last 2 failed the same way: restarting does not help while the cause stays (the operator failed in weir_snapshot, snapshotting its state: the same records build the same state again after each restore)\n" +
				"  to go on: weir job cancel slow, raise the operator's limits.snapshot-timeout in the spec, and its limits.memory if the failure says its memory was near it (or fix the operator, if it is stuck) and submit the job again (no checkpoint completed to restore)\n"},
		{"past the snapshot deadline in weir_restore", []control.Failure{
			failed(2, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_restore: exceeded the 1m0s snapshot deadline (stuck)"),
			failed(1, control.FailureDeadline, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_restore: exceeded the 1m0s snapshot deadline (stuck)")},
			row + "  the last 2 failed the same way: restarting does not help while the cause stays (the operator failed in weir_restore, restoring its state from the checkpoint: it does so each time it restores that checkpoint)\n" +
				"  to go on: weir job cancel slow, raise the operator's limits.snapshot-timeout in the spec, and its limits.memory if the failure says its memory was near it (or fix the operator, if it is stuck) and submit the job again (no checkpoint completed to restore)\n"},
		{"past the call deadline as it starts", []control.Failure{
			failed(2, control.FailureDeadline, "slowop-0", "deploy: task slowop-0: operator slowop[0]: start function: exceeded the 5s call deadline (stuck)"),
			failed(1, control.FailureDeadline, "slowop-0", "deploy: task slowop-0: operator slowop[0]: start function: exceeded the 5s call deadline (stuck)")},
			row + strings.Replace(deadlineSame, "(an operator that runs past its call deadline on a record, in a loop say, does so each time the record is read again after a restore)",
				"(the operator failed as it started, in its start function: it does so at every restart, before it reads a record)", 1)},
		{"a trap in weir_init", []control.Failure{
			failed(2, control.FailureTrap, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_init: trap: unreachable"),
			failed(1, control.FailureTrap, "slowop-0", "task slowop-0 failed: operator slowop[0]: weir_init: trap: unreachable")},
			row + strings.Replace(trapSame, "(an operator that traps on a record, or snapshotting the state it builds from them, does so again after each restore, as the same records are read again)",
				"(the operator failed as it started, in weir_init: it does so at every restart, before it reads a record)", 1)},
	} {
		var b bytes.Buffer
		printInARow(&b, control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: 3, FailuresInARow: 2, RestartAttempts: 3,
			Failures: c.failures}, trapRemedy(""))
		if b.String() != c.want {
			t.Errorf("%s: printed\n%q\nwant\n%q", c.name, b.String(), c.want)
		}
	}

	// Checkpoints: an expiry and the failover for failed checkpoints are
	// told by their cause and kind, however their reasons read.
	at := time.Date(2026, 12, 2, 14, 14, 17, 0, time.UTC)
	cps := control.CheckpointStats{Completed: 1, Failed: 1, LastID: 1, LastCompleted: at, FailedInARow: 1, LastFailedID: 2, LastFailed: at,
		LastFailure: "timed out after 5s", LastFailureCause: control.CheckpointExpired}
	lost := control.Failure{Attempt: 1, Kind: control.FailureCheckpointsFailed, Reason: "checkpoint 2 failed, beyond the tolerated 0"}
	var b bytes.Buffer
	printCheckpointsFailing(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 2, Checkpoints: cps, LastFailure: &lost}, "")
	for _, want := range []string{"  a checkpoint expires when its barriers do not get through in time: ", "weir checkpoint ls slow shows which tasks did not ack\n",
		"  the job fails over for them, each attempt from checkpoint 1 again; "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("expired checkpoints in other words: printed\n%s\nwant %q in it", b.String(), want)
		}
	}
	// A declined one whose reason happens to begin as an expiry's does
	// not; nor a failure of another kind that quotes a checkpoint's.
	cps.LastFailure, cps.LastFailureCause = "expired after the task's disk filled", control.CheckpointDeclined
	lost = control.Failure{Attempt: 1, Kind: control.FailureWorkerLost, Reason: "worker w1 lost (its consecutive checkpoint failures exceed nothing)"}
	b.Reset()
	printCheckpointsFailing(&b, control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 2, Checkpoints: cps, LastFailure: &lost}, "")
	if want := "checkpoints failing: 1 in a row, since 1 completed; the newest, 2 at 14:14:17: expired after the task's disk filled\n"; b.String() != want {
		t.Errorf("a declined checkpoint: printed\n%s\nwant\n%s", b.String(), want)
	}
}

// weir run's advice for a job whose operator traps on a record: run it
// again, as the job goes with the run — but with -data, which keeps the
// job, its checkpoints and its input streams, restore it from its latest
// checkpoint where weir up -data serves the directory (on the port weir
// up served it on last, with the -nats that reaches it), or, with none,
// run it again without the -input its stream holds already.
func TestRerunRemedy(t *testing.T) {
	const again = "to go on: fix the operator and run the job again"
	for _, c := range []struct {
		data   dataServe
		stored bool
		latest int64
		want   string
	}{
		{dataServe{}, false, 0, again},
		{dataServe{}, true, 7, again},
		{serveAt("d", ""), false, 0, again},
		{serveAt("d", ""), true, 0, "to go on: fix the operator and run the job again without -input: its stream in -data d holds the input already, " +
			"and -input would store it a second time"},
		{serveAt("d", ""), false, 7, "to go on: fix the operator, then, with weir up -data d running, weir job restore slow -from 7 -spec SPEC, " +
			"the spec's module: naming the fixed build (its state and output carry over; run again, it would repeat the output it committed)"},
		{serveAt("d", "nats://127.0.0.1:5333"), false, 7, "to go on: fix the operator, then, with weir up -data d -port 5333 running, " +
			"weir job restore -nats nats://127.0.0.1:5333 slow -from 7 -spec SPEC, " +
			"the spec's module: naming the fixed build (its state and output carry over; run again, it would repeat the output it committed)"},
		// A directory the shell would split is quoted, in the command and
		// in the -data named.
		{serveAt("my data", ""), true, 0, "to go on: fix the operator and run the job again without -input: its stream in -data 'my data' holds the input already, " +
			"and -input would store it a second time"},
		{serveAt("my data", "nats://127.0.0.1:5333"), false, 7, "to go on: fix the operator, then, with weir up -data 'my data' -port 5333 running, " +
			"weir job restore -nats nats://127.0.0.1:5333 slow -from 7 -spec SPEC, " +
			"the spec's module: naming the fixed build (its state and output carry over; run again, it would repeat the output it committed)"},
	} {
		st := control.JobStatus{Name: "slow", State: control.JobRestarting, LatestCheckpoint: c.latest}
		if got := rerunRemedy(c.data, c.stored)(st, remedyOperator); got != c.want {
			t.Errorf("-data %+v, input stored %v, checkpoint %d: said\n%q\nwant\n%q", c.data, c.stored, c.latest, got, c.want)
		}
	}
}

// Where weir up serves a data directory, from the URL it noted there: the
// flags that put its server there, and the URL clients reach it on.
func TestServeAt(t *testing.T) {
	for _, c := range []struct {
		url, up, client string
	}{
		{"", "weir up -data d", defaultNATS},
		{"nats://127.0.0.1:4222", "weir up -data d", defaultNATS},
		{"nats://127.0.0.1:5333", "weir up -data d -port 5333", "nats://127.0.0.1:5333"},
		{"nats://0.0.0.0:4222", "weir up -data d -host 0.0.0.0", defaultNATS},
		{"nats://[::]:5333", "weir up -data d -host :: -port 5333", "nats://127.0.0.1:5333"},
		{"nats://10.1.2.3:5333", "weir up -data d -host 10.1.2.3 -port 5333", "nats://10.1.2.3:5333"},
		// An empty host is weir up's -host default, 127.0.0.1 (it named
		// the empty host in -host before); no scheme is nats://.
		{"nats://:4222", "weir up -data d", defaultNATS},
		{"nats://:5333", "weir up -data d -port 5333", "nats://127.0.0.1:5333"},
		{"127.0.0.1:5333", "weir up -data d -port 5333", "nats://127.0.0.1:5333"},
		{"nats://localhost:5333/", "weir up -data d -host localhost -port 5333", "nats://localhost:5333"},
		// What weir up does not note says nothing of where it serves:
		// no URL, rather than the default one (which it gave before).
		{"not a url", "weir up -data d", ""},
		{"nats://h", "weir up -data d", ""},
		{"nats://h:0", "weir up -data d", ""},
		{"nats://h:70000", "weir up -data d", ""},
		{"nats://h:port", "weir up -data d", ""},
		{"http://h:5333", "weir up -data d", ""},
		{"nats://u:p@h:5333", "weir up -data d", ""},
		{"nats://h:5333/x", "weir up -data d", ""},
	} {
		if got := serveAt("d", c.url); got.up != c.up || got.url != c.client {
			t.Errorf("serveAt(%q) = %q, %q; want %q, %q", c.url, got.up, got.url, c.up, c.client)
		}
	}
	// A directory the shell would split is one argument of the command.
	if got, want := serveAt("/srv/it's data", "nats://127.0.0.1:5333").up, `weir up -data '/srv/it'\''s data' -port 5333`; got != want {
		t.Errorf("for a directory with a space and a quote: %s, want %s", got, want)
	}
}

// What weir run -data prints of where weir up serves its directory
// follows DIR/weir-up.url: a URL weir up could have noted names its port,
// one with an empty host 127.0.0.1 (not "-host " with nothing after it);
// a file that says no such URL gives no advice where only the URL would
// be said, and the placeholder URL in the commands, rather than a port
// weir up may not serve on. With no file, weir up's defaults.
func TestServedByOddFiles(t *testing.T) {
	inUse := fmt.Errorf("data directory: %w", node.ErrDataDirInUse)
	st := control.JobStatus{Name: "slow", State: control.JobRestarting, LatestCheckpoint: 7}
	for _, c := range []struct {
		file          *string
		hint, restore string
	}{
		{nil, "; if it is weir up -data DIR, reach its jobs on nats://127.0.0.1:4222: weir job ls",
			"with weir up -data DIR running, weir job restore slow -from 7"},
		{ptr("nats://:5333\n"), "; if it is weir up -data DIR -port 5333, reach its jobs on nats://127.0.0.1:5333: weir job ls -nats nats://127.0.0.1:5333",
			"with weir up -data DIR -port 5333 running, weir job restore -nats nats://127.0.0.1:5333 slow -from 7"},
		{ptr("garbage\n"), "", "with weir up -data DIR running, weir job restore -nats URL slow -from 7"},
		{ptr(""), "", "with weir up -data DIR running, weir job restore -nats URL slow -from 7"},
	} {
		dir := t.TempDir()
		name := "no file"
		if c.file != nil {
			name = fmt.Sprintf("%q", *c.file)
			if err := os.WriteFile(filepath.Join(dir, servedFile), []byte(*c.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		hint := strings.ReplaceAll(c.hint, "DIR", dir)
		if got := inUseHint(inUse, dir).Error(); got != inUse.Error()+hint {
			t.Errorf("%s: in use: %q, want %q", name, got, inUse.Error()+hint)
		}
		restore := strings.ReplaceAll(c.restore, "DIR", dir)
		if got := rerunRemedy(servedBy(dir), false)(st, remedyOperator); !strings.Contains(got, restore) {
			t.Errorf("%s: remedy %q, want it to hold %q", name, got, restore)
		}
	}
}

func ptr(s string) *string { return &s }

// weir run says what weir job status says of a job in trouble — the
// checkpoints failing in a row with the advice for an expired one, the
// failures in a row of a restart loop, the bottleneck — with the same
// lines, but each once: a row of two or more once, again only after a
// checkpoint completed ended it; a bottleneck once for each operator.
// It printed none of them, on any poll.
func TestRunSaysTroubleOnce(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 14, 17, 0, time.UTC)
	failing := func(n int64) control.CheckpointStats {
		return control.CheckpointStats{Completed: 1, Failed: n, LastID: 1, LastCompleted: at, FailedInARow: n,
			LastFailedID: 1 + n, LastFailed: at.Add(time.Duration(n) * 5 * time.Second), LastFailure: "expired after 5s; no snapshot from slowop-0"}
	}
	busy := func(task string, f float64) []control.TaskStatus {
		return []control.TaskStatus{{Task: "lines-0", Backpressured: 0.9}, {Task: task, Busy: f}}
	}
	trap := func(attempt int) control.Failure {
		return control.Failure{Attempt: attempt, Reason: "task op-0 failed: trap"}
	}
	running := func(cps control.CheckpointStats, tasks []control.TaskStatus) control.JobStatus {
		return control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 1, Checkpoints: cps, Tasks: tasks,
			CheckpointMode: jobspec.ModeUnaligned}
	}
	restarting := func(n int) control.JobStatus {
		fs := make([]control.Failure, n)
		for i := range fs {
			fs[i] = trap(n - i)
		}
		return control.JobStatus{Name: "slow", State: control.JobRestarting, Attempt: n, FailuresInARow: n, RestartAttempts: 5, Failures: fs}
	}
	notes := statusNotes{remedy: rerunRemedy(dataServe{}, false)}
	for i, c := range []struct {
		st   control.JobStatus
		want string // a regexp of all it says; "" for nothing
	}{
		{running(control.CheckpointStats{Completed: 1, LastID: 1}, busy("slowop-0", 0.3)), ""},
		{running(failing(1), busy("slowop-0", 0.97)), `^bottleneck: slowop-0 is busy 97% of the time; backpressured: lines-0 90% — make slowop faster per record or raise its parallelism\n$`},
		{running(failing(1), busy("slowop-0", 0.99)), ""},
		{running(failing(2), busy("slowop-0", 0.98)), `^checkpoints failing: 2 in a row, since 1 completed; the newest, 3 at 14:14:27: expired after 5s; no snapshot from slowop-0\n` +
			`  a checkpoint expires when its barriers do not get through in time: unaligned ones overtake .*\n$`},
		{running(failing(3), busy("slowop-0", 0.98)), ""},
		{running(failing(3), busy("lastop-0", 0.9)), `^bottleneck: lastop-0 is busy 90% of the time`},
		{running(control.CheckpointStats{Completed: 2, Failed: 3, LastID: 5}, nil), ""},
		{running(failing(2), nil), `^checkpoints failing: 2 in a row`},
		{restarting(1), ""},
		{restarting(2), `^failures in a row: 2 since the job started \(no checkpoint completed\); restart.attempts allows 5 restarts, failure 6 fails the job\n` +
			`  the last 2 failed the same way: restarting does not help while the cause stays \(an operator that traps .*\)\n` +
			`  to go on: fix the operator and run the job again\n$`},
		{restarting(3), ""},
	} {
		got := notes.news(c.st)
		if c.want == "" && got != "" || c.want != "" && !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("poll %d: said\n%q\nwant it to match\n%q", i, got, c.want)
		}
	}
}

// weir run names a bottleneck once, though the busiest of an operator's
// subtasks changes from one poll to the next: two subtasks of an operator
// that limits the job, each busy nearly all the time, take turns as the
// busiest, and weir run said the bottleneck again on every poll.
func TestRunSaysABottleneckOnce(t *testing.T) {
	tasks := func(busy0, busy1 float64) []control.TaskStatus {
		return []control.TaskStatus{{Task: "lines-0", Backpressured: 0.9}, {Task: "slowop-0", Busy: busy0}, {Task: "slowop-1", Busy: busy1}}
	}
	var notes statusNotes
	said := 0
	for i := range 6 {
		st := control.JobStatus{Name: "slow", State: control.JobRunning, Attempt: 1, Tasks: tasks(0.95, 0.96)}
		if i%2 == 1 {
			st.Tasks = tasks(0.96, 0.95)
		}
		said += strings.Count(notes.news(st), "bottleneck: ")
	}
	if said != 1 {
		t.Errorf("said the bottleneck %d times in 6 polls, want once", said)
	}
}

// weir run says a task stuck in one call of its operator as that, not as
// the bottleneck (a trial's infinite loop was "busy 73% of the time — make
// op faster per record"), once; and the bottleneck once it is one.
func TestRunSaysAStuckCallNotABottleneck(t *testing.T) {
	stuck := control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 1, Tasks: []control.TaskStatus{
		{Task: "in-0", Backpressured: 0.9}, {Task: "op-1", Busy: 0.73, Stats: control.TaskStats{InCallNanos: int64(2 * time.Second)}}}}
	var notes statusNotes
	var said strings.Builder
	for range 3 {
		said.WriteString(notes.news(stuck))
	}
	slow := stuck
	slow.Tasks = []control.TaskStatus{{Task: "in-0", Backpressured: 0.9}, {Task: "op-1", Busy: 0.95, Stats: control.TaskStats{InCallNanos: int64(50 * time.Millisecond)}}}
	said.WriteString(notes.news(slow))
	got := said.String()
	if strings.Count(got, "stuck: op-1 has been in one call of its operator for 2s") != 1 || strings.Count(got, "bottleneck: op-1 is busy 95%") != 1 ||
		strings.Index(got, "stuck:") > strings.Index(got, "bottleneck:") {
		t.Errorf("weir run said:\n%s\nwant the stuck call once, then the bottleneck once", got)
	}
}

// feedUntilEnded publishes value on subject in until job has ended: a job
// whose operator fails on each record it gets fails once its restarts ran
// out.
func feedUntilEnded(t *testing.T, ctx context.Context, n *node.Node, job, value string) {
	t.Helper()
	for {
		st, err := n.API.Job(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if st.State.Terminal() {
			return
		}
		if err := n.Conn.Publish("in", []byte(value)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// trapNode starts an embedded node for the trap remedy tests and returns
// it with the absolute paths of a module that traps (misbehave.wasm) and
// of a fixed build to restore with (passthrough.wasm).
func trapNode(t *testing.T, ctx context.Context) (n *node.Node, mis, fixed string) {
	t.Helper()
	mis, err := filepath.Abs("../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if fixed, err = filepath.Abs("../../guests/wat/passthrough.wasm"); err != nil {
		t.Fatal(err)
	}
	n, err = node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n, mis, fixed
}

// A restore of a job from one of its own checkpoints older than its
// latest says that the output committed since is published again.
func TestOlderNote(t *testing.T) {
	sinks := []jobspec.Sink{{Name: "out"}}
	for _, c := range []struct {
		st   control.JobStatus
		from string
		want string
	}{
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7, Sinks: sinks}, "3",
			"note: checkpoint 3 is older than the job's latest, 7: the output its sinks committed after checkpoint 3 is published again, as new output (restore from 7 not to repeat it)"},
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7, Sinks: sinks}, "wc/chk-3",
			"note: checkpoint 3 is older than the job's latest, 7: the output its sinks committed after checkpoint 3 is published again, as new output (restore from 7 not to repeat it)"},
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7, Sinks: sinks}, "7", ""},
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7, Sinks: sinks}, "other/3", ""},
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7}, "3", ""},
		{control.JobStatus{Name: "wc", LatestCheckpoint: 7, Sinks: sinks}, "x", ""},
	} {
		if got := olderNote(c.st, c.from); got != c.want {
			t.Errorf("olderNote(%d, %q) = %q, want %q", c.st.LatestCheckpoint, c.from, got, c.want)
		}
	}
}

// weir run says once what lets an aligned checkpoint's barriers past the
// data backpressure queues (a trial's aligned checkpoints took 9–14 s
// behind a backlog, and the checkpoint line named only the start delay),
// and nothing of a checkpoint that waited on a sink's commits, of a quick
// one, or of a job that turns unaligned already.
func TestRunSaysOnceThatBarriersQueue(t *testing.T) {
	ck := func(id int64, phase string, wait, total time.Duration) control.CheckpointInfo {
		m := map[string]int64{control.MetricStartDelayNanos: int64(wait)}
		switch phase {
		case control.PhaseAlignment:
			m = map[string]int64{control.MetricAlignmentNanos: int64(wait)}
		case control.PhaseCommitWait:
			m[control.MetricCommitWaitNanos] = int64(wait)
		case control.PhaseBlocked:
			m[control.MetricOutputBlockedNanos] = int64(wait)
		}
		return control.CheckpointInfo{ID: id, Status: control.CheckpointCompleted, Duration: total,
			Tasks:   map[string]map[string]int64{"sum-0": m, "lines-0": {}},
			Inputs:  map[string][]string{"lines": nil, "sum": {"lines"}, "out": {"sum"}},
			Outputs: map[string][]control.OutputPort{"lines": {{To: "sum"}}, "sum": {{To: "out", Forward: true}}}}
	}
	aligned := control.JobStatus{Name: "j", State: control.JobRunning, CheckpointMode: jobspec.ModeExactlyOnce}
	timeout := aligned
	timeout.AlignedTimeout = time.Second
	unaligned := aligned
	unaligned.CheckpointMode = jobspec.ModeUnaligned
	for _, c := range []struct {
		name string
		st   control.JobStatus
		c    control.CheckpointInfo
		want string // a regexp; "" for nothing
	}{
		{"quick", aligned, ck(1, control.PhaseStartDelay, 300*time.Millisecond, 400*time.Millisecond), ""},
		{"snapshot", aligned, ck(2, control.PhaseStartDelay, 2*time.Second, 9*time.Second), ""},
		{"commit wait", aligned, ck(3, control.PhaseCommitWait, 8*time.Second, 9*time.Second), ""},
		{"aligned timeout", timeout, ck(4, control.PhaseStartDelay, 8*time.Second, 9*time.Second), ""},
		{"unaligned", unaligned, ck(5, control.PhaseStartDelay, 8*time.Second, 9*time.Second), ""},
		{"queued", aligned, ck(6, control.PhaseStartDelay, 8800*time.Millisecond, 9200*time.Millisecond),
			`^checkpoint 6 waited 8.8s of its 9.2s for its barriers at sum-0, queued behind the data in flight to it: .*checkpointing.mode: unaligned.*still exactly-once; a shorter channels.debloat \(1s now\) or a smaller channels.buffer bounds them\n$`},
		{"said once", aligned, ck(7, control.PhaseAlignment, 8*time.Second, 9*time.Second), ""},
		{"blocked", aligned, ck(8, control.PhaseBlocked, 8800*time.Millisecond, 9200*time.Millisecond),
			`^checkpoint 8 waited 8.8s of its 9.2s for its barriers at sum-0, queued while it was blocked sending its output \(out-0 is slower than its input\): `},
	} {
		var notes statusNotes
		if c.name == "said once" {
			notes.queued = true
		}
		got := notes.slowBarriers(c.st, c.c)
		if c.want == "" && got != "" || c.want != "" && !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("%s: said %q, want it to match %q", c.name, got, c.want)
		}
	}
	var notes statusNotes
	if got := notes.slowBarriers(aligned, ck(8, control.PhaseAlignment, 3*time.Second, 4*time.Second)); !strings.Contains(got, "at sum-0, aligning its inputs") {
		t.Errorf("alignment: said %q", got)
	}
	if got := notes.slowBarriers(aligned, ck(9, control.PhaseAlignment, 3*time.Second, 4*time.Second)); got != "" {
		t.Errorf("said again: %q", got)
	}
}

// A job whose operator failed in weir_restore, not restarted (a new build
// that does not read the state an older one wrote), is told what to do: a
// build that reads it, restored from the same checkpoint (a trial's
// upgrade said only the failure).
func TestJobStatusSaysHowToGoOnAfterAFailedRestore(t *testing.T) {
	reason := "task dedup-1 failed: restore dedup/chk-32/dedup-1: operator dedup[1]: weir_restore: dedup v2: unknown state version 1"
	st := control.JobStatus{Name: "dedup", State: control.JobFailed, Attempt: 4, LatestCheckpoint: 32,
		Reason:   reason + " (not restarted: it would fail the same way again)",
		Failures: []control.Failure{{Attempt: 4, Reason: reason, Kind: control.FailureOperatorError}}}
	var b strings.Builder
	printInARow(&b, st, trapRemedy(""))
	want := "the operator failed restoring the checkpoint's state (weir_restore), as it would at every restart: the build does not read the state the checkpoint holds\n" +
		"to go on: give the operator a build that reads the checkpoint's state (a new version that also reads the layout the old one wrote; weir exec NEW.wasm -restore F tries one on F, the task's snapshot JOB/chk-ID/TASK in the checkpoint store), " +
		"then weir job restore dedup -from 32 -spec SPEC, the spec's module: naming that build (its state and output carry over)\n"
	if b.String() != want {
		t.Errorf("said\n%s\nwant\n%s", b.String(), want)
	}
	var notes statusNotes
	notes.remedy = trapRemedy("")
	if got := notes.news(st); got != want {
		t.Errorf("weir run said\n%s\nwant\n%s", got, want)
	}
}

// A task whose worker has gone silent shows it beside the worker, and a
// line says that its figures are the last report's; weir worker ls shows
// when each worker was last heard from and says which went silent. A
// trial's killed worker looked healthy, with its old rates, until its
// heartbeat timeout passed.
func TestSilentWorkersAreSaid(t *testing.T) {
	var b bytes.Buffer
	printTasks(&b, []control.TaskStatus{
		{Task: "in-0", Worker: "w1", InRate: 1315, WorkerSilent: 3240 * time.Millisecond},
		{Task: "sum-0", Worker: "w1", WorkerSilent: 3240 * time.Millisecond},
		{Task: "out-0", Worker: "w2"},
	})
	for _, want := range []string{
		`(?m)^in-0 +w1 \(silent 3.2s\) +0 +0 +1315 `,
		`(?m)^out-0 +w2 +0 `,
		`(?m)^worker w1 has not been heard from lately: its tasks' figures are from its last report`,
	} {
		if !regexp.MustCompile(want).MatchString(b.String()) {
			t.Errorf("tasks:\n%s\nwant a match of %s", b.String(), want)
		}
	}
	if n := strings.Count(b.String(), "has not been heard from"); n != 1 {
		t.Errorf("said %d times:\n%s", n, b.String())
	}
	b.Reset()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	printWorkers(&b, []control.WorkerStatus{
		{ID: "w1", Host: "h", Used: 2, LastHeartbeat: now.Add(-3240 * time.Millisecond)},
		{ID: "w2", Host: "h", Used: 1, Slots: 4, LastHeartbeat: now.Add(-400 * time.Millisecond)},
		{ID: "old", Host: "h"},
	}, now)
	want := "WORKER  HOST  STATE  SLOTS  LAST HEARD\n" +
		"w1      h     ready  2/-    3.2s ago\n" +
		"w2      h     ready  1/4    400ms ago\n" +
		"old     h     ready  0/-    -\n" +
		"worker w1 has not been heard from for 3.2s (stopped, or cut off?): the coordinator declares it lost once its heartbeat timeout passes, and moves its tasks\n"
	if b.String() != want {
		t.Errorf("workers:\n%s\nwant\n%s", b.String(), want)
	}
	// A drained worker that stopped stays listed while it is cordoned.
	b.Reset()
	printWorkers(&b, []control.WorkerStatus{
		{ID: "w2", Host: "h", Used: 1, Slots: 4, LastHeartbeat: now.Add(-400 * time.Millisecond)},
		{ID: "w1", Cordoned: true, Down: true},
	}, now)
	want = "WORKER  HOST  STATE  SLOTS  LAST HEARD\n" +
		"w2      h     ready  1/4    400ms ago\n" +
		"w1      -     down   -      -\n" +
		"worker w1 is cordoned and not live: it gets no task when it comes back until weir worker uncordon w1\n"
	if b.String() != want {
		t.Errorf("workers:\n%s\nwant\n%s", b.String(), want)
	}
	// Memory budgets and caps: what a refusal's "w2 256MiB of 256MiB"
	// is checked against.
	b.Reset()
	printWorkers(&b, []control.WorkerStatus{
		{ID: "w1", Host: "h", Used: 3, Slots: 8, MemoryUsed: 640 << 20, Caps: control.Caps{Memory: 1 << 30, MaxTaskMemory: 256 << 20},
			LastHeartbeat: now.Add(-400 * time.Millisecond)},
		{ID: "w2", Host: "h", Used: 1, MemoryUsed: 64 << 20, Caps: control.Caps{MaxCallTimeout: 10 * time.Second, MaxLogRate: 50},
			LastHeartbeat: now.Add(-400 * time.Millisecond)},
		{ID: "w3", Host: "h", Caps: control.Caps{Memory: 256 << 20}, LastHeartbeat: now.Add(-400 * time.Millisecond)},
		{ID: "w4", Host: "h", LastHeartbeat: now.Add(-400 * time.Millisecond)},
	}, now)
	want = "WORKER  HOST  STATE  SLOTS  MEMORY       CAPS                LAST HEARD\n" +
		"w1      h     ready  3/8    640MiB/1GiB  task 256MiB         400ms ago\n" +
		"w2      h     ready  1/-    64MiB/-      call 10s, log 50/s  400ms ago\n" +
		"w3      h     ready  0/-    0/256MiB     -                   400ms ago\n" +
		"w4      h     ready  0/-    0/-          -                   400ms ago\n"
	if b.String() != want {
		t.Errorf("workers:\n%s\nwant\n%s", b.String(), want)
	}
}

// The barriers of a pipeline whose operator is slow queue before that
// operator, and come late to every task after it: weir run names the
// operator's task, not the sink, which has the longest start delay but
// is idle (a trial was sent to the sink) — from the topology the
// coordinator sends, or else from the spec.
func TestSlowBarriersNamesWhereBarriersQueued(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: ev, kind: jetstream, stream: EV}]
operators: [{name: win, module: w@1, parallelism: 2, inputs: [{from: ev, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: win}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := func(ms int64) map[string]int64 { return map[string]int64{control.MetricStartDelayNanos: ms * 1e6} }
	c := control.CheckpointInfo{ID: 1, Status: control.CheckpointCompleted, Duration: 16 * time.Second,
		Tasks: map[string]map[string]int64{"ev-0": d(5), "win-0": d(11000), "win-1": d(9000), "out-0": d(12000)}}
	st := control.JobStatus{Name: "j", State: control.JobRunning, CheckpointMode: jobspec.ModeExactlyOnce}
	for _, c := range []struct {
		name  string
		notes statusNotes
		c     control.CheckpointInfo
	}{
		{"spec", statusNotes{spec: spec}, c},
		{"sent", statusNotes{}, func() control.CheckpointInfo { c := c; c.Inputs = control.Topology(spec); return c }()},
	} {
		if got := c.notes.slowBarriers(st, c.c); !strings.Contains(got, "waited 10.995s of its 16s for its barriers at win-0, queued behind the data in flight to it") {
			t.Errorf("%s: said %q", c.name, got)
		}
	}
	var notes statusNotes
	if got := notes.slowBarriers(st, c); got != "" {
		t.Errorf("without a topology: %q", got)
	}
}

// A checkpoint a failover, a stop or a newer one cut is listed and
// printed as aborted, not failed: a trial's weir run printed six
// "failed" lines where the status counted three failures.
func TestAbortedCheckpointsAreNotFailures(t *testing.T) {
	cps := []control.CheckpointInfo{
		{ID: 3, Status: control.CheckpointFailed, Aborted: true, Reason: "job canceled"},
		{ID: 2, Status: control.CheckpointFailed, Reason: "expired after 6s"},
	}
	var b bytes.Buffer
	printCheckpoints(&b, cps)
	for _, want := range []string{`(?m)^3 +checkpoint +aborted +.*job canceled$`, `(?m)^2 +checkpoint +failed +.*expired after 6s$`} {
		if !regexp.MustCompile(want).MatchString(b.String()) {
			t.Errorf("checkpoint ls:\n%s\nwant a match of %s", b.String(), want)
		}
	}
	b.Reset()
	printCheckpointLine(&b, cps[0])
	printCheckpointLine(&b, cps[1])
	if want := "checkpoint 3 aborted: job canceled\ncheckpoint 2 failed: expired after 6s\n"; b.String() != want {
		t.Errorf("weir run printed\n%s\nwant\n%s", b.String(), want)
	}
}

// A savepoint or stop that expired says what to change (a Flink-user
// trial's stop said only the expiry); other failures are as they were.
func TestSavepointAdvice(t *testing.T) {
	err := savepointAdvice(errors.New("savepoint failed: checkpoint 3: expired after 6s; no snapshot from win-0 (the job keeps running)"))
	if first, rest, _ := strings.Cut(err.Error(), "\n"); first != "savepoint failed: checkpoint 3: expired after 6s; no snapshot from win-0 (the job keeps running)" ||
		!strings.HasPrefix(rest, "a savepoint is always aligned: its barriers queue behind the data in flight to a busy task") {
		t.Errorf("advice: %q", err)
	}
	if err := savepointAdvice(errors.New("job x already failed")); err.Error() != "job x already failed" {
		t.Errorf("other failure: %q", err)
	}
}

// weir job status shows an operator's memory beside its limit (one near
// its limit shows before it fails), and, in UNREAD, the records a task's
// input channels hold (a Flink-user trial's job was 10 s behind with every
// UNREAD at 0: the backlog sat in the channels before a slow operator).
func TestJobStatusShowsOperatorMemory(t *testing.T) {
	var b bytes.Buffer
	printTasks(&b, []control.TaskStatus{
		{Task: "op-0", Worker: "w1", Stats: control.TaskStats{MemoryBytes: 3 << 20, MemoryLimit: 64 << 20}},
		{Task: "in-0", Worker: "w1"},
		{Task: "win-0", Worker: "w1", Stats: control.TaskStats{QueuedRecords: 30000}},
		// One unit, the limit's: a trial read 164352KiB/256MiB.
		{Task: "big-0", Worker: "w1", Stats: control.TaskStats{MemoryBytes: 164352 << 10, MemoryLimit: 256 << 20}},
	})
	for _, want := range []string{`(?m)^op-0 +w1 .* 3MiB/64MiB +-$`, `(?m)^big-0 +w1 .* 160.5MiB/256MiB +-$`, `(?m)^in-0 +w1 .* 0 +- +-$`, `(?m)^win-0 +w1 .* - +30000 queued$`} {
		if !regexp.MustCompile(want).MatchString(b.String()) {
			t.Errorf("tasks:\n%s\nwant a match of %s", b.String(), want)
		}
	}
}
