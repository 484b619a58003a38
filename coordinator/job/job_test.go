package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// fleet is a set of fake workers that speak the real control protocol: on
// a trigger, every task of the attempt acks from the worker it runs on, as
// if barriers had flowed through the job.
type fleet struct {
	t     *testing.T
	nc    *nats.Conn
	store storage.Store
	mu    sync.Mutex
	ws    map[string]*fakeWorker
	all   []*fakeWorker
	acks  sync.WaitGroup // ackAll goroutines
}

// wait waits until every worker stopped and every ack was sent.
func (f *fleet) wait() {
	f.mu.Lock()
	all := f.all
	f.mu.Unlock()
	for _, w := range all {
		w.stop()
		<-w.done
	}
	f.acks.Wait()
}

type fakeWorker struct {
	f      *fleet
	id     string
	nc     *nats.Conn
	client *control.Worker
	stop   context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	deploys  []control.Deploy
	cancels  []control.Cancel
	complete []int64
	current  map[string]control.Deploy // job → running attempt
	extra    []control.TaskRef         // reported in heartbeats besides current
	hang     chan struct{}             // if set, Deploy answers only once it is closed
	noAck    bool                      // if set, triggers are taken but never acked
	// restoring, if set, keeps the tasks of deploys restoring: they never
	// report running.
	restoring bool
	// restored, if set, makes heartbeats say the tasks of deploys
	// restored their state (control.TaskStats.Restored).
	restored bool
	triggers []control.Trigger // every Trigger received
	// abortHang, if set, is signaled by each Abort, which then answers only
	// once the worker stops.
	abortHang chan struct{}
	stops     []control.Stop // Stop requests (bring tasks to rest)
	aborts    []int64        // the checkpoint of every Abort
	stopErr   error          // if set, the next Stop fails with it
	deployErr error          // if set, deploys fail with it
	// slots is the worker's, and refuseBeyond makes it refuse a deploy
	// that would run more tasks than that, counting extra, as a real
	// worker does (control.ErrNoSlots).
	slots        int
	refuseBeyond bool
	// memory, if set, makes it refuse a deploy whose operator tasks'
	// memory (control.TaskMemory), with that of the other jobs' running
	// attempts and of extra (their reported MemoryLimit), is over it, as
	// a real worker does with its budget (weir worker -memory).
	memory int64
	// cancelGate, if set, is called with each Cancel before it is handled.
	cancelGate func(control.Cancel)
	// commitReport, if set, makes the worker's sink tasks (out-N) ack
	// with control.MetricCommitReport and report committing each
	// checkpoint whose completion they hear of, as an exactly-once sink's
	// tasks do.
	commitReport bool
	// sinkStateFrom, if set, gives the checkpoint from which on the
	// snapshots of the worker's sink tasks (out-N) of periodic checkpoint
	// id name output staged earlier (control.MetricSinkStateFrom; 0:
	// none), as an exactly-once sink's snapshot names what it has not
	// confirmed yet.
	sinkStateFrom func(id int64) int64
	// positions, if set, are the source positions
	// (control.MetricSourcePosition) its tasks ack with, by task.
	positions map[string]int64
	// gate, if set, is called with the operation (control.OpDeploy, ...)
	// of each Deploy, Cancel, Complete, Abort and Stop before it is
	// handled.
	gate func(op string)
}

// holdFirst makes w hold its first request of kind op (control.OpDeploy,
// ...) until release is called: held is closed once it is held. The
// worker's requests of a job come one at a time, so those after it wait
// too. The test's end releases it if the test did not.
func (w *fakeWorker) holdFirst(t *testing.T, op string) (held chan struct{}, release func()) {
	held, gate := make(chan struct{}), make(chan struct{})
	first := true
	w.mu.Lock()
	w.gate = func(o string) {
		if o == op && first {
			first = false
			close(held)
			<-gate
		}
	}
	w.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return held, release
}

func (f *fleet) start(ctx context.Context, id string) *fakeWorker {
	return f.startSlots(ctx, id, 0)
}

// startSlots starts a worker that takes at most slots tasks (0: any
// number).
func (f *fleet) startSlots(ctx context.Context, id string, slots int) *fakeWorker {
	return f.startCaps(ctx, id, slots, control.Caps{})
}

// startCaps is startSlots for a worker that tells caps (its memory budget,
// ...) in its heartbeats, as weir worker -memory and the like do.
func (f *fleet) startCaps(ctx context.Context, id string, slots int, caps control.Caps) *fakeWorker {
	// Each worker has its own connection, so that closing it is a crash.
	nc, err := nats.Connect(f.nc.ConnectedUrl())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	w := &fakeWorker{f: f, id: id, nc: nc, current: map[string]control.Deploy{}, done: make(chan struct{}), slots: slots}
	w.client = control.NewWorker(nc, id, w, control.WorkerOptions{HeartbeatInterval: fakeHeartbeat, Tasks: w.tasks, Slots: slots, Caps: caps})
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	ready := make(chan struct{})
	go func() { defer close(w.done); _ = w.client.Run(wctx, ready) }()
	<-ready
	f.mu.Lock()
	f.ws[id] = w
	f.all = append(f.all, w)
	f.mu.Unlock()
	return w
}

// fakeHeartbeat is how often a fake worker sends its heartbeat.
const fakeHeartbeat = 40 * time.Millisecond

// kill stops a worker gracefully: it unregisters.
func (w *fakeWorker) kill() {
	w.stop()
	<-w.done
	w.f.mu.Lock()
	delete(w.f.ws, w.id)
	w.f.mu.Unlock()
}

// lose cuts worker w off without a word and has e's coordinator declare
// it lost at once, as its heartbeat timeout would: a worker that stopped
// gracefully (kill) says goodbye, which is no failure of its jobs'.
func (e *env) lose(w *fakeWorker) {
	w.nc.Close()
	w.kill()
	e.heardLast(w.id)
	e.mgr.ctl.Forget(w.id)
}

// heardLast waits until the coordinator has taken in the last heartbeat
// of worker id, whose connection is closed. One sent just before the
// close could otherwise arrive after the Forget that follows and count the
// worker in again: the job's next attempt was then placed on it and
// skipped (a CI run saw attempt 3 where the test wanted attempt 2). The
// flush has the coordinator's connection read all the server sent it so
// far; its heartbeat subscription takes them in soon after, which the
// last-heard time, still for 5 heartbeat intervals, stands for.
func (e *env) heardLast(id string) {
	_ = e.fleet.nc.Flush()
	last, since := e.mgr.ctl.HeardFrom()[id], time.Now()
	for time.Since(since) < 5*fakeHeartbeat {
		time.Sleep(fakeHeartbeat / 4)
		if at := e.mgr.ctl.HeardFrom()[id]; !at.Equal(last) {
			last, since = at, time.Now()
		}
	}
}

// crash cuts the worker off without a word: its connection closes, its
// heartbeats stop, nothing answers on its subjects. It returns once the
// server has noticed (a request to the worker finds no responders).
func (w *fakeWorker) crash() {
	w.nc.Close()
	w.kill()
	subj := control.Subjects{}.Worker(w.id, "ping")
	for {
		_, err := w.f.nc.Request(subj, nil, 100*time.Millisecond)
		if errors.Is(err, nats.ErrNoResponders) {
			return
		}
	}
}

// tasks reports the running attempts' tasks in heartbeats, as a real
// worker does.
func (w *fakeWorker) tasks() []control.TaskRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	refs := append([]control.TaskRef(nil), w.extra...)
	for _, d := range w.current {
		for _, task := range d.Tasks {
			ref := control.TaskRef{Job: d.Job, Attempt: d.Attempt, Task: task}
			if w.restored {
				ref.Stats = &control.TaskStats{Restored: true}
			}
			refs = append(refs, ref)
		}
	}
	return refs
}

