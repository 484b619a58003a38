package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// tokenServer starts a nats-server with JetStream that takes only the
// token s3cret, and returns its client URL.
func tokenServer(t *testing.T) string {
	t.Helper()
	return embeddedtest.FromOptions(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Authorization: "s3cret"}).ClientURL()
}

// A command whose server refuses it says so, naming the server without
// the token the URL carried: not that the server cannot be reached
// (asking whether weir up runs), and never with the token in the clear.
func TestCommandRefusedNamesTheServerRedacted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := tokenServer(t)
	withToken := strings.Replace(url, "nats://", "nats://wrongtoken@", 1)
	var out, errb syncBuffer
	code := run(ctx, []string{"job", "ls", "-nats", withToken}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	got := errb.String()
	if code != 1 {
		t.Errorf("exit %d; want 1 (stderr %q)", code, got)
	}
	if strings.Contains(got, "wrongtoken") {
		t.Errorf("stderr %q shows the URL's token", got)
	}
	if strings.Contains(got, "cannot reach") || !strings.Contains(got, "Authorization Violation") {
		t.Errorf("stderr %q; want the server's refusal, not that it cannot be reached", got)
	}
}

// Every command pointed at a port that answers something other than NATS
// (here an HTTP server, as the monitoring port is) says so on one line
// naming the URL and exits 1 — weir worker and weir up -nats too, which
// would otherwise wait for a server: a wrong port does not fix itself.
// The CLI commands say first that they wait for the server, as they do for
// any that has not answered within a second.
func TestCommandsAtAPortThatIsNotNATS(t *testing.T) {
	url := natsconntest.HTTPPort(t)
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "wrongport", mod, "")
	said := "weir: nats connect " + url + `: answered "HTTP/1.1 400 Bad Request": an HTTP server (the NATS monitoring port?), not NATS; ` +
		"NATS clients use port 4222 unless the server is configured otherwise\n"
	notice := "weir: waiting for NATS at " + url + " to answer (a server that does not is left after 5s, for the next one listed; weir gives up within 7s)\n"
	for _, args := range [][]string{
		{"job", "ls", "-nats", url},
		{"module", "ls", "-nats", url},
		{"run", "-nats", url, spec},
		{"worker", "-nats", url, "-data", t.TempDir()},
		{"up", "-nats", url, "-data", t.TempDir()},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errb syncBuffer
			code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
			got := strings.TrimPrefix(errb.String(), notice)
			if code != 1 || got != said {
				t.Errorf("weir %s: exit %d, stderr %q; want 1 and %q", strings.Join(args, " "), code, errb.String(), said)
			}
		})
	}
}

// weir worker waits for a server that is down (connection refused) and
// joins it once it is up, on that port; one that said nothing (a frozen
// server) it waits for too, saying each time that the port accepted the
// connection and said nothing.
func TestWorkerWaitsForAServerThatIsDownOrSilent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := natsconntest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	w, wdone := &upOutput{}, make(chan int, 1)
	go func() {
		wdone <- run(wctx, []string{"worker", "-nats", url, "-id", "late", "-data", t.TempDir()},
			Stdio{In: strings.NewReader(""), Out: &w.out, Err: &w.errb})
	}()
	for strings.Count(w.errb.String(), `msg="NATS not reachable; retrying"`) < 2 {
		select {
		case code := <-wdone:
			t.Fatalf("weir worker exited %d without a server: %s", code, w.errb.String())
		case <-ctx.Done():
			t.Fatalf("no retries logged: %s", w.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	embeddedtest.Server(t, embedded.Config{Port: port})
	w.await(t, ctx, wdone, "worker late connected to "+url)
	stopWorker()
	<-wdone

	silent := natsconntest.SilentPort(t)
	sctx, stopSilent := context.WithCancel(ctx)
	defer stopSilent()
	s, sdone := &upOutput{}, make(chan int, 1)
	go func() {
		sdone <- run(sctx, []string{"worker", "-nats", silent, "-data", t.TempDir()}, Stdio{In: strings.NewReader(""), Out: &s.out, Err: &s.errb})
	}()
	said := "nats connect " + silent + ": the port accepted the connection and said nothing in 5s, nor in 2s after a NATS CONNECT"
	for !strings.Contains(s.errb.String(), said) {
		select {
		case code := <-sdone:
			t.Fatalf("weir worker at a silent port exited %d: %s", code, s.errb.String())
		case <-ctx.Done():
			t.Fatalf("no retry saying %q: %s", said, s.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopSilent()
	if code := <-sdone; code != 0 || !strings.Contains(s.errb.String(), "weir worker: stopped before it joined") {
		t.Errorf("interrupted at a silent port: exit %d, stderr %q; want 0 and that it stopped before it joined", code, s.errb.String())
	}
}

// The NATS auth settings may come from the environment (WEIR_NATS_USER,
// WEIR_NATS_PASSWORD, ...), which ps does not show as it shows flags; a
// flag given wins over its variable. The commands weir up prints name the
// auth flags given, never a secret's value, and leave out what the
// environment gives (the next command in the shell reads it there too).
func TestNATSAuthFromTheEnvironment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := embeddedtest.FromOptions(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Username: "weir", Password: "pw"}).ClientURL()
	t.Setenv("WEIR_NATS_USER", "weir")
	t.Setenv("WEIR_NATS_PASSWORD", "pw")
	var out, errb syncBuffer
	if code := run(ctx, []string{"stream", "ls", "-nats", url}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir stream ls with the password in the environment: exit %d, %s", code, errb.String())
	}
	errb = syncBuffer{}
	if code := run(ctx, []string{"stream", "ls", "-nats", url, "-password", "wrong"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 1 ||
		!strings.Contains(errb.String(), "Authorization Violation") {
		t.Errorf("weir stream ls -password wrong: exit %d, %q; want 1 and the server's refusal (the flag wins)", code, errb.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "submit a job with: weir run -nats " + url + " JOB.yaml"},
		{[]string{"-user", "weir", "-password", "pw"}, "submit a job with: weir run -nats " + url + " -user weir -password … JOB.yaml"},
	} {
		upCtx, stop := context.WithCancel(ctx)
		o, done := &upOutput{}, make(chan int, 1)
		args := append([]string{"up", "-nats", url, "-workers", "0", "-data", t.TempDir()}, c.args...)
		go func() {
			done <- run(upCtx, args, Stdio{In: strings.NewReader(""), Out: &o.out, Err: &o.errb})
		}()
		o.await(t, ctx, done, "submit a job with: ")
		stop()
		if code := <-done; code != 0 {
			t.Fatalf("weir %s exited %d: %s", strings.Join(args, " "), code, o.errb.String())
		}
		if got := o.out.String(); !strings.Contains(got, c.want) || strings.Contains(got, "pw") {
			t.Errorf("weir %s printed:\n%s\nwant %q, and never the password", strings.Join(args, " "), got, c.want)
		}
	}
}

// weir run on a server that is not there asks whether weir up runs, as
// weir job ls does: not the bare "no servers available".
func TestRunWhereNoServerIsAsksForWeirUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "nats://127.0.0.1:1"
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := tapSpec(t, "noserver", mod, "")
	for _, args := range [][]string{{"job", "ls", "-nats", url}, {"run", "-nats", url, spec}} {
		var out, errb syncBuffer
		code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		want := "weir: cannot reach NATS at " + url + " (is 'weir up' running?): "
		if got := errb.String(); code != 1 || !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 {
			t.Errorf("weir %s: exit %d, stderr %q; want 1 and one line starting %q", args[0], code, got, want)
		}
	}
}
