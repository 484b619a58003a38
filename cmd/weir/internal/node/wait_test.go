package node

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/jobspec"
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

	startWorker("w1", StoreDir)
	st := waitJob(t, ctx, up, "late", "a checkpoint", func(st control.JobStatus) bool {
		return st.LatestCheckpoint >= 1 || st.State.Terminal()
	})
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 {
		t.Fatalf("status %+v, want running its first attempt with no failure", st)
	}
}
