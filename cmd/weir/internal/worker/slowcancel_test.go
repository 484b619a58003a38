package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/stream"
)

// logWatch keeps a worker's log lines and closes seen[msg] once a line
// with that message is logged.
type logWatch struct {
	mu   sync.Mutex
	b    strings.Builder
	seen map[string]chan struct{}
}

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logWatch) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type watchHandler struct {
	slog.Handler
	w *logWatch
}

func (h watchHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	h.w.mu.Lock()
	if ch, ok := h.w.seen[r.Message]; ok {
		close(ch)
		delete(h.w.seen, r.Message)
	}
	h.w.mu.Unlock()
	return err
}

func (h watchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return watchHandler{h.Handler.WithAttrs(as), h.w}
}

// A worker answers the coordinator's cancel of an attempt one of whose
// tasks does not stop (blocked in a call that does not heed its cancel:
// a JetStream source's consumers during a NATS reconnect, a sink letting
// a commit finish) without waiting for it: it said nothing until the task
// ended, the coordinator's cancel failed for want of an answer, and the
// job's next deploy here waited behind it. A stale attempt's cancel is
// logged at once, naming the task it waits for, and again once its tasks
// stopped, as docs/OPERATIONS.md promises. What the task met as it
// stopped (a channel's connection lost before, restored since) is not
// reported as the attempt's failure.
func TestCancelAnsweredWhileATaskStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	const (
		stopping = "the coordinator canceled a stale attempt: its tasks here are stopping"
		stopped  = "the coordinator canceled a stale attempt: its tasks here stopped"
		notSaid  = "task of a canceled attempt ended with an error: not reported, the attempt is over"
	)
	lw := &logWatch{seen: map[string]chan struct{}{stopping: make(chan struct{}), stopped: make(chan struct{}), notSaid: make(chan struct{})}}
	saidStopping, saidStopped, saidNotReported := lw.seen[stopping], lw.seen[stopped], lw.seen[notSaid]
	log := slog.New(watchHandler{slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelInfo}), lw})
	w := &Worker{cfg: Config{ID: "w1"}, log: log, jobs: map[string]*attempt{}, claims: map[string]int{}, claimMem: map[string]int64{}}
	w.ctl = control.NewWorker(nc, "w1", w, control.WorkerOptions{HeartbeatInterval: time.Hour})

	// Attempt 3 of job wc: count-0 stops when canceled, in-0 does not
	// until released, and then fails as its output channel failed when
	// the worker's connection was lost, before the cancel.
	events, err := nc.SubscribeSync(control.Subjects{}.Event())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	a := &attempt{job: "wc", n: 3, cancel: cancelRun, taskIDs: []string{"count-0", "in-0"}}
	l := listener{w: w.ctl, log: w.log, job: "wc", attempt: 3, stopped: runCtx}
	release := make(chan struct{})
	failed := make(chan error, 1)
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		defer a.taskEnded("count-0")
		<-runCtx.Done()
	}()
	go func() {
		defer a.wg.Done()
		defer a.taskEnded("in-0")
		<-release
		lost := &stream.ChannelError{Channel: "in-0 -> count-0", Err: errors.New(remote.ErrDisconnected.Error() + " (RECONNECTING)")}
		failed <- l.Failed(context.Background(), "in-0", lost)
	}()
	w.jobs["wc"] = a

	ready := make(chan struct{})
	runCtxW, stopWorker := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtxW, ready) }()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("the worker did not start")
	}

	req, err := json.Marshal(control.Cancel{Job: "wc", Attempt: 3, Reason: "attempt 3 is no longer current", Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.RequestWithContext(ctx, control.Subjects{}.Worker("w1", control.OpCancel), req)
	if err != nil {
		t.Fatalf("cancel not answered while in-0 stops: %v", err)
	}
	var rep control.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error != "" {
		t.Fatalf("cancel answered %q (%v)", m.Data, err)
	}
	// Answered, and logged, while in-0 runs still.
	select {
	case <-saidStopping:
	default:
		t.Fatalf("the cancel answered without saying it waits for in-0; log:\n%s", lw)
	}
	if got := lw.String(); !strings.Contains(got, "still_running=in-0 ") || strings.Contains(got, stopped) {
		t.Fatalf("log before in-0 stopped:\n%s", got)
	}
	if w.Tasks() != 0 {
		t.Fatalf("the canceled attempt still holds %d tasks", w.Tasks())
	}

	close(release)
	if err := <-failed; err != nil {
		t.Fatalf("failure of a canceled attempt's task: %v", err)
	}
	select {
	case <-saidStopped:
	case <-ctx.Done():
		t.Fatalf("no line once the tasks stopped; log:\n%s", lw)
	}
	select {
	case <-saidNotReported:
	default:
		t.Fatalf("in-0's error was not logged as a canceled attempt's; log:\n%s", lw)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := events.Pending(); n != 0 {
		e, _ := events.NextMsg(0)
		t.Fatalf("%d events reached the coordinator after the cancel, first %s", n, e.Data)
	}
	if got := lw.String(); strings.Contains(got, `msg="task failed"`) {
		t.Fatalf("a canceled attempt's task logged as failed:\n%s", got)
	}
	stopWorker()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}
