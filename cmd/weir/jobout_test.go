package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/sink"
)

// outputJob starts what weir up starts, creates the streams the job spec
// yaml names (as weir run does) and submits the job.
func outputJob(t *testing.T, ctx context.Context, yaml string) *node.Node {
	t.Helper()
	n := startUp(t, ctx)
	spec, err := jobspec.Parse("job.yaml", []byte(yaml), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, n.JS, spec, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	return n
}

// publishKeyed publishes the record key/value to JetStream on subject.
func publishKeyed(t *testing.T, ctx context.Context, js jetstream.JetStream, subject, key, value string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(sink.KeyHeader, key)
	m.Data = []byte(value)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// awaitState waits until job is in state.
func awaitState(t *testing.T, ctx context.Context, n *node.Node, job string, state control.JobState) {
	t.Helper()
	for {
		st, err := n.API.Job(ctx, job)
		if err == nil && st.State == state {
			return
		}
		if err == nil && st.State.Terminal() {
			t.Fatalf("job %s %s, not %s: %s", job, st.State, state, st.Reason)
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s never %s: %+v, %v", job, state, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startJobOutput starts weir job output with args; the test's end
// interrupts it. Its context has no deadline, as a command's does: ctx
// bounds the test's waits.
func startJobOutput(t *testing.T, ctx context.Context, args ...string) *following {
	t.Helper()
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	rctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		f.done <- run(rctx, append([]string{"job", "output"}, args...), Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	return f
}

// saidOnStderr waits until f printed what on stderr.
func (f *following) saidOnStderr(what string) {
	f.t.Helper()
	for !strings.Contains(f.errb.String(), what) {
		select {
		case code := <-f.done:
			f.t.Fatalf("exited %d before it said %q:\n%s\n%s", code, what, f.out.String(), f.errb.String())
		case <-f.ctx.Done():
			f.t.Fatalf("never said %q:\n%s\n%s", what, f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exited waits until f exits and returns its exit code.
func (f *following) exited() int {
	f.t.Helper()
	select {
	case code := <-f.done:
		return code
	case <-f.ctx.Done():
		f.t.Fatalf("did not exit:\n%s\n%s", f.out.String(), f.errb.String())
	}
	return 0
}

// jsJob is a job from JetStream stream IN to JetStream stream OUT,
// exactly-once; extra goes into its source's braces.
func jsJob(extra string) string {
	return `name: jo
sources: [{name: in, kind: jetstream, stream: IN` + extra + `}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: "out.{key}", input: {from: in}}]
checkpointing: {interval: 50ms}
`
}

// weir job output follows a job someone else runs: the records its sink
// stores from then on, not those stored before; it stops once the job
// ended, saying so.
func TestJobOutputFollowsARunningJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(""))
	url := n.Server.ClientURL()
	// -until-now of a stream that holds nothing yet: nothing, and done.
	if code, stdout, stderr := weir(t, "", "job", "output", "-nats", url, "-from-start", "-until-now", "jo"); code != 0 || stdout != "" ||
		stderr != "showing sink out: stream OUT holds nothing on out.>\n0 records shown: all the sinks' streams held on their subjects when weir job output started\n" {
		t.Errorf("-until-now of an empty stream: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	publishKeyed(t, ctx, n.JS, "in.x", "old", "before")
	awaitStored(t, ctx, n.JS, "OUT", 1)

	f := startJobOutput(t, ctx, "-nats", url, "jo")
	f.saidOnStderr("following sink out: stream OUT from sequence 2 (new records on out.>)\n")
	publishKeyed(t, ctx, n.JS, "in.x", "a", "1")
	publishKeyed(t, ctx, n.JS, "in.x", "b", "2")
	f.said("a\t1\nb\t2\n")
	// -for ends the following of a job that runs on, with nothing to say.
	if code, stdout, stderr := weir(t, "", "job", "output", "-nats", url, "-for", "100ms", "jo"); code != 0 || stdout != "" ||
		stderr != "following sink out: stream OUT from sequence 4 (new records on out.>)\n" {
		t.Errorf("-for: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// -until-now shows what the stream holds now and exits, while the
	// job runs on.
	if code, stdout, stderr := weir(t, "", "job", "output", "-nats", url, "-from-start", "-until-now", "jo"); code != 0 ||
		stdout != "old\tbefore\na\t1\nb\t2\n" ||
		stderr != "showing sink out: stream OUT from sequence 1 to 3 (all it holds on out.>: 3 records)\n3 records shown: all the sinks' streams held on their subjects when weir job output started\n" {
		t.Errorf("-until-now: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := weir(t, "", "job", "output", "-nats", url, "-until-now", "jo"); code != 2 ||
		!strings.Contains(stderr, "-until-now shows what the streams hold now: give -from-start or -last N with it") {
		t.Errorf("-until-now alone: exit %d, stderr %q", code, stderr)
	}
	if _, err := n.API.CancelJob(ctx, "jo"); err != nil {
		t.Fatal(err)
	}
	if code := f.exited(); code != 0 || f.out.String() != "a\t1\nb\t2\n" ||
		!strings.HasSuffix(f.errb.String(), "job jo canceled; 2 records shown\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, f.out.String(), f.errb.String())
	}
}

// weir job output of a job that weir job stop stopped says so, naming
// the savepoint, not that the job was canceled (as a stopped job is).
func TestJobOutputOfAStoppedJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(""))
	awaitState(t, ctx, n, "jo", control.JobRunning)
	f := startJobOutput(t, ctx, "-nats", n.Server.ClientURL(), "jo")
	f.saidOnStderr("following sink out: stream OUT from sequence 1 (new records on out.>)\n")
	publishKeyed(t, ctx, n.JS, "in.x", "a", "1")
	f.said("a\t1\n")
	sp, err := n.API.StopJob(ctx, "jo")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("job jo stopped with savepoint %d; 1 record shown\n", sp.ID)
	if code := f.exited(); code != 0 || f.out.String() != "a\t1\n" || !strings.HasSuffix(f.errb.String(), want) {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant it to end %q", code, f.out.String(), f.errb.String(), want)
	}
}

// How a job ended comes from its status's fields, not from its reason's
// words: a stopped job is one with StoppedWithSavepoint, and a canceled
// job whose reason reads as a stop's (an older coordinator's status, or a
// reason worded so) is canceled.
func TestHowEnded(t *testing.T) {
	for _, c := range []struct {
		st   control.JobStatus
		want string
	}{
		{control.JobStatus{State: control.JobCanceled, Reason: "stopped with savepoint 7", StoppedWithSavepoint: 7}, "stopped with savepoint 7"},
		{control.JobStatus{State: control.JobCanceled, Reason: "the stop's reason, worded otherwise", StoppedWithSavepoint: 7}, "stopped with savepoint 7"},
		{control.JobStatus{State: control.JobCanceled, Reason: "stopped with savepoint 7"}, "canceled"},
		{control.JobStatus{State: control.JobCanceled, Reason: "job canceled"}, "canceled"},
		{control.JobStatus{State: control.JobFailed, Reason: "trap"}, "failed (trap)"},
		{control.JobStatus{State: control.JobFinished}, "finished"},
	} {
		if got := howEnded(c.st); got != c.want {
			t.Errorf("howEnded(%s, %q, StoppedWithSavepoint %d) = %q; want %q", c.st.State, c.st.Reason, c.st.StoppedWithSavepoint, got, c.want)
		}
	}
}

// awaitStored waits until stream holds n messages.
func awaitStored(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, n uint64) {
	t.Helper()
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			if info, err := st.Info(ctx); err == nil && info.State.Msgs >= n {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s never held %d messages", stream, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A job that ends stops weir job output once all its sink's stream held
// then is printed: a bounded job's last records are not cut off.
func TestJobOutputEndsWithTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(", stop: 5"))
	f := startJobOutput(t, ctx, "-nats", n.Server.ClientURL(), "jo")
	f.saidOnStderr("following sink out: stream OUT from sequence 1 (new records on out.>)\n")
	for i := range 5 {
		publishKeyed(t, ctx, n.JS, "in.x", fmt.Sprint("k", i), fmt.Sprint(i))
	}
	if code := f.exited(); code != 0 || f.out.String() != "k0\t0\nk1\t1\nk2\t2\nk3\t3\nk4\t4\n" ||
		!strings.HasSuffix(f.errb.String(), "job jo finished; 5 records shown\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, f.out.String(), f.errb.String())
	}
}

// -from-start prints all the sink's stream holds, -last N its last N
// records on the sink's subjects (not another subject the stream
// stores); of a job that ended, weir job output then stops.
func TestJobOutputFromStartAndLast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>", "other"}, Duplicates: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("job.yaml", []byte(jsJob(", stop: 4")), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := createStreams(ctx, Stdio{Out: io.Discard}, n.JS, spec, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		publishKeyed(t, ctx, n.JS, "in.x", fmt.Sprint("k", i), fmt.Sprint(i))
	}
	awaitState(t, ctx, n, "jo", control.JobFinished)
	publishKeyed(t, ctx, n.JS, "other", "x", "not the sink's")
	url := n.Server.ClientURL()
	for _, c := range []struct {
		args           []string
		stdout, stderr string
	}{
		{[]string{"-from-start"}, "k0\t0\nk1\t1\nk2\t2\nk3\t3\n",
			"following sink out: stream OUT from sequence 1 (all it holds on out.>)\njob jo finished; 4 records shown\n"},
		{[]string{"-last", "2"}, "k2\t2\nk3\t3\n",
			"following sink out: stream OUT from sequence 3 (its last 2 records on out.>)\njob jo finished; 2 records shown\n"},
		{[]string{"-last", "9"}, "k0\t0\nk1\t1\nk2\t2\nk3\t3\n",
			"following sink out: stream OUT from sequence 1 (its last 9 records on out.>)\njob jo finished; 4 records shown\n"},
		// A job that ended: what it stored since its submit (nothing new
		// comes).
		{nil, "k0\t0\nk1\t1\nk2\t2\nk3\t3\n",
			"following sink out: stream OUT from sequence 1 (what job jo stored on out.> since its submit: 4 records; -from-start shows all the stream holds)\njob jo finished; 4 records shown\n"},
		{[]string{"-from-start", "-until-now"}, "k0\t0\nk1\t1\nk2\t2\nk3\t3\n",
			"showing sink out: stream OUT from sequence 1 to 5 (all it holds on out.>: 4 records)\n4 records shown: all the sinks' streams held on their subjects when weir job output started\n"},
		{[]string{"-from-start", "-show", "-1"}, "k0\t0\nk1\t1\nk2\t2\nk3\t3\n", // -1: all, as weir run's
			"following sink out: stream OUT from sequence 1 (all it holds on out.>)\njob jo finished; 4 records shown\n"},
		{[]string{"-last", "1", "-until-now"}, "k3\t3\n",
			"showing sink out: stream OUT from sequence 4 to 5 (its last record on out.>: 1 record)\n1 record shown: all the sinks' streams held on their subjects when weir job output started\n"},
	} {
		code, stdout, stderr := weir(t, "", append([]string{"job", "output", "-nats", url, "jo"}, c.args...)...)
		if code != 0 || stdout != c.stdout || stderr != c.stderr {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s\nwant stdout:\n%s\nstderr:\n%s", c.args, code, stdout, stderr, c.stdout, c.stderr)
		}
	}
}

// Two jobs whose exactly-once sinks write to the same stream and
// subjects: each one's output is its own records, told apart by the
// message ids the sinks give them, not all the subjects hold.
func TestJobOutputOfJobsSharingASinkStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(", stop: 2"))
	spec, err := jobspec.Parse("job.yaml", []byte(strings.Replace(jsJob(", stop: 2"), "name: jo", "name: jo2", 1)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	publishKeyed(t, ctx, n.JS, "in.x", "k0", "0")
	publishKeyed(t, ctx, n.JS, "in.x", "k1", "1")
	awaitState(t, ctx, n, "jo", control.JobFinished)
	awaitState(t, ctx, n, "jo2", control.JobFinished)
	for _, job := range []string{"jo", "jo2"} {
		code, stdout, stderr := weir(t, "", "job", "output", "-nats", n.Server.ClientURL(), "-from-start", job)
		if code != 0 || stdout != "k0\t0\nk1\t1\n" || !strings.HasSuffix(stderr, "job "+job+" finished; 2 records shown\n") {
			t.Errorf("%s: exit %d, stdout:\n%s\nstderr:\n%s", job, code, stdout, stderr)
		}
	}
}

// Of a job with several sinks, each line says its sink, as weir run's
// do; -sink picks one, whose lines then need no name.
func TestJobOutputTwoSinks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, `name: two
sources: [{name: in, kind: jetstream, stream: IN, stop: 2}]
sinks:
  - {name: a, kind: jetstream, stream: A, subject: "a.{key}", input: {from: in}}
  - {name: b, kind: jetstream, stream: B, subject: "b.{key}", input: {from: in}}
checkpointing: {interval: 50ms}
`)
	publishKeyed(t, ctx, n.JS, "in.x", "k", "1")
	publishKeyed(t, ctx, n.JS, "in.x", "k", "2")
	awaitState(t, ctx, n, "two", control.JobFinished)
	url := n.Server.ClientURL()
	code, stdout, stderr := weir(t, "", "job", "output", "-nats", url, "-from-start", "two")
	// The sinks' records interleave as they come: each sink's in order.
	var a, b []string
	for line := range strings.Lines(stdout) {
		switch {
		case strings.HasPrefix(line, "[a] "):
			a = append(a, line)
		case strings.HasPrefix(line, "[b] "):
			b = append(b, line)
		default:
			t.Errorf("line without its sink: %q", line)
		}
	}
	if code != 0 || strings.Join(a, "") != "[a] k\t1\n[a] k\t2\n" || strings.Join(b, "") != "[b] k\t1\n[b] k\t2\n" ||
		!strings.HasSuffix(stderr, "job two finished; 4 records shown\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = weir(t, "", "job", "output", "-nats", url, "-from-start", "-sink", "b", "two")
	if code != 0 || stdout != "k\t1\nk\t2\n" || stderr != "following sink b: stream B from sequence 1 (all it holds on b.>)\njob two finished; 2 records shown\n" {
		t.Errorf("-sink b: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// A core NATS sink's output is what it publishes while followed, and
// weir job output says so; -show N stops it after N records.
func TestJobOutputCoreSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1}, "")
	awaitState(t, ctx, n, "tap", control.JobRunning)
	f := startJobOutput(t, ctx, "-nats", n.Server.ClientURL(), "-show", "3", "tap")
	f.saidOnStderr("following sink out: core NATS subject out: its output is seen only while followed, no history\n")
	// Core NATS: a record published before the job's tasks subscribed is
	// lost; publish until weir job output has shown 3.
	for i := 0; ; i++ {
		select {
		case code := <-f.done:
			if code != 0 || f.out.String() != "x\nx\nx\n" {
				t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, f.out.String(), f.errb.String())
			}
			return
		case <-ctx.Done():
			t.Fatalf("weir job output -show 3 did not stop:\n%s\n%s", f.out.String(), f.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if err := n.Conn.Publish("in", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// What weir job output cannot follow it names, in one line, and exits 1:
// a job that does not exist, a sink the job does not have, a sink
// stream that was deleted.
func TestJobOutputErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := outputJob(t, ctx, jsJob(""))
	url := n.Server.ClientURL()
	check := func(want string, args ...string) {
		t.Helper()
		code, stdout, stderr := weir(t, "", append([]string{"job", "output", "-nats", url}, args...)...)
		if code != 1 || stdout != "" || stderr != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1, %q", args, code, stdout, stderr, want)
		}
	}
	check(`weir: no job "nosuch"`+"\n", "nosuch")
	check(`weir: job jo has no sink "x" (its sinks: out)`+"\n", "-sink", "x", "jo")
	f := startJobOutput(t, ctx, "-nats", url, "jo")
	f.saidOnStderr("following sink out: stream OUT from sequence 1 (new records on out.>)\n")
	if err := n.JS.DeleteStream(ctx, "OUT"); err != nil {
		t.Fatal(err)
	}
	if code, want := f.exited(), "weir: job jo: sink out: stream OUT was deleted: there is no more output to follow\n"; code != 1 || !strings.HasSuffix(f.errb.String(), want) {
		t.Errorf("stream deleted while followed: exit %d, stderr:\n%s\nwant exit 1, %q", code, f.errb.String(), want)
	}
	check("weir: job jo: sink out: stream OUT does not exist (deleted?): there is no output to follow\n", "jo")
}

// weir run -nats, leaving a job running, says how to follow its output
// from then on.
func TestRunPointsToJobOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := inputNode(t, ctx, jsJob(""))
	if err := os.WriteFile("in.txt", []byte("a\tx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url := n.Server.ClientURL()
	code, stdout, stderr := weir(t, "", "run", "-nats", url, "job.yaml", "-input", "in.txt")
	if want := "job jo keeps running; follow its output with: weir job output -nats " + url + " jo; stop it with: "; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("weir run exited %d, printed:\n%s\n%s\nwant a line with %q", code, stdout, stderr, want)
	}
}
