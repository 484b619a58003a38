package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	const said = "weir: waiting for the coordinator to answer job status (for up to 50s)"
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
// that it waits for it, before it gives up on it.
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
	said := "weir: waiting for NATS at " + quiet.URL() + " to answer (a server that does not is left after 5s, for the next one listed)\n"
	if got := errb.String(); !strings.HasPrefix(got, said) || !strings.Contains(got, "cannot reach NATS at "+quiet.URL()) {
		t.Errorf("stderr %q; want %q, then that NATS cannot be reached", got, said)
	}
}
