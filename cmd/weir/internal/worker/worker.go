// Package worker runs a job's tasks on one machine: it speaks the worker side
// of the coordinator's control protocol (coordinator/control), turns each
// deployed plan into host tasks — JetStream or core-NATS sources, wasm
// operators, NATS sinks — wires them with in-process channels when both ends
// run here and NATS channels otherwise, and relays checkpoint triggers,
// completions and the tasks' acknowledgements and failures.
//
// It is the one place that knows every part of weir (host, host/wasm,
// transport, coordinator/control), which is why it lives under cmd.
package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/partition"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// DefaultDataPrefix starts the subjects of remote channels. A job spec's
// sources and sinks may not reach them (jobspec.Reserved).
const DefaultDataPrefix = jobspec.DefaultDataPrefix

// ModuleSource fetches the bytes of an operator's module. Its errors name
// the module ("module ./x.wasm: no such file or directory"): the worker
// adds only the task. An error that wraps fs.ErrNotExist,
// registry.ErrNotFound or ErrModuleNotFound says the module is not there,
// one that wraps ErrModuleChanged that its bytes are not the ones the job
// was submitted with, one that wraps registry.ErrTooLarge that it is over
// the registry's size limit: each fails the job at once (Unrecoverable).
// Any other error (a registry that did not answer) fails it over.
type ModuleSource func(ctx context.Context, m control.Module) ([]byte, error)

// moduleNotFound marks a ModuleSource's error as ErrModuleNotFound and
// leaves its message alone.
type moduleNotFound struct{ error }

func (e moduleNotFound) Unwrap() []error { return []error{e.error, ErrModuleNotFound} }

// Errors of a ModuleSource that no restart of the job can get past.
var (
	// ErrModuleNotFound: the module file or registry entry does not exist
	// (any more).
	ErrModuleNotFound = errors.New("module not found")
	// ErrModuleChanged: the module's bytes no longer have the digest the
	// job was submitted with.
	ErrModuleChanged = errors.New("module changed since the job was submitted")
)

// Config configures a Worker.
type Config struct {
	// ID names the worker; it must be unique among the workers of a cluster.
	ID string
	// Conn is the NATS connection for control, channels, sources and sinks.
	Conn *nats.Conn
	// Engine runs the operators' modules.
	Engine *wasm.Engine
	// Store holds task snapshots; every worker of a cluster must reach the
	// same store (a local directory only works for one machine).
	Store host.Store
	// Modules fetches module bytes.
	Modules ModuleSource
	// ControlPrefix is the control subjects' prefix ("" = default).
	ControlPrefix string
	// DataPrefix is the remote channels' subject prefix ("" = default).
	DataPrefix string
	// SpillDir holds alignment spill files ("" = the system temp dir).
	SpillDir string
	// HeartbeatInterval (0 = control's default).
	HeartbeatInterval time.Duration
	// ChannelCapacity bounds the bytes queued on one in-process channel (0 =
	// 1 MiB); remote channels use their own window.
	ChannelCapacity int
	// Slots is the most tasks the worker asks to be given at a time, of
	// all jobs (0: no limit); the coordinator places no more on it
	// (plan.Assign), and the worker refuses a deploy beyond it
	// (control.ErrNoSlots).
	Slots int
	// Caps bound what the operators of a job may ask of the worker: its
	// memory budget, counted as slots are, and per-instance maximums of
	// limits.memory, limits.timeout and limits.log-rate. The coordinator
	// places no job on the worker that they refuse, and the worker refuses
	// a deploy over them. Zero fields bound nothing.
	Caps control.Caps
	// AtomicBatch is the most messages a JetStream sink puts in one
	// atomic batch (0 = sink.MaxAtomicBatch, nats-server's default limit);
	// the server must accept it (max_batch_size). At LargeCheckpoint or
	// more, exactly-once sinks in publish mode auto commit large
	// checkpoints in atomic batches.
	AtomicBatch int
	// Log receives the worker's log lines, and the operators' unless
	// OperatorLog is set.
	Log *slog.Logger
	// OperatorLog, if set, receives the operators' own lines (weir.log,
	// stdout, stderr) and the host's warnings about them: an operator's
	// lines are its author's output, which a log kept at warnings and
	// errors for the worker's own lines must not hide.
	OperatorLog *slog.Logger
	// Hooks, if set, lets tests wrap what the worker builds (fault
	// injection).
	Hooks *Hooks
}

// Hooks let tests wrap the parts of a task. Every function may be nil.
type Hooks struct {
	Operator func(job, task string, op host.Operator) host.Operator
	Store    func(job, task string, s host.Store) host.Store
	Sink     func(job, task string, s host.Sink) host.Sink
}

// Worker runs tasks for the coordinator.
type Worker struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger
	ctl *control.Worker

	// stacks remembers the trap stacks logged, so that a job failing the
	// same way on every restart logs its stack once.
	stacks stackLog

	mu   sync.Mutex
	jobs map[string]*attempt // by job name
	// claims holds, by job name, the tasks of the deploys being set up:
	// they count against the slots before they run; claimMem their
	// operators' memory, against Caps.Memory.
	claims   map[string]int
	claimMem map[string]int64

	// stopping counts the attempts whose tasks, canceled, have not all
	// ended yet (stopAttempt); Run waits for them before it returns.
	stopping sync.WaitGroup
}

// New returns a worker; call Run.
func New(cfg Config) (*Worker, error) {
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Conn == nil || cfg.Engine == nil || cfg.Store == nil || cfg.Modules == nil {
		return nil, errors.New("worker: Conn, Engine, Store and Modules are required")
	}
	if cfg.DataPrefix == "" {
		cfg.DataPrefix = DefaultDataPrefix
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("worker %s: jetstream: %w", cfg.ID, err)
	}
	w := &Worker{cfg: cfg, js: js, log: cfg.Log.With("worker", cfg.ID), jobs: map[string]*attempt{}, claims: map[string]int{}, claimMem: map[string]int64{}}
	// The host goes with every heartbeat: the coordinator's log and the
	// workers it lists say where a worker runs, not just its ID.
	host, _ := os.Hostname()
	w.ctl = control.NewWorker(cfg.Conn, cfg.ID, w, control.WorkerOptions{
		Prefix: cfg.ControlPrefix, Host: host, HeartbeatInterval: cfg.HeartbeatInterval, Tasks: w.taskRefs,
		Slots: cfg.Slots, Store: storage.Location(cfg.Store), Caps: cfg.Caps,
	})
	return w, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Run serves the coordinator until ctx is done, then stops every task.
// ready, if not nil, is closed once the worker listens.
func (w *Worker) Run(ctx context.Context, ready chan<- struct{}) error {
	err := w.ctl.Run(ctx, ready)
	w.mu.Lock()
	jobs := make([]*attempt, 0, len(w.jobs))
	for _, a := range w.jobs {
		jobs = append(jobs, a)
	}
	w.jobs = map[string]*attempt{}
	w.mu.Unlock()
	for _, a := range jobs {
		a.stop()
	}
	w.stopping.Wait()
	return err
}

// Tasks counts the tasks the worker holds: those it runs and those of
// the deploys it is setting up.
func (w *Worker) Tasks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.jobs {
		n += len(a.taskIDs)
	}
	for _, c := range w.claims {
		n += c
	}
	return n
}

