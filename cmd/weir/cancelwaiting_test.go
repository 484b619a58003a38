package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
)

// A job waiting for free slots — what weir up runs has no room for it —
// is canceled by weir run -cancel's interrupt, and stays canceled once
// room comes free; weir run -nats without -cancel says that it leaves the
// job waiting (not "keeps running"), and weir job cancel ends that one.
func TestRunCancelsAJobWaitingForSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// weir up whose one worker has room for one tap job (3 tasks).
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, WorkerSlots: 3,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	url := n.Server.ClientURL()
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	long := startFollowing(t, ctx, url, tapSpec(t, "long", mod, ""))
	long.running("long", 0, 1)

	waits := startFollowing(t, ctx, url, tapSpec(t, "waits", mod, ""))
	waits.said("job waits: created, waiting for free slots: ")
	waits.stop()
	if st, err := n.API.Job(ctx, "waits"); err != nil || st.State != control.JobCanceled {
		t.Fatalf("job waits after weir run -cancel was interrupted: %s, %v; want canceled\n%s", st.State, err, waits.out.String())
	}
	if strings.Contains(waits.errb.String(), "cancel") {
		t.Errorf("weir run's stderr: %s", waits.errb.String())
	}

	// Without -cancel weir run leaves it, saying it waits.
	left := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	rctx, rcancel := context.WithCancel(ctx)
	left.cancel = rcancel
	t.Cleanup(rcancel)
	go func() {
		left.done <- run(rctx, []string{"run", "-nats", url, "-idle", "0", tapSpec(t, "left", mod, "")},
			Stdio{In: strings.NewReader(""), Out: &left.out, Err: &left.errb})
	}()
	left.said("job left: created, waiting for free slots: ")
	left.stop()
	want := "job left is left created, not running yet: it starts once a worker has room for it; follow its output with: weir job output -nats " +
		url + " left; end it with: weir job cancel -nats " + url + " left\n"
	if !strings.HasSuffix(left.out.String(), want) {
		t.Errorf("weir run -nats interrupted, of a job that waits:\n%s\nwant it to end with %q", left.out.String(), want)
	}
	if st, err := n.API.Job(ctx, "left"); err != nil || st.State != control.JobCreated {
		t.Fatalf("job left after weir run -nats was interrupted: %s, %v; want created (waiting)", st.State, err)
	}
	code, out, errs := weir(t, "", "job", "cancel", "-nats", url, "left")
	if code != 0 || out != "job left: canceled\n" {
		t.Errorf("weir job cancel of a waiting job: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	// Room comes free: neither starts.
	long.stop()
	if st, err := n.API.Job(ctx, "long"); err != nil || st.State != control.JobCanceled {
		t.Fatalf("job long after weir run -cancel was interrupted: %s, %v; want canceled", st.State, err)
	}
	for _, job := range []string{"waits", "left"} {
		if st, err := n.API.Job(ctx, job); err != nil || st.State != control.JobCanceled || st.Attempt != 0 {
			t.Errorf("job %s once room came free: %s (attempt %d), %v; want canceled, never run", job, st.State, st.Attempt, err)
		}
	}
}

// weir run -cancel interrupted while its submit is on its way cancels
// the job: the coordinator may have taken it, and the job would start
// once room came free. Here a stand-in coordinator takes the submit and
// does not answer before the interrupt.
func TestRunCancelsAJobWhoseSubmitWasInterrupted(t *testing.T) {
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
	rctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	subs := control.Subjects{}
	var canceled atomic.Value
	for op, answer := range map[string]func(*nats.Msg){
		control.APIJob: func(m *nats.Msg) { _ = m.Respond([]byte(`{"error":"no job \"taken\"","code":"not_found"}`)) },
		control.APISubmit: func(*nats.Msg) {
			interrupt() // taken, unanswered
		},
		control.APICancel: func(m *nats.Msg) {
			var r struct{ Name string }
			_ = json.Unmarshal(m.Data, &r)
			canceled.Store(r.Name)
			_ = m.Respond([]byte(`{"result":{"name":"taken","state":"canceled"}}`))
		},
	} {
		sub, err := n.Conn.Subscribe(subs.API(op), answer)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	var out, errb syncBuffer
	code := run(rctx, []string{"run", "-nats", n.Server.ClientURL(), "-cancel", tapSpec(t, "taken", mod, "")},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 0 || !strings.HasSuffix(out.String(), "job taken: interrupted while it was submitted; canceled if the coordinator took it\n") {
		t.Errorf("weir run -cancel interrupted in its submit: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if got, _ := canceled.Load().(string); got != "taken" {
		t.Errorf("the coordinator was asked to cancel %q; want taken", got)
	}
}
