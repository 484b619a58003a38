package node

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/natsconn"
)

// TestJobWaitsForAWorkerToJoin submits a job to a coordinator with no
// worker (weir up -workers 0): the job waits, created and saying why,
// instead of using up its restart attempts, and runs and checkpoints on
// the worker that joins later, with no restart.
func TestJobWaitsForAWorkerToJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, startWorker := upWithoutWorkers(t, ctx)
	spec, err := jobspec.Parse("late.yaml", []byte(`name: late
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 3}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, up, "late", "the job waiting for a worker", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && st.Reason == job.ReasonWaitingForWorker
	})

	startWorker("w1", StoreDir, 0)
	st := waitJob(t, ctx, up, "late", "a checkpoint", func(st control.JobStatus) bool {
		return st.LatestCheckpoint >= 1 || st.State.Terminal()
	})
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 {
		t.Fatalf("status %+v, want running its first attempt with no failure", st)
	}
}

// TestJobsWaitForFreeSlots runs two real workers with -slots: a job with
// more tasks than the first worker's slots waits, created and saying what
// is missing, and runs once the second joins, with no worker over its
// slots; a second job waits for the first's slots and runs once it ends.
// Neither wait costs a restart attempt.
func TestJobsWaitForFreeSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, startWorker := upWithoutWorkers(t, ctx)
	submit := func(name string) {
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in.`+name+`}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out.`+name+`, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 3}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	checkpointed := func(name string) control.JobStatus {
		t.Helper()
		st := waitJob(t, ctx, up, name, "a checkpoint", func(st control.JobStatus) bool {
			return st.LatestCheckpoint >= 1 || st.State.Terminal()
		})
		if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 {
			t.Fatalf("%s: status %+v, want running its first attempt with no failure", name, st)
		}
		return st
	}

	startWorker("w1", StoreDir, 2)
	submit("first")
	waitJob(t, ctx, up, "first", "the job waiting for more slots", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && st.Reason == job.ReasonTooBig+
			"needs 3 tasks, and the live workers have 2 slots in all (w1 2): lower the job's parallelism, or add workers or slots (weir worker -slots)"
	})
	startWorker("w2", StoreDir, 1)
	st := checkpointed("first")
	perWorker := map[string]int{}
	for _, w := range st.Assignment {
		perWorker[w]++
	}
	if want := map[string]int{"w1": 2, "w2": 1}; !maps.Equal(perWorker, want) {
		t.Errorf("first's tasks per worker %v, want %v (the slots)", perWorker, want)
	}

	submit("second")
	waitJob(t, ctx, up, "second", "the job waiting for the first's slots", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && st.Reason == job.ReasonWaitingForSlots+"needs 3 tasks, workers have 0 free (w1 0 of 2, w2 0 of 1)"
	})
	if _, err := up.API.CancelJob(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	checkpointed("second")
}

// TestRestartedCoordinatorKeepsTheSlotsOfItsJobs: a coordinator restarted
// beside a worker that stays up (weir up -workers 0 and a weir worker
// -slots 3) resumes its job in the slots it ran in; a job submitted while
// the resumed one gives the worker a heartbeat timeout to find the new
// coordinator waits for free slots instead of taking them.
func TestRestartedCoordinatorKeepsTheSlotsOfItsJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	w, err := Start(ctx, Options{DataDir: filepath.Join(dir, "worker"), Port: -1, Workers: 1, WorkerID: "w1", WorkerSlots: 3,
		CheckpointStore: StoreJetStream, HeartbeatInterval: 100 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	coordinator := func() *Node {
		t.Helper()
		n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: w.Server.ClientURL()}, Coordinator: true,
			CheckpointStore: StoreJetStream, HeartbeatTimeout: testHeartbeatTimeout, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	submit := func(n *Node, name string) {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in.`+name+`}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out.`+name+`, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 3}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	c := coordinator()
	submit(c, "first")
	before := waitJob(t, ctx, c, "first", "a checkpoint", func(st control.JobStatus) bool {
		return st.LatestCheckpoint >= 1 || st.State.Terminal()
	})
	if before.State != control.JobRunning {
		t.Fatalf("first: %+v, want it running", before)
	}
	c.Close()

	c = coordinator()
	defer c.Close()
	submit(c, "second")
	st := waitJob(t, ctx, c, "first", "resumed, or waiting for slots", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > before.Attempt || strings.HasPrefix(st.Reason, job.ReasonWaitingForSlots) ||
			st.State.Terminal()
	})
	if st.State != control.JobRunning {
		t.Fatalf("first after the coordinator restarted: %+v; want it running again in its slots", st)
	}
	waitJob(t, ctx, c, "second", "waiting for first's slots", func(st control.JobStatus) bool {
		return st.State == control.JobCreated && st.Reason == job.ReasonWaitingForSlots+"needs 3 tasks, workers have 0 free (w1 0 of 3)"
	})
}