// RunningTasks lists the running tasks with their counters, as the
// worker's heartbeats carry them (weir worker -metrics).
func (w *Worker) RunningTasks() []control.TaskRef { return w.taskRefs() }

// taskRefs lists the running tasks with their counters, for heartbeats.
func (w *Worker) taskRefs() []control.TaskRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	var refs []control.TaskRef
	for _, a := range w.jobs {
		for _, id := range a.taskIDs {
			s := a.tasks[id].Stats()
			st := &control.TaskStats{
				RecordsIn: s.RecordsIn, RecordsOut: s.RecordsOut, RunningNanos: int64(s.Running),
				BusyNanos: int64(s.Busy), BackpressuredNanos: int64(s.Backpressured), Checkpoints: s.Checkpoints,
				InputEnded: s.InputEnded, Restored: s.Restored, MemoryBytes: s.MemoryBytes, MemoryLimit: s.MemoryLimit,
				QueuedRecords: s.QueuedRecords, InputBufferBytes: s.InputBufferBytes, InCallNanos: int64(s.InCall),
				InCallExport: s.InCallExport, InCallCheckpoint: s.InCallCheckpoint,
			}
			if s.ReportsCommits {
				st.SinkCommitted = &s.Committed
			}
			if p := a.pending[id]; p != nil {
				n, ok := p.Pending()
				if u, isU := p.(unreadCounter); isU {
					// Not processed yet: fetched records the task
					// has not taken count too.
					n, ok = u.Unread(s.SourceOffset)
				}
				if ok {
					v := int64(min(n, math.MaxInt64))
					st.SourcePending = &v
				}
				if r, ok := p.(readThrougher); ok {
					var seq uint64 // 0 until the task processed any input
					if s, ok := r.ReadThrough(s.SourceOffset); ok {
						seq = s
					}
					st.SourceReadSeq = &seq
				}
				if w, ok := p.(stopAwaiter); ok {
					if stop, last, ok := w.AwaitsStop(); ok {
						st.AwaitedStop, st.StreamLastSeq = stop, last
					}
				}
				if c, ok := p.(*source.Core); ok {
					st.CoreSubscription = w.coreSubscription(a, id, c)
				}
			}
			refs = append(refs, control.TaskRef{Job: a.job, Attempt: a.n, Task: id, Stats: st})
		}
	}
	return refs
}

// attempt is one deployed job attempt on this worker.
type attempt struct {
	job     string
	n       int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	tasks   map[string]*host.Task
	taskIDs []string
	live    atomic.Int64 // tasks that have not returned yet: they hold a slot each
	mem     int64        // its operator tasks' memory limits: held of Caps.Memory while live
	sources []string
	// pending holds the source tasks' sources that count what they have
	// not read yet.
	pending map[string]pendingCounter
	// dropped is, by core source task, how many messages its
	// subscription had dropped when the worker last logged it (taskRefs,
	// under Worker.mu).
	dropped map[string]int
	// completed is the latest checkpoint whose completion the tasks were
	// told (Complete). Only the job's requests, one at a time, use it.
	completed int64
	// endedMu guards ended: the tasks whose Run returned.
	endedMu sync.Mutex
	ended   map[string]bool
}

// coreSubscription returns what core source c of task id of attempt a
// holds and dropped, for the task's stats, and logs the messages it
// dropped since the worker last said so: one line per heartbeat at most
// while it drops, naming the job, the task and the count. The caller
// holds w.mu.
func (w *Worker) coreSubscription(a *attempt, id string, c *source.Core) *control.CoreSubscription {
	cs := c.Stats()
	if cs.Dropped > a.dropped[id] {
		if a.dropped == nil {
			a.dropped = map[string]int{}
		}
		cfg := c.Config()
		w.log.Warn("core NATS source dropped messages: the job fell behind its input past the source's pending limit "+
			"(raise the slow operator's parallelism or make it faster, raise the source's pending-messages or pending-bytes, "+
			"or read a JetStream stream to lose nothing)",
			"job", a.job, "task", id, "subject", cfg.Subject, "dropped", cs.Dropped-a.dropped[id], "dropped_in_all", cs.Dropped,
			"pending_limit", fmt.Sprintf("%d messages or %s", cs.PendingMsgsLimit, jobspec.FormatSize(int64(cs.PendingBytesLimit))))
		a.dropped[id] = cs.Dropped
	}
	return &control.CoreSubscription{Dropped: int64(cs.Dropped), PendingBytes: int64(cs.PendingBytes),
		LimitMessages: int64(cs.PendingMsgsLimit), LimitBytes: int64(cs.PendingBytesLimit)}
}

// pendingCounter is a source that can tell how much of its input it has
// not read yet (source.JetStream, source.Core).
type pendingCounter interface {
	Pending() (n uint64, ok bool)
}

// unreadCounter is a source that can tell how much of its input a task
// whose offset is offset has not processed yet (source.JetStream).
type unreadCounter interface {
	Unread(offset []byte) (n uint64, ok bool)
}

// readThrougher is a source that can tell from a task's offset up to
// which stream sequence the task has read everything (source.JetStream).
type readThrougher interface {
	ReadThrough(offset []byte) (seq uint64, ok bool)
}

// stopAwaiter is a bounded source that can tell whether it waits for its
// stream to reach its stop (source.JetStream).
type stopAwaiter interface {
	AwaitsStop() (stop, last uint64, ok bool)
}

func (a *attempt) stop() {
	a.cancel()
	a.wg.Wait()
}

// stopWait bounds how long the worker waits for the tasks of an attempt
// it stops — canceled, or replaced by a deploy of the next — before it
// answers the coordinator: well within the coordinator's request timeout
// (job.Options.RequestTimeout, 5 s by default). A task that has not
// ended by then is blocked in a call that does not heed its cancel (a
// JetStream source's consumers that do not stop during a NATS reconnect,
// for up to 12 s; a sink letting its commit finish; an acknowledgement
// waiting for its answer): it ends in the background, and the worker
// logs when. Waiting on would hold up the job's next requests here too,
// its next attempt's deploy among them (a worker runs a job's requests
// one at a time), and the coordinator's cancel would fail for want of an
// answer.
const stopWait = 2 * time.Second

// stopWithin cancels the attempt's tasks and waits up to d for them to
// end. It returns a channel closed once every task ended, and whether
// they had within d.
func (a *attempt) stopWithin(d time.Duration) (ended <-chan struct{}, ok bool) {
	a.cancel()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return done, true
	case <-t.C:
		return done, false
	}
}

