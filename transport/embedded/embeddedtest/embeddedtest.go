// Package embeddedtest starts a real embedded nats-server with JetStream for
// a test, the way net/http/httptest starts an HTTP server: on a random
// loopback port, with its store in the test's temporary directory, shut
// down when the test ends.
package embeddedtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
)

// Server starts a server configured by cfg (DataDir defaults to a
// temporary directory), shut down when t ends.
func Server(t testing.TB, cfg embedded.Config) *embedded.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Connect opens a connection to srv, closed when t ends, and its JetStream
// context.
func Connect(t testing.TB, srv *embedded.Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := srv.Connect(opts...)
	if err != nil {
		t.Fatalf("connect to embedded nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// Start starts a server configured by cfg and connects to it.
func Start(t testing.TB, cfg embedded.Config) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv := Server(t, cfg)
	nc, _ := Connect(t, srv)
	return srv, nc
}

// Conn starts a default server and returns a connection to it.
func Conn(t testing.TB) *nats.Conn {
	t.Helper()
	_, nc := Start(t, embedded.Config{})
	return nc
}

// JetStream starts a default server and returns a connection and its
// JetStream context.
func JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Connect(t, Server(t, embedded.Config{}))
}

// Restart restarts srv and waits until each of conns has noticed the
// restart and reconnected. Status alone cannot tell: right after the
// restart a connection may still report CONNECTED on its old socket, and a
// request written there is lost (its reply never comes).
func Restart(t testing.TB, srv *embedded.Server, conns ...*nats.Conn) {
	t.Helper()
	before := make([]uint64, len(conns))
	for i, nc := range conns {
		before[i] = nc.Stats().Reconnects
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, nc := range conns {
		for nc.Stats().Reconnects == before[i] || nc.Status() != nats.CONNECTED {
			if time.Now().After(deadline) {
				t.Fatalf("connection did not reconnect after the server restart: status %v", nc.Status())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// Kick cuts srv's connection to the client named name (nats.Name), as a
// network failure would; the client reconnects if it is set to.
func Kick(t testing.TB, srv *embedded.Server, name string) {
	t.Helper()
	cz, err := srv.NATSServer().Connz(&server.ConnzOptions{})
	if err != nil {
		t.Errorf("kick %s: %v", name, err)
		return
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			if err := srv.NATSServer().DisconnectClientByID(c.Cid); err != nil {
				t.Errorf("kick %s: %v", name, err)
			}
			return
		}
	}
	t.Errorf("kick %s: no client of that name", name)
}

// Delivered returns once every message that pub published so far (a
// JetStream request, say) has reached the channel and synchronous
// subscriptions of each of watchers, all connected to the same server as
// pub. A watcher's flush alone does not do it, even after the request
// was answered: nats-server v2.15.2 hands a JetStream API request to a
// queue of its own, whose workers answer it, before the publisher's read
// loop hands the watchers' connections their copies (the API's $JS.API.>
// import is matched first), so the answer, and the watcher's flush after
// it, can come before the copy. A server reads each
// connection's protocol in order: once it answers pub's PING, it has
// handed every message pub sent before to the subscribers' connections,
// and a watcher's PING is answered after them.
func Delivered(t testing.TB, pub *nats.Conn, watchers ...*nats.Conn) {
	t.Helper()
	if err := pub.Flush(); err != nil {
		t.Fatalf("flush the publisher: %v", err)
	}
	for _, w := range watchers {
		if err := w.Flush(); err != nil {
			t.Fatalf("flush a watcher: %v", err)
		}
	}
}
