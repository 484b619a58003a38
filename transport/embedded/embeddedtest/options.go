package embeddedtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// FromOptions starts a real nats-server configured by opts (auth, TLS,
// JetStream or none: what embedded.Config does not offer), on a random
// loopback port, silent, shut down when t ends, and returns it once it
// takes connections.
func FromOptions(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}
