package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/stream"
)

// A failure report that gets no answer (lost on its way: sent as the
// worker's connection came back, to a coordinator still on a server that
// froze) is sent again: lost, it left the attempt running without the
// task until its next checkpoint expired, 30 s later, and the job's
// failure named that expiry instead of the task's.
func TestFailureReportSentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	heard := fakeCoordinator(t, nc, func(n int) *control.Reply {
		if n == 1 {
			return nil // lost: no answer
		}
		return &control.Reply{}
	})
	l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.DiscardHandler),
		job: "j", attempt: 3, stopped: ctx}
	if err := l.Failed(ctx, "split-0", errors.New("channel lines-0 -> split-0: NATS connection lost")); err != nil {
		t.Fatalf("failure report: %v", err)
	}
	got := heard()
	if len(got) != 2 {
		t.Fatalf("%d reports reached the coordinator, want 2 (the first unanswered)", len(got))
	}
	for _, e := range got {
		if e.Type != control.EventFailed || e.Job != "j" || e.Attempt != 3 || e.Task != "split-0" || e.Worker != "w1" ||
			e.Reason != "channel lines-0 -> split-0: NATS connection lost" {
			t.Errorf("report %+v", e)
		}
	}
}

// A failure report is not sent again once its attempt stopped on the
// worker (canceled, replaced, the worker stopping): a worker stopped while
// the coordinator is out of reach is not held up for the patience.
func TestFailureReportGivenUpWhenTheAttemptStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	heard := make(chan struct{}, 100)
	sub, err := nc.Subscribe(control.Subjects{}.Event(), func(m *nats.Msg) {
		heard <- struct{}{} // and no answer
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	stopped, stop := context.WithCancel(context.Background())
	l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.DiscardHandler),
		job: "j", attempt: 3, patience: time.Hour, stopped: stopped}
	done := make(chan error, 1)
	go func() { done <- l.Failed(context.Background(), "split-0", errors.New("boom")) }()
	select {
	case <-heard:
	case <-ctx.Done():
		t.Fatal("no failure report was sent")
	}
	stop()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a report nobody answered was taken for heard")
		}
	case <-ctx.Done():
		t.Fatal("the failure report was sent on after its attempt stopped")
	}
}

