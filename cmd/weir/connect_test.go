package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
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
