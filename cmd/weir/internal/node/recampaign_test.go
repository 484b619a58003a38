package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A coordinator whose lease is lost to nobody — silenced past its TTL
// while its key was deleted, which it cannot tell from a renewal of its
// own stored with its answer lost and expired since, nor from another's
// take — is restarted in its process (RestartCoordinator): it campaigns
// for the lease as at Start, takes it, loads its job from storage and
// resumes it, which completes a checkpoint again. Its worker ran on
// throughout.
func TestCoordinatorLostToNobodyComesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	url := srv.ClientURL()
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Workers: 1, WorkerID: "w1", DataDir: t.TempDir(),
		CacheDir: t.TempDir(), HeartbeatInterval: 100 * time.Millisecond, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustStream(t, ctx, w.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, w.JS, "OUT", "out")

	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(url, "nats://"))
	a, err := Start(ctx, coordinatorOn(t, quiet.URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mod, err := filepath.Abs("../../../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("comeback.yaml", []byte(fmt.Sprintf(`name: comeback
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: pass, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: pass}}]
checkpointing: {interval: 100ms}
`, mod)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, a, "comeback", "two checkpoints", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint >= 2
	})
	first, started := a.CoordinatorID(), a.JobManager()

	quiet.Silence()
	for !errors.Is(a.currentLease().Check(), lease.ErrLapsed) {
		select {
		case <-ctx.Done():
			t.Fatal("the silenced coordinator's lease did not lapse")
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Its key goes (written: a delete marker), as a key that expired
	// after a renewal stored with its answer lost leaves the bucket
	// written since the holder's last known renewal.
	kv, _, err := lease.Open(ctx, w.JS, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "lease"); err != nil {
		t.Fatal(err)
	}
	quiet.Resume()
	select {
	case <-a.Lost():
	case <-ctx.Done():
		t.Fatal("the coordinator, hearing NATS again, did not find its lease gone")
	}
	if h, ok := a.LeaseTakenBy(); ok {
		t.Fatalf("lease lost to nobody reads as taken by %s", h)
	}
	lost := a.LeaseErr()
	t.Logf("lost: %v", lost)
	if !errors.Is(lost, lease.ErrLost) || !strings.Contains(lost.Error(), "another coordinator may have held it meanwhile") {
		t.Errorf("loss %v; want the bucket written since", lost)
	}

	if err := a.RestartCoordinator(ctx); err != nil {
		t.Fatalf("restart of the coordinator that lost its lease to nobody: %v", err)
	}
	second := a.CoordinatorID()
	if second == "" || second == first {
		t.Errorf("coordinator after its restart holds the lease as %q (before: %q); want a new ID", second, first)
	}
	if h, ok := lease.Current(ctx, kv); !ok || h.ID != second {
		t.Errorf("lease held by %v (%v); want the restarted coordinator %s", h, ok, second)
	}
	if a.JobManager() == started {
		t.Errorf("the restarted coordinator runs the job manager Start started")
	}
	back := waitJob(t, ctx, a, "comeback", "the job loaded by the restarted coordinator", func(control.JobStatus) bool { return true })
	st := waitJob(t, ctx, a, "comeback", "a checkpoint completed after the comeback", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint > back.LatestCheckpoint
	})
	t.Logf("after the comeback: attempt %d, checkpoint %d (loaded at %d)", st.Attempt, st.LatestCheckpoint, back.LatestCheckpoint)
	if ws := w.Workers[0].Tasks(); ws == 0 {
		t.Errorf("worker w1 runs no task after the comeback")
	}
	select {
	case <-a.Lost():
		t.Errorf("the restarted coordinator lost its lease: %v", a.LeaseErr())
	default:
	}
}