// pass calls the worker's gate, if it has one, with op.
func (w *fakeWorker) pass(op string) {
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		gate(op)
	}
}

func (w *fakeWorker) Deploy(_ context.Context, d control.Deploy) error {
	w.pass(control.OpDeploy)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deploys = append(w.deploys, d)
	if w.hang != nil {
		w.mu.Unlock()
		<-w.hang
		w.mu.Lock()
		return errors.New("too late")
	}
	if strings.HasPrefix(d.Job, "doomed") {
		return errors.New("module traps in weir_process")
	}
	if w.deployErr != nil {
		return w.deployErr
	}
	if w.refuseBeyond {
		runs := len(w.extra)
		for job, c := range w.current {
			if job != d.Job {
				runs += len(c.Tasks)
			}
		}
		if runs+len(d.Tasks) > w.slots {
			return control.Errorf(control.ErrNoSlots, "worker %s has %d slots and runs %d tasks: no room for the %d tasks of job %s",
				w.id, w.slots, runs, len(d.Tasks), d.Job)
		}
	}
	if w.memory > 0 {
		var held int64
		for _, r := range w.extra {
			if r.Stats != nil {
				held += int64(r.Stats.MemoryLimit)
			}
		}
		for job, c := range w.current {
			if job != d.Job {
				held += control.DeployMemory(c)
			}
		}
		if held+control.DeployMemory(d) > w.memory {
			return control.Errorf(control.ErrNoSlots, "worker %s has a memory budget of %d bytes and its operators hold %d: no room for the %d job %s asks for",
				w.id, w.memory, held, control.DeployMemory(d), d.Job)
		}
	}
	if strings.HasPrefix(d.Job, "broken") {
		return control.Unrecoverable(errors.New("exactly-once sink out: stream OUT's duplicate window 2m0s is too short"))
	}
	w.current[d.Job] = d
	if !w.restoring {
		// As a real worker's tasks do once they restored their state.
		w.f.acks.Add(1)
		go func() {
			defer w.f.acks.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, task := range d.Tasks {
				_ = w.client.Running(ctx, control.TaskRef{Job: d.Job, Attempt: d.Attempt, Task: task})
			}
		}()
	}
	return nil
}

func (w *fakeWorker) Cancel(_ context.Context, c control.Cancel) error {
	w.pass(control.OpCancel)
	w.mu.Lock()
	gate := w.cancelGate
	w.mu.Unlock()
	if gate != nil {
		gate(c)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancels = append(w.cancels, c)
	var keep []control.TaskRef
	for _, r := range w.extra {
		if r.Job != c.Job || r.Attempt != c.Attempt {
			keep = append(keep, r)
		}
	}
	w.extra = keep
	if d, ok := w.current[c.Job]; ok && d.Attempt == c.Attempt {
		delete(w.current, c.Job)
	}
	return nil
}

func (w *fakeWorker) Trigger(_ context.Context, t control.Trigger) error {
	w.mu.Lock()
	w.triggers = append(w.triggers, t)
	d, ok := w.current[t.Job]
	w.mu.Unlock()
	if !ok || d.Attempt != t.Attempt {
		return fmt.Errorf("job %s attempt %d not running here", t.Job, t.Attempt)
	}
	w.mu.Lock()
	noAck := w.noAck
	w.mu.Unlock()
	if noAck {
		return nil
	}
	w.f.acks.Add(1)
	go func() { defer w.f.acks.Done(); w.f.ackAll(d, t) }()
	return nil
}

func (w *fakeWorker) Complete(_ context.Context, c control.Complete) error {
	w.pass(control.OpComplete)
	w.mu.Lock()
	w.complete = append(w.complete, c.CheckpointID)
	d, ok := w.current[c.Job]
	report := w.commitReport && ok && d.Attempt == c.Attempt
	w.mu.Unlock()
	if report {
		w.f.acks.Add(1)
		go func() {
			defer w.f.acks.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, task := range d.Tasks {
				if reportsCommits(task) {
					_ = w.client.Committing(ctx, control.TaskRef{Job: d.Job, Attempt: d.Attempt, Task: task}, c.CheckpointID)
				}
			}
		}()
	}
	return nil
}

// reportsCommits says whether task is a sink task, which reports its
// commits on a worker with commitReport.
func reportsCommits(task string) bool { return strings.HasPrefix(task, "out-") }

func (w *fakeWorker) Abort(ctx context.Context, a control.Abort) error {
	w.pass(control.OpAbort)
	w.mu.Lock()
	w.aborts = append(w.aborts, a.CheckpointID)
	w.mu.Unlock()
	if w.abortHang != nil {
		select {
		case w.abortHang <- struct{}{}:
		default:
		}
		<-ctx.Done()
	}
	return nil
}
func (w *fakeWorker) Stop(_ context.Context, s control.Stop) error {
	w.pass(control.OpStop)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stops = append(w.stops, s)
	err := w.stopErr
	w.stopErr = nil
	return err
}

func (w *fakeWorker) currentAttempt(job string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.current[job]
	return d.Attempt, ok
}

func (w *fakeWorker) lastDeploy(job string) control.Deploy {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.deploys) - 1; i >= 0; i-- {
		if w.deploys[i].Job == job {
			return w.deploys[i]
		}
	}
	return control.Deploy{}
}

func (f *fleet) ackAll(d control.Deploy, t control.Trigger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for task, wid := range d.Assignment {
		f.mu.Lock()
		w := f.ws[wid]
		f.mu.Unlock()
		if w == nil {
			continue // a dead worker acks nothing
		}
		key := checkpoint.StateKey(d.Job, t.CheckpointID, task)
		if err := f.store.Put(ctx, key, strings.NewReader("state")); err != nil {
			return
		}
		metrics := map[string]int64{control.MetricSnapshotBytes: 5, control.MetricAlignmentNanos: 1000}
		w.mu.Lock()
		if w.commitReport && reportsCommits(task) {
			metrics[control.MetricCommitReport] = 1
		}
		if pos, ok := w.positions[task]; ok {
			metrics[control.MetricSourcePosition] = pos
		}
		from := w.sinkStateFrom
		w.mu.Unlock()
		if from != nil && reportsCommits(task) && !t.Savepoint {
			if k := from(t.CheckpointID); k > 0 {
				metrics[control.MetricSinkStateFrom] = k
			}
		}
		_ = w.client.Ack(ctx, control.TaskRef{Job: d.Job, Attempt: d.Attempt, Task: task}, t.CheckpointID, key, metrics)
	}
}

type env struct {
	api   *control.APIClient
	fleet *fleet
	dir   string
	mgr   *Manager
}

func setup(t *testing.T, ctx context.Context) *env {
	t.Helper()
	return setupWith(t, ctx, Options{})
}

// setupWith is setup with opts (Catalog, and NC and timeouts when unset,
// filled in).
func setupWith(t *testing.T, ctx context.Context, opts Options) *env {
	t.Helper()
	nc := opts.NC
	if nc == nil {
		nc = embeddedtest.Conn(t)
	}
	dir := t.TempDir()
	st, err := storage.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.NC, opts.Catalog = nc, &checkpoint.Catalog{Meta: st, State: st}
	if opts.HeartbeatTimeout == 0 {
		opts.HeartbeatTimeout = 3 * time.Second
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 2 * time.Second
	}
	mgr := New(opts)
	ready := make(chan struct{})
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(mctx, ready) }()
	t.Cleanup(func() { cancel(); <-done })
	<-ready
	f := &fleet{t: t, nc: nc, store: st, ws: map[string]*fakeWorker{}}
	t.Cleanup(f.wait)
	return &env{api: control.NewAPIClient(nc, ""), fleet: f, dir: dir, mgr: mgr}
}

