package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A weir up cut off from its NATS for the coordinator lease's TTL has
// lost its lease: it exits 1 with one line that says so and for how long
// the lease was not renewed, not going on as a second coordinator beside
// the one that takes it over.
func TestUpExitsWhenItLosesItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	// A bucket with a short TTL: weir up keeps the TTL of one that exists.
	_, js := embeddedtest.Connect(t, srv)
	if _, _, err := lease.Open(ctx, js, 0, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	out, _, done := upOn(t, ctx, quiet.URL())
	out.await(t, ctx, done, "holds the coordinator lease of this NATS")
	quiet.Silence()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("weir up went on after it lost its lease")
	}
	errs := out.errb.String()
	if code != 1 || !strings.Contains(errs, "weir: up: coordinator lease lost: not renewed for ") ||
		!strings.Contains(errs, "this coordinator stopped, leaving its jobs to the one that takes the lease\n") {
		t.Errorf("weir up exited %d with:\n%s", code, errs)
	}
	t.Logf("stderr:\n%s", errs)
}
