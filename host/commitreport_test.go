package host_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// commitRecorder is a recorder that hears of commits handed over
// (host.CommitListener).
type commitRecorder struct {
	*recorder
	mu      sync.Mutex
	started []int64
}

func (r *commitRecorder) CommitStarted(ctx context.Context, task string, id int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, id)
	return nil
}

func (r *commitRecorder) commitsStarted() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started)
}

// A task whose exactly-once sink commits in the background acks its
// checkpoints with commit_report and, once a checkpoint completed, says
// when its sink took the commit (host.CommitListener): the coordinator
// sends the next barrier only then, so that it never waits behind a sink
// waiting for room among its commits. A barrier that did wait so says how
// long (commit_wait_ns): the time the sink spent in Commit after the
// checkpoint's trigger.
func TestSinkTaskReportsItsCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "out-0"})
	if err != nil {
		t.Fatal(err)
	}
	rc, acks := ackWaiter()
	cr := &commitRecorder{recorder: rc}
	// The task's clock moves a second a reading: the sink's Commit lasts
	// from one reading to the next.
	base := time.Unix(1_000_000, 0)
	var ticks int64
	var clockMu sync.Mutex
	clock := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		ticks++
		return base.Add(time.Duration(ticks) * time.Second)
	}
	si, ri := local.New(local.Options{Name: "up->out-0"})
	task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: cr, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- task.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	}()
	send := func(es ...stream.Element) {
		t.Helper()
		for _, e := range es {
			if err := si.Send(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	var b abi.Builder
	b.Add(nil, []byte("a"), 1)
	records := func() stream.Element { return stream.Records(append([]byte(nil), b.Bytes()...)) }

	send(records(), stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: base.UnixMilli()}))
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	if got := rc.metric(1, "out-0", host.MetricCommitReport); got != 1 {
		t.Errorf("checkpoint 1: %s = %d, want 1", host.MetricCommitReport, got)
	}
	if got := cr.commitsStarted(); len(got) != 0 {
		t.Errorf("commits reported before the checkpoint completed: %v", got)
	}
	task.NotifyCheckpointComplete(1)
	waitUntil(t, "report of checkpoint 1's commit", func() bool { return slices.Equal(cr.commitsStarted(), []int64{1}) })

	// Checkpoint 2 was triggered before the sink took the commit of 1
	// (a coordinator that did not wait for the report): its barrier
	// waited while the sink was in Commit.
	send(records(), stream.BarrierElement(stream.Barrier{ID: 2, Timestamp: base.UnixMilli()}))
	if id := waitAck(t, acks, rc); id != 2 {
		t.Fatalf("ack %d", id)
	}
	if got := time.Duration(rc.metric(2, "out-0", host.MetricCommitWaitNanos)); got != time.Second {
		t.Errorf("checkpoint 2 triggered before the commit of 1: %s = %s, want the commit's 1s", host.MetricCommitWaitNanos, got)
	}
	task.NotifyCheckpointComplete(2)
	waitUntil(t, "report of checkpoint 2's commit", func() bool { return slices.Equal(cr.commitsStarted(), []int64{1, 2}) })

	// Checkpoint 3 was triggered once the sink took the commit of 2: its
	// barrier waited for no commit.
	clockMu.Lock()
	after := base.Add(time.Duration(ticks+1) * time.Second)
	clockMu.Unlock()
	send(records(), stream.BarrierElement(stream.Barrier{ID: 3, Timestamp: after.UnixMilli()}))
	if id := waitAck(t, acks, rc); id != 3 {
		t.Fatalf("ack %d", id)
	}
	if got := rc.metric(3, "out-0", host.MetricCommitWaitNanos); got != 0 {
		t.Errorf("checkpoint 3 triggered after the commit of 2: %s = %s, want none", host.MetricCommitWaitNanos, time.Duration(got))
	}
}
