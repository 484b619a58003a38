// Package embedded runs weir's default NATS server inside the process: a
// nats-server with JetStream on, its file store in a data directory,
// listening on loopback.
//
// Typical use:
//
//	srv, err := embedded.Start(embedded.Config{DataDir: dir})
//	...
//	defer srv.Shutdown()
//	nc, err := srv.Connect()
//
// Restarting on the same DataDir keeps every stream, consumer, KV bucket and
// object store. JetStream's file store flushes to disk every SyncInterval
// (the server default is two minutes): a power failure can lose writes that
// were acknowledged within that interval. Set SyncAlways for a checkpoint
// store that must survive power loss, at the cost of one fsync per write.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures an embedded server. The zero value with DataDir set is a
// loopback server on a random port with JetStream on.
type Config struct {
	// Host is the listen address; default "127.0.0.1".
	Host string
	// Port is the client port; 0 or -1 picks a random free port.
	Port int
	// DataDir holds the JetStream file store. Required when JetStream is on.
	DataDir string
	// NoJetStream turns JetStream off (core NATS only).
	NoJetStream bool
	// ServerName names the server; default "weir".
	ServerName string
	// SyncAlways makes JetStream fsync every write before acknowledging it
	// (nats-server's `sync_interval: always`). Use it for the checkpoint
	// store; it costs throughput.
	SyncAlways bool
	// SyncInterval overrides the file store's periodic fsync interval when
	// SyncAlways is off; 0 keeps the server default.
	SyncInterval time.Duration
	// MaxPayload overrides the largest message the server accepts (default
	// 1 MiB in nats-server).
	MaxPayload int32
	// MaxAtomicBatch is the most messages one atomic batch publish may
	// hold (nats-server's `max_batch_size`): 0 means DefaultMaxAtomicBatch,
	// a negative value keeps nats-server's own default (1000). Exactly-once
	// sinks commit a large checkpoint in batches of up to this many
	// messages, with two message ids per batch (its first and last
	// message) instead of one per message.
	MaxAtomicBatch int
	// ReadyTimeout bounds how long Start waits for the server to accept
	// connections; default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines; nil keeps the server quiet.
	Logger server.Logger
	// Debug and Trace enable the server's debug and protocol trace logging
	// when Logger is set.
	Debug, Trace bool
}

// DefaultMaxAtomicBatch is the embedded server's atomic batch limit. The
// server keeps every message id of a stream's duplicate window in memory
// and checks each new one against them, which gets slower the more it
// holds; two ids per batch of this size keep exactly-once output about as
// fast as plain publishing. Batches of 20 000 measured at least as fast as
// 100 000 and hold the server's commit (and its readers) shorter
// (docs/bench/transport.md).
const DefaultMaxAtomicBatch = 20_000

// ErrNotReady is wrapped by Start when the server did not come up in time.
var ErrNotReady = errors.New("embedded nats-server not ready")

// Server is a running embedded nats-server.
type Server struct {
	cfg Config
	ns  *server.Server
}

// Start starts a server and waits until it accepts client connections and,
// unless NoJetStream, JetStream is enabled.
func Start(cfg Config) (*Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = server.RANDOM_PORT
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "weir"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if !cfg.NoJetStream && cfg.DataDir == "" {
		return nil, errors.New("embedded nats-server: DataDir is required with JetStream on")
	}
	if cfg.MaxAtomicBatch == 0 {
		cfg.MaxAtomicBatch = DefaultMaxAtomicBatch
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		NoSigs:     true,
		NoLog:      cfg.Logger == nil,
		Debug:      cfg.Debug,
		Trace:      cfg.Trace,
		JetStream:  !cfg.NoJetStream,
		StoreDir:   cfg.DataDir,
		SyncAlways: cfg.SyncAlways,
		MaxPayload: cfg.MaxPayload,
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	}
	if cfg.MaxAtomicBatch > 0 {
		opts.JetStreamLimits.MaxBatchSize = cfg.MaxAtomicBatch
	}
	if cfg.Port > 0 {
		// nats-server reports a port it cannot listen on only in its log,
		// and then never gets ready: say so at once.
		l, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: %w", err)
		}
		l.Close()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: configure: %w", err)
	}
	if cfg.Logger != nil {
		ns.SetLoggerV2(cfg.Logger, cfg.Debug, cfg.Trace, false)
	}
	ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s:%d after %s: %w", cfg.Host, cfg.Port, cfg.ReadyTimeout, ErrNotReady)
	}
	if !cfg.NoJetStream && !ns.JetStreamEnabled() {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats-server: JetStream did not start in %s (is the data dir writable?): %w", cfg.DataDir, ErrNotReady)
	}
	return &Server{cfg: cfg, ns: ns}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Port is the client port the server listens on (the actual port when the
// configured one was random).
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return s.cfg.Port
}

// DataDir is the JetStream store directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// NATSServer exposes the underlying nats-server for monitoring calls.
func (s *Server) NATSServer() *server.Server { return s.ns }

// Connect opens a client connection over TCP to the server, with extra
// options appended to weir's defaults (a name and unlimited reconnects).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name("weir"), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect(s.ClientURL(), all...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats-server %s: %w", s.ClientURL(), err)
	}
	return nc, nil
}

// ConnectInProcess opens a client connection that bypasses TCP (an
// in-memory pipe). It cannot reconnect after Restart.
func (s *Server) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.Name("weir"), nats.InProcessServer(s.ns)}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("in-process connect to embedded nats-server: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once. A Restart after it listens on the same port.
func (s *Server) Shutdown() {
	// A server that stopped has no address: Restart finds the port here.
	s.cfg.Port = s.Port()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// Restart shuts the server down (unless Shutdown did) and starts a new one
// with the same configuration, data directory and port, so clients with
// reconnect enabled find it again. Streams survive in the data directory.
func (s *Server) Restart() error {
	s.Shutdown()
	cfg := s.cfg
	port := cfg.Port
	var err error
	// The OS may keep the port briefly; retry a few times.
	for i := 0; i < 50; i++ {
		var ns *Server
		ns, err = Start(cfg)
		if err == nil {
			s.ns = ns.ns
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart embedded nats-server on port %d: %w", port, err)
}
