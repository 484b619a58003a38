package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// A job API handler waits for storage no longer than its caller waits for
// the answer: with the checkpoint store's streams on a three-server
// cluster that lost its quorum (no leader to answer a read), a submit
// restoring from a checkpoint is answered while its caller still listens,
// with why (the checkpoint store, the stream without a leader, how long
// the coordinator waited) — not left to the caller's own deadline while
// the handler waits out an election for 30 s. A listing of checkpoints,
// whose stored ones it cannot read, answers with the run's history while
// its caller waits, rather than after.
func TestHandlerGivesUpWithItsCaller(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 3)
	if err != nil {
		t.Fatal(err)
	}
	stay, stop := embeddedtest.QuorumLoss(t, ctx, js, "KV_"+storage.DefaultMetaBucket, servers)
	// The coordinator and its client on the server that stays: the
	// stream's replica there has no leader to turn to once the others go.
	nc, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	if meta, err = storage.NewKV(ctx, sjs, storage.DefaultMetaBucket, 0); err != nil {
		t.Fatal(err)
	}
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mgr := New(Options{NC: nc, Catalog: &checkpoint.Catalog{Meta: meta, State: dir}, HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second})
	mctx, mcancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(mctx, ready) }()
	t.Cleanup(func() { mcancel(); <-done })
	<-ready
	api := control.NewAPIClient(nc, "")
	// A job with no worker to run it waits for one: listed, with no
	// checkpoint of its own.
	if _, err := api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "waits", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	stop()
	noLeader(t, ctx, sjs, "KV_"+storage.DefaultMetaBucket)

	// The client waits 4 s: the handler gives up 0.4 s before.
	sctx, scancel := context.WithTimeout(ctx, 4*time.Second)
	_, err = api.Submit(sctx, control.SubmitRequest{Spec: spec(t, "restored", ""), RestoreFrom: "waits/3"})
	scancel()
	var re *control.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("submit restoring from a checkpoint in a store without a leader = %v; want the coordinator's answer before the caller's deadline", err)
	}
	if !errors.Is(err, control.ErrUnavailable) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "checkpoint waits/3") || !strings.Contains(err.Error(), "KV_"+storage.DefaultMetaBucket) ||
		!gaveUpWithin(err, 3600*time.Millisecond) {
		t.Errorf("submit = %q (%v); want one line, unavailable, naming the checkpoint, its stream and the wait", err, err)
	}
	t.Logf("submit: %v", err)

	// The read is sent again every 2 s; the answer to any try counts.
	api.ReadAttempt = 2 * time.Second
	lctx, lcancel := context.WithTimeout(ctx, 6*time.Second)
	cps, err := api.Checkpoints(lctx, "waits")
	lcancel()
	if err != nil || len(cps) != 0 {
		t.Errorf("checkpoints of waits with the store out of reach = %+v, %v; want the run's history (none)", cps, err)
	}
}

// gaveUpWithin reports whether err says how long the coordinator waited
// ("gave up after 3.5s"), a wait greater than 0 and no longer than most,
// the caller's wait less the handler's margin. (A request carries what
// its caller has left of its wait when it goes out: a loaded machine
// makes that shorter than the whole wait, never longer, and an exact
// match of the wait rounded to 100 ms could then fail.)
func gaveUpWithin(err error, most time.Duration) bool {
	_, rest, ok := strings.Cut(err.Error(), "gave up after ")
	if !ok {
		return false
	}
	s, _, _ := strings.Cut(rest, ",")
	d, perr := time.ParseDuration(s)
	return perr == nil && d > 0 && d <= most
}

// noLeader waits until stream has no leader as js's server sees it: a
// replica answers its info without one, or nobody does. (The server that
// stays after a quorum loss may have led the stream since the leader was
// looked up, until it steps down for want of a quorum.)
func noLeader(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) {
	t.Helper()
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		st, err := js.Stream(c, stream)
		cancel()
		if err != nil || st.CachedInfo().Cluster == nil || st.CachedInfo().Cluster.Leader == "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s keeps a leader (%s) after its quorum was lost", stream, st.CachedInfo().Cluster.Leader)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
