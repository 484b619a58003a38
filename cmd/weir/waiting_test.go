package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// weir job status says what it waits for once the coordinator has not
// answered for a second — as one whose NATS server fell silent does not
// until its connection moves to another server — and then prints the
// status. Here the coordinator answers only once the command said so.
func TestJobStatusSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, _ := embeddedtest.Connect(t, srv)
	var out, errb syncBuffer
	const said = "weir: waiting for the coordinator to answer the job's status (for up to 50s)"
	sub, err := nc.Subscribe(control.Subjects{}.API(control.APIJob), func(m *nats.Msg) {
		for !strings.Contains(errb.String(), said) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		_ = m.Respond([]byte(`{"result":{"name":"x","state":"running"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Without a deadline of its own, as from a shell: -wait bounds it.
	if code := run(context.Background(), []string{"job", "status", "-nats", srv.ClientURL(), "-wait", "50s", "x"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job status exited %d: %s", code, errb.String())
	}
	if got := errb.String(); strings.Count(got, said) != 1 {
		t.Errorf("stderr %q; want %q once", got, said)
	}
	if !strings.Contains(out.String(), "running") {
		t.Errorf("stdout %q; want the job's status", out.String())
	}
}

// A command whose NATS server does not answer (a frozen process) says
// that it waits for it, before it gives up on it, saying that the port
// took the connection and said nothing (not that nothing runs there).
func TestCommandSaysItWaitsForNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	quiet.Silence()
	var out, errb syncBuffer
	if code := run(ctx, []string{"job", "ls", "-nats", quiet.URL()}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code == 0 {
		t.Fatalf("weir job ls through a silent server exited 0: %s", out.String())
	}
	said := "weir: waiting for NATS at " + quiet.URL() + " to answer (a server that does not is left after 5s, for the next one listed; weir gives up within 7s)\n"
	gaveUp := "weir: nats connect " + quiet.URL() + ": the port accepted the connection and said nothing in 5s, nor in 2s after a NATS CONNECT: " +
		"a frozen NATS server, or not a NATS client port (NATS clients use port 4222 unless the server is configured otherwise)\n"
	if got := errb.String(); got != said+gaveUp {
		t.Errorf("stderr %q; want %q, then %q", got, said, gaveUp)
	}
}

// weir run -nats says that it waits for a server that does not answer, as
// the other commands do, before it gives up on it.
func TestRunSaysItWaitsForNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	quiet.Silence()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	if code := run(ctx, []string{"run", "-nats", quiet.URL(), tapSpec(t, "frozen", mod, "")},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code == 0 {
		t.Fatalf("weir run through a silent server exited 0: %s", out.String())
	}
	said := "weir: waiting for NATS at " + quiet.URL() + " to answer (a server that does not is left after 5s, for the next one listed; weir gives up within 7s)\n"
	if got := errb.String(); !strings.HasPrefix(got, said) || strings.Count(got, said) != 1 {
		t.Errorf("stderr %q; want %q once, first", got, said)
	}
}

// weir run says what it waits for once the coordinator has not answered
// its submit or a status poll for a second — once per wait: while the
// coordinator is away it polls again and again (each poll waits up to a
// read attempt, control.DefaultReadAttempt), and says so once, not for
// every poll. Here a stand-in for the coordinator answers the submit and
// the first poll only once weir run said it waits for them, the next poll
// at once, and then goes away.
func TestRunSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// NATS and the module registry, without a coordinator.
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	const (
		submitSaid = "weir: waiting for the coordinator to answer the submit (for up to 6s)"
		statusSaid = "weir: waiting for the coordinator to answer the job's status (for up to 6s)"
		running    = `{"result":{"name":"waits","state":"running","attempt":1}}`
	)
	// heldUntil answers m with data once weir run said what.
	heldUntil := func(m *nats.Msg, what, data string) {
		for !strings.Contains(errb.String(), what) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		_ = m.Respond([]byte(data))
	}
	subs := control.Subjects{}
	var polls atomic.Int32
	var submitted atomic.Bool
	away := make(chan struct{})
	var jobSub, cpSub *nats.Subscription
	submitSub, err := n.Conn.Subscribe(subs.API(control.APISubmit), func(m *nats.Msg) {
		submitted.Store(true)
		heldUntil(m, submitSaid, running)
	})
	if err == nil {
		jobSub, err = n.Conn.Subscribe(subs.API(control.APIJob), func(m *nats.Msg) {
			if !submitted.Load() {
				// What weir run asks before it builds: whether the name
				// ran before (checkRerun). It did not.
				_ = m.Respond([]byte(`{"error":"no job \"waits\"","code":"not_found"}`))
				return
			}
			switch polls.Add(1) {
			case 1:
				heldUntil(m, statusSaid, running)
			case 2:
				_ = m.Respond([]byte(running))
				close(away)
			}
		})
	}
	if err == nil {
		cpSub, err = n.Conn.Subscribe(subs.API(control.APICheckpoints), func(m *nats.Msg) { _ = m.Respond([]byte(`{"result":[]}`)) })
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-away
		for _, s := range []*nats.Subscription{submitSub, jobSub, cpSub} {
			_ = s.Unsubscribe()
		}
	}()
	// -wait 6s: weir run polls a coordinator that is away until nobody
	// listened for that long, two polls or more. Without a deadline of its
	// own, as from a shell: -wait bounds each request.
	code := run(context.Background(), []string{"run", "-nats", n.Server.ClientURL(), "-wait", "6s", "-idle", "0", tapSpec(t, "waits", mod, "")},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 1 || !strings.Contains(errb.String(), "no coordinator answers") {
		t.Fatalf("weir run with the coordinator gone: exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	if polls.Load() < 2 {
		t.Fatalf("weir run polled the job's status %d times; want 2 answered:\n%s\n%s", polls.Load(), out.String(), errb.String())
	}
	got := errb.String()
	if c := strings.Count(got, submitSaid); c != 1 {
		t.Errorf("stderr says %q %d times; want once:\n%s", submitSaid, c, got)
	}
	// Once for the first poll, once for the polls while it is away.
	if c := strings.Count(got, statusSaid); c != 2 {
		t.Errorf("stderr says %q %d times; want twice:\n%s", statusSaid, c, got)
	}
}

// weir job status says why an attempt number is missing: attempt 3 runs
// after attempt 1 failed, and attempt 2's deploy lost its worker (it was
// planned again at once, with no failure), one line naming the worker.
func TestJobStatusSaysWhyAnAttemptWasSkipped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, _ := embeddedtest.Connect(t, srv)
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	st := control.JobStatus{Name: "x", State: control.JobRunning, Attempt: 3, Restarts: 1,
		Failures: []control.Failure{{Time: at, Attempt: 1, Reason: "worker w1 lost"}},
		Skipped:  []control.SkippedAttempt{{Time: at, Attempt: 2, Worker: "w2", Reason: "its worker w2 was lost while it was deployed"}}}
	st.LastFailure = &st.Failures[0]
	data, err := json.Marshal(map[string]any{"result": st})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(control.Subjects{}.API(control.APIJob), func(m *nats.Msg) { _ = m.Respond(data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var out, errb syncBuffer
	if code := run(ctx, []string{"job", "status", "-nats", srv.ClientURL(), "x"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job status exited %d: %s", code, errb.String())
	}
	const said = "\nattempt 2 was not started: its worker w2 was lost while it was deployed\n"
	if got := out.String(); strings.Count(got, said) != 1 {
		t.Errorf("stdout:\n%s\nwant the line %q once", got, strings.TrimSpace(said))
	}
}

// weir job status says how a job's attempts came about when its restarts
// do not: "attempt 12, restarts 1" read as a contradiction, where 9
// attempts placed the job again after a worker was lost while deploying
// and 1 resumed it after a coordinator restart — no restarts, which are
// all RESTARTS counts. A job whose restarts explain its attempts gets no
// such line.
func TestJobStatusExplainsTheAttempts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, _ := embeddedtest.Connect(t, srv)
	status := func(st control.JobStatus) string {
		t.Helper()
		data, err := json.Marshal(map[string]any{"result": st})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := nc.Subscribe(control.Subjects{}.API(control.APIJob), func(m *nats.Msg) { _ = m.Respond(data) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		var out, errb syncBuffer
		if code := run(ctx, []string{"job", "status", "-nats", srv.ClientURL(), "x"},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("weir job status exited %d: %s", code, errb.String())
		}
		return out.String()
	}
	const said = "\n12 attempts: 1 restart after failures, 9 placements again after a worker was drained or stopped, or was lost or refused its tasks while deploying, " +
		"1 resume after a coordinator restart, 1 first deployment (RESTARTS counts only the restarts after failures)\n"
	if got := status(control.JobStatus{Name: "x", State: control.JobRunning, Attempt: 12, Restarts: 1, Replacements: 9, Resumes: 1}); !strings.Contains(got, said) {
		t.Errorf("stdout:\n%s\nwant the line %q", got, strings.TrimSpace(said))
	}
	if got := status(control.JobStatus{Name: "x", State: control.JobRunning, Attempt: 3, Restarts: 2}); strings.Contains(got, "attempts:") {
		t.Errorf("stdout:\n%s\nwant no line on the attempts: the restarts explain them", got)
	}
}

// weir run of a job that waits for a worker says so, and when -for ends
// before the job ran, that its -input was not published (a trial's run
// summed up "0 records out" and left the input file unpublished without
// a word).
func TestRunSaysTheJobWaitsForAWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, err := node.Start(ctx, node.Options{DataDir: filepath.Join(dir, "data"), Port: -1, Coordinator: true, Workers: 0,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	specPath, input := filepath.Join(dir, "tap.yaml"), filepath.Join(dir, "in.txt")
	if err := os.WriteFile(specPath, []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(input, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	code := run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-for", "2s", specPath, "-input", input},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("weir run exited %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"job tap: created, waiting for a worker to join (none is live)\n",
		"-input " + input + " not published: the job did not run within -for (created)\n",
	} {
		if strings.Count(out.String(), want) != 1 {
			t.Errorf("stdout\n%s\nwant once: %q", out.String(), want)
		}
	}
}

// weir run without -nats starts its own NATS also when $WEIR_NATS, the
// other commands' default, is set, and says so: a trial expected the run
// on the server $WEIR_NATS names.
func TestRunSaysItIgnoresWeirNATS(t *testing.T) {
	t.Setenv(natsEnv, "nats://127.0.0.1:9")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	specPath := filepath.Join(t.TempDir(), "tap.yaml")
	if err := os.WriteFile(specPath, []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	if code := run(ctx, []string{"run", "-for", "500ms", specPath}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir run exited %d: %s", code, errb.String())
	}
	want := `note: $WEIR_NATS is set (nats://127.0.0.1:9), but weir run starts its own NATS unless -nats says otherwise: weir run -nats "$WEIR_NATS" … runs the job there`
	if !strings.Contains(out.String(), want) {
		t.Errorf("stdout\n%s\nwant %q", out.String(), want)
	}
}
