package natsconn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A server that falls silent without closing the connection (here a
// proxy that stops forwarding: a frozen process or a partition) is taken
// for gone after a few unanswered pings, and the connection moves to the
// next server it knows. With nats.go's default ping interval it stayed on
// the silent one for six minutes.
func TestSilentServerIsLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := startServer(t, &server.Options{})
	quiet := natsconntest.NewSilencer(t, ns.Addr().String())
	disc := make(chan error, 4)
	reco := make(chan struct{}, 4)
	nc, err := Connect(Options{
		URL:          quiet.URL() + "," + ns.ClientURL(),
		OnDisconnect: func(err error) { disc <- err },
		OnReconnect:  func() { reco <- struct{}{} },
	}, nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != quiet.URL() {
		t.Fatalf("connected to %s, want the silenced path %s first", got, quiet.URL())
	}
	quiet.Silence()
	select {
	case err := <-disc:
		if !errors.Is(err, nats.ErrStaleConnection) {
			t.Fatalf("disconnected with %v, want %v", err, nats.ErrStaleConnection)
		}
	case <-ctx.Done():
		t.Fatalf("the connection stayed on the silent server (%s)", ctx.Err())
	}
	select {
	case <-reco:
	case <-ctx.Done():
		t.Fatalf("no reconnect after leaving the silent server (%s)", ctx.Err())
	}
	if got := nc.ConnectedUrl(); got != ns.ClientURL() {
		t.Fatalf("reconnected to %s, want %s", got, ns.ClientURL())
	}
	// The connection works: a round trip through the server.
	sub, err := nc.SubscribeSync("ping")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("ping", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("message after the reconnect: %v", err)
	}
}

// A connection that is writing when its server falls silent leaves it
// as soon as one that is not: its writes block once the socket's buffers
// are full, and nats.go holds the connection's lock across a write, so
// that no ping is sent or counted until the write gives up. With
// nats.go's write deadline (a minute) the connection stayed that long on
// the silent server, and everything else that used it (a worker's
// heartbeats, its requests) waited as long.
func TestSilentServerIsLeftByAWriter(t *testing.T) {
	// Less than nats.go's default write deadline (a minute), well past
	// the few seconds a silent server is given.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := startServer(t, &server.Options{})
	quiet := natsconntest.NewSilencer(t, ns.Addr().String())
	disc := make(chan error, 4)
	nc, err := Connect(Options{
		URL:          quiet.URL() + "," + ns.ClientURL(),
		OnDisconnect: func(err error) { disc <- err },
	}, nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != quiet.URL() {
		t.Fatalf("connected to %s, want the silenced path %s first", got, quiet.URL())
	}
	quiet.Silence()
	// Publish until the connection is left: the socket's buffers fill
	// and a write blocks.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	written := make(chan struct{})
	go func() {
		defer close(written)
		data := make([]byte, 64<<10)
		for wctx.Err() == nil && nc.ConnectedUrl() == quiet.URL() {
			_ = nc.Publish("bulk", data)
		}
	}()
	select {
	case <-disc:
	case <-ctx.Done():
		t.Fatalf("a writing connection stayed on the silent server (%s)", ctx.Err())
	}
	wcancel()
	<-written
}