// A failure report says the failure's kind, from its error's type: the
// coordinator records it, and weir job status branches on it rather than
// on words of the reason (a trap whose message lacks "trap" is one still).
func TestFailureReportSaysItsKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	heard := fakeCoordinator(t, nc, func(int) *control.Reply { return &control.Reply{} })
	l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.DiscardHandler),
		job: "j", attempt: 1, stopped: ctx, stacks: &stackLog{}}
	cases := []struct {
		err  error
		want control.FailureKind
	}{
		{&host.TaskError{Task: "op-0", Err: &wasm.TrapError{Operator: "op", Export: "weir_process", RecordIndex: 3,
			Err: errors.New("wasm error: unreachable")}}, control.FailureTrap},
		{fmt.Errorf("restore: %w", &wasm.DeadlineError{Operator: "op", Export: "weir_restore", RecordIndex: -1}), control.FailureDeadline},
		{&wasm.ExitError{Operator: "op", Export: "weir_process", Code: 2, RecordIndex: -1}, control.FailureExit},
		{&wasm.OperatorError{Operator: "op", Export: "weir_process", Status: 1, RecordIndex: -1}, control.FailureOperatorError},
		{&wasm.FaultError{Operator: "op", Export: "weir_process", Detail: "malformed batch"}, control.FailureFault},
		{fmt.Errorf("commit: %w", &sink.StreamFullError{Stream: "OUT", Limit: "max_msgs", Err: errors.New("maximum messages exceeded")}),
			control.FailureSinkRefused},
		{errors.New("a trap of words only"), control.FailureUnknown},
		// A stream deleted, or deleted and created again, under a source
		// or a sink.
		{fmt.Errorf("jetstream source IN: %w while the job read it", source.ErrStreamGone), control.FailureStream},
		{fmt.Errorf("jetstream source IN: resume after sequence 260: %w", source.ErrOffsetAhead), control.FailureStream},
		// Messages a running source had not read, removed (purged,
		// expired).
		{fmt.Errorf("jetstream source IN: messages 24..1000 were removed from the stream before the source read them: %w", source.ErrMessagesLost), control.FailureStream},
		{fmt.Errorf("exactly-once sink counts: stream COUNTS: %w", jetstream.ErrStreamNotFound), control.FailureStream},
		// A sink's stream whose subjects no longer take the sink's
		// subject, mid-run or in the recovery of output staged on it (a
		// keyed one's record wraps sink.ErrBadKey too: still the
		// stream's).
		{fmt.Errorf("exactly-once sink out: commit of checkpoint 3: %w", sink.ErrSubjectNotStored), control.FailureStream},
		{fmt.Errorf("exactly-once sink out: recover checkpoint 3: %w: record 2: %w", sink.ErrStagedSubjectNotStored, sink.ErrBadKey), control.FailureStream},
		// A channel between workers, or a source's or sink's NATS
		// connection, lost (a trial: "channel slow-1 -> count-0: NATS
		// connection lost" had no kind).
		{&host.TaskError{Task: "count-0", Err: &stream.ChannelError{Channel: "slow-1 -> count-0",
			Err: fmt.Errorf("%w (closed)", remote.ErrDisconnected)}}, control.FailureConnection},
		{&stream.ChannelError{Channel: "slow-1 -> count-0", Err: fmt.Errorf("%w: got frame 9, want 7", remote.ErrSequenceGap)}, control.FailureConnection},
		{fmt.Errorf("jetstream source IN: the consumer stopped: %w", nats.ErrConnectionClosed), control.FailureConnection},
		{fmt.Errorf("exactly-once sink out: publish: %w", nats.ErrDisconnected), control.FailureConnection},
		// The socket under the connection, as a core sink's publish
		// returns it (a trial: "write: broken pipe" had no kind).
		{fmt.Errorf("core sink out: publish: %w", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), control.FailureConnection},
		{fmt.Errorf("core sink out: flush: %w", syscall.ECONNRESET), control.FailureConnection},
		// An exactly-once sink that staged past its bound: checkpoints
		// are not completing.
		{fmt.Errorf("exactly-once sink out: %w: 250 records", sink.ErrStagedTooMuch), control.FailureCheckpointsFailed},
		// A memory.grow the memory limit refused during the call makes
		// any of an operator's failures memory-limit.
		{&host.TaskError{Task: "op-0", Err: &wasm.TrapError{Operator: "op", Export: "weir_process", RecordIndex: 3,
			Err: errors.New("wasm error: unreachable"), MemorySize: 2 << 20, MemoryLimit: 4 << 20, GrowRefused: 1 << 30}}, control.FailureMemoryLimit},
		{&wasm.OperatorError{Operator: "op", Export: "weir_process", Status: 1, RecordIndex: -1, Message: "out of memory",
			MemorySize: 4 << 20, MemoryLimit: 4 << 20, GrowRefused: wasm.PageSize}, control.FailureMemoryLimit},
		{&wasm.ExitError{Operator: "op", Export: "weir_process", Code: 2, RecordIndex: -1, GrowRefused: wasm.PageSize}, control.FailureMemoryLimit},
		{&wasm.DeadlineError{Operator: "op", Export: "weir_process", RecordIndex: -1, GrowRefused: wasm.PageSize}, control.FailureMemoryLimit},
		// Near the limit with no grow refused is no proof: the kind of
		// the error's type.
		{&wasm.TrapError{Operator: "op", Export: "weir_process", RecordIndex: -1, Err: errors.New("wasm error: unreachable"),
			MemorySize: 63 << 20, MemoryLimit: 64 << 20}, control.FailureTrap},
	}
	for _, c := range cases {
		if err := l.Failed(ctx, "op-0", c.err); err != nil {
			t.Fatalf("failure report: %v", err)
		}
	}
	got := heard()
	if len(got) != len(cases) {
		t.Fatalf("%d reports, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		if got[i].FailureKind != c.want {
			t.Errorf("report of %v: kind %q, want %q", c.err, got[i].FailureKind, c.want)
		}
	}
}

// A trap's stack, often kilobytes, is logged with the first failure of a
// task only: a job that traps on the same record after every failover
// repeated it on each restart, while the one-line reason says the rest.
// Another task, another stack, or the same stack in a run of the job
// submitted again is logged in full.
func TestTrapStackLoggedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	fakeCoordinator(t, nc, func(int) *control.Reply { return &control.Reply{} })
	var logged bytes.Buffer
	stacks := &stackLog{}
	first := runKey(time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC))
	again := runKey(time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		attempt          int
		run, task, stack string
		full             bool
	}{
		{1, first, "op-0", "weir_process\n\tmain.process", true},
		{2, first, "op-0", "weir_process\n\tmain.process", false}, // the restart meets it again
		{2, first, "op-1", "weir_process\n\tmain.process", true},
		{3, first, "op-0", "weir_process\n\tmain.other", true},
		// The job submitted again: attempts number on, and the new run
		// never logged the stack.
		{4, again, "op-0", "weir_process\n\tmain.process", true},
		{5, again, "op-0", "weir_process\n\tmain.process", false},
	} {
		logged.Reset()
		l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.NewTextHandler(&logged, nil)),
			job: "j", attempt: c.attempt, run: c.run, stopped: ctx, stacks: stacks}
		err := &wasm.TrapError{Operator: "op", Export: "weir_process", RecordIndex: -1, Err: errors.New("wasm error: unreachable"), Stack: c.stack}
		if err := l.Failed(ctx, c.task, err); err != nil {
			t.Fatalf("failure report: %v", err)
		}
		full := strings.Contains(logged.String(), strconv.Quote(c.stack))
		if full != c.full || !full && !strings.Contains(logged.String(), `stack="as logged for this task before"`) {
			t.Errorf("attempt %d, task %s: logged %q; want the stack in full: %v", c.attempt, c.task, logged.String(), c.full)
		}
	}
}