// taskEnded notes that task id's Run returned.
func (a *attempt) taskEnded(id string) {
	a.endedMu.Lock()
	defer a.endedMu.Unlock()
	if a.ended == nil {
		a.ended = map[string]bool{}
	}
	a.ended[id] = true
}

// running lists the tasks whose Run has not returned, sorted.
func (a *attempt) running() []string {
	a.endedMu.Lock()
	defer a.endedMu.Unlock()
	var ids []string
	for _, id := range a.taskIDs {
		if !a.ended[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

// ErrStoreMismatch is wrapped by the refusal of a deploy whose coordinator
// reads checkpoints from another store than the one this worker writes to.
var ErrStoreMismatch = errors.New("checkpoint store mismatch")

// checkStore refuses a deploy whose coordinator reads snapshots from
// another store (want, a storage.Location) than the one this worker
// writes to: every checkpoint would look corrupt to the coordinator, and a
// failover would start the job over from nothing, repeating the output its
// exactly-once sinks had committed. Either side not naming its store
// passes.
func (w *Worker) checkStore(want string) error {
	have := storage.Location(w.cfg.Store)
	if want == "" || have == "" || want == have {
		return nil
	}
	return fmt.Errorf("%w: the coordinator reads checkpoints from %s, this worker writes them to %s "+
		"(give 'weir up' and 'weir worker' the same -checkpoint-store: jetstream when workers run in other processes)",
		ErrStoreMismatch, want, have)
}

func (w *Worker) current(job string, n int) *attempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.jobs[job]
	if a == nil || a.n != n {
		return nil
	}
	return a
}

// Deploy sets up the tasks of d assigned to this worker and starts them,
// in place of any earlier attempt of the job. A deploy of the attempt that
// runs here already changes nothing and succeeds: the coordinator sends a
// deploy again when its answer may have been lost (its NATS connection
// dropped meanwhile), and setting the attempt up anew would restore and
// replay its input again — twice the output of an at-most-once or
// at-least-once sink — while its tasks on other workers, which went on,
// lose their channels to it. (Attempt numbers never repeat across a job's
// runs, so the attempt is this one.)
func (w *Worker) Deploy(ctx context.Context, d control.Deploy) error {
	if d.Spec != nil {
		// The coordinator places no job the caps refuse; one from a
		// coordinator that knew other caps is refused here, for good.
		if err := w.cfg.Caps.Refuse(w.cfg.ID, d.Spec); err != nil {
			w.log.Warn("deploy refused", "job", d.Job, "attempt", d.Attempt, "err", err)
			return control.Unrecoverable(err)
		}
	}
	w.mu.Lock()
	old := w.jobs[d.Job]
	if old != nil && old.n == d.Attempt {
		w.mu.Unlock()
		w.log.Info("deploy of the attempt running here again: kept as it runs", "job", d.Job, "attempt", d.Attempt)
		return nil
	}
	delete(w.jobs, d.Job)
	err := w.claimLocked(d)
	w.mu.Unlock()
	if old != nil {
		w.stopAttempt(old, control.Cancel{Job: d.Job, Attempt: old.n, Reason: fmt.Sprintf("replaced by attempt %d", d.Attempt)})
	}
	if err != nil {
		w.log.Warn("deploy refused", "job", d.Job, "attempt", d.Attempt, "err", err)
		return err
	}
	claimed := true
	defer func() {
		if claimed {
			w.mu.Lock()
			delete(w.claims, d.Job)
			delete(w.claimMem, d.Job)
			w.mu.Unlock()
		}
	}()
	if d.Plan == nil || d.Spec == nil {
		return fmt.Errorf("deploy of %s without plan or spec", d.Job)
	}
	if err := w.checkStore(d.StateStore); err != nil {
		return control.Unrecoverable(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	b := &builder{w: w, d: d, runCtx: runCtx, senders: map[string]stream.Sender{}, receivers: map[string]stream.Receiver{}}
	tasks, err := b.build(ctx)
	if err != nil {
		cancel()
		b.closeAll()
		if Unrecoverable(err) {
			err = control.Unrecoverable(err)
		}
		// An operator that failed setting up (weir_init past its memory
		// limit, say) is classified as its failure in a running task
		// would be: the coordinator records the deploy's failure so.
		return control.WithFailureKind(err, failureKind(err))
	}
	a := &attempt{job: d.Job, n: d.Attempt, cancel: cancel, tasks: tasks, pending: b.pending, mem: control.DeployMemory(d)}
	for id := range tasks {
		a.taskIDs = append(a.taskIDs, id)
		if t, _ := d.Plan.Task(id); t.Kind == plan.Source {
			a.sources = append(a.sources, id)
		}
	}
	sort.Strings(a.taskIDs)
	if d.EndInput {
		// The job is being drained: its sources end their input once
		// they restored their state, reading nothing more — or, where
		// the drain chose a sequence, reading on to it.
		for _, id := range a.sources {
			if seq, ok := d.EndInputAt[id]; ok {
				tasks[id].EndInputAt(seq)
			} else {
				tasks[id].EndInput()
			}
		}
	}
	a.live.Store(int64(len(a.taskIDs)))
	w.mu.Lock()
	w.jobs[d.Job] = a
	delete(w.claims, d.Job) // counted as running now
	delete(w.claimMem, d.Job)
	claimed = false
	w.mu.Unlock()
	for _, id := range a.taskIDs {
		t := tasks[id]
		ref := control.TaskRef{Job: d.Job, Attempt: d.Attempt, Task: id}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer a.live.Add(-1)
			defer a.taskEnded(id)
			// The task reports running (listener.Running) once it
			// restored its state. A failed task reported (and logged)
			// its failure through the listener; a canceled one is done.
			if err := t.Run(runCtx); err == nil {
				_ = w.ctl.Finished(context.Background(), ref)
			}
		}()
	}
	w.log.Info("deployed", "job", d.Job, "attempt", d.Attempt, "tasks", len(tasks))
	return nil
}

// claimLocked counts the tasks of d against the worker's slots, with
// those it runs (a task that returned holds none) and those of the other
// deploys being set up, and claims them for d; or refuses d, with
// control.ErrNoSlots, when they are more than its slots. The coordinator
// places no more than the slots (plan.Assign), but it counts only the
// tasks it placed: two coordinators during a handover, or attempts a
// cut-off worker still runs, fill a worker beyond what either knows. The
// caller holds w.mu and dropped d.Job's earlier attempt from w.jobs: d
// replaces it.
func (w *Worker) claimLocked(d control.Deploy) error {
	if err := w.claimMemoryLocked(d); err != nil {
		return err
	}
	if w.cfg.Slots <= 0 {
		w.claims[d.Job] = len(d.Tasks)
		return nil
	}
	used := 0
	var runs []string
	for job, a := range w.jobs {
		if n := int(a.live.Load()); n > 0 {
			used += n
			runs = append(runs, fmt.Sprintf("job %s: %d", job, n))
		}
	}
	for job, n := range w.claims {
		if job != d.Job && n > 0 {
			used += n
			runs = append(runs, fmt.Sprintf("job %s: %d, deploying", job, n))
		}
	}
	if used+len(d.Tasks) <= w.cfg.Slots {
		w.claims[d.Job] = len(d.Tasks)
		return nil
	}
	runsWhat := "no task"
	if used > 0 {
		sort.Strings(runs)
		runsWhat = fmt.Sprintf("%d %s (%s)", used, plural(used, "task", "tasks"), strings.Join(runs, "; "))
	}
	delete(w.claimMem, d.Job)
	return control.Errorf(control.ErrNoSlots, "worker %s has %d %s and runs %s: no room for the %d %s of job %s attempt %d",
		w.cfg.ID, w.cfg.Slots, plural(w.cfg.Slots, "slot", "slots"), runsWhat, len(d.Tasks), plural(len(d.Tasks), "task", "tasks"), d.Job, d.Attempt)
}

// claimMemoryLocked counts the memory of d's operator tasks against the
// worker's memory budget, with that of the attempts it runs and the
// deploys being set up, and claims it for d; or refuses d, with
// control.ErrNoSlots (the coordinator waits for room, as for slots), when
// it is more than the budget. The caller holds w.mu, as claimLocked's.
func (w *Worker) claimMemoryLocked(d control.Deploy) error {
	need := control.DeployMemory(d)
	if w.cfg.Caps.Memory <= 0 {
		w.claimMem[d.Job] = need
		return nil
	}
	var used int64
	for _, a := range w.jobs {
		if a.live.Load() > 0 {
			used += a.mem
		}
	}
	for job, m := range w.claimMem {
		if job != d.Job {
			used += m
		}
	}
	if used+need > w.cfg.Caps.Memory {
		return control.Errorf(control.ErrNoSlots, "worker %s has a memory budget of %s (-memory) and its operators hold %s: no room for the %s job %s attempt %d asks for (limits.memory of its operator tasks here)",
			w.cfg.ID, jobspec.FormatSize(w.cfg.Caps.Memory), jobspec.FormatSize(used), jobspec.FormatSize(need), d.Job, d.Attempt)
	}
	w.claimMem[d.Job] = need
	return nil
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Cancel stops the tasks of a job attempt. It answers once they ended,
// or after stopWait with those still running left to end in the
// background (stopAttempt): the coordinator hears of the cancel within
// its request timeout, and the job's next requests here are not held up.
func (w *Worker) Cancel(ctx context.Context, c control.Cancel) error {
	w.mu.Lock()
	a := w.jobs[c.Job]
	if a != nil && (c.Attempt == 0 || a.n == c.Attempt) {
		delete(w.jobs, c.Job)
	} else {
		a = nil
	}
	w.mu.Unlock()
	if a != nil {
		w.stopAttempt(a, c)
	}
	return nil
}

// stopAttempt stops the tasks of attempt a, which c cancels (a Cancel, or
// a deploy of another attempt in its place), waiting up to stopWait for
// them, and logs it: a stale attempt's end at warn (the end of an
// incident: the worker ran on cut off, the job was placed again), any
// other's at info. Tasks still running after stopWait end in the
// background: the worker logs at once, at warn, which ones it waits for,
// and again once they ended, with how long they took. a is no longer in
// w.jobs.
func (w *Worker) stopAttempt(a *attempt, c control.Cancel) {
	start := time.Now()
	ended, ok := a.stopWithin(stopWait)
	if ok {
		w.logStopped(a, c, 0)
		return
	}
	attrs := []any{"job", c.Job, "attempt", a.n, "tasks", len(a.taskIDs), "still_running", strings.Join(a.running(), ","),
		"waited", stopWait, "reason", c.Reason}
	if c.Stale {
		w.log.Warn("the coordinator canceled a stale attempt: its tasks here are stopping", attrs...)
	} else {
		w.log.Warn("tasks of a canceled attempt have not stopped yet: they stop in the background", attrs...)
	}
	w.stopping.Add(1)
	go func() {
		defer w.stopping.Done()
		<-ended
		w.logStopped(a, c, time.Since(start))
	}()
}

// logStopped logs that the tasks of attempt a, which c canceled, stopped;
// took, if not 0, is how long they took, past stopWait.
func (w *Worker) logStopped(a *attempt, c control.Cancel, took time.Duration) {
	attrs := []any{"job", c.Job, "attempt", a.n, "tasks", len(a.taskIDs), "reason", c.Reason}
	if took > 0 {
		attrs = append(attrs, "took", took.Round(time.Millisecond))
	}
	switch {
	case c.Stale:
		// Tasks this worker ran on that the job no longer has: the end
		// of an incident (the worker cut off, the job placed again).
		w.log.Warn("the coordinator canceled a stale attempt: its tasks here stopped", attrs...)
	case took > 0:
		// At the level of the line that said they had not yet.
		w.log.Warn("tasks of a canceled attempt stopped", attrs...)
	default:
		w.log.Info("canceled", attrs...)
	}
}

// Trigger starts a checkpoint at the listed source tasks.
func (w *Worker) Trigger(ctx context.Context, t control.Trigger) error {
	a := w.current(t.Job, t.Attempt)
	if a == nil {
		return fmt.Errorf("job %s attempt %d is not running here", t.Job, t.Attempt)
	}
	typ := stream.Checkpoint
	if t.Savepoint {
		typ = stream.Savepoint
	}
	b := stream.Barrier{ID: t.CheckpointID, Timestamp: t.Timestamp, Type: typ}
	for _, id := range t.Tasks {
		task := a.tasks[id]
		if task == nil {
			return fmt.Errorf("no task %s of job %s here", id, t.Job)
		}
		if t.Stop {
			task.TriggerStop(b)
		} else {
			task.TriggerCheckpoint(b)
		}
	}
	return nil
}

// EndInput implements control.InputEnder: the listed source tasks of the
// attempt end their input where they have read to (a drain).
func (w *Worker) EndInput(ctx context.Context, e control.EndInput) error {
	a := w.current(e.Job, e.Attempt)
	if a == nil {
		return fmt.Errorf("job %s attempt %d is not running here", e.Job, e.Attempt)
	}
	for _, id := range e.Tasks {
		task := a.tasks[id]
		if task == nil {
			return fmt.Errorf("no task %s of job %s here", id, e.Job)
		}
		if seq, ok := e.At[id]; ok {
			task.EndInputAt(seq)
		} else {
			task.EndInput()
		}
	}
	w.log.Info("sources end their input (drain)", "job", e.Job, "attempt", e.Attempt, "tasks", len(e.Tasks), "at", len(e.At))
	return nil
}

// HoldInput implements control.InputHolder: the listed source tasks of
// the attempt whose sources read a JetStream stream hold for a drain,
// each saying the sequence it covered.
func (w *Worker) HoldInput(ctx context.Context, h control.HoldInput) (map[string]uint64, error) {
	a := w.current(h.Job, h.Attempt)
	if a == nil {
		return nil, fmt.Errorf("job %s attempt %d is not running here", h.Job, h.Attempt)
	}
	held := map[string]uint64{}
	for _, id := range h.Tasks {
		task := a.tasks[id]
		if task == nil {
			return nil, fmt.Errorf("no task %s of job %s here", id, h.Job)
		}
		if seq, ok := task.HoldInput(time.Duration(h.Millis) * time.Millisecond); ok {
			held[id] = seq
		}
	}
	w.log.Info("sources held for a drain", "job", h.Job, "attempt", h.Attempt, "tasks", len(h.Tasks), "held", len(held))
	return held, nil
}

// Complete tells every task of the attempt that a checkpoint completed.
// The completion of a checkpoint the tasks were told of already, or of an
// earlier one, is not passed on: the coordinator sends Complete again when
// its connection came back while it waited for the answer, and a
// checkpoint's completion covers the ones before it.
func (w *Worker) Complete(ctx context.Context, c control.Complete) error {
	a := w.current(c.Job, c.Attempt)
	if a == nil || c.CheckpointID <= a.completed {
		return nil
	}
	a.completed = c.CheckpointID
	for _, t := range a.tasks {
		t.NotifyCheckpointComplete(c.CheckpointID)
	}
	return nil
}

// Abort tells the attempt's tasks that a checkpoint was aborted: sources
// stopped for a stop savepoint go on. (Staged sink output of an aborted
// checkpoint is committed with the next completed one.)
func (w *Worker) Abort(ctx context.Context, a control.Abort) error {
	if at := w.current(a.Job, a.Attempt); at != nil {
		for _, t := range at.tasks {
			t.AbortCheckpoint(a.CheckpointID)
		}
	}
	return nil
}

// Stop brings the attempt's tasks to rest after its stop savepoint
// completed: it returns once each has handled the completion (sinks
// committed the savepoint's output). The coordinator sends Stop only once
// the savepoint completed, so when its Complete did not come (it was lost
// for good), Stop passes the completion on itself: the savepoint's output
// would otherwise stay uncommitted, and a bounded job finish without it.
func (w *Worker) Stop(ctx context.Context, s control.Stop) error {
	at := w.current(s.Job, s.Attempt)
	if at == nil {
		return fmt.Errorf("job %s attempt %d is not running here", s.Job, s.Attempt)
	}
	if s.CheckpointID > at.completed {
		w.log.Warn("stop savepoint's completion not heard of: passed on now", "job", s.Job, "attempt", s.Attempt,
			"savepoint", s.CheckpointID)
		at.completed = s.CheckpointID
		for _, t := range at.tasks {
			t.NotifyCheckpointComplete(s.CheckpointID)
		}
	}
	// A job's handlers run one at a time: a sink that cannot finish its
	// commits must not hold up the cancel that follows.
	ctx, cancel := context.WithTimeout(ctx, control.RestTimeout)
	defer cancel()
	var errs []error
	for _, id := range at.taskIDs {
		if err := at.tasks[id].Rest(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// listener relays task outcomes to the coordinator.
type listener struct {
	w       *control.Worker
	log     *slog.Logger
	job     string
	attempt int
	// run tells the job's run from another submitted under its name
	// (runKey), "" if the coordinator did not say.
	run string
	// stop is the stop sequence of a bounded JetStream source task (0:
	// any other task), which its acks carry (control.MetricStopSequence).
	stop uint64
	// patience is how long a commit or failure report is sent again
	// (CommitStarted, Failed): the job's checkpoint timeout, the longest
	// the coordinator holds the next trigger for it, or goes on without
	// hearing of a failure before the next checkpoint expires
	// (jobspec.DefaultTimeout when 0).
	patience time.Duration
	// stopped, if not nil, is done once the attempt stops on this worker
	// (canceled, replaced by another, the worker stopping): a failure
	// report is not sent again after that.
	stopped context.Context
	// stacks, if not nil, says whether a trap's stack was logged before.
	stacks *stackLog
}

// stackLog remembers which trap stacks a worker has logged for a task of
// a job's run, with the Go runtime's traceback of a trap or an exit
// (wasm.TrapError.Traceback). A failure the restarts meet again (a trap
// on the same record after each failover) logs its stack, often
// kilobytes, the first time only: the one-line reason says the rest
// every time. A job submitted again under its name is another run: it
// logs the stack anew, as that run never did.
//
// It keeps the sha256 of each job, run, task and stack, not the stack: a
// stack is up to 30 frames (wazero's bound), each as long as its
// function's name in the module's name section, which anyone may write.
type stackLog struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
}

// runKey is what tells a job's run from another submitted under its name
// apart: the time it was submitted (control.Deploy.Submitted), the same
// for each of its attempts; "" when the coordinator did not say.
func runKey(submitted time.Time) string {
	if submitted.IsZero() {
		return ""
	}
	return submitted.UTC().Format(time.RFC3339Nano)
}

// maxStacks bounds what a stackLog remembers: past it, it forgets and
// logs stacks again.
const maxStacks = 256

// first reports whether stack is new for task of job's run (runKey), and
// remembers it. A nil stackLog finds every stack new.
func (s *stackLog) first(job, run, task, stack string) bool {
	if s == nil {
		return true
	}
	h := sha256.New()
	for _, p := range []string{job, run, task, stack} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[k]; ok {
		return false
	}
	if s.seen == nil || len(s.seen) >= maxStacks {
		s.seen = map[[sha256.Size]byte]struct{}{}
	}
	s.seen[k] = struct{}{}
	return true
}

// guestStacks returns the wasm stack of a trap and what the guest runtime
// wrote after its fatal line (the Go runtime's stack of the goroutine
// that failed) of a trap or an exit, or the Go SDK after a panic it
// recovered into an error status, each "" if none.
func guestStacks(err error) (stack, traceback string) {
	var te *wasm.TrapError
	var xe *wasm.ExitError
	var oe *wasm.OperatorError
	switch {
	case errors.As(err, &te):
		return te.Stack, te.Traceback
	case errors.As(err, &xe):
		return "", xe.Traceback
	case errors.As(err, &oe):
		return "", oe.Traceback
	}
	return "", ""
}

// withoutHex returns s with each hexadecimal number ("0x23e070") cut to
// its "0x": a Go traceback's arguments and frame addresses, which may
// differ from one attempt to the next where the functions and lines do
// not.
func withoutHex(s string) string {
	if !strings.Contains(s, "0x") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		if s[i] == '0' && i+1 < len(s) && s[i+1] == 'x' {
			b.WriteByte('x')
			i++
			for i+1 < len(s) && isHexDigit(s[i+1]) {
				i++
			}
		}
	}
	return b.String()
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// reportTry bounds one try of a report that is sent again until heard
// (listener.resend): a report lost on its way — routed to a server that
// froze, which the others still take for alive — gets no answer, and the
// next try goes out this long after the one before, not after the
// request's default 10 s. The coordinator answers a report at once, and
// takes a report the same however often it comes.
const reportTry = 2 * time.Second

func (l listener) ref(task string) control.TaskRef {
	return control.TaskRef{Job: l.job, Attempt: l.attempt, Task: task}
}

// Acknowledge relays a task's ack with its metrics. A bounded source
// task's also say where its source stops (control.MetricStopSequence): a
// restore whose spec would have it read on, past the end its downstream
// ports handled, is refused by the coordinator.
func (l listener) Acknowledge(ctx context.Context, task string, id int64, handle string, metrics map[string]int64) error {
	if l.stop > 0 && l.stop <= math.MaxInt64 {
		if metrics == nil {
			metrics = map[string]int64{}
		}
		metrics[control.MetricStopSequence] = int64(l.stop)
	}
	return l.w.Ack(ctx, l.ref(task), id, handle, metrics)
}

func (l listener) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	return l.w.Decline(ctx, l.ref(task), id, kind, reason)
}

// Running implements host.RunningListener: the task restored its state
// and runs; the coordinator checkpoints once every task of the attempt does.
func (l listener) Running(ctx context.Context, task string) error {
	return l.w.Running(ctx, l.ref(task))
}

// InputEnded implements host.InputEndListener: the task's input ended.
func (l listener) InputEnded(ctx context.Context, task string) error {
	return l.w.InputEnded(ctx, l.ref(task))
}

// CommitStarted implements host.CommitListener: the task handed its sink's
// output up to checkpoint id to the sink's commits; the coordinator
// triggers the next checkpoint once every such task did. A report that
// fails (lost in a NATS blip, say) would hold the job's next checkpoint
// for its checkpoint timeout, so it is sent again (resend) until it is
// heard, the task ends, or the job's checkpoint timeout passed (the
// coordinator stops waiting by then). The coordinator takes a report the
// same however often it comes.
func (l listener) CommitStarted(ctx context.Context, task string, id int64) error {
	return l.resend(ctx, "commit report", task, func(ctx context.Context) error {
		return l.w.Committing(ctx, l.ref(task), id)
	})
}

// resend calls send, a report to the coordinator, each try bounded by
// reportTry, until it is heard (nil), ctx is done or the listener's
// patience passed, after pauses growing to a second, and returns the last
// try's error.
func (l listener) resend(ctx context.Context, what, task string, send func(context.Context) error) error {
	patience := l.patience
	if patience <= 0 {
		patience = jobspec.DefaultTimeout
	}
	give := time.Now().Add(patience)
	pause := 50 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, reportTry)
		err := send(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(give) {
			return err
		}
		l.log.Debug(what+" not heard: sending it again", "job", l.job, "attempt", l.attempt, "task", task, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// Failed reports the task's failure; the reason is the cause alone, as
// the coordinator names the task ("task <name> failed: <cause>"). A
// report not heard is sent again (resend), until the attempt stops here.
//
// A task that ends with an error after its attempt stopped here
// (canceled, replaced, the worker stopping) is not reported, and logged
// at info as a canceled attempt's task: the attempt is over, and its
// error — what the task met as it stopped, or one it kept from before
// and met only then (a channel's "NATS connection lost" of a connection
// restored since) — is no failure of the job's.
func (l listener) Failed(ctx context.Context, task string, err error) error {
	if l.stopped != nil && l.stopped.Err() != nil {
		l.log.Info("task of a canceled attempt ended with an error: not reported, the attempt is over",
			"job", l.job, "attempt", l.attempt, "task", task, "err", err)
		return nil
	}
	// The log has what the one-line reason leaves out. It is written
	// before the coordinator hears of the failure: a weir run that ends
	// with the job must find it there.
	attrs := []any{"job", l.job, "attempt", l.attempt, "task", task, "err", err}
	if stack, traceback := guestStacks(err); stack != "" || traceback != "" {
		first := l.stacks.first(l.job, l.run, task, stack+"\x00"+withoutHex(traceback))
		for _, a := range [][2]string{{"stack", stack}, {"traceback", traceback}} {
			switch {
			case a[1] == "":
			case first:
				attrs = append(attrs, a[0], a[1])
			default:
				attrs = append(attrs, a[0], "as logged for this task before")
			}
		}
	}
	if errors.Is(err, stream.ErrClosed) {
		// Secondary (see below): the cause is logged where it happened.
		l.log.Info("task failed", attrs...)
	} else {
		l.log.Warn("task failed", attrs...)
	}
	reason := err.Error()
	if te := (*host.TaskError)(nil); errors.As(err, &te) && te.Task == task {
		reason = te.Cause()
	}
	// A report lost on its way (sent as the worker's connection came
	// back, to a coordinator on a server that froze) would leave the
	// attempt running without the task until the next checkpoint
	// expires: it is sent again until heard, or the attempt stops here.
	if l.stopped != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(l.stopped, cancel)()
	}
	ref := l.ref(task)
	e := control.Event{Type: control.EventFailed, Job: ref.Job, Attempt: ref.Attempt, Task: ref.Task,
		FailureKind: failureKind(err), Reason: reason, Record: wasm.FailedRecord(err)}
	switch {
	case Unrecoverable(err):
		e.Unrecoverable = true
	case errors.Is(err, stream.ErrClosed):
		// A task closes its channels only as it stops: the other end
		// failed, and its own report names the cause.
		e.Secondary = true
	}
	return l.resend(ctx, "failure report", task, func(ctx context.Context) error {
		return l.w.Send(ctx, e)
	})
}

// failureKind classifies a task's failure by its error's type, for the
// coordinator to record with it (control.Failure.Kind): clients branch on
// the kind, not on the words of the reason. An operator's failure in a
// call in which its memory limit refused a memory.grow is
// control.FailureMemoryLimit whatever its type: guest runtimes that
// cannot grow their heap trap (Go, Rust, AssemblyScript), return an
// error (C's weir_fail after a failed malloc), exit, or spin on the
// allocation until the deadline.
func failureKind(err error) control.FailureKind {
	if refusedGrow(err) {
		return control.FailureMemoryLimit
	}
	var (
		te *wasm.TrapError
		de *wasm.DeadlineError
		xe *wasm.ExitError
		oe *wasm.OperatorError
		fe *wasm.FaultError
		sf *sink.StreamFullError
	)
	switch {
	case errors.As(err, &te):
		return control.FailureTrap
	case errors.As(err, &de):
		return control.FailureDeadline
	case errors.As(err, &xe):
		return control.FailureExit
	case errors.As(err, &oe):
		return control.FailureOperatorError
	case errors.As(err, &fe):
		return control.FailureFault
	case errors.As(err, &sf):
		return control.FailureSinkRefused
	case errors.Is(err, sink.ErrSubjectNotStored) || errors.Is(err, sink.ErrStagedSubjectNotStored):
		// Before ErrBadKey, which a staged record's subject not stored
		// wraps too: the stream's subjects need fixing, not the
		// operator (its output is staged on that subject).
		return control.FailureStream
	case errors.Is(err, sink.ErrBadKey) || errors.Is(err, sink.ErrRecordTooLarge) || errors.Is(err, wasm.ErrRecordTooLarge):
		return control.FailureBadRecord
	case errors.Is(err, sink.ErrStagedTooMuch):
		return control.FailureCheckpointsFailed
	case errors.Is(err, snapshot.ErrCorrupt):
		return control.FailureCheckpointCorrupt
	case errors.Is(err, source.ErrStreamGone) || errors.Is(err, source.ErrOffsetGone) || errors.Is(err, source.ErrOffsetAhead) ||
		errors.Is(err, source.ErrMessagesLost) || errors.Is(err, jetstream.ErrStreamNotFound):
		return control.FailureStream
	case errors.Is(err, remote.ErrDisconnected) || errors.Is(err, remote.ErrSequenceGap) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrStaleConnection) ||
		errors.Is(err, control.ErrNotHeard) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, new(*net.OpError)):
		// A channel between workers, or a source's or sink's NATS
		// connection, lost (nats.go, or the socket under it: "write:
		// broken pipe" from a core sink's publish), or a report to the
		// coordinator not answered: the network or the server, not the
		// job.
		return control.FailureConnection
	}
	return control.FailureUnknown
}

// refusedGrow reports whether err is an operator's failure in a call in
// which its memory limit refused a memory.grow (the GrowRefused of
// wasm.TrapError and its kin). A guest that handled the refusal and
// carried on is not reported: the host resets the note at each call.
func refusedGrow(err error) bool {
	var (
		te *wasm.TrapError
		de *wasm.DeadlineError
		xe *wasm.ExitError
		oe *wasm.OperatorError
	)
	switch {
	case errors.As(err, &te):
		return te.GrowRefused > 0
	case errors.As(err, &de):
		return de.GrowRefused > 0
	case errors.As(err, &xe):
		return xe.GrowRefused > 0
	case errors.As(err, &oe):
		return oe.GrowRefused > 0
	}
	return false
}

// Mode maps a job's checkpointing mode to the task's barrier handling.
func Mode(c jobspec.Checkpointing) barrier.Mode {
	switch c.Mode {
	case jobspec.ModeAtLeastOnce:
		return barrier.AtLeastOnce
	case jobspec.ModeUnaligned:
		return barrier.Unaligned
	}
	if c.AlignedTimeout > 0 {
		return barrier.AlignedTimeout
	}
	return barrier.Aligned
}

// builder turns a Deploy into tasks.
type builder struct {
	w *Worker
	d control.Deploy
	// runCtx is the attempt's: canceled when it stops on this worker.
	runCtx    context.Context
	senders   map[string]stream.Sender
	receivers map[string]stream.Receiver
	// closers release the sources, operators and sinks built so far when
	// the deploy fails (closeAll); once the tasks run, each task releases
	// its own.
	closers []func()
	// pending collects the source tasks' pending counters (attempt.pending).
	pending map[string]pendingCounter
}

// Remote channel credit windows. Every remote receiver on a worker shares
// its NATS connection, whose pending bytes the server caps (64 MiB by
// default): the windows of one worker's receivers together stay under
// remoteWindowBudget, so no window lets the server cut the connection as a
// slow consumer.
const (
	remoteWindowDefault = 4 << 20
	remoteWindowBudget  = 48 << 20
	remoteWindowMin     = 256 << 10
)

// window is the credit window of the remote channels into task: both ends
// compute it from the plan and the assignment, so they agree.
func (b *builder) window(task string) int {
	w := b.d.Assignment[task]
	receivers := 0
	for _, c := range b.d.Plan.Channels {
		if b.d.Assignment[c.To] == w && b.d.Assignment[c.From] != w {
			receivers++
		}
	}
	window := remoteWindowDefault
	if receivers > 0 {
		window = min(remoteWindowDefault, max(remoteWindowBudget/receivers, remoteWindowMin))
	}
	if buf := b.d.Spec.Channels.Buffer; buf > 0 {
		// The job's channels.buffer, which both ends read from the spec
		// they share.
		window = min(window, int(buf))
	}
	return window
}

func (b *builder) closeAll() {
	for _, s := range b.senders {
		_ = s.Close()
	}
	for _, r := range b.receivers {
		_ = r.Close()
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

func (b *builder) channels() error {
	mine := map[string]bool{}
	for _, id := range b.d.Tasks {
		mine[id] = true
	}
	for _, c := range b.d.Plan.Channels {
		from, to := mine[c.From], mine[c.To]
		if !from && !to {
			continue
		}
		name := fmt.Sprintf("%s -> %s", c.From, c.To)
		if from && to {
			capacity := b.w.cfg.ChannelCapacity
			if buf := b.d.Spec.Channels.Buffer; buf > 0 {
				capacity = int(buf) // the job's channels.buffer
			}
			s, r := local.New(local.Options{Name: name, CapacityBytes: capacity})
			b.senders[c.ID], b.receivers[c.ID] = s, r
			continue
		}
		// Both ends must agree on the window: it derives from the plan and
		// the assignment, which every worker of the attempt shares.
		cfg := remote.Config{Channel: name, Window: b.window(c.To),
			Subject:   fmt.Sprintf("%s.%s.a%d.%s", b.w.cfg.DataPrefix, b.d.Job, b.d.Attempt, c.ID),
			MinWindow: jobspec.MinChannelBuffer}
		if b.d.Spec.Channels.DebloatTarget() > 0 {
			// A debloating task's input starts at the least and grows as
			// the task measures its pace (host.Debloat): the receiver
			// grants no more than that when it opens.
			cfg.StartWindow = jobspec.MinChannelBuffer
		}
		if from {
			s, err := remote.NewSender(b.w.cfg.Conn, cfg)
			if err != nil {
				return fmt.Errorf("channel %s: %w", name, err)
			}
			b.senders[c.ID] = s
		} else {
			r, err := remote.NewReceiver(b.w.cfg.Conn, cfg)
			if err != nil {
				return fmt.Errorf("channel %s: %w", name, err)
			}
			b.receivers[c.ID] = r
		}
	}
	return nil
}

func (b *builder) build(ctx context.Context) (map[string]*host.Task, error) {
	if err := b.channels(); err != nil {
		return nil, err
	}
	tasks := map[string]*host.Task{}
	for _, id := range b.d.Tasks {
		pt, ok := b.d.Plan.Task(id)
		if !ok {
			return nil, fmt.Errorf("no task %s in the plan of job %s", id, b.d.Job)
		}
		t, err := b.task(ctx, pt)
		if err != nil {
			return nil, control.WithFailedTask(fmt.Errorf("task %s: %w", pt.ID, err), pt.ID)
		}
		tasks[id] = t
	}
	return tasks, nil
}

// emitCheck returns the host.Output.Check of a task's output port out: where it feeds an operator, a record over that operator's input
// batch limit (wasm.DefaultMaxBatchBytes: the limit is not set per
// operator) fails the task that emitted it, as no replay gets it through,
// naming the operator it goes to; nil where it feeds a sink, which checks
// the records it publishes itself.
func (b *builder) emitCheck(out plan.Output) func([]byte) error {
	if len(out.Channels) == 0 {
		return nil
	}
	var to plan.Task
	for _, c := range b.d.Plan.Channels {
		if c.ID == out.Channels[0] {
			to, _ = b.d.Plan.Task(c.To)
			break
		}
	}
	if to.Kind != plan.Operator {
		return nil
	}
	name := "operator " + to.Vertex
	return func(batch []byte) error { return wasm.CheckEmitted(batch, wasm.DefaultMaxBatchBytes, name) }
}

func (b *builder) task(ctx context.Context, pt plan.Task) (*host.Task, error) {
	spec := b.d.Spec
	l := listener{w: b.w.ctl, log: b.w.log, job: b.d.Job, attempt: b.d.Attempt, run: runKey(b.d.Submitted),
		patience: spec.Checkpointing.Timeout, stopped: b.runCtx, stacks: &b.w.stacks}
	cfg := host.Config{
		Name: pt.ID,
		Checkpointing: host.Checkpointing{
			Mode:             Mode(spec.Checkpointing),
			AlignmentTimeout: spec.Checkpointing.AlignedTimeout,
			SpillDir:         b.w.cfg.SpillDir,
		},
		Store:     b.w.cfg.Store,
		KeyPrefix: b.d.Job + "/",
		Listener:  l,
		// A channel's buffer shrinks to no less than the job's
		// channels.buffer allows (16 KiB at the least): the same bound.
		Debloat: host.Debloat{Target: spec.Channels.DebloatTarget(), MinBytes: jobspec.MinChannelBuffer},
	}
	if h := b.w.cfg.Hooks; h != nil && h.Store != nil {
		cfg.Store = h.Store(b.d.Job, pt.ID, cfg.Store)
	}
	if r := b.d.Restore; r != nil {
		cfg.Restore = r.Handles[pt.ID]
		cfg.RestoreMerged = r.Merged[pt.ID]
		cfg.Subtask, cfg.Parallelism = pt.Index, pt.Parallelism
		cfg.ChannelPlan = r.ChannelPlan
		for _, pc := range r.Channels[pt.ID] {
			cfg.RestoreChannels = append(cfg.RestoreChannels, host.ChannelPiece{
				Handle: pc.Handle, Output: pc.Output, Channel: pc.Channel, Port: pc.Port, ByKey: pc.ByKey})
		}
	}
	for port, chs := range pt.Inputs {
		for _, ch := range chs {
			r := b.receivers[ch]
			if r == nil {
				return nil, fmt.Errorf("input channel %s was not set up", ch)
			}
			cfg.Inputs = append(cfg.Inputs, host.Input{Port: port, Receiver: r})
		}
	}
	for _, out := range pt.Outputs {
		p, err := partition.New(partitionKind(out.Partition))
		if err != nil {
			return nil, err
		}
		o := host.Output{Partitioner: p, Check: b.emitCheck(out)}
		for _, ch := range out.Channels {
			s := b.senders[ch]
			if s == nil {
				return nil, fmt.Errorf("output channel %s was not set up", ch)
			}
			o.Senders = append(o.Senders, s)
		}
		cfg.Outputs = append(cfg.Outputs, o)
	}
	switch pt.Kind {
	case plan.Source:
		src, err := b.source(pt)
		if err != nil {
			return nil, err
		}
		// A core NATS source subscribes as it is built: a deploy that
		// fails later must unsubscribe it, or it buffers messages nobody
		// reads and, in a queue group, takes the next run's share.
		b.closers = append(b.closers, func() { _ = src.Close() })
		cfg.Source = src
		if s := find(spec.Sources, func(s jobspec.Source) string { return s.Name }, pt.Vertex); s != nil && s.Kind == jobspec.KindJetStream {
			l.stop = s.StopSequence
			cfg.Listener = l
		}
		if p, ok := src.(pendingCounter); ok {
			if b.pending == nil {
				b.pending = map[string]pendingCounter{}
			}
			b.pending[pt.ID] = p
		}
	case plan.Operator:
		op, err := b.operator(ctx, pt)
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, func() { _ = op.Close(context.Background()) })
		if h := b.w.cfg.Hooks; h != nil && h.Operator != nil {
			op = h.Operator(b.d.Job, pt.ID, op)
		}
		cfg.Operator = op
	case plan.Sink:
		sk, err := b.sink(ctx, pt)
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, func() { _ = sk.Close() })
		if h := b.w.cfg.Hooks; h != nil && h.Sink != nil {
			sk = h.Sink(b.d.Job, pt.ID, sk)
		}
		cfg.Sink = sk
	}
	return host.New(cfg)
}

// partitionKind maps the job spec's partition names to host/partition's.
func partitionKind(p string) string {
	if p == jobspec.KeyHash {
		return "key-hash"
	}
	return p
}

func (b *builder) operator(ctx context.Context, pt plan.Task) (host.Operator, error) {
	spec := find(b.d.Spec.Operators, func(o jobspec.Operator) string { return o.Name }, pt.Vertex)
	if spec == nil {
		return nil, fmt.Errorf("operator %s is not in the spec", pt.Vertex)
	}
	mod, ok := b.d.Modules[pt.Vertex]
	if !ok {
		mod = control.Module{Ref: spec.Module}
	}
	code, err := b.w.cfg.Modules(ctx, mod)
	if err != nil {
		if !errors.Is(err, ErrModuleNotFound) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, registry.ErrNotFound)) {
			err = moduleNotFound{err}
		}
		if strings.HasPrefix(err.Error(), "module ") {
			return nil, err // it names the module already (registry.Resolve)
		}
		return nil, fmt.Errorf("module %s: %w", mod.Ref, err)
	}
	lim := wasm.Limits{CallTimeout: spec.Limits.Timeout, SnapshotTimeout: b.w.cfg.Caps.SnapshotTimeout(*spec)}
	if spec.Limits.Memory > 0 {
		lim.MemoryBytes = uint64(spec.Limits.Memory)
	}
	m, err := b.w.cfg.Engine.Load(ctx, mod.Ref, code, lim) // its errors name the module
	if err != nil {
		return nil, MemoryLimitHint(*spec, err)
	}
	return m.Instantiate(ctx, wasm.InstanceConfig{
		Name:    pt.DisplayName(),
		Config:  spec.Config,
		Outputs: max(len(pt.Outputs), 1),
		Logger:  cmp.Or(b.w.cfg.OperatorLog, b.w.log).With("job", b.d.Job, "task", pt.ID),
		LogRate: spec.Limits.LogRate,
	})
}

// MemoryLimitHint names operator op in err, a module's refusal at load,
// when the module's minimum memory is over the operator's memory limit:
// the refusal says the limits.memory that would take it, and this says
// whose.
func MemoryLimitHint(op jobspec.Operator, err error) error {
	var verr *wasm.ValidationError
	if !errors.As(err, &verr) || verr.MinMemoryBytes == 0 {
		return err
	}
	return fmt.Errorf("operator %s: %w", op.Name, err)
}
