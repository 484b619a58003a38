package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

type recCoord struct {
	mu     sync.Mutex
	events []Event
	joined chan string
	lost   chan string
	tasks  chan []TaskRef // nil: not recorded
}

func (r *recCoord) Event(e Event) error {
	if e.Task == "bad" {
		return errors.New("no such task")
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	return nil
}
func (r *recCoord) WorkerJoined(w WorkerInfo) { r.joined <- w.ID }
func (r *recCoord) WorkerLost(id string)      { r.lost <- id }
func (r *recCoord) WorkerTasks(_ string, tasks []TaskRef) {
	if r.tasks != nil {
		r.tasks <- tasks
	}
}

type recWorker struct {
	mu       sync.Mutex
	got      []string
	dep      Deploy
	fail     bool
	failWith error // if set, every call fails with it
}

func (w *recWorker) rec(s string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, s)
	if w.failWith != nil {
		return w.failWith
	}
	if w.fail {
		return errors.New("cannot " + s)
	}
	return nil
}
func (w *recWorker) Deploy(_ context.Context, d Deploy) error {
	w.mu.Lock()
	w.dep = d
	w.mu.Unlock()
	return w.rec("deploy")
}
func (w *recWorker) Cancel(context.Context, Cancel) error     { return w.rec("cancel") }
func (w *recWorker) Trigger(context.Context, Trigger) error   { return w.rec("trigger") }
func (w *recWorker) Complete(context.Context, Complete) error { return w.rec("complete") }
func (w *recWorker) Abort(context.Context, Abort) error       { return w.rec("abort") }
func (w *recWorker) Stop(context.Context, Stop) error         { return w.rec("stop") }