// A Go guest's traceback (the stack of the goroutine that failed, after
// the runtime's fatal line) is logged as the trap's stack is: in full with
// the task's first failure, and not again when a restart meets the same
// failure, its arguments at other addresses. An exit's is too, and the
// stack of a panic the Go SDK recovered into an error status.
func TestTracebackLoggedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	fakeCoordinator(t, nc, func(int) *control.Reply { return &control.Reply{} })
	var logged bytes.Buffer
	stacks := &stackLog{}
	const (
		stack = "wasm stack trace:\n\truntime.abort(i32) i32"
		tb1   = "goroutine 1 [running]:\nmain.(*op).Process(0x23e070, 0x0)\n\t/src/main.go:86 +0xcd fp=0x215e58\n(11 other goroutines left out)"
		tb2   = "goroutine 1 [running]:\nmain.(*op).Process(0x24f180, 0x1)\n\t/src/main.go:86 +0xcd fp=0x216f00\n(11 other goroutines left out)"
		tb3   = "goroutine 1 [running]:\nmain.(*op).other(0x24f180)\n\t/src/main.go:90 +0x1c fp=0x216f00"
	)
	trap := func(tb string) error {
		return &wasm.TrapError{Operator: "op", Export: "weir_process", RecordIndex: -1, Err: errors.New("wasm error: unreachable"),
			Stack: stack, Fatal: "fatal error: out of memory", Traceback: tb}
	}
	for _, c := range []struct {
		attempt int
		err     error
		tb      string
		full    bool
	}{
		{1, trap(tb1), tb1, true},
		{2, trap(tb2), tb2, false}, // the restart meets it again
		{3, trap(tb3), tb3, true},
		{4, &wasm.ExitError{Operator: "op", Export: "weir_process", Code: 2, RecordIndex: -1, Traceback: tb1}, tb1, true},
		{5, &wasm.ExitError{Operator: "op", Export: "weir_process", Code: 2, RecordIndex: -1, Traceback: tb2}, tb2, false},
		// The Go SDK's stack of a panic it recovered into an error.
		{6, &wasm.OperatorError{Operator: "op", Export: "weir_process", Status: -1, Message: "panic in Process at main.go:90 (main.(*op).other): x",
			RecordIndex: -1, Traceback: tb3}, tb3, true},
		{7, &wasm.OperatorError{Operator: "op", Export: "weir_process", Status: -1, Message: "panic in Process at main.go:90 (main.(*op).other): x",
			RecordIndex: -1, Traceback: tb3}, tb3, false},
	} {
		logged.Reset()
		l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.NewTextHandler(&logged, nil)),
			job: "j", attempt: c.attempt, stopped: ctx, stacks: stacks}
		if err := l.Failed(ctx, "op-0", c.err); err != nil {
			t.Fatalf("failure report: %v", err)
		}
		full := strings.Contains(logged.String(), "traceback="+strconv.Quote(c.tb))
		if full != c.full || !full && !strings.Contains(logged.String(), `traceback="as logged for this task before"`) {
			t.Errorf("attempt %d: logged %q; want the traceback in full: %v", c.attempt, logged.String(), c.full)
		}
		if _, isTrap := c.err.(*wasm.TrapError); isTrap != strings.Contains(logged.String(), "stack=") {
			t.Errorf("attempt %d: logged %q; want a stack: %v", c.attempt, logged.String(), isTrap)
		}
	}
}

// What a worker's stackLog holds does not grow with the stacks: they
// come from a module's name section, anyone's to write (wazero keeps 30
// frames, each as long as its function's name), and it remembered up to
// maxStacks of them whole, for the worker's life.
func TestStackLogHoldsNoStack(t *testing.T) {
	s := &stackLog{}
	for i := range 3 {
		stack := strings.Repeat("x", 1<<20) + strconv.Itoa(i)
		if !s.first("j", "", "op-0", stack) || s.first("j", "", "op-0", stack) {
			t.Fatalf("stack %d: not new once, then known", i)
		}
	}
	held := 0
	for k := range s.seen {
		held += len(k)
	}
	if held > 3*64 {
		t.Errorf("the stack log holds %d bytes for 3 stacks of 1 MiB", held)
	}
}