// waitWorkers waits until the coordinator counts n live workers.
func (e *env) waitWorkers(n int) {
	for len(e.mgr.Control().LiveWorkers()) < n {
		time.Sleep(10 * time.Millisecond)
	}
}

func spec(t *testing.T, name, extra string) *jobspec.Spec {
	t.Helper()
	s, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: jetstream, stream: IN, parallelism: 2}]
operators:
  - {name: count, module: count@1, parallelism: 2, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`+extra), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// submitRunning submits s and waits until the job runs.
func (e *env) submitRunning(t *testing.T, ctx context.Context, s *jobspec.Spec) control.JobStatus {
	t.Helper()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	return waitFor(t, ctx, e, s.Name, "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
}

// waitFor polls the job's status until cond holds.
func waitFor(t *testing.T, ctx context.Context, e *env, job string, what string, cond func(control.JobStatus) bool) control.JobStatus {
	t.Helper()
	for {
		st, err := e.api.Job(ctx, job)
		if err == nil && cond(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: timed out waiting for %s; last status %+v (%v)", job, what, st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A worker that dies while a deploy waits for its answer ends that wait as
// soon as its heartbeats stop (it is declared lost), not after
// DeployTimeout: the job fails over to the workers left.
func TestDeployToAWorkerThatDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{DeployTimeout: time.Hour})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	w2.hang = make(chan struct{})
	t.Cleanup(func() { close(w2.hang) })
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 30ms, retained: 2}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	for {
		w2.mu.Lock()
		n := len(w2.deploys)
		w2.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The crash: heartbeats and subscriptions stop (Run returns only once
	// the hung deploy does, at cleanup), and the deploy stays unanswered.
	w2.stop()
	e.fleet.mu.Lock()
	delete(e.fleet.ws, w2.id)
	e.fleet.mu.Unlock()
	st := waitFor(t, ctx, e, "wc", "running on w1 alone", func(st control.JobStatus) bool {
		if st.State != control.JobRunning || st.Attempt < 2 {
			return false
		}
		for _, w := range st.Assignment {
			if w != "w1" {
				return false
			}
		}
		return true
	})
	if d := w1.lastDeploy("wc"); d.Attempt != st.Attempt || len(d.Tasks) != 5 {
		t.Errorf("w1's last deploy: attempt %d, %d tasks; want attempt %d, 5 tasks", d.Attempt, len(d.Tasks), st.Attempt)
	}
	// The failure is the worker's loss, of that kind.
	if i := slices.IndexFunc(st.Failures, func(f control.Failure) bool {
		return f.Reason == "deploy to worker w2: worker lost while deploying"
	}); i < 0 || st.Failures[i].Kind != control.FailureWorkerLost {
		t.Errorf("failures %+v; want the deploy's of kind %q", st.Failures, control.FailureWorkerLost)
	}
}

// A failover does not wait for the cancel of a worker that is no longer
// live: a frozen process (kill -STOP) keeps its subscriptions, so the
// cancel finds a subscriber that never answers and would hold the failover
// back for the whole request timeout (5s for each such worker by default).
func TestFailoverDoesNotWaitForALostWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Longer than ctx gives the test, not so long that a failure hangs
	// it: the manager's requests end with the request timeout.
	e := setupWith(t, ctx, Options{RequestTimeout: time.Minute})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	// The freeze: w2 stops answering and its heartbeats stop, but its
	// cancel subject still has a subscriber.
	var mu sync.Mutex
	var cancels int
	sub, err := e.fleet.nc.Subscribe(control.Subjects{}.Worker("w2", "cancel"), func(*nats.Msg) {
		mu.Lock()
		cancels++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.fleet.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w2.kill()
	st := waitFor(t, ctx, e, "wc", "running on w1 alone", func(st control.JobStatus) bool {
		if st.State != control.JobRunning || st.Attempt < 2 {
			return false
		}
		for _, w := range st.Assignment {
			if w != "w1" {
				return false
			}
		}
		return true
	})
	if d := w1.lastDeploy("wc"); d.Attempt != st.Attempt || len(d.Tasks) != 5 {
		t.Errorf("w1's last deploy: attempt %d, %d tasks; want attempt %d, 5 tasks", d.Attempt, len(d.Tasks), st.Attempt)
	}
	mu.Lock()
	if cancels != 1 {
		t.Errorf("the frozen worker was sent %d cancels; want 1 (it is still told)", cancels)
	}
	mu.Unlock()
	cancelWhileLive(t, ctx, e, "wc")
}

// A coordinator that shuts down leaves its jobs' tasks running on the
// workers, as a crash would: the next coordinator resumes each job and
// takes its tasks over. Told to cancel them, a worker in another process
// (weir worker) stopped taking a core source's input from the stop of
// weir up until its next start had deployed again: a planned restart cost
// a trial 8-10 s of input, a kill -9 under 0.1 s. Nor does the shutdown
// wait for a frozen worker (RequestTimeout is an hour here): the
// manager's Run returning at all shows it did not.
func TestShutdownLeavesTheTasksRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := embeddedtest.Conn(t)
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mgr := New(Options{NC: nc, Catalog: &checkpoint.Catalog{Meta: st, State: st}, RequestTimeout: time.Hour})
	mctx, stop := context.WithCancel(context.Background())
	defer stop()
	ready, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); _ = mgr.Run(mctx, ready) }()
	<-ready
	f := &fleet{t: t, nc: nc, store: st, ws: map[string]*fakeWorker{}}
	defer f.wait()
	e := &env{api: control.NewAPIClient(nc, ""), fleet: f, mgr: mgr}
	w := f.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 1h}\n"))
	// A frozen worker: one that takes a cancel answers only once the
	// test ends.
	told := make(chan control.Cancel, 1)
	thaw := make(chan struct{})
	defer close(thaw)
	w.mu.Lock()
	w.cancelGate = func(c control.Cancel) {
		told <- c
		<-thaw
	}
	w.mu.Unlock()
	stop()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the coordinator's shutdown did not return")
	}
	// Whatever the manager sent, it sent before Run returned: a request
	// of the job's sent after it on the same connection reaches the
	// worker behind any cancel, and is answered after it (a worker takes
	// a job's requests one at a time, in order).
	aborted := make(chan error, 1)
	go func() {
		aborted <- control.NewCoordinator(nc, nil, control.CoordinatorOptions{}).Abort(ctx, "w1", control.Abort{Job: "wc", Attempt: 1, CheckpointID: 1})
	}()
	select {
	case c := <-told:
		t.Fatalf("the coordinator's shutdown told the worker %+v; want its tasks left running", c)
	case err := <-aborted:
		if err != nil {
			t.Fatal(err)
		}
	}
	w.mu.Lock()
	d, runs := w.current["wc"]
	w.mu.Unlock()
	if !runs || d.Attempt != 1 {
		t.Errorf("after the coordinator's shutdown the worker runs %+v (%v); want attempt 1 of wc", d, runs)
	}
}

// cancelWhileLive cancels job and waits until it is canceled, while its
// workers still answer, rather than leave it to the manager's shutdown.
func cancelWhileLive(t *testing.T, ctx context.Context, e *env, job string) {
	t.Helper()
	if _, err := e.api.CancelJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, job, "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
}

// A failover tells the workers to cancel the attempt side by side, not one
// after the other: a worker answers once its tasks stopped, seconds under
// load, and the waits would add up. Here each worker's cancel of attempt 1
// answers only once the other's arrived too.
func TestFailoverCancelsOnAllWorkersAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Longer than ctx gives the test, not so long that a failure hangs it.
	e := setupWith(t, ctx, Options{RequestTimeout: time.Minute})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	meet := rendezvous(ctx, 2)
	for i, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		w.cancelGate = func(c control.Cancel) {
			if c.Attempt == 1 {
				meet[i]()
			}
		}
		w.mu.Unlock()
	}
	s := spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	if err := w1.client.Failed(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "in-0"}, control.FailureUnknown, "trap"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "attempt 2 running", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt == 2
	})
	cancelWhileLive(t, ctx, e, "wc")
}

// A checkpoint's completion goes to every worker of the attempt at once:
// each worker here answers its first Complete only once the other's has
// arrived too. One after the other, a worker slow to answer (its sink's
// commit under way, a frozen process) held up the others' completions,
// and the checkpoint runner with them, by RequestTimeout each.
func TestCompletionsGoToAllWorkersAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Longer than ctx gives the test, not so long that a failure hangs it.
	e := setupWith(t, ctx, Options{RequestTimeout: time.Minute})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	meet := rendezvous(ctx, 2)
	for i, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		w.gate = func(op string) {
			if op == control.OpComplete {
				meet[i]()
			}
		}
		w.mu.Unlock()
	}
	e.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 20ms}\n"))
	waitFor(t, ctx, e, "wc", "two checkpoints", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 2 })
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		n := len(w.complete)
		w.mu.Unlock()
		if n == 0 {
			t.Errorf("worker %s heard of no completion", w.id)
		}
	}
	cancelWhileLive(t, ctx, e, "wc")
}

// A worker that crashed between heartbeats (it is still counted live, but
// nothing answers its subject) costs no restart attempt at deploy: the
// coordinator drops it at once and plans the attempt again without it.
func TestDeployToAVanishedWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{HeartbeatTimeout: time.Hour})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	w2.crash()
	s := spec(t, "wc", "restart: {strategy: none}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool {
		return st.State == control.JobRunning || st.State == control.JobFailed
	})
	if st.State != control.JobRunning || st.Restarts != 0 || st.Attempt != 2 {
		t.Fatalf("status %+v; want running attempt 2 with no restart", st)
	}
	// The status says why attempt 1 is missing: it is no failure.
	const why = "attempt 1 was not started: its worker w2 was lost while it was deployed"
	if len(st.Skipped) != 1 || st.Skipped[0].String() != why || st.Skipped[0].Worker != "w2" || len(st.Failures) != 0 {
		t.Errorf("skipped %+v, failures %+v; want %q alone", st.Skipped, st.Failures, why)
	}
	for task, w := range st.Assignment {
		if w != "w1" {
			t.Errorf("task %s on %s", task, w)
		}
	}
	if got := e.mgr.Control().LiveWorkers(); len(got) != 1 || got[0] != "w1" {
		t.Errorf("live workers %v", got)
	}
	w1.mu.Lock()
	defer w1.mu.Unlock()
	// A heartbeat of w1 sent before the cancel may still list attempt 1
	// when it is processed after attempt 2 began: a second cancel of
	// attempt 1, as a stale one.
	dropped := slices.ContainsFunc(w1.cancels, func(c control.Cancel) bool {
		return c.Attempt == 1 && strings.Contains(c.Reason, "gone while deploying")
	})
	if !dropped || slices.ContainsFunc(w1.cancels, func(c control.Cancel) bool { return c.Attempt != 1 }) {
		t.Errorf("w1 cancels %+v; want attempt 1's half-deployed tasks canceled, nothing else", w1.cancels)
	}
}

// Why an attempt was not started is kept in the job's record: after a
// coordinator restart the status still explains the missing number.
func TestSkippedAttemptSurvivesACoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, startManager := restartableWith(t, nil, Options{HeartbeatTimeout: time.Hour, RequestTimeout: 2 * time.Second})
	stop := startManager()
	f := e.fleet
	f.start(ctx, "w1")
	w2 := f.start(ctx, "w2")
	defer f.wait()
	for {
		if ws, err := e.api.Workers(ctx); err == nil && len(ws) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the workers never joined")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w2.crash()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "restart: {strategy: none}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	stop()
	stop = startManager()
	defer stop()
	const why = "attempt 1 was not started: its worker w2 was lost while it was deployed"
	if st, err := e.api.Job(ctx, "wc"); err != nil || len(st.Skipped) != 1 || st.Skipped[0].String() != why {
		t.Errorf("after the restart: %+v, %v; want skipped %q", st, err, why)
	}
}

// The attempts that are no restart — placing the job again after a worker
// was lost while deploying, resuming it after a coordinator restart — are
// counted in the status, and kept in the job's record: "attempt 3,
// restarts 0" is explained, and the explanation survives the restart.
// RESTARTS stays what the restart strategy counted, none.
func TestStatusCountsTheAttemptsThatAreNoRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A crashed worker stays live for the first manager (no heartbeat
	// timeout in the test): its deploy finds nobody. The second resumes
	// the job after a heartbeat timeout.
	opts := Options{HeartbeatTimeout: time.Hour, RequestTimeout: 2 * time.Second}
	e, startManager := restartableFrom(t, nil, &opts)
	stop := startManager()
	f := e.fleet
	f.start(ctx, "w1")
	w2 := f.start(ctx, "w2")
	defer f.wait()
	for {
		if ws, err := e.api.Workers(ctx); err == nil && len(ws) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the workers never joined")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w2.crash()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "restart: {strategy: none}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if st.Attempt != 2 || st.Restarts != 0 || st.Replacements != 1 || st.Resumes != 0 {
		t.Fatalf("status %+v; want attempt 2, placed again once, no restart", st)
	}
	stop()
	opts.HeartbeatTimeout = time.Second
	stop = startManager()
	defer stop()
	st = waitFor(t, ctx, e, "wc", "resumed", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.Attempt > 2
	})
	if st.Attempt != 3 || st.Restarts != 0 || st.Replacements != 1 || st.Resumes != 1 {
		t.Fatalf("status after the coordinator restart %+v; want attempt 3: placed again once (from the record), resumed once, no restart", st)
	}
	const want = "3 attempts: 1 placement again after a worker was drained or stopped, or was lost or refused its tasks while deploying, " +
		"1 resume after a coordinator restart, 1 first deployment"
	if got := st.AttemptsExplained(); got != want {
		t.Errorf("attempts explained as %q; want %q", got, want)
	}
}

// A checkpoint trigger that finds nobody on a worker's subject fails the
// job over at once, naming the worker, instead of waiting out the
// heartbeat timeout while every checkpoint fails.
func TestTriggerToAVanishedWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{HeartbeatTimeout: time.Hour})
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	w2.crash()
	// in-1 runs on w2: the savepoint's trigger goes there and finds
	// nobody.
	if _, err := e.api.Savepoint(ctx, "wc"); err == nil {
		t.Error("a savepoint with a crashed worker succeeded")
	}
	st := waitFor(t, ctx, e, "wc", "attempt 2", func(st control.JobStatus) bool {
		return st.Attempt >= 2 && st.State == control.JobRunning
	})
	if st.Attempt != 2 || st.Restarts != 1 || !strings.Contains(lastFailure(st), "worker w2 lost") {
		t.Errorf("status %+v; want attempt 2 after one restart for worker w2 lost", st)
	}
	if d := w1.lastDeploy("wc"); d.Attempt != 2 || len(d.Tasks) != 5 {
		t.Errorf("w1's last deploy: attempt %d, %d tasks", d.Attempt, len(d.Tasks))
	}
}

// A worker that reports, in its heartbeats, tasks of an attempt that is no
// longer current (it missed the cancel while cut off) or of a job the
// coordinator does not know is told to cancel them, once per attempt; the
// current attempt's tasks are left alone.
func TestStaleAttemptsCanceled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "wc", "checkpointing: {interval: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	if err := w1.client.Failed(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "count-1"}, control.FailureUnknown, "trap"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })
	w1.mu.Lock()
	before := len(w1.cancels)
	w1.extra = []control.TaskRef{
		{Job: "wc", Attempt: 1, Task: "in-0"}, {Job: "wc", Attempt: 1, Task: "in-1"},
		{Job: "ghost", Attempt: 4, Task: "x-0"},
	}
	w1.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w1.mu.Lock()
		left, got := len(w1.extra), append([]control.Cancel(nil), w1.cancels[before:]...)
		w1.mu.Unlock()
		if left == 0 {
			// A heartbeat sent just before a cancel arrived may bring
			// one more cancel of the same attempt; never of another.
			jobs := map[string]bool{}
			for _, c := range got {
				jobs[c.Job] = true
				if !c.Stale || c.Job == "wc" && (c.Attempt != 1 || !strings.Contains(c.Reason, "no longer current")) ||
					c.Job == "ghost" && (c.Attempt != 4 || !strings.Contains(c.Reason, "does not know the job")) ||
					c.Job != "wc" && c.Job != "ghost" {
					t.Errorf("cancel %+v", c)
				}
			}
			if len(jobs) != 2 {
				t.Errorf("cancels %+v; want wc attempt 1 and ghost canceled", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stale attempts still reported: %+v (cancels %+v)", w1.extra, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, _ := e.api.Job(ctx, "wc"); st.Attempt != 2 || st.State != control.JobRunning {
		t.Errorf("the current attempt was disturbed: %+v", st)
	}
	if _, ok := w1.currentAttempt("wc"); !ok {
		t.Error("the current attempt's tasks were canceled")
	}
}

// A job submitted again numbers its attempts on from its last run's, so
// the tasks of the earlier run that a cut-off worker still reports are
// stale, and canceled, rather than taken for the new run's.
func TestStaleRunCanceled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "wc", "checkpointing: {interval: 1h}\n")
	e.submitRunning(t, ctx, s)
	if _, err := e.api.CancelJob(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	st := e.submitRunning(t, ctx, s)
	if st.Attempt != 2 {
		t.Fatalf("second run at attempt %d, want 2", st.Attempt)
	}
	w1.mu.Lock()
	before := len(w1.cancels)
	w1.extra = []control.TaskRef{{Job: "wc", Attempt: 1, Task: "in-0"}}
	w1.mu.Unlock()
	canceled := func() bool {
		w1.mu.Lock()
		defer w1.mu.Unlock()
		for _, c := range w1.cancels[before:] {
			if c.Job == "wc" && c.Attempt == 1 {
				return true
			}
		}
		return false
	}
	for !canceled() {
		if ctx.Err() != nil {
			t.Fatal("the first run's task was not canceled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := w1.currentAttempt("wc"); !ok {
		t.Error("the second run's tasks were canceled")
	}
}

// A failure that would recur on every restart (a task's unrecoverable
// failure event, or a deploy refused as unrecoverable) fails the job at
// once: no restart is used up, the reason says why.
func TestUnrecoverableFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	restart := "restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n"
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "checkpointing: {interval: 1h}\n"+restart)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	err := w1.client.FailedUnrecoverable(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "in-0"}, control.FailureUnknown,
		"task in-0: resume after sequence 50, but the stream's last sequence is 10")
	if err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || st.Attempt != 1 ||
		!strings.HasPrefix(st.Reason, "task in-0 failed: resume after sequence 50") ||
		!strings.Contains(st.Reason, "not restarted") {
		t.Errorf("after an unrecoverable task failure: %+v", st)
	}
	if _, ok := w1.currentAttempt("wc"); ok {
		t.Error("the failed job's tasks still run")
	}

	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "broken", restart)}); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "broken", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || st.Attempt != 1 ||
		!strings.Contains(st.Reason, "deploy to worker w1: exactly-once sink out: stream OUT's duplicate window") ||
		!strings.Contains(st.Reason, "not restarted") {
		t.Errorf("after an unrecoverable deploy failure: %+v", st)
	}
	if len(st.Failures) != 1 || st.Failures[0].Kind != control.FailureDeploy || st.Failures[0].Task != "" {
		t.Errorf("failures %+v; want one of kind %q", st.Failures, control.FailureDeploy)
	}
}

// TestDeployFailureKeepsTheWorkersKind: a deploy that failed in an
// operator's setup (weir_init past its memory limit) is recorded with the
// kind the worker's reply gives it, not as a deploy failure, and with its
// reason as before; a reply without a kind, from a worker that does not
// send one, stays a deploy failure (TestUnrecoverableFailure).
func TestDeployFailureKeepsTheWorkersKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	const cause = "task in-0: operator in: weir_init: trap: out of memory (memory.grow of 5 pages (320 KiB) refused: " +
		"the operator's memory limit (limits.memory) is 512 KiB and it had 512 KiB)"
	w1.mu.Lock()
	w1.deployErr = control.Unrecoverable(control.WithFailureKind(errors.New(cause), control.FailureMemoryLimit))
	w1.mu.Unlock()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "oom", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "oom", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || !strings.HasPrefix(st.Reason, "deploy to worker w1: "+cause) {
		t.Errorf("after a deploy past the memory limit: %+v", st)
	}
	if len(st.Failures) != 1 || st.Failures[0].Kind != control.FailureMemoryLimit ||
		st.Failures[0].Reason != "deploy to worker w1: "+cause {
		t.Errorf("failures %+v; want one of kind %q with the worker's reason", st.Failures, control.FailureMemoryLimit)
	}
}

func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	w2 := e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	s := spec(t, "wc", "checkpointing: {interval: 30ms, retained: 2}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); !errors.Is(err, control.ErrConflict) {
		t.Errorf("second submit of a running job = %v, want ErrConflict", err)
	}
	st := waitFor(t, ctx, e, "wc", "two checkpoints", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 2 })
	if st.State != control.JobRunning || st.Attempt != 1 || len(st.Assignment) != 5 {
		t.Fatalf("status %+v", st)
	}
	if d := w1.lastDeploy("wc"); len(d.Tasks) != 3 || d.Restore != nil || d.Plan == nil || d.Spec.Name != "wc" {
		t.Errorf("w1 deploy %+v", d)
	}

	// 1. A task fails: every worker cancels attempt 1, attempt 2 restores
	// from a checkpoint at least as new as the latest one seen.
	latest := st.LatestCheckpoint
	if err := w2.client.Failed(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "count-1"}, control.FailureUnknown, "trap in weir_process"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "wc", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })
	if st.Restarts != 1 || !strings.Contains(lastFailure(st), "count-1 failed: trap in weir_process") {
		t.Errorf("after failover %+v", st)
	}
	d := w1.lastDeploy("wc")
	if d.Attempt != 2 || d.Restore == nil || d.Restore.CheckpointID < latest || len(d.Restore.Handles) != 5 {
		t.Errorf("attempt 2 deploy restore %+v (latest was %d)", d.Restore, latest)
	}
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		if len(w.cancels) == 0 || w.cancels[0].Attempt != 1 {
			t.Errorf("%s cancels %+v", w.id, w.cancels)
		}
		w.mu.Unlock()
	}

	// 2. A worker dies: its heartbeats stop, the job moves to w1 alone.
	cp := waitFor(t, ctx, e, "wc", "a checkpoint in attempt 2", func(s control.JobStatus) bool { return s.LatestCheckpoint > st.RestoredFrom })
	e.lose(w2)
	st = waitFor(t, ctx, e, "wc", "attempt 3", func(st control.JobStatus) bool { return st.Attempt == 3 && st.State == control.JobRunning })
	if !strings.Contains(lastFailure(st), "worker w2 lost") {
		t.Errorf("last failure %q", lastFailure(st))
	}
	for task, w := range st.Assignment {
		if w != "w1" {
			t.Errorf("task %s on %s after w2 was lost", task, w)
		}
	}
	if d := w1.lastDeploy("wc"); d.Restore == nil || d.Restore.CheckpointID < cp.LatestCheckpoint || len(d.Tasks) != 5 {
		t.Errorf("attempt 3 deploy %+v", d.Restore)
	}

	// 3. Savepoint, history, completion notifications, cancel.
	waitFor(t, ctx, e, "wc", "a checkpoint in attempt 3", func(s control.JobStatus) bool { return s.LatestCheckpoint > st.RestoredFrom })
	sp, err := e.api.Savepoint(ctx, "wc")
	if err != nil || !sp.Savepoint || sp.Status != control.CheckpointCompleted || sp.Size != 25 {
		t.Fatalf("savepoint %+v %v", sp, err)
	}
	cps, err := e.api.Checkpoints(ctx, "wc")
	if err != nil || len(cps) < 3 {
		t.Fatalf("checkpoints %d %v", len(cps), err)
	}
	completed := 0
	for _, c := range cps {
		if c.Status == control.CheckpointCompleted {
			completed++
			if c.Alignment != time.Microsecond || c.Acked != 5 || len(c.Tasks) != 5 {
				t.Errorf("checkpoint info %+v", c)
			}
		}
	}
	if completed < 3 { // retained 2 + the savepoint
		t.Errorf("%d completed checkpoints in history", completed)
	}
	w1.mu.Lock()
	if len(w1.complete) == 0 {
		t.Error("no completion notifications")
	}
	w1.mu.Unlock()
	st, err = e.api.CancelJob(ctx, "wc")
	if err != nil || st.State != control.JobCanceled {
		t.Errorf("cancel %+v %v", st, err)
	}
	// Retention: storage holds at most 2 checkpoints plus savepoints.
	ids, _ := e.mgr.opts.Catalog.IDs(ctx, "wc")
	if len(ids) > 4 {
		t.Errorf("checkpoints in storage: %v", ids)
	}
}

// A checkpoint that a failover aborts before any task acked it says how it
// was to be taken — the job's mode — and how many tasks had to ack it:
// weir checkpoint ls shows "unaligned 0/5" for an unaligned job's, not
// "aligned".
func TestFailoverAbortedCheckpointKeepsTheMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	w.mu.Lock()
	w.noAck = true // the checkpoint is in flight when the task fails
	w.mu.Unlock()
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "u", "checkpointing: {mode: unaligned, interval: 20ms, timeout: 1h}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n"))
	waitFor(t, ctx, e, "u", "a checkpoint in flight", func(control.JobStatus) bool {
		cps, err := e.api.Checkpoints(ctx, "u")
		return err == nil && len(cps) > 0
	})
	if err := w.client.Failed(ctx, control.TaskRef{Job: "u", Attempt: 1, Task: "count-1"}, control.FailureUnknown, "trap"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "u", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })
	cps, err := e.api.Checkpoints(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, c := range cps {
		if c.Status != control.CheckpointFailed {
			continue
		}
		failed++
		if c.Mode != jobspec.ModeUnaligned || c.Acked != 0 || c.Total != 5 || !strings.Contains(c.Reason, "count-1 failed") {
			t.Errorf("checkpoint aborted by the failover: %+v", c)
		}
	}
	if failed == 0 {
		t.Fatalf("no checkpoint aborted by the failover: %+v", cps)
	}
}

func TestRestartExhaustedAndIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	good := spec(t, "good", "checkpointing: {interval: 20ms}\n")
	e.submitRunning(t, ctx, good)
	doomed := spec(t, "doomed", "restart: {strategy: exponential-backoff, initial: 5ms, max: 20ms, attempts: 2}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: doomed}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "doomed", "failed", func(s control.JobStatus) bool { return s.State == control.JobFailed })
	// Two restarts were made (attempts 2 and 3); the third failure ended
	// the job and is no restart.
	if st.Restarts != 2 || st.Attempt != 3 || !strings.Contains(st.Reason, "module traps in weir_process") ||
		!strings.HasSuffix(st.Reason, " (after 2 restart attempts)") {
		t.Errorf("doomed %+v", st)
	}
	// Each attempt's failure is listed, newest first.
	if len(st.Failures) != 3 {
		t.Errorf("doomed lists %d failures, want 3: %+v", len(st.Failures), st.Failures)
	}
	for i, f := range st.Failures {
		if f.Attempt != 3-i || !strings.Contains(f.Reason, "module traps in weir_process") || f.Time.IsZero() ||
			(i > 0 && f.Time.After(st.Failures[i-1].Time)) {
			t.Errorf("failure %d: %+v", i, f)
		}
	}
	g, _ := e.api.Job(ctx, "good")
	if g.State != control.JobRunning || g.Attempt != 1 || g.Restarts != 0 {
		t.Errorf("the other job was touched: %+v", g)
	}
	jobs, err := e.api.Jobs(ctx)
	if err != nil || len(jobs) != 2 || jobs[0].Name != "doomed" {
		t.Errorf("jobs %+v %v", jobs, err)
	}
	if _, err := e.api.Job(ctx, "nosuch"); !errors.Is(err, control.ErrNotFound) || err.Error() != `no job "nosuch"` {
		t.Errorf("unknown job = %v", err)
	}
	// A name one or two edits from a job's is taken for a misspelling.
	if _, err := e.api.Job(ctx, "doomd"); !errors.Is(err, control.ErrNotFound) || err.Error() != `no job "doomd" (did you mean doomed?)` {
		t.Errorf("misspelled job = %v", err)
	}
	// Checkpoint failures beyond the tolerable count fail the job over:
	// a declined checkpoint with tolerable-failures 0.
	tol := spec(t, "tol", "checkpointing: {interval: 20ms}\nrestart: {strategy: fixed-delay, delay: 5ms}\n")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: tol}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "tol", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint > 0 })
	// Decline every pending checkpoint until the job restarts.
	w := e.fleet.ws["w1"]
	for {
		st, _ := e.api.Job(ctx, "tol")
		if st.Attempt > 1 {
			// The cause is the last failure's: REASON is the state's now,
			// and empty once attempt 2 runs.
			if f := st.Latest(); f == nil || !strings.Contains(f.Reason, "consecutive checkpoint failures") ||
				f.Kind != control.FailureCheckpointsFailed || f.Task != "" {
				t.Errorf("tol's last failure %+v (reason %q)", f, st.Reason)
			}
			break
		}
		cps, _ := e.api.Checkpoints(ctx, "tol")
		for _, c := range cps {
			if c.Status == control.CheckpointPending {
				_ = w.client.Decline(ctx, control.TaskRef{Job: "tol", Attempt: 1, Task: "in-0"}, c.ID, control.DeclineFailed, "disk full")
			}
		}
		if ctx.Err() != nil {
			t.Fatal("tol never failed over")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCorruptCheckpointFallbackAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	s := spec(t, "sp", "checkpointing: {disabled: true}\nrestart: {delay: 5ms}\n")
	e.submitRunning(t, ctx, s)
	for i := 1; i <= 2; i++ {
		sp, err := e.api.Savepoint(ctx, "sp")
		if err != nil || sp.ID != int64(i) {
			t.Fatalf("savepoint %d: %+v %v", i, sp, err)
		}
	}
	// Corrupt savepoint 2's metadata: the failover must use 1.
	p := filepath.Join(e.dir, "sp", "chk-2", "_metadata")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.client.Failed(ctx, control.TaskRef{Job: "sp", Attempt: 1, Task: "in-1"}, control.FailureUnknown, "boom"); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "sp", "attempt 2", func(s control.JobStatus) bool { return s.Attempt == 2 && s.State == control.JobRunning })
	if st.RestoredFrom != 1 || w.lastDeploy("sp").Restore.CheckpointID != 1 {
		t.Errorf("restored from %d, want 1 (2 is corrupt)", st.RestoredFrom)
	}
	prev := st.Attempt
	if _, err := e.api.CancelJob(ctx, "sp"); err != nil {
		t.Fatal(err)
	}
	// restore --from: a new run starting at savepoint 1, its attempts
	// numbered on from the last run's.
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "sp", From: "2"}); err == nil {
		t.Error("restore from a corrupt checkpoint accepted")
	}
	st, err = e.api.Restore(ctx, control.RestoreRequest{Job: "sp", From: "sp/1"})
	if err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, ctx, e, "sp", "restored run", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if d := w.lastDeploy("sp"); d.Attempt != prev+1 || st.Attempt != prev+1 || d.Restore == nil || d.Restore.CheckpointID != 1 || st.RestoredFrom != 1 {
		t.Errorf("restore deploy %+v status %+v", d.Restore, st)
	}
	// New checkpoint IDs continue after those in storage.
	sp, err := e.api.Savepoint(ctx, "sp")
	if err != nil || sp.ID != 3 {
		t.Errorf("savepoint after restore %+v %v", sp, err)
	}
}

func TestFinished(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "fin", "checkpointing: {interval: 10ms}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "fin", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	for task := range st.Assignment {
		if err := w.client.Finished(ctx, control.TaskRef{Job: "fin", Attempt: 1, Task: task}); err != nil {
			t.Fatal(err)
		}
	}
	st = waitFor(t, ctx, e, "fin", "finished", func(s control.JobStatus) bool { return s.State.Terminal() })
	if st.State != control.JobFinished || st.Restarts != 0 {
		t.Errorf("status %+v", st)
	}
	// A finished job has nothing to cancel, stop or take a savepoint of:
	// each is refused, saying when it ended, and the job stays finished.
	ended := "job fin already finished at " + st.Updated.UTC().Format(time.DateTime+" MST") + "; nothing to "
	if _, err := e.api.Savepoint(ctx, "fin"); !errors.Is(err, control.ErrConflict) || !strings.HasPrefix(err.Error(), ended+"take a savepoint of") {
		t.Errorf("savepoint of a finished job = %v", err)
	}
	if _, err := e.api.StopJob(ctx, "fin"); !errors.Is(err, control.ErrConflict) || !strings.HasPrefix(err.Error(), ended+"stop") {
		t.Errorf("stop of a finished job = %v", err)
	}
	if got, err := e.api.CancelJob(ctx, "fin"); !errors.Is(err, control.ErrConflict) || err.Error() != ended+"cancel" {
		t.Errorf("cancel of a finished job = %+v, %v", got, err)
	}
	if now, err := e.api.Job(ctx, "fin"); err != nil || now.State != control.JobFinished || !now.Updated.Equal(st.Updated) {
		t.Errorf("after the refusals: %+v, %v", now, err)
	}
}

// TestCoordinatorRestart stops a manager while its job runs and starts a new
// one on the same storage: the job resumes from its latest checkpoint as the
// next attempt, and the workers are told to drop the old attempt.
func TestCoordinatorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	// A finished job is remembered too.
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "old", "checkpointing: {disabled: true}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "old", "running", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if _, err := e.api.CancelJob(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	// So is a failed job, with why it failed.
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "doomed", "restart: {strategy: none}\n")}); err != nil {
		t.Fatal(err)
	}
	doomed := waitFor(t, ctx, e, "doomed", "failed", func(s control.JobStatus) bool { return s.State == control.JobFailed })
	before := waitFor(t, ctx, e, "ha", "two checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 2 })
	stop()

	stop = startManager()
	defer stop()
	// Until the next attempt runs, the job is restarting, because the
	// coordinator restarted: not created, as if it had not run.
	if st, err := e.api.Job(ctx, "ha"); err != nil || st.State != control.JobRestarting || st.Reason != ReasonCoordinatorRestarted ||
		st.Attempt != before.Attempt {
		t.Errorf("job being resumed: %+v, %v; want restarting (attempt %d): %s", st, err, before.Attempt, ReasonCoordinatorRestarted)
	}
	after := waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning && s.Attempt > before.Attempt })
	// Running again, it is no longer waiting for anything: the reason is
	// gone (the restart was no failure of the job's).
	if after.Reason != "" {
		t.Errorf("resumed job runs with the reason %q", after.Reason)
	}
	d := w.lastDeploy("ha")
	if d.Restore == nil || d.Restore.CheckpointID < before.LatestCheckpoint || after.RestoredFrom != d.Restore.CheckpointID {
		t.Errorf("resumed from %+v, latest before the restart was %d", d.Restore, before.LatestCheckpoint)
	}
	w.mu.Lock()
	dropped := false
	for _, c := range w.cancels {
		if c.Job == "ha" && c.Attempt == before.Attempt {
			dropped = true
		}
	}
	w.mu.Unlock()
	if !dropped {
		t.Error("the old attempt was never canceled")
	}
	waitFor(t, ctx, e, "ha", "a new checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint > d.Restore.CheckpointID })
	if old, err := e.api.Job(ctx, "old"); err != nil || old.State != control.JobCanceled {
		t.Errorf("old job after restart: %+v %v", old, err)
	}
	if got, err := e.api.Job(ctx, "doomed"); err != nil || got.State != control.JobFailed || got.Reason != doomed.Reason ||
		!got.Updated.Equal(doomed.Updated) || !strings.Contains(got.Reason, "module traps in weir_process") ||
		len(got.Failures) != 1 || got.Failures[0].Reason != doomed.Failures[0].Reason || !got.Failures[0].Time.Equal(doomed.Failures[0].Time) {
		t.Errorf("failed job after restart: %+v %v, before: %+v", got, err, doomed)
	}
}

// A restarted coordinator tells the live workers to drop the old attempt
// side by side, not one after the other: a worker that is frozen yet still
// counted live held the resume back by RequestTimeout (5s by default)
// each. Here each worker's cancel of the old attempt answers only once the
// other's arrived too; RequestTimeout is longer than the test may take.
func TestResumeCancelsOnAllWorkersAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, startManager := restartableWith(t, nil, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: time.Hour})
	f := e.fleet
	stop := startManager()
	w1 := f.start(ctx, "w1")
	w2 := f.start(ctx, "w2")
	defer f.wait()
	before := e.submitRunning(t, ctx, spec(t, "ha", "checkpointing: {interval: 1h}\n"))
	stop()

	var both sync.WaitGroup
	both.Add(2)
	arrived := make(chan struct{})
	go func() { both.Wait(); close(arrived) }()
	for _, w := range []*fakeWorker{w1, w2} {
		var once sync.Once
		w.mu.Lock()
		w.cancelGate = func(c control.Cancel) {
			if c.Job == "ha" && c.Attempt == before.Attempt {
				once.Do(both.Done)
				select {
				case <-arrived:
				case <-ctx.Done(): // one after the other: the test fails
				}
			}
		}
		w.mu.Unlock()
	}
	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool {
		return s.State == control.JobRunning && s.Attempt > before.Attempt
	})
	for _, w := range []*fakeWorker{w1, w2} {
		w.mu.Lock()
		told := slices.ContainsFunc(w.cancels, func(c control.Cancel) bool {
			return c.Job == "ha" && c.Attempt == before.Attempt && c.Reason == ReasonCoordinatorRestarted
		})
		w.mu.Unlock()
		if !told {
			t.Errorf("%s was not told to drop attempt %d", w.id, before.Attempt)
		}
	}
	if _, err := e.api.CancelJob(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ha", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
}

// giveUp says why a job is not restarted in words, counting the restarts
// made before the failure that ends it.
func TestGiveUpReason(t *testing.T) {
	fixed := func(attempts int) jobspec.Restart {
		return jobspec.Restart{Strategy: jobspec.RestartFixedDelay, Attempts: attempts}
	}
	for _, c := range []struct {
		restart  jobspec.Restart
		n        int // consecutive failures so far
		restarts int // restarts made in the run (RESTARTS)
		want     string
	}{
		{jobspec.Restart{Strategy: jobspec.RestartNone}, 1, 0, "not restarted: the restart strategy is none"},
		{fixed(0), 1, 0, "not restarted: the restart strategy allows no attempts"},
		{fixed(1), 1, 0, ""},
		{fixed(1), 2, 1, "after 1 restart attempt"},
		{fixed(2), 2, 1, ""},
		{fixed(2), 3, 2, "after 2 restart attempts"},
		// Restarts before the last progress count in RESTARTS, not here.
		{fixed(1), 2, 4, "after 1 restart attempt since a checkpoint last made progress (4 in this run)"},
		{fixed(2), 3, 5, "after 2 restart attempts since a checkpoint last made progress (5 in this run)"},
	} {
		j := &job{spec: &jobspec.Spec{Restart: c.restart}}
		j.st.Restarts = c.restarts
		if got := j.giveUp(c.n); got != c.want {
			t.Errorf("%+v after failure %d: %q, want %q", c.restart, c.n, got, c.want)
		}
	}
}

// A task that failed because another one closed a channel under it reports
// a secondary failure; the job's reason is the failure that caused it,
// even when that one is reported second. (The grace is an hour here: with
// the second's grace the two reports, one request after the other, could
// be that far apart on a loaded machine.)
func TestSecondaryFailureWaitsForItsCause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setupWith(t, ctx, Options{secondaryGrace: time.Hour})
	w := e.fleet.start(ctx, "w1")
	s := spec(t, "wc", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	if err := w.client.FailedSecondary(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "in-0"}, control.FailureUnknown, "channel in-0 -> count-0 closed"); err != nil {
		t.Fatal(err)
	}
	if err := w.client.Failed(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "count-0"}, control.FailureUnknown, "trap in weir_process"); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })
	if lastFailure(st) != "task count-0 failed: trap in weir_process" || len(st.Failures) != 1 {
		t.Errorf("after the cause came second: %+v", st)
	}
}

// Alone, a secondary failure fails the attempt over after the grace, as
// the attempt's reason.
func TestSecondaryFailureAloneAfterTheGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	s := spec(t, "wc", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	e.submitRunning(t, ctx, s)
	start := time.Now()
	if err := w.client.FailedSecondary(ctx, control.TaskRef{Job: "wc", Attempt: 1, Task: "in-0"}, control.FailureUnknown, "channel closed"); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "wc", "attempt 2", func(st control.JobStatus) bool { return st.Attempt == 2 && st.State == control.JobRunning })
	if lastFailure(st) != "task in-0 failed: channel closed" || time.Since(start) < secondaryGrace {
		t.Errorf("a secondary failure alone: %+v after %v", st, time.Since(start))
	}
}

// restartable makes what a test needs to stop a coordinator and start
// another on the same storage: a server, a fleet of fake workers, and
// start, which runs a manager keeping checkpoints and job records in a
// directory (seen through wrap, if not nil) until its stop is called.
func restartable(t *testing.T, wrap func(storage.Store) storage.Store) (e *env, start func() (stop func())) {
	t.Helper()
	return restartableWith(t, wrap, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second})
}

// restartableWith is restartable with the managers' timeouts, and log,
// taken from opts.
func restartableWith(t *testing.T, wrap func(storage.Store) storage.Store, opts Options) (e *env, start func() (stop func())) {
	t.Helper()
	return restartableFrom(t, wrap, &opts)
}

// restartableFrom is restartableWith with the timeouts and log read from
// *opts at each start: a test may change them between a manager and the
// next.
func restartableFrom(t *testing.T, wrap func(storage.Store) storage.Store, opts *Options) (e *env, start func() (stop func())) {
	t.Helper()
	nc := embeddedtest.Conn(t)
	path := t.TempDir()
	dir, err := storage.NewDir(path)
	if err != nil {
		t.Fatal(err)
	}
	st := storage.Store(dir)
	if wrap != nil {
		st = wrap(dir)
	}
	start = func() func() {
		mgr := New(Options{NC: nc, Catalog: &checkpoint.Catalog{Meta: st, State: st}, Jobs: st,
			HeartbeatTimeout: opts.HeartbeatTimeout, RequestTimeout: opts.RequestTimeout, Log: opts.Log})
		mctx, mcancel := context.WithCancel(context.Background())
		ready, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); _ = mgr.Run(mctx, ready) }()
		<-ready
		return func() { mcancel(); <-done }
	}
	f := &fleet{t: t, nc: nc, store: dir, ws: map[string]*fakeWorker{}}
	return &env{api: control.NewAPIClient(nc, ""), fleet: f, dir: path}, start
}

// catalogIDs lists the checkpoints of job in e's directory.
func (e *env) catalogIDs(ctx context.Context, job string) ([]int64, error) {
	st, err := storage.NewDir(e.dir)
	if err != nil {
		return nil, err
	}
	return (&checkpoint.Catalog{Meta: st, State: st}).IDs(ctx, job)
}

// rendezvous returns n functions, one per party, each of which returns
// once every party has called its own (or ctx ended); later calls return
// at once. Requests held at such a meeting pass only when they are sent
// side by side: sent one after the other, the first waits until ctx ends
// and the test fails.
func rendezvous(ctx context.Context, n int) []func() {
	var all sync.WaitGroup
	all.Add(n)
	arrived := make(chan struct{})
	go func() { all.Wait(); close(arrived) }()
	meet := make([]func(), n)
	for i := range meet {
		var once sync.Once
		meet[i] = func() {
			once.Do(all.Done)
			select {
			case <-arrived:
			case <-ctx.Done():
			}
		}
	}
	return meet
}

// lastFailure returns the cause of the failover a running job recovered
// from: its last failure's. A running job has no reason of its own; one
// that has is reported as such, to fail the caller's comparison.
func lastFailure(st control.JobStatus) string {
	switch {
	case st.Reason != "":
		return "a reason: " + st.Reason
	case st.LastFailure == nil:
		return "no last failure"
	}
	return st.LastFailure.Reason
}
