package node

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/natsconn"
)

// TestStartOnPortInUse checks that a node whose port is taken fails at
// once, naming the port, and releases its data directory (TestStartFailsCleanly
// covers an unreachable NATS and a coordinator that fails to start).
func TestStartOnPortInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	port := l.Addr().(*net.TCPAddr).Port
	if _, err := Start(ctx, Options{DataDir: dir, Port: port, Coordinator: true, Workers: 1, Log: log}); err == nil {
		t.Fatal("a node started on a port in use")
	}
	// The failed start left the data directory free.
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, Log: log})
	if err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	n.Close()
}

// TestDataDirIsLocked checks that a second node on a data directory in
// use is refused (it would resume the first one's jobs and delete its
// checkpoints), and that the directory is free again once the first node
// closes.
func TestDataDirIsLocked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	first, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, Log: log})
	if err == nil || !strings.Contains(err.Error(), "data directory "+dir+" is in use by another weir process") {
		t.Fatalf("second node on %s: %v", dir, err)
	}
	// A worker of the same machine may share the directory for its spill
	// files and dir checkpoints.
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: first.Server.ClientURL()}, DataDir: dir,
		CheckpointStore: StoreDir, Workers: 1, WorkerID: "w2", Log: log})
	if err != nil {
		t.Fatalf("worker on the same directory: %v", err)
	}
	w.Close()
	first.Close()
	again, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, Log: log})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	again.Close()
}
