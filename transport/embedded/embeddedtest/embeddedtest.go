// Package embeddedtest starts a real embedded nats-server with JetStream for
// a test, the way net/http/httptest starts an HTTP server: on a random
// loopback port, with its store in the test's temporary directory, shut
// down when the test ends.
package embeddedtest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
)

// Start starts a server configured by cfg (DataDir defaults to a temporary
// directory) and connects to it. Both are closed when t ends.
func Start(t testing.TB, cfg embedded.Config) (*embedded.Server, *nats.Conn) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect to embedded nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
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
	nc := Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
