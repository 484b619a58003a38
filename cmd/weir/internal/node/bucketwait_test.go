package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/storage"
)

// A coordinator started on a cluster restarted whole, a quorum not back
// yet (the checkpoint bucket's stream, and JetStream's meta layer, without
// a leader), waits for JetStream, its lease and its buckets, logging each
// try, and starts once they answer: it used to give up after one try
// ("kv weir_checkpoints: context deadline exceeded"), and later, when
// JetStream still answered for a moment after the quorum was lost, waited
// for its lease in silence until its context ended. A worker started
// then waits too, for JetStream and for the module registry's and the
// checkpoint store's buckets: it used to try them once and exit.
func TestCoordinatorWaitsForItsBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	// The buckets exist, as after a restart: made now, with three servers
	// of three down, they would be refused (insufficient resources).
	first := coordinatorOn(t, servers[0].ClientURL())
	first.Replicas = 3
	n, err := Start(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	stay, stop := embeddedtest.QuorumLoss(t, ctx, js, "KV_"+storage.DefaultMetaBucket, servers)
	restart := stop()
	logs := &lockedBuffer{}
	opts := coordinatorOn(t, stay.ClientURL())
	opts.NATS, opts.WaitForNATS, opts.Replicas = &natsconn.Options{URL: stay.ClientURL()}, true, 3
	opts.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	started := make(chan error, 1)
	go func() {
		var err error
		n, err = Start(ctx, opts)
		started <- err
	}()
	wlogs := &lockedBuffer{}
	var w *Node
	workerStarted := make(chan error, 1)
	go func() {
		var err error
		w, err = Start(ctx, Options{NATS: &natsconn.Options{URL: stay.ClientURL()}, WaitForNATS: true, Replicas: 3, Workers: 1, WorkerID: "w1",
			DataDir: t.TempDir(), CacheDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(wlogs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		workerStarted <- err
	}()
	waiting := func(log string) bool {
		return strings.Contains(log, "JetStream not available; retrying") || strings.Contains(log, "coordinator lease: its bucket's stream has no leader")
	}
	for !waiting(logs.String()) {
		select {
		case err := <-started:
			t.Fatalf("the coordinator's start returned without a quorum: %v\nlog:\n%s", err, logs.String())
		case err := <-workerStarted:
			t.Fatalf("the worker's start returned without a quorum: %v\nlog:\n%s", err, wlogs.String())
		case <-ctx.Done():
			t.Fatalf("no retry logged:\n%s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	restart()
	if err := <-started; err != nil {
		t.Fatalf("start once the quorum is back: %v\nlog:\n%s", err, logs.String())
	}
	defer n.Close()
	if err := <-workerStarted; err != nil {
		t.Fatalf("the worker's start once the quorum is back: %v\nlog:\n%s", err, wlogs.String())
	}
	defer w.Close()
	t.Logf("log:\n%s\nthe worker's:\n%s", logs.String(), wlogs.String())
}
