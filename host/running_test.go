package host_test

import (
	"context"
	"errors"
	"strings"
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

// runningRecorder is a recorder that hears when tasks run
// (host.RunningListener); onRunning runs inside the report.
type runningRecorder struct {
	*recorder
	running   chan string
	onRunning func()
}

func (r *runningRecorder) Running(ctx context.Context, task string) error {
	if r.onRunning != nil {
		r.onRunning()
	}
	r.running <- task
	return nil
}

// A task reports running once it restored its state — an exactly-once
// sink after its recovery re-published what the checkpoint staged — and
// at once when it has nothing to restore; a task whose restore fails
// reports its failure, not running.
func TestTaskReportsRunningOnceRestored(t *testing.T) {
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
	rc, acks := ackWaiter()
	rr := &runningRecorder{recorder: rc, running: make(chan string, 1)}
	// run starts the task; stop cancels it and returns its error, done
	// has the error once it ended by itself.
	run := func(restore string, input ...stream.Element) (stop func() error, done <-chan error) {
		sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "out-0"})
		if err != nil {
			t.Fatal(err)
		}
		si, ri := local.New(local.Options{Name: "up->out-0"})
		for _, e := range input {
			if err := si.Send(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rr, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		ended := make(chan error, 1)
		go func() { ended <- task.Run(rctx) }()
		return func() error { cancel(); return <-ended }, ended
	}
	stored := func() uint64 {
		st, err := js.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	awaitRunning := func() {
		t.Helper()
		select {
		case task := <-rr.running:
			if task != "out-0" {
				t.Fatalf("%s reported running", task)
			}
		case <-ctx.Done():
			t.Fatal("the task never reported running")
		}
	}

	// Nothing to restore: it runs at once, before any input.
	var b abi.Builder
	for _, v := range []string{"a", "b", "c"} {
		b.Add(nil, []byte(v), 1)
	}
	stop, _ := run("", stream.Records(append([]byte(nil), b.Bytes()...)), stream.BarrierElement(stream.Barrier{ID: 1}))
	awaitRunning()
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	handle := rc.handle(1, "out-0")
	// Checkpoint 1 never completes: its output stays staged.
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if n := stored(); n != 0 {
		t.Fatalf("OUT holds %d messages before any commit", n)
	}

	// The restore re-publishes the staged output before the task runs.
	var atRunning uint64
	rr.onRunning = func() { atRunning = stored() }
	stop, _ = run(handle)
	awaitRunning()
	if atRunning != 3 {
		t.Errorf("OUT held %d messages when the restored task reported running, want 3", atRunning)
	}
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// A failed restore reports no running.
	rr.onRunning = nil
	_, done := run("j/chk-9/out-0")
	if err := <-done; err == nil || !strings.Contains(err.Error(), "restore: storage: j/chk-9/out-0:") {
		t.Errorf("restore of a missing snapshot: %v", err)
	}
	select {
	case <-rr.running:
		t.Error("a task whose restore failed reported running")
	default:
	}
}

// A task's Stats say it restored its state from the moment it reports
// running, also while that report is under way (and when it is lost):
// heartbeats carry it, and the coordinator takes it for a lost report.
func TestStatsSayTheTaskRestored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := make(chan struct{})
	rr := &runningRecorder{recorder: newRecorder(), running: make(chan string, 1)}
	reporting := make(chan struct{})
	rr.onRunning = func() { close(reporting); <-release }
	_, ri := local.New(local.Options{Name: "up->op-0"})
	task, err := host.New(host.Config{Name: "op-0", Inputs: []host.Input{{Receiver: ri}}, Operator: &passOp{},
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Listener: rr})
	if err != nil {
		t.Fatal(err)
	}
	if task.Stats().Restored {
		t.Error("restored before it ran")
	}
	rctx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- task.Run(rctx) }()
	select {
	case <-reporting:
	case <-ctx.Done():
		t.Fatal("the task never reported running")
	}
	if !task.Stats().Restored {
		t.Error("not restored while it reports running")
	}
	close(release)
	stop()
	<-ended
}
