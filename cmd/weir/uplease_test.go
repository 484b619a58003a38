package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
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

// A weir up whose lease is lost to nobody — cut off past the lease's TTL
// while its key went (a quorum loss longer than the TTL after a renewal
// stored with its answer lost reads the same) — does not exit: it says
// so in one line, campaigns for the lease again as it started, takes it
// and serves on, its in-process worker with it.
func TestUpCampaignsAgainWhenItsLeaseIsLostToNobody(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	kv, _, err := lease.Open(ctx, js, 0, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	out, stop, done := upOn(t, ctx, quiet.URL())
	out.await(t, ctx, done, "holds the coordinator lease of this NATS")
	first, ok := lease.Current(ctx, kv)
	if !ok {
		t.Fatal("no lease held once weir up is up")
	}
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
	if err := kv.Delete(ctx, "lease"); err != nil {
		t.Fatal(err)
	}
	quiet.Resume()
	out.await(t, ctx, done, "holds the coordinator lease of this NATS again (bucket weir_coordinator), and resumed its jobs")
	errs := out.errb.String()
	if n := strings.Count(errs, "no other coordinator is known to hold the lease, so it campaigns for it again as weir up starts"); n != 1 {
		t.Errorf("%d lines say the coordinator campaigns again; want 1:\n%s", n, errs)
	}
	now, ok := lease.Current(ctx, kv)
	if !ok || now.ID == first.ID || !strings.Contains(out.out.String(), "coordinator "+now.ID+" holds the coordinator lease of this NATS again") {
		t.Errorf("lease held by %v (%v) after the comeback, first by %s; weir up said:\n%s", now, ok, first.ID, out.out.String())
	}
	api := control.NewAPIClient(nc, "")
	for {
		ws, err := api.Workers(ctx)
		if err == nil && len(ws) == 1 && !ws[0].Down {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("weir up exited %d after its comeback: %s", code, out.errb.String())
		case <-ctx.Done():
			t.Fatalf("the restarted coordinator does not list weir up's worker: %v %v", ws, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Errorf("weir up exited %d: %s", code, out.errb.String())
	}
	t.Logf("stderr:\n%s", out.errb.String())
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
