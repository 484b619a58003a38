package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A weir up cut off from its NATS for the coordinator lease's TTL lets
// its lease lapse and says so, but goes on trying: nobody else may hold
// it. Once another coordinator took the lease over and weir up hears NATS
// again, it exits 1 with one line naming the one that holds it, not going
// on as a second coordinator beside it.
func TestUpExitsWhenAnotherTookItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	// A bucket with a short TTL: weir up keeps the TTL of one that exists.
	nc, js := embeddedtest.Connect(t, srv)
	kv, ttl, err := lease.Open(ctx, js, 0, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	out, _, done := upOn(t, ctx, quiet.URL())
	out.await(t, ctx, done, "holds the coordinator lease of this NATS")
	quiet.Silence()
	for !strings.Contains(out.errb.String(), "coordinator lease lapsed: not renewed for ") {
		select {
		case code := <-done:
			t.Fatalf("weir up exited %d as its lease lapsed: %s", code, out.errb.String())
		case <-ctx.Done():
			t.Fatalf("no lapse logged: %s", out.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Another takes the lease once it expired.
	b, err := lease.Take(ctx, lease.Config{KV: kv, TTL: ttl, Conn: nc, Holder: lease.Holder{ID: "other", Host: "elsewhere", PID: 9}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	select {
	case code := <-done:
		t.Fatalf("weir up exited %d before it heard NATS again: %s", code, out.errb.String())
	default:
	}
	quiet.Resume()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		t.Fatal("weir up went on beside the coordinator that holds its lease")
	}
	errs := out.errb.String()
	if code != 1 || !strings.Contains(errs, "weir: up: coordinator lease lost: coordinator other on elsewhere (pid 9, since ") ||
		!strings.Contains(errs, "this coordinator stopped, leaving its jobs to the one that holds the lease\n") {
		t.Errorf("weir up exited %d with:\n%s", code, errs)
	}
	t.Logf("stderr:\n%s", errs)
}

// weir up -nats started before its server (a cluster restarted whole,
// weir up first) waits for it, and for JetStream and its buckets, logging
// each try as weir worker does, and comes up once the server is there.
func TestUpWaitsForItsServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := natsconntest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	out, stop, done := upOn(t, ctx, url)
	for strings.Count(out.errb.String(), `msg="NATS not reachable; retrying"`) < 2 {
		select {
		case code := <-done:
			t.Fatalf("weir up exited %d without a server: %s", code, out.errb.String())
		case <-ctx.Done():
			t.Fatalf("no retries logged: %s", out.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	embeddedtest.Server(t, embedded.Config{Port: port})
	out.await(t, ctx, done, "weir is up: NATS on "+url)
	stop()
	if code := <-done; code != 0 {
		t.Errorf("weir up exited %d: %s", code, out.errb.String())
	}
}
