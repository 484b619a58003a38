package node

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
)

// TestDeployOfTheRunningAttemptAgain sends a worker the deploy of the
// attempt it runs once more, as the coordinator does when the answer may
// have been lost to a NATS blip: the worker answers it and keeps the
// attempt as it runs — no task is built again, no source reads its input
// again — and the keyed counts behind it go on exactly once.
func TestDeployOfTheRunningAttemptAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var built atomic.Int32 // operator tasks set up
	hooks := &worker.Hooks{Operator: func(_, _ string, op host.Operator) host.Operator { built.Add(1); return op }}
	n, deploys, _ := runCounts(t, ctx, hooks, control.Subjects{}.Worker("w1", control.OpDeploy), "{interval: 100ms}")
	in := newKeyedInput(t, ctx, n.JS, 5)
	in.publish(100)

	m, err := deploys.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("the deploy to w1: %v", err)
	}
	rep, err := n.Conn.RequestWithContext(ctx, m.Subject, m.Data)
	if err != nil {
		t.Fatalf("deploy again: %v", err)
	}
	var r control.Reply
	if err := json.Unmarshal(rep.Data, &r); err != nil || r.Error != "" {
		t.Fatalf("deploy again: reply %q (%v)", rep.Data, err)
	}
	if got := built.Load(); got != 1 {
		t.Errorf("operator tasks set up: %d; want 1 (the attempt kept as it runs)", got)
	}
	in.publish(100)
	in.checkCounts()
	if st, err := n.API.Job(ctx, "counts"); err != nil || st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 {
		t.Errorf("job after the second deploy: %s attempt %d, %d restarts (%v); want running attempt 1, no restart",
			st.State, st.Attempt, st.Restarts, err)
	}
}

// completions counts, per checkpoint, how often operators were told it
// completed.
type completions struct {
	mu sync.Mutex
	n  map[int64]int
}

type countingOperator struct {
	host.Operator
	c *completions
}

func (o countingOperator) CheckpointComplete(ctx context.Context, id int64) error {
	o.c.mu.Lock()
	o.c.n[id]++
	o.c.mu.Unlock()
	return o.Operator.CheckpointComplete(ctx, id)
}

// TestCompleteAgainIsPassedOnOnce sends a worker a checkpoint's
// completion once more, as the coordinator does when the answer may have
// been lost to a NATS blip: the worker answers it, and its tasks hear of
// the completion once.
func TestCompleteAgainIsPassedOnOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := &completions{n: map[int64]int{}}
	hooks := &worker.Hooks{Operator: func(_, _ string, op host.Operator) host.Operator { return countingOperator{op, c} }}
	// One checkpoint, the savepoint below: no later completion comes.
	n, completes, _ := runCounts(t, ctx, hooks, control.Subjects{}.Worker("w1", control.OpComplete), "{disabled: true}")
	sp, err := n.API.Savepoint(ctx, "counts")
	if err != nil {
		t.Fatalf("savepoint: %v", err)
	}
	m, err := completes.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("the completion sent to w1: %v", err)
	}
	rep, err := n.Conn.RequestWithContext(ctx, m.Subject, m.Data)
	if err != nil {
		t.Fatalf("complete again: %v", err)
	}
	var r control.Reply
	if err := json.Unmarshal(rep.Data, &r); err != nil || r.Error != "" {
		t.Fatalf("complete again: reply %q (%v)", rep.Data, err)
	}
	// Rest returns once the tasks handled every notification posted
	// before: both completions.
	if err := n.Workers[0].Stop(ctx, control.Stop{Job: "counts", Attempt: 1, CheckpointID: sp.ID}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.n[sp.ID]; got != 1 {
		t.Errorf("the operator heard %d times that savepoint %d completed; want once", got, sp.ID)
	}
}

// TestStopCommitsASavepointWhoseCompletionWasLost brings a job's tasks to
// rest after a stop savepoint whose completion never reached the worker
// (the savepoint is triggered on the worker itself, as if the coordinator
// had, and its Complete was lost): the Stop commits the savepoint's
// output before it returns, as the completion would have.
func TestStopCommitsASavepointWhoseCompletionWasLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, events, st := runCounts(t, ctx, nil, control.Subjects{}.Event(), "{disabled: true}")
	in := newKeyedInput(t, ctx, n.JS, 5)
	in.send(100)
	waitJob(t, ctx, n, "counts", "the sink to take every record", func(st control.JobStatus) bool {
		for _, ts := range st.Tasks {
			if ts.Task == "out-0" {
				return ts.Stats.RecordsIn == 100
			}
		}
		return false
	})

	const id = 1000 // no checkpoint of the coordinator's
	w := n.Workers[0]
	if err := w.Trigger(ctx, control.Trigger{Job: "counts", Attempt: st.Attempt, CheckpointID: id,
		Savepoint: true, Stop: true, Tasks: []string{"in-0"}}); err != nil {
		t.Fatal(err)
	}
	for acked := false; !acked; {
		m, err := events.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("waiting for the sink's ack of savepoint %d: %v", id, err)
		}
		var e control.Event
		acked = json.Unmarshal(m.Data, &e) == nil && e.Type == control.EventAck && e.Task == "out-0" && e.CheckpointID == id
	}
	if err := w.Stop(ctx, control.Stop{Job: "counts", Attempt: st.Attempt, CheckpointID: id}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	out, err := n.JS.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 100 {
		t.Errorf("OUT holds %d messages once the tasks are at rest; want the savepoint's 100", info.State.Msgs)
	}
}

// runCounts starts a node with one worker (its operators wrapped by
// hooks, if any), subscribes to subject before anything is sent on it,
// and submits the keyed count of IN into the exactly-once sink OUT with
// checkpointing as given (a YAML flow map). It returns once the job runs.
func runCounts(t *testing.T, ctx context.Context, hooks *worker.Hooks, subject, checkpointing string) (*Node, *nats.Subscription, control.JobStatus) {
	t.Helper()
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: testHeartbeatTimeout, HeartbeatInterval: 100 * time.Millisecond, Hooks: hooks,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	sub, err := n.Conn.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("counts.yaml", []byte(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+mod+`, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: `+checkpointing+`
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	return n, sub, waitJob(t, ctx, n, "counts", "job running", running)
}