func TestRoundTripAndLostWorker(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := &recCoord{joined: make(chan string, 4), lost: make(chan string, 4)}
	co := NewCoordinator(nc, rc, CoordinatorOptions{HeartbeatTimeout: time.Minute})
	ready := make(chan struct{})
	go func() { _ = co.Run(ctx, ready) }()
	<-ready

	rw := &recWorker{}
	wctx, wcancel := context.WithCancel(ctx)
	w := NewWorker(nc, "w1", rw, WorkerOptions{HeartbeatInterval: 50 * time.Millisecond})
	wdone := make(chan struct{})
	wready := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx, wready) }()
	<-wready
	if id := <-rc.joined; id != "w1" {
		t.Fatalf("joined %q", id)
	}
	if got := co.LiveWorkers(); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("live = %v", got)
	}

	spec, err := jobspec.Parse("j", []byte("name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\n"), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := plan.Build(spec)
	d := Deploy{Job: "j", Attempt: 1, Spec: spec, Plan: p, Tasks: p.TaskIDs(),
		Restore: &Restore{CheckpointID: 3, Handles: map[string]string{"in-0": "j/chk-3/in-0"}}}
	if err := co.Deploy(ctx, "w1", d); err != nil {
		t.Fatal(err)
	}
	rw.mu.Lock()
	if rw.dep.Plan == nil || len(rw.dep.Plan.Tasks) != 2 || rw.dep.Restore.Handles["in-0"] != "j/chk-3/in-0" || rw.dep.Spec.Name != "j" {
		t.Errorf("deploy arrived as %+v", rw.dep)
	}
	rw.mu.Unlock()
	for _, f := range []func() error{
		func() error {
			return co.Trigger(ctx, "w1", Trigger{Job: "j", Attempt: 1, CheckpointID: 4, Tasks: []string{"in-0"}})
		},
		func() error { return co.Complete(ctx, "w1", Complete{Job: "j", Attempt: 1, CheckpointID: 4}) },
		func() error { return co.Abort(ctx, "w1", Abort{Job: "j", Attempt: 1, CheckpointID: 5, Reason: "x"}) },
		func() error { return co.Cancel(ctx, "w1", Cancel{Job: "j", Attempt: 1}) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	rw.mu.Lock()
	if got := rw.got; len(got) != 5 || got[4] != "cancel" {
		t.Errorf("worker got %v", got)
	}
	rw.fail = true
	rw.mu.Unlock()
	var re *RemoteError
	if err := co.Cancel(ctx, "w1", Cancel{Job: "j"}); !errors.As(err, &re) || re.Msg != "cannot cancel" {
		t.Errorf("worker error = %v", err)
	}
	rw.mu.Lock()
	rw.failWith = Unrecoverable(fmt.Errorf("module m: %w", ErrInvalid))
	rw.mu.Unlock()
	if err := co.Deploy(ctx, "w1", d); !errors.Is(err, ErrUnrecoverable) || errors.Is(err, ErrInvalid) || err.Error() != "module m: invalid request" {
		t.Errorf("unrecoverable deploy error = %v; want the message as is, classified unrecoverable", err)
	}
	if err := co.Cancel(ctx, "nosuch", Cancel{Job: "j"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("request to a missing worker = %v, want ErrUnavailable", err)
	}

	ref := TaskRef{Job: "j", Attempt: 1, Task: "in-0"}
	if err := w.Ack(ctx, ref, 4, "j/chk-4/in-0", map[string]int64{MetricStateBytes: 10}); err != nil {
		t.Fatal(err)
	}
	if err := w.Decline(ctx, ref, 5, DeclineRefused, "too much"); err != nil {
		t.Fatal(err)
	}
	if err := w.Failed(ctx, ref, FailureTrap, "trap"); err != nil {
		t.Fatal(err)
	}
	if err := w.Finished(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := w.Failed(ctx, TaskRef{Job: "j", Task: "bad"}, FailureUnknown, "x"); err == nil {
		t.Error("coordinator's refusal did not reach the worker")
	}
	rc.mu.Lock()
	if len(rc.events) != 4 || rc.events[0].Handle != "j/chk-4/in-0" || rc.events[0].Metrics[MetricStateBytes] != 10 ||
		rc.events[1].Kind != DeclineRefused || rc.events[2].Reason != "trap" || rc.events[2].FailureKind != FailureTrap || rc.events[3].Type != EventFinished || rc.events[0].Worker != "w1" {
		t.Errorf("events = %+v", rc.events)
	}
	rc.mu.Unlock()

	// A graceful stop unregisters: lost at once.
	wcancel()
	<-wdone
	if id := <-rc.lost; id != "w1" {
		t.Errorf("lost %q", id)
	}
	if got := co.LiveWorkers(); len(got) != 0 {
		t.Errorf("live after loss = %v", got)
	}
}

// crashWorker runs a worker on its own connection; closing the connection
// is a crash: no unregister, no more heartbeats.
func crashWorker(t *testing.T, ctx context.Context, url, id string) (crash func()) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	ready := make(chan struct{})
	w := NewWorker(nc, id, &recWorker{}, WorkerOptions{HeartbeatInterval: 20 * time.Millisecond})
	go func() { defer close(done); _ = w.Run(wctx, ready) }()
	<-ready
	return func() {
		nc.Close()
		cancel()
		<-done
	}
}

func TestLostWorker(t *testing.T) {
	srv, nc := embeddedtest.Start(t, embedded.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := &recCoord{joined: make(chan string, 8), lost: make(chan string, 8)}
	// A live worker beats every 20 ms; a loaded machine can starve its
	// heartbeats for a second, and a shorter timeout then declares it
	// lost (and a restart below no longer comes within the timeout).
	co := NewCoordinator(nc, rc, CoordinatorOptions{HeartbeatTimeout: 2 * time.Second})
	ready := make(chan struct{})
	go func() { _ = co.Run(ctx, ready) }()
	<-ready

	// A crashed worker misses its heartbeats and is declared lost.
	crash := crashWorker(t, ctx, srv.ClientURL(), "w1")
	<-rc.joined
	crash()
	if id := <-rc.lost; id != "w1" {
		t.Errorf("lost %q", id)
	}
	// A worker that restarts within the heartbeat timeout comes back with
	// a new session: its old incarnation is lost, the new one joins.
	crash = crashWorker(t, ctx, srv.ClientURL(), "w2")
	<-rc.joined
	crash()
	crash = crashWorker(t, ctx, srv.ClientURL(), "w2")
	defer crash()
	if id := <-rc.lost; id != "w2" {
		t.Errorf("lost %q", id)
	}
	if id := <-rc.joined; id != "w2" {
		t.Errorf("joined %q", id)
	}
}

// liveness records what a coordinator says of its workers' liveness.
type liveness struct {
	joined, lost chan string
	beats        chan string // the latest heartbeat's worker; a full channel drops it
}

func (l *liveness) Event(Event) error         { return nil }
func (l *liveness) WorkerJoined(w WorkerInfo) { l.joined <- w.ID }
func (l *liveness) WorkerLost(id string)      { l.lost <- id }
func (l *liveness) WorkerTasks(id string, _ []TaskRef) {
	select {
	case l.beats <- id:
	default:
	}
}

// manualClock is a coordinator's clock (CoordinatorOptions.Now) that
// moves only when the test moves it: a worker's heartbeats are late by
// the clock only when the test says, never because a loaded machine
// starved them.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A coordinator whose own server falls silent (a frozen process, a
// partition) hears no heartbeat until its connection leaves that server,
// 4–6 s, longer than the heartbeat timeout: that declares no worker lost
// (it declared every one lost, and a job failed over naming a worker, which
// ran on through another server all along). Once it hears again, a worker
// that stays silent is lost as before.
//
// The coordinator's clock moves only while its server is silent, by more
// than the heartbeat timeout at once and on while it is cut off, and
// after the worker crashed: a live worker's heartbeats that a loaded
// machine starves are never late by it, and the cut-off is longer than
// the timeout however soon the connection moves.
func TestCoordinatorCutOffDeclaresNoWorkerLost(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	// The coordinator knows the cluster through the path that falls silent
	// only; the servers tell it the others' addresses.
	quiet := natsconntest.NewSilencer(t, servers[0].Addr().String())
	nc, err := nats.Connect(quiet.URL(), append(natsconn.LivenessOptions(), nats.MaxReconnects(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &liveness{joined: make(chan string, 16), lost: make(chan string, 16), beats: make(chan string, 1)}
	const timeout = 2 * time.Second
	clock := &manualClock{now: time.Now()}
	co := NewCoordinator(nc, l, CoordinatorOptions{HeartbeatTimeout: timeout, Now: clock.Now})
	ready := make(chan struct{})
	go func() { _ = co.Run(ctx, ready) }()
	<-ready
	crash := crashWorker(t, ctx, servers[1].ClientURL(), "w1")
	if id := <-l.joined; id != "w1" {
		t.Fatalf("joined %q", id)
	}

	// Silent, the coordinator hears no heartbeat for longer than the
	// timeout by its clock, and checks its heartbeats (every quarter of
	// the timeout) many times over before its connection moves (4–6 s).
	quiet.Silence()
	clock.advance(2 * timeout)
	for !nc.IsConnected() || nc.ConnectedUrl() == quiet.URL() {
		select {
		case <-ctx.Done():
			t.Fatal("the coordinator's connection stayed on the silent server")
		case <-time.After(20 * time.Millisecond):
		}
		clock.advance(timeout / 20)
	}
	// A heartbeat through the server it moved to: the coordinator hears
	// again, and has not given up on w1 meanwhile.
	select {
	case <-l.beats:
	default:
	}
	select {
	case <-l.beats:
	case <-ctx.Done():
		t.Fatal("no heartbeat after the coordinator reconnected")
	}
	select {
	case id := <-l.lost:
		t.Fatalf("worker %s declared lost while the coordinator was the one cut off", id)
	default:
	}

	// Its clock moves on until the crashed worker is late by it.
	crash()
	for {
		select {
		case id := <-l.lost:
			if id != "w1" {
				t.Errorf("lost %q", id)
			}
			return
		case <-ctx.Done():
			t.Fatal("a crashed worker was not declared lost after the coordinator heard again")
		case <-time.After(20 * time.Millisecond):
			clock.advance(timeout / 20)
		}
	}
}

// A heartbeat handled after its session's unregistration (the two
// subjects have their own goroutines, so this happens) does not bring the
// worker back; a new session of the same worker does join.
func TestHeartbeatAfterUnregister(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := &recCoord{joined: make(chan string, 8), lost: make(chan string, 8), tasks: make(chan []TaskRef, 8)}
	co := NewCoordinator(nc, rc, CoordinatorOptions{HeartbeatTimeout: time.Minute})
	ready := make(chan struct{})
	go func() { _ = co.Run(ctx, ready) }()
	<-ready
	var subj Subjects
	send := func(subject string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	old := WorkerInfo{ID: "w1", Session: "s1"}
	running := []TaskRef{{Job: "j", Attempt: 3, Task: "in-0"}}
	send(subj.Heartbeat(), Heartbeat{Worker: old, Tasks: running})
	if id := <-rc.joined; id != "w1" {
		t.Fatalf("joined %q", id)
	}
	if got := <-rc.tasks; len(got) != 1 || got[0] != running[0] {
		t.Errorf("tasks reported %v", got)
	}
	send(subj.Unregister(), old)
	if id := <-rc.lost; id != "w1" {
		t.Fatalf("lost %q", id)
	}
	send(subj.Heartbeat(), Heartbeat{Worker: old, Tasks: running})
	send(subj.Heartbeat(), Heartbeat{Worker: WorkerInfo{ID: "w1", Session: "s2"}})
	if id := <-rc.joined; id != "w1" {
		t.Fatalf("joined %q", id)
	}
	select {
	case id := <-rc.joined:
		t.Errorf("%s joined twice", id)
	case got := <-rc.tasks:
		// Session s2 reports that it runs none; the departed session's
		// heartbeat, handled before it, would have come first.
		if len(got) > 0 {
			t.Errorf("a departed session's tasks were reported: %v", got)
		}
	default:
	}
	if live := co.Workers(); len(live) != 1 || live[0].Worker.Session != "s2" {
		t.Errorf("live workers %+v; want w1 in session s2", live)
	}
}

type fakeAPI struct{}

func (fakeAPI) Submit(_ context.Context, r SubmitRequest) (JobStatus, error) {
	if r.Spec.Name == "dup" {
		return JobStatus{}, Errorf(ErrConflict, "job %s is already running", r.Spec.Name)
	}
	return JobStatus{Name: r.Spec.Name, State: JobCreated}, nil
}
func (fakeAPI) Jobs(context.Context) ([]JobStatus, error) {
	return []JobStatus{{Name: "a", State: JobRunning}}, nil
}
func (fakeAPI) Job(_ context.Context, n string) (JobStatus, error) {
	return JobStatus{}, Errorf(ErrNotFound, "no job %q", n)
}
func (fakeAPI) CancelJob(_ context.Context, n string) (JobStatus, error) {
	return JobStatus{Name: n, State: JobCanceled}, nil
}
func (fakeAPI) Savepoint(_ context.Context, n string) (CheckpointInfo, error) {
	return CheckpointInfo{Job: n, ID: 7, Savepoint: true}, nil
}
func (fakeAPI) StopJob(_ context.Context, n string) (CheckpointInfo, error) {
	return CheckpointInfo{Job: n, ID: 8, Savepoint: true}, nil
}
func (fakeAPI) Restore(_ context.Context, r RestoreRequest) (JobStatus, error) {
	return JobStatus{Name: r.Job, RestoredFrom: 7}, nil
}
func (fakeAPI) CheckRestore(_ context.Context, r RestoreRequest) error {
	if r.From != "7" {
		return Errorf(ErrNotFound, "restore from %s/%s: there is no such checkpoint", r.Job, r.From)
	}
	return nil
}
func (fakeAPI) Checkpoints(_ context.Context, n string) ([]CheckpointInfo, error) {
	return []CheckpointInfo{{Job: n, ID: 2, Tasks: map[string]map[string]int64{"t": {MetricUnaligned: 1}}}}, nil
}

func (fakeAPI) Workers(context.Context) ([]WorkerStatus, error) {
	return []WorkerStatus{{ID: "w1", Host: "h", Slots: 4, Used: 3}}, nil
}

func (fakeAPI) RemoveJob(_ context.Context, job string) (Removed, error) {
	if job == "running" {
		return Removed{}, Errorf(ErrConflict, "cannot remove job running: it is running")
	}
	return Removed{Checkpoints: []RemovedCheckpoint{{CheckpointInfo: CheckpointInfo{Job: job, ID: 2}, Objects: 4}}}, nil
}

func (fakeAPI) RemoveCheckpoints(_ context.Context, r RemoveRequest) (Removed, error) {
	if r.ID == 9 {
		return Removed{}, Errorf(ErrConflict, "cannot remove checkpoint 9 of job %s: it is being written (pending)", r.Job)
	}
	return Removed{Checkpoints: []RemovedCheckpoint{{CheckpointInfo: CheckpointInfo{Job: r.Job, ID: r.ID, Size: 5}, Objects: 3}}}, nil
}

func TestAPIRoundTrip(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); _ = ServeAPI(ctx, nc, "", fakeAPI{}, ready) }()
	<-ready
	c := NewAPIClient(nc, "")
	if st, err := c.Submit(ctx, SubmitRequest{Spec: &jobspec.Spec{Name: "x"}}); err != nil || st.Name != "x" {
		t.Errorf("submit = %+v %v", st, err)
	}
	if ws, err := c.Workers(ctx); err != nil || len(ws) != 1 || ws[0] != (WorkerStatus{ID: "w1", Host: "h", Slots: 4, Used: 3}) {
		t.Errorf("workers = %+v %v", ws, err)
	}
	// The sentinel travels as the reply's code, not in the message.
	if _, err := c.Submit(ctx, SubmitRequest{Spec: &jobspec.Spec{Name: "dup"}}); !errors.Is(err, ErrConflict) ||
		err.Error() != "job dup is already running" {
		t.Errorf("dup submit = %v", err)
	}
	if _, err := c.Job(ctx, "zz"); !errors.Is(err, ErrNotFound) || err.Error() != `no job "zz"` {
		t.Errorf("job = %v", err)
	}
	if js, err := c.Jobs(ctx); err != nil || len(js) != 1 {
		t.Errorf("jobs = %v %v", js, err)
	}
	if st, err := c.CancelJob(ctx, "a"); err != nil || st.State != JobCanceled {
		t.Errorf("cancel = %v %v", st, err)
	}
	if sp, err := c.Savepoint(ctx, "a"); err != nil || sp.ID != 7 {
		t.Errorf("savepoint = %v %v", sp, err)
	}
	if sp, err := c.StopJob(ctx, "a"); err != nil || sp.ID != 8 {
		t.Errorf("stop = %v %v", sp, err)
	}
	if st, err := c.Restore(ctx, RestoreRequest{Job: "a", From: "7"}); err != nil || st.RestoredFrom != 7 {
		t.Errorf("restore = %v %v", st, err)
	}
	if err := c.CheckRestore(ctx, RestoreRequest{Job: "a", From: "7"}); err != nil {
		t.Errorf("check restore = %v", err)
	}
	if err := c.CheckRestore(ctx, RestoreRequest{Job: "a", From: "9"}); !errors.Is(err, ErrNotFound) || err.Error() != "restore from a/9: there is no such checkpoint" {
		t.Errorf("check restore from a checkpoint that is not there = %v", err)
	}
	if cs, err := c.Checkpoints(ctx, "a"); err != nil || len(cs) != 1 || cs[0].Tasks["t"][MetricUnaligned] != 1 {
		t.Errorf("checkpoints = %v %v", cs, err)
	}
	if rm, err := c.RemoveCheckpoints(ctx, RemoveRequest{Job: "a", ID: 4}); err != nil || len(rm.Checkpoints) != 1 ||
		rm.Checkpoints[0].ID != 4 || rm.Checkpoints[0].Size != 5 || rm.Checkpoints[0].Objects != 3 {
		t.Errorf("remove = %+v %v", rm, err)
	}
	if _, err := c.RemoveCheckpoints(ctx, RemoveRequest{Job: "a", ID: 9}); !errors.Is(err, ErrConflict) ||
		err.Error() != "cannot remove checkpoint 9 of job a: it is being written (pending)" {
		t.Errorf("refused remove = %v", err)
	}
	if rm, err := c.RemoveJob(ctx, "a"); err != nil || len(rm.Checkpoints) != 1 || rm.Checkpoints[0].Job != "a" || rm.Checkpoints[0].Objects != 4 {
		t.Errorf("remove job = %+v %v", rm, err)
	}
	if _, err := c.RemoveJob(ctx, "running"); !errors.Is(err, ErrConflict) || err.Error() != "cannot remove job running: it is running" {
		t.Errorf("refused remove job = %v", err)
	}
	cancel()
	<-done
}

// A read request that gets no answer — lost in a reconnect, here dropped by
// the responder — is sent again, and the read succeeds long before the
// caller's deadline; a write is not repeated.
func TestAPIReadRetriesALostRequest(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subj := Subjects{}
	var seen atomic.Int32
	for _, op := range []string{APIJob, APISubmit} {
		sub, err := nc.Subscribe(subj.API(op), func(m *nats.Msg) {
			if seen.Add(1) == 1 {
				return // the first request is lost
			}
			_ = m.Respond([]byte(`{"result":{"name":"x"}}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	c := NewAPIClient(nc, "")
	c.ReadAttempt = 200 * time.Millisecond
	if st, err := c.Job(ctx, "x"); err != nil || st.Name != "x" {
		t.Fatalf("job = %+v %v", st, err)
	}
	if seen.Load() != 2 {
		t.Errorf("%d requests, want 2", seen.Load())
	}
	seen.Store(0)
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer wcancel()
	if _, err := c.Submit(wctx, SubmitRequest{Spec: &jobspec.Spec{Name: "x"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("submit = %v, want the deadline", err)
	}
	if seen.Load() != 1 {
		t.Errorf("submit sent %d times, want once", seen.Load())
	}
}

// A request that changes something (a submit) sent while nobody listens
// on the API subject reached no one, so it is sent again, with pauses,
// until a coordinator listens — one subscribing again after its server
// restarted, as weir run's submit met in CI — and fails with
// ErrUnavailable, naming the subject, once nobody has listened for
// ReadAttempt.
func TestAPISubmitWhileNobodyListens(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := NewAPIClient(nc, "")
	c.ReadAttempt = 500 * time.Millisecond
	before := nc.Stats().OutMsgs
	_, err := c.Submit(ctx, SubmitRequest{Spec: &jobspec.Spec{Name: "x"}})
	if !errors.Is(err, ErrUnavailable) || err.Error() != "weir.ctl.api.submit: nobody is listening (no responders)" {
		t.Fatalf("submit with nobody listening = %v, want ErrUnavailable naming the subject", err)
	}
	if sent := nc.Stats().OutMsgs - before; sent < 2 || sent > 50 {
		t.Errorf("%d requests sent while nobody listened, want a few", sent)
	}

	// A coordinator that starts listening while the submit waits gets it.
	c.ReadAttempt = 30 * time.Second
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { stop(); <-done }()
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		_ = ServeAPI(sctx, nc, "", fakeAPI{}, nil)
	}()
	if st, err := c.Submit(ctx, SubmitRequest{Spec: &jobspec.Spec{Name: "x"}}); err != nil || st.Name != "x" {
		t.Errorf("submit to a coordinator that subscribes while it waits = %+v, %v", st, err)
	}
}

// A read while nobody listens on the API subject (no coordinator) is not
// sent again and again until the caller's deadline, ending with that
// deadline: it pauses between tries and fails with ErrUnavailable, naming
// the subject, once nobody has listened for ReadAttempt. A coordinator
// that subscribes in the meantime (a restart) is found.
func TestAPIReadWithNobodyListening(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := NewAPIClient(nc, "")
	c.ReadAttempt = 500 * time.Millisecond
	before := nc.Stats().OutMsgs
	_, err := c.Jobs(ctx)
	if !errors.Is(err, ErrUnavailable) || err.Error() != "weir.ctl.api.jobs: nobody is listening (no responders)" {
		t.Fatalf("jobs with nobody listening = %v, want ErrUnavailable naming the subject", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the read waited out its caller's deadline")
	}
	// Pauses of 20 ms doubling to a second: a handful of requests in
	// ReadAttempt, where resending at once sends thousands.
	if sent := nc.Stats().OutMsgs - before; sent > 50 {
		t.Errorf("%d requests sent while nobody listened, want a few", sent)
	}

	// A coordinator that starts listening after the first request is
	// found by a later one.
	c.ReadAttempt = DefaultReadAttempt
	subscribed := make(chan error, 1)
	before = nc.Stats().OutMsgs
	go func() {
		for nc.Stats().OutMsgs == before {
			time.Sleep(time.Millisecond)
		}
		sub, err := nc.Subscribe(Subjects{}.API(APIJobs), func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"result":[{"name":"x"}]}`))
		})
		if err == nil {
			t.Cleanup(func() { sub.Unsubscribe() })
			err = nc.Flush()
		}
		subscribed <- err
	}()
	jobs, err := c.Jobs(ctx)
	if err := <-subscribed; err != nil {
		t.Fatal(err)
	}
	if err != nil || len(jobs) != 1 || jobs[0].Name != "x" {
		t.Fatalf("jobs once a coordinator listens = %+v, %v", jobs, err)
	}
}

// A task's rates and time fractions cover the span between two reports,
// or since the task started after the first.
func TestNewTaskStatus(t *testing.T) {
	first := TaskStats{RecordsIn: 1000, RecordsOut: 500, RunningNanos: 2e9, BusyNanos: 5e8, BackpressuredNanos: 0}
	st := NewTaskStatus("op-0", "w1", first, nil)
	if st.InRate != 500 || st.OutRate != 250 || st.Busy != 0.25 || st.Backpressured != 0 {
		t.Errorf("first report: %+v", st)
	}
	second := TaskStats{RecordsIn: 4000, RecordsOut: 2000, RunningNanos: 3e9, BusyNanos: 6e8, BackpressuredNanos: 5e8}
	st = NewTaskStatus("op-0", "w1", second, &first)
	if st.InRate != 3000 || st.OutRate != 1500 || st.Busy != 0.1 || st.Backpressured != 0.5 || st.Stats != second {
		t.Errorf("second report: %+v", st)
	}
	if st := NewTaskStatus("op-0", "w1", first, &first); st.InRate != 0 || st.Busy != 0 {
		t.Errorf("no time between reports: %+v", st)
	}
}

// A source's unread messages change at a rate over the span between two
// reports that both have them: negative while it catches up on a backlog.
// Without an earlier count (the first report, a source that cannot tell)
// there is none.
func TestNewTaskStatusUnreadRate(t *testing.T) {
	pending := func(n int64) *int64 { return &n }
	first := TaskStats{RunningNanos: 2e9, SourcePending: pending(100000)}
	if st := NewTaskStatus("lines-0", "w1", first, nil); st.UnreadRate != nil {
		t.Errorf("first report: unread rate %v", *st.UnreadRate)
	}
	second := TaskStats{RunningNanos: 4e9, SourcePending: pending(60000)}
	if st := NewTaskStatus("lines-0", "w1", second, &first); st.UnreadRate == nil || *st.UnreadRate != -20000 {
		t.Errorf("catching up: %+v", st)
	}
	third := TaskStats{RunningNanos: 5e9, SourcePending: pending(60500)}
	if st := NewTaskStatus("lines-0", "w1", third, &second); st.UnreadRate == nil || *st.UnreadRate != 500 {
		t.Errorf("falling behind: %+v", st)
	}
	if st := NewTaskStatus("op-0", "w1", TaskStats{RunningNanos: 4e9}, &TaskStats{RunningNanos: 2e9}); st.UnreadRate != nil {
		t.Errorf("not a source: unread rate %v", *st.UnreadRate)
	}
}

// slowCancelWorker blocks a cancel of job "slow" until release is closed.
type slowCancelWorker struct {
	recWorker
	release  chan struct{}
	canceled chan struct{}
}

func (w *slowCancelWorker) Cancel(ctx context.Context, c Cancel) error {
	if c.Job == "slow" {
		close(w.canceled)
		<-w.release
	}
	return w.rec("cancel " + c.Job)
}

func (w *slowCancelWorker) Trigger(_ context.Context, t Trigger) error {
	return w.rec(fmt.Sprintf("trigger %s %d", t.Job, t.CheckpointID))
}

// A job whose cancel takes long (a sink finishing its commits) holds up
// neither the checkpoints of another job on the same worker nor their
// order; its own requests wait behind it, in order.
func TestWorkerServesJobsApart(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	co := NewCoordinator(nc, &recCoord{joined: make(chan string, 4), lost: make(chan string, 4)}, CoordinatorOptions{HeartbeatTimeout: time.Minute})
	ready := make(chan struct{})
	go func() { _ = co.Run(ctx, ready) }()
	<-ready
	sw := &slowCancelWorker{release: make(chan struct{}), canceled: make(chan struct{})}
	w := NewWorker(nc, "w1", sw, WorkerOptions{HeartbeatInterval: 50 * time.Millisecond})
	wready := make(chan struct{})
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(ctx, wready) }()
	<-wready

	cancelDone := make(chan error, 1)
	go func() { cancelDone <- co.Cancel(ctx, "w1", Cancel{Job: "slow", Attempt: 1}) }()
	<-sw.canceled
	// The slow job's next request queues behind its cancel.
	triggerDone := make(chan error, 1)
	go func() {
		triggerDone <- co.Trigger(ctx, "w1", Trigger{Job: "slow", Attempt: 1, CheckpointID: 9})
	}()
	for id := int64(1); id <= 3; id++ {
		if err := co.Trigger(ctx, "w1", Trigger{Job: "other", Attempt: 1, CheckpointID: id}); err != nil {
			t.Fatalf("trigger of the other job while the slow one cancels: %v", err)
		}
	}
	select {
	case err := <-triggerDone:
		t.Fatalf("the slow job's trigger ran before its cancel ended: %v", err)
	default:
	}
	close(sw.release)
	if err := <-cancelDone; err != nil {
		t.Fatal(err)
	}
	if err := <-triggerDone; err != nil {
		t.Fatal(err)
	}
	sw.mu.Lock()
	got := strings.Join(sw.got, ", ")
	sw.mu.Unlock()
	if got != "trigger other 1, trigger other 2, trigger other 3, cancel slow, trigger slow 9" {
		t.Errorf("handled %s", got)
	}
	cancel()
	<-wdone
}

// A job status carries its newest failure as last_failure; one from a
// coordinator without the field (the failure in failures, and, for a
// running job, in reason) still decodes, and Latest finds the failure.
func TestJobStatusLastFailure(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)
	lost := Failure{Time: at, Attempt: 1, Reason: "worker w1 lost"}
	b, err := json.Marshal(JobStatus{Name: "wc", State: JobRunning, Attempt: 2, Failures: []Failure{lost}, LastFailure: &lost})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"last_failure":{"time":"2026-12-02T01:02:03Z","attempt":1,"reason":"worker w1 lost"}`) ||
		strings.Contains(string(b), `"reason":"worker w1 lost","submitted"`) {
		t.Errorf("encoded %s", b)
	}
	var st JobStatus
	if err := json.Unmarshal(b, &st); err != nil || st.Latest() == nil || *st.Latest() != lost || st.Reason != "" {
		t.Errorf("decoded %+v, %v", st, err)
	}
	// An earlier coordinator's.
	old := `{"name":"wc","state":"running","attempt":2,"restarts":1,"reason":"worker w1 lost",` +
		`"failures":[{"time":"2026-12-02T01:02:03Z","attempt":1,"reason":"worker w1 lost"}]}`
	st = JobStatus{}
	if err := json.Unmarshal([]byte(old), &st); err != nil || st.LastFailure != nil || st.Latest() == nil || *st.Latest() != lost ||
		st.Reason != "worker w1 lost" {
		t.Errorf("decoded %+v, %v", st, err)
	}
	if (JobStatus{}).Latest() != nil {
		t.Error("a job that never failed has a latest failure")
	}
}

// StoppedWithSavepoint travels as stopped_with_savepoint, not at all when
// 0; a status without it (an older coordinator's) reads 0, whatever its
// reason says.
func TestJobStatusStoppedWithSavepoint(t *testing.T) {
	b, err := json.Marshal(JobStatus{Name: "wc", State: JobCanceled, Reason: "stopped with savepoint 8", StoppedWithSavepoint: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"stopped_with_savepoint":8`) {
		t.Errorf("encoded %s", b)
	}
	var st JobStatus
	if err := json.Unmarshal(b, &st); err != nil || st.StoppedWithSavepoint != 8 {
		t.Errorf("decoded %+v, %v", st, err)
	}
	if b, err := json.Marshal(JobStatus{Name: "wc", State: JobCanceled}); err != nil || strings.Contains(string(b), "stopped_with_savepoint") {
		t.Errorf("a canceled job encoded %s, %v", b, err)
	}
	old := `{"name":"wc","state":"canceled","attempt":1,"restarts":0,"reason":"stopped with savepoint 8"}`
	st = JobStatus{}
	if err := json.Unmarshal([]byte(old), &st); err != nil || st.StoppedWithSavepoint != 0 || st.Reason != "stopped with savepoint 8" {
		t.Errorf("decoded %+v, %v", st, err)
	}
}

// The attempts of a job submitted again, or restored, are numbered on
// from its earlier runs': the line says which are those (a trial read "2
// of the first deployment and the job's earlier runs" as nonsense).
func TestAttemptsExplainedNamesEarlierRuns(t *testing.T) {
	for _, c := range []struct {
		st   JobStatus
		want string
	}{
		{JobStatus{Attempt: 4, Resumes: 1}, "4 attempts: 1 resume after a coordinator restart, 1 first deployment of this run, 2 of the job's earlier runs"},
		{JobStatus{Attempt: 2, Replacements: 1}, "2 attempts: 1 placement again after a worker was drained or stopped, or was lost or refused its tasks while deploying, 1 first deployment"},
		{JobStatus{Attempt: 3, Restarts: 2}, ""},
	} {
		if got := c.st.AttemptsExplained(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.st, got, c.want)
		}
	}
}

// Completed checkpoints are counted at each duration bound they are
// within, and summed: a histogram.
func TestCheckpointDurationHistogram(t *testing.T) {
	var c CheckpointStats
	for _, d := range []time.Duration{3 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second, 20 * time.Minute} {
		c.Observe(d)
	}
	// 5ms 10ms 25ms 50ms 100ms 500ms 1s 5s 10s 30s 1m 5m
	if want := [12]int64{1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3}; c.DurationBuckets != want || c.DurationSum != 3*time.Millisecond+50*time.Millisecond+2*time.Second+20*time.Minute {
		t.Errorf("buckets %v, sum %v", c.DurationBuckets, c.DurationSum)
	}
	// JSON keeps them; a client of these bounds reads them back.
	b, err := json.Marshal(JobStatus{Checkpoints: c})
	if err != nil {
		t.Fatal(err)
	}
	var back JobStatus
	if err := json.Unmarshal(b, &back); err != nil || back.Checkpoints != c {
		t.Errorf("%s read back as %+v (%v)", b, back.Checkpoints, err)
	}
}

// A status from a coordinator of the older bounds (100ms up, its
// histogram under the key duration_buckets) is read into the current
// bounds: each older bound's count at the same bound, the bounds between
// two older ones counting what the lower one did, and 0 under 100ms,
// which it did not count apart.
func TestCheckpointDurationHistogramOfAnOlderCoordinator(t *testing.T) {
	old := `{"name":"wc","checkpoints":{"completed":5,"last_id":5,` +
		`"duration_buckets":[2,3,3,4,4,5,5,5],"duration_sum":9000000000}}`
	var st JobStatus
	if err := json.Unmarshal([]byte(old), &st); err != nil {
		t.Fatal(err)
	}
	// 5ms 10ms 25ms 50ms 100ms 500ms 1s 5s 10s 30s 1m 5m
	want := [12]int64{0, 0, 0, 0, 2, 3, 3, 4, 4, 5, 5, 5}
	if c := st.Checkpoints; c.DurationBuckets != want || c.Completed != 5 || c.LastID != 5 || c.DurationSum != 9*time.Second || st.Name != "wc" {
		t.Errorf("read %+v of %s", st, old)
	}
	// Cumulative still: no bound counts more than a higher one.
	for i := 1; i < len(want); i++ {
		if st.Checkpoints.DurationBuckets[i] < st.Checkpoints.DurationBuckets[i-1] {
			t.Errorf("bound %v counts less than the one before: %v", CheckpointDurationBounds[i], st.Checkpoints.DurationBuckets)
		}
	}
	// The older key no longer written: a client of the older bounds
	// reads no histogram rather than counts in the wrong buckets.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"duration_buckets"`) {
		t.Errorf("the older key written: %s", b)
	}
}
