// Package job is weir's job manager: it deploys jobs onto live workers,
// runs each job's checkpoint coordinator, fails jobs over from their latest
// completed checkpoint according to their restart strategy, and serves the
// job API (control.API) the CLI uses.
//
// Every job runs in its own goroutine with its own checkpoint runner: one
// job's failure never touches another.
//
// # Job lifecycle
//
//	created ─► running ─► finished              every source read up to its stop and the
//	              │  ▲                           final savepoint completed (or every task
//	              │  │                           reported finished)
//	              ▼  │ redeploy (attempt+1) from the latest valid checkpoint
//	          restarting ─► failed               restart attempts exhausted
//	any non-terminal state ─► canceled           CancelJob, or StopJob's savepoint completed
//
// A job a restarted coordinator resumes is restarting (reason
// ReasonCoordinatorRestarted) until its next attempt runs. One it cannot
// resume (its checkpoints unreadable for now) is listed as failed, with
// why, but has not ended: its record stays for the next coordinator to
// resume it, the checkpoints of its run stay, and a cancel gives it up.
//
// A failover is caused by a task's EventFailed, a lost worker that ran one
// of the job's tasks, a deploy that failed, or checkpoint failures beyond
// the tolerable count. It cancels every task of the attempt, waits per the
// restart strategy, picks the newest completed checkpoint whose metadata
// and state check out (falling back to older ones with a warning), and
// deploys the next attempt with its handles. The restart counter resets
// whenever a checkpoint completes. A deploy that finds a worker gone (no
// responders) is planned again without it and is no failover; a failure
// that every restart would meet again (control.ErrUnrecoverable) fails
// the job at once — but for a sink's bad record whose input cannot replay
// it (lostRecord), which the restart strategy handles.
//
// Each attempt is placed on the live workers by plan.Assign, counting the
// tasks the other jobs that have not ended have on each worker against
// its slots (control.WorkerInfo.Slots). A job with no live worker to
// deploy to waits for one to join (created or restarting, reason
// ReasonWaitingForWorker), and a job whose tasks do not fit in the
// workers' free slots waits for room (ReasonWaitingForSlots), woken by a
// worker that joins, a job that ends or one placed again; the wait is no
// failover. Only one longer than Options.WorkerWait counts as a failure.
package job

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/storage"
)

// Options configure a Manager.
type Options struct {
	// NC is the connection to NATS.
	NC *nats.Conn
	// Prefix of the control subjects ("" = control.DefaultPrefix).
	Prefix string
	// Catalog stores checkpoint metadata and discards checkpoints.
	Catalog *checkpoint.Catalog
	// Registry, if set, resolves module references to digests at submit.
	Registry *registry.Registry
	// JetStream, if set, is asked at submit whether the streams the spec's
	// JetStream sources and sinks name exist and store their subjects
	// (CheckStreams): a spec naming one that does not is refused
	// (control.ErrInvalid) instead of failing over until its restart
	// attempts run out. A stream that goes missing after the job
	// was submitted fails the job over per its restart strategy.
	JetStream jetstream.JetStream
	// HeartbeatTimeout declares a silent worker lost (default
	// control.DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration
	// DeployTimeout bounds one worker's deploy (default 60s), sent once or,
	// when the coordinator's connection came back meanwhile, again
	// (control.Coordinator.Deploy); other requests to workers are bounded
	// by RequestTimeout (default 5s) likewise.
	DeployTimeout, RequestTimeout time.Duration
	// WorkerWait is how long a job with no live worker to deploy to waits
	// for one to join, or one whose tasks do not fit waits for free slots
	// (default DefaultWorkerWait). The wait is no restart attempt: the job
	// stays created or restarting, with the reason ReasonWaitingForWorker
	// or ReasonWaitingForSlots, and deploys as soon as it fits. Only a
	// wait that runs out counts as one failure, once: running out again,
	// with no attempt placed since, it is the same wait
	// (control.Failure.Repeats). Waiting jobs are placed in line
	// (line.go).
	WorkerWait time.Duration
	// Jobs, if set, keeps a record of every job (spec, state, attempt) under
	// "jobs/NAME", so that a restarted coordinator resumes the jobs that
	// were running, from their latest valid checkpoint. A JetStream KV
	// store (storage.NewKV) or the checkpoint directory both do.
	Jobs storage.Store
	// AllowSystemSubjects lets a spec's sources and sinks reach weir's
	// own and NATS's own subjects and streams, which Submit and Restore
	// otherwise refuse (jobspec.Reserved): weir up
	// -allow-system-subjects, the deployment operator's choice for a
	// deployment whose spec authors are its admins. Nothing in a spec
	// turns it on.
	AllowSystemSubjects bool
	// FsyncEachWrite says the NATS server fsyncs every JetStream write
	// before acknowledging it (weir up -sync always): deploys say so to
	// the workers (control.Deploy.FsyncEachWrite), and the job status
	// says what it makes of the at-least-once sinks.
	FsyncEachWrite bool
	// Fence, if set, guards every request to a worker
	// (control.CoordinatorOptions.Fence). The stores the manager writes
	// (Jobs, the Catalog's) are guarded by the caller.
	Fence control.Fence
	Log   *slog.Logger

	// secondaryGrace replaces the package's secondaryGrace (a test's
	// seam: one that reports a secondary failure and then its cause does
	// not depend on the two arriving within a second).
	secondaryGrace time.Duration
}

// Manager runs jobs. It implements control.API and
// control.CoordinatorHandler.
type Manager struct {
	opts Options
	ctl  *control.Coordinator
	log  *slog.Logger
	// lost and left count the workers lost and those that left
	// (WorkerLosses).
	lost, left atomic.Uint64
	// lostAt holds when each worker was lost (its ID's), for the line that
	// says it joined again.
	lostAt sync.Map

	mu   sync.Mutex
	ctx  context.Context
	jobs map[string]*job
	wg   sync.WaitGroup
	// finishing bounds the jobs whose cut-short removals a starting
	// coordinator finishes at once (finishRemovalsLater), as resume
	// bounds the jobs it resumes: each lists its checkpoints.
	finishing chan struct{}
	// canceling holds the stale attempts a cancel is on its way to, so a
	// worker's every heartbeat does not send another.
	canceling map[staleKey]bool
	// reported holds how many tasks each worker reported in its latest
	// heartbeat, and freed how often a heartbeat reported fewer than the
	// one before (WorkerTasks).
	reported map[string]int
	freed    map[string]uint64
	// stopped holds the attempts a worker answered a cancel of: their
	// tasks returned, whatever a heartbeat sent before says, until one
	// without them (WorkerTasks).
	stopped map[staleKey]bool
	// removing holds the checkpoints being removed, each with what
	// removes it (removerUser, removerFinish, and removerRetention: a
	// job's runner discarding it, claimDiscard), and starting counts the
	// submits and restores under way from each checkpoint: a job does not
	// start from one being removed, nor is one removed that a job is
	// starting from (which, once started, neededBy sees). Each request marks its checkpoint under mu and does its
	// storage I/O after, so that a removal stuck in storage holds up no
	// other job's submit or restore.
	removing map[ckKey]string
	starting map[ckKey]int
	// clearing holds, by job name, the objects of checkpoints that never
	// completed that a removal (removeEarlier) is deleting: a run of the
	// name that starts meanwhile numbers its checkpoints above them.
	clearing map[string]clearing
	// room is closed (and replaced) when a job waiting to be placed may
	// fit now: a worker joined, a job ended, a job was placed again (its
	// tasks may have left some workers), or a worker reported fewer tasks
	// than before (stale ones ended). See roomSignal.
	room chan struct{}
	// placeMu makes placing a job (place) one step: no two jobs count
	// the same free slot.
	placeMu sync.Mutex
	// cordon holds the cordoned workers, which get no task (drain.go).
	cordon cordonSet
	// line holds the jobs waiting to be placed, each with its place
	// (line.go); lineSeq numbers them as they join.
	line    map[*job]inLine
	lineSeq uint64
}

// DefaultWorkerWait is how long a job waits for a worker to join when none
// is live, or for free slots, like Flink's slot.request.timeout.
const DefaultWorkerWait = 5 * time.Minute

// ckKey names a checkpoint: its job and ID.
type ckKey struct {
	job string
	id  int64
}

// clearing is what removals of leftovers of one job name delete:
// checkpoint IDs up to ceiling, by n removals.
type clearing struct {
	n       int
	ceiling int64
}

// staleKey names a job attempt on one worker.
type staleKey struct {
	worker, job string
	attempt     int
}

// New returns a manager; call Run.
func New(opts Options) *Manager {
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = control.DefaultHeartbeatTimeout
	}
	if opts.DeployTimeout <= 0 {
		opts.DeployTimeout = 60 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.WorkerWait <= 0 {
		opts.WorkerWait = DefaultWorkerWait
	}
	if opts.secondaryGrace <= 0 {
		opts.secondaryGrace = secondaryGrace
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, log: opts.Log, jobs: map[string]*job{}, canceling: map[staleKey]bool{}, reported: map[string]int{}, freed: map[string]uint64{}, stopped: map[staleKey]bool{},
		room: make(chan struct{}), removing: map[ckKey]string{}, starting: map[ckKey]int{}, clearing: map[string]clearing{},
		finishing: make(chan struct{}, resumeParallel)}
	m.ctl = control.NewCoordinator(opts.NC, m, control.CoordinatorOptions{Prefix: opts.Prefix, HeartbeatTimeout: opts.HeartbeatTimeout, Fence: opts.Fence,
		Unusable: m.unusable, Log: m.log})
	return m
}

// Control returns the coordinator side of the control protocol (live
// workers and so on).
func (m *Manager) Control() *control.Coordinator { return m.ctl }

// stateStore is where the catalog reads task snapshots (storage.Location),
// sent with every deploy so that a worker writing elsewhere refuses it.
func (m *Manager) stateStore() string {
	if m.opts.Catalog == nil {
		return ""
	}
	return storage.Location(m.opts.Catalog.State)
}

// Run serves the control protocol and the job API until ctx is done. It
// leaves the jobs' tasks running on the workers, as a crash of the
// coordinator would: the next coordinator resumes each job from its record
// and takes its tasks over (the job's resume gives the workers a heartbeat
// timeout to find it, then cancels the old attempt and deploys the next
// from the latest checkpoint). ready, if not nil, is closed once both
// listen.
func (m *Manager) Run(ctx context.Context, ready chan<- struct{}) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	// The cordons first: a resumed job is placed off a cordoned worker.
	if err := m.loadCordons(ctx); err != nil {
		m.log.Warn("reading worker cordons failed", "err", err)
	}
	if err := m.resume(ctx); err != nil {
		m.log.Warn("resuming jobs failed", "err", err)
	}
	ctlReady, apiReady := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	go func() { errs <- m.ctl.Run(ctx, ctlReady) }()
	go func() { errs <- control.ServeAPI(ctx, m.opts.NC, m.opts.Prefix, m, apiReady) }()
	for _, ch := range []chan struct{}{ctlReady, apiReady} {
		select {
		case <-ch:
		case err := <-errs:
			return err
		}
	}
	if ready != nil {
		close(ready)
	}
	var err error
	for i := 0; i < 2; i++ {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	m.wg.Wait()
	return err
}

// WorkerJoined implements control.CoordinatorHandler.
// It wakes the jobs waiting for a live worker or for free slots.
func (m *Manager) WorkerJoined(w control.WorkerInfo) {
	if why := m.unusable(w); why != "" {
		m.log.Warn("worker joined, but gets no tasks", "worker", w.ID, "host", w.Host, "why", why)
		return
	}
	if m.cordoned(w.ID) {
		m.log.Info("worker joined, cordoned: it gets no tasks until weir worker uncordon", "worker", w.ID, "host", w.Host)
		return
	}
	if at, ok := m.lostAt.LoadAndDelete(w.ID); ok {
		// The end of the incident its loss began, at the level that
		// logged the loss (weir up's default shows it).
		m.log.Warn("worker joined again", "worker", w.ID, "host", w.Host, "slots", w.Slots,
			"lost_for", time.Since(at.(time.Time)).Round(time.Millisecond))
	} else {
		m.log.Info("worker joined", "worker", w.ID, "host", w.Host, "slots", w.Slots)
	}
	m.roomMade()
}

// unusableLive says which live workers get no tasks (unusable), for a
// placement that found none: "" when none is live.
func (m *Manager) unusableLive() string {
	for _, hb := range m.ctl.Workers() {
		if why := m.unusable(hb.Worker); why != "" {
			return fmt.Sprintf(" (worker %s is live, but gets no tasks: %s)", hb.Worker.ID, why)
		}
	}
	return ""
}

// unusable says why no task may be placed on worker w, or "": it writes
// snapshots where this coordinator does not read checkpoints (a
// directory of its own machine, say), so every checkpoint with a task of
// it would be out of the coordinator's reach — the worker refuses such a
// deploy (an unrecoverable failure of the job), so it gets none.
func (m *Manager) unusable(w control.WorkerInfo) string {
	have := m.stateStore()
	if w.Store == "" || have == "" || w.Store == have {
		return ""
	}
	return fmt.Sprintf("it writes checkpoints to %s, and this coordinator reads them from %s (give 'weir up' and 'weir worker' the same -checkpoint-store: jetstream when workers run in other processes)",
		w.Store, have)
}

// roomMade wakes the jobs waiting to be placed (roomSignal).
func (m *Manager) roomMade() {
	m.mu.Lock()
	close(m.room)
	m.room = make(chan struct{})
	m.mu.Unlock()
}

// roomSignal returns a channel closed when a job waiting to be placed may
// fit next: a worker joined, a job ended or was placed again. Take it
// before placing, so a change in between is not missed: the control layer
// reports a join after the worker is live.
func (m *Manager) roomSignal() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.room
}

// place places j's tasks on the live workers (plan.Assign), counting the
// tasks of every other job that has not ended on each worker against its
// slots and their operators' memory against its memory budget, and those
// its heartbeats report besides (staleTasks) — a worker
// in full as full, whatever the count, until its heartbeats report fewer
// tasks than before (freedSlots grew past what full notes): it refused
// j's tasks for want of slots —, and begins
// j's next attempt with that
// assignment (job.begin). It returns the assignment and the attempt, or
// why the job waits: Assign's error (plan.ErrNoWorkers,
// *plan.CapacityError), a *tooBigError when the job does not fit on the
// workers even with nothing else on them (slots or memory), or a
// *queuedError when it would fit but
// a job ahead of it in the line of waiting jobs (line.go) waits still.
//
// A job holds its slots from its placement until it ends (job.holds):
// across a failover too, so that another job does not take them during
// its restart delay, and while it waits for a worker to join (after a
// coordinator restart, before the workers' heartbeats reached it; or
// every worker gone), so that the job its workers ran takes them back when
// they return — but not while it waits for free slots. Jobs that failed
// over together (their worker lost) and that no longer all fit would
// otherwise each wait for slots another holds; released, one of them
// fits.
func (m *Manager) place(j *job, full map[string]uint64) (map[string][]string, int, error) {
	m.placeMu.Lock()
	defer m.placeMu.Unlock()
	used := m.slotsUsed(j)
	memUsed := m.memoryUsed(j)
	live := m.ctl.Workers()
	stale, staleMem := m.staleTasks(live, j)
	ws := make([]plan.Worker, 0, len(live))
	var capped error // why a live worker's caps refuse the job
	for _, hb := range live {
		if m.unusable(hb.Worker) != "" || m.cordoned(hb.Worker.ID) {
			continue
		}
		if err := hb.Worker.Caps.Refuse(hb.Worker.ID, j.spec); err != nil {
			capped = err
			continue
		}
		w := plan.Worker{ID: hb.Worker.ID, Slots: hb.Worker.Slots, Used: used[hb.Worker.ID] + stale[hb.Worker.ID],
			Memory: hb.Worker.Caps.Memory, MemoryUsed: memUsed[hb.Worker.ID] + staleMem[hb.Worker.ID]}
		if at, ok := full[w.ID]; ok && m.freedSlots(w.ID) <= at {
			if w.Slots <= 0 {
				continue // full, it said, but of no limit it told: no room to count on
			}
			w.Used = max(w.Used, w.Slots)
		}
		ws = append(ws, w)
	}
	assignment, err := plan.AssignMemory(j.plan, ws, control.TaskMemory(j.spec))
	if len(ws) == 0 && capped != nil {
		// Live workers, but none whose caps (weir worker -max-task-memory
		// and the like) take the job: it waits for one that does.
		err = &cappedError{refused: capped}
	}
	var short *plan.CapacityError
	if errors.As(err, &short) {
		// Slots or memory that no job's end frees: not in all of the
		// workers that take the job, even empty.
		if big := tooBig(j, ws); big != nil {
			err = big
		}
	}
	if err == nil {
		// The line: a job ahead of it, waiting too, gets the room first.
		if k, at := m.ahead(j, live); k != nil {
			err = &queuedError{job: k.spec.Name, ran: at.ran && !j.ranBefore(), since: at.since}
		}
	}
	if err != nil && !errors.Is(err, plan.ErrNoWorkers) {
		j.mu.Lock()
		released := j.holds
		j.holds = false
		j.mu.Unlock()
		if released {
			m.roomMade()
		}
	}
	if err != nil {
		// In line from now on (under placeMu: no job behind it takes the
		// room it released meanwhile).
		m.joinLine(j)
		return nil, 0, err
	}
	m.leaveLine(j, false)
	attempt := j.begin(assignment)
	// The job may have left workers where another waits for a slot.
	m.roomMade()
	return assignment, attempt, nil
}

// Workers implements control.API: the live workers, by ID, with their
// slots and caps and the tasks placed on each (slotsUsed) or still
// running there besides (staleTasks), and their operators' memory
// (memoryUsed), as placement counts them.
func (m *Manager) Workers(context.Context) ([]control.WorkerStatus, error) {
	used := m.slotsUsed(nil)
	memUsed := m.memoryUsed(nil)
	live := m.ctl.Workers()
	heard := m.ctl.HeardFrom()
	stale, staleMem := m.staleTasks(live, nil)
	out := make([]control.WorkerStatus, len(live))
	for i, hb := range live {
		id := hb.Worker.ID
		out[i] = control.WorkerStatus{ID: id, Host: hb.Worker.Host, Slots: hb.Worker.Slots, Used: used[id] + stale[id],
			Caps: hb.Worker.Caps, MemoryUsed: memUsed[id] + staleMem[id],
			Unusable: m.unusable(hb.Worker), LastHeartbeat: heard[id], Cordoned: m.cordoned(id)}
	}
	return append(out, m.cordonedDown(live)...), nil
}

// freedSlots returns how often worker id's heartbeats reported fewer
// tasks than the one before: a worker that refused a deploy for want of
// slots counts as full until this grows (job.deploy, place).
func (m *Manager) freedSlots(id string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.freed[id]
}

// attemptStopped notes that worker answered the cancel of job's attempt:
// its tasks there returned, and hold no slots whatever the worker's
// heartbeats sent before the answer still say (staleTasks).
func (m *Manager) attemptStopped(worker, job string, attempt int) {
	m.mu.Lock()
	m.stopped[staleKey{worker: worker, job: job, attempt: attempt}] = true
	m.mu.Unlock()
}

// staleTasks counts, per live worker, the tasks its latest heartbeat
// reported that slotsUsed does not count: those of an attempt that is not
// its job's current one, of a job that ended or that this coordinator
// does not know, or placed elsewhere — an attempt whose cancel has not
// reached the worker yet (it was cut off), or is under way. They take
// the worker's slots all the same (it refuses a deploy beyond them). The
// tasks of except are not counted: a job being placed counts its own
// slots free (its earlier attempt is being canceled); nor are those of an
// attempt whose cancel the worker answered (attemptStopped), which a
// heartbeat sent before the answer may still list.
//
// mem counts, per worker, the memory limits of the stale operator tasks
// among them: the worker holds them against its memory budget
// (control.Caps.Memory) as it holds their slots, and refuses a deploy
// beyond it. A task of a job the coordinator knows counts its operator's
// limits.memory under the job's spec, as the worker counts it; one of a
// job it does not know, the limit the heartbeat reports
// (control.TaskStats.MemoryLimit).
func (m *Manager) staleTasks(live []control.Heartbeat, except *job) (stale map[string]int, mem map[string]int64) {
	m.mu.Lock()
	jobs := maps.Clone(m.jobs)
	stopped := maps.Clone(m.stopped)
	m.mu.Unlock()
	stale, mem = map[string]int{}, map[string]int64{}
	taskMem := map[*job]map[string]int64{} // each job's control.TaskMemory, taken once
	for _, hb := range live {
		for _, t := range hb.Tasks {
			if stopped[staleKey{worker: hb.Worker.ID, job: t.Job, attempt: t.Attempt}] {
				continue
			}
			j := jobs[t.Job]
			if j == except && j != nil {
				continue
			}
			if j != nil {
				j.mu.Lock()
				counted := j.holds && !j.st.State.Terminal() && j.st.Attempt == t.Attempt && j.assign[t.Task] == hb.Worker.ID
				if _, ok := taskMem[j]; !ok && !counted {
					taskMem[j] = control.TaskMemory(j.spec)
				}
				j.mu.Unlock()
				if counted {
					continue
				}
			}
			stale[hb.Worker.ID]++
			switch {
			case j != nil:
				mem[hb.Worker.ID] += taskMem[j][control.VertexOf(t.Task)]
			case t.Stats != nil:
				mem[hb.Worker.ID] += int64(min(t.Stats.MemoryLimit, math.MaxInt64))
			}
		}
	}
	return stale, mem
}

// others returns the manager's jobs but except, taken under its lock.
func (m *Manager) others(except *job) []*job {
	m.mu.Lock()
	defer m.mu.Unlock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		if j != except {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// slotsUsed counts, per worker, the tasks placed there of the jobs that
// have not ended and hold their slots (job.holds), except's aside.
func (m *Manager) slotsUsed(except *job) map[string]int {
	used := map[string]int{}
	for _, j := range m.others(except) {
		j.mu.Lock()
		if j.holds && !j.st.State.Terminal() {
			for _, w := range j.assign {
				used[w]++
			}
		}
		j.mu.Unlock()
	}
	return used
}

// memoryUsed returns, per worker, the memory limits of the operator tasks
// placed there of the jobs that hold their slots (slotsUsed), but
// except's: what they take of a worker's memory budget (control.Caps).
func (m *Manager) memoryUsed(except *job) map[string]int64 {
	used := map[string]int64{}
	for _, j := range m.others(except) {
		j.mu.Lock()
		if j.holds && !j.st.State.Terminal() {
			mem := control.TaskMemory(j.spec)
			for _, t := range j.plan.Tasks {
				if w, ok := j.assign[t.ID]; ok {
					used[w] += mem[t.Vertex]
				}
			}
		}
		j.mu.Unlock()
	}
	return used
}

// WorkerLost fails over every job with a task on the worker.
func (m *Manager) WorkerLost(id string) {
	m.log.Warn("worker lost", "worker", id)
	m.lostAt.Store(id, time.Now())
	m.lost.Add(1)
	m.dropWorker(id, false)
}

// WorkerLosses returns how many workers were lost (killed, cut off: their
// heartbeats stopped), and how many left saying goodbye, since the
// coordinator started: a worker that flaps between two scrapes shows
// only here.
func (m *Manager) WorkerLosses() (lost, left uint64) {
	return m.lost.Load(), m.left.Load()
}

// WorkerLeft implements control.WorkerLeaver: the worker stopped on
// purpose, saying goodbye. Every job with a task on it is placed again
// from its latest checkpoint, as after a loss, but that is no failure of
// the job's: it is not counted against restart.attempts, and the status
// counts the attempt as a replacement. (A trial's rolling restart of a
// worker with SIGTERM counted as a worker-lost failure and a restart.)
func (m *Manager) WorkerLeft(id string) {
	m.log.Info("worker stopped and left", "worker", id)
	m.left.Add(1)
	m.dropWorker(id, true)
}

// dropWorker forgets what the manager knows of worker id and fails over
// every job with a task on it; left says it stopped on purpose.
func (m *Manager) dropWorker(id string, left bool) {
	m.mu.Lock()
	delete(m.reported, id)
	delete(m.freed, id)
	for k := range m.stopped {
		if k.worker == id {
			delete(m.stopped, k)
		}
	}
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	for _, j := range jobs {
		j.workerLost(id, left)
	}
}

// WorkerTasks implements control.CoordinatorHandler: it cancels the tasks
// a worker runs for an attempt that is no longer its job's current one, or
// for a job that ended or is unknown. A worker cut off from NATS (or
// declared lost while slow) misses the cancel of its attempt and would run
// it on: a source reading and a sink writing beside the attempt that
// replaced it.
func (m *Manager) WorkerTasks(worker string, tasks []control.TaskRef) {
	// Fewer tasks than the worker reported before: slots came free — also
	// those of stale tasks, which no job's end announces — and a job
	// waiting for them may fit now.
	m.mu.Lock()
	fewer := len(tasks) < m.reported[worker]
	m.reported[worker] = len(tasks)
	if fewer {
		m.freed[worker]++
	}
	for k := range m.stopped {
		if k.worker == worker && !slices.ContainsFunc(tasks, func(t control.TaskRef) bool { return t.Job == k.job && t.Attempt == k.attempt }) {
			delete(m.stopped, k)
		}
	}
	m.mu.Unlock()
	if fewer {
		m.roomMade()
	}
	seen := map[staleKey]bool{}
	for _, t := range tasks {
		m.mu.Lock()
		j := m.jobs[t.Job]
		m.mu.Unlock()
		if j != nil {
			j.observe(worker, t)
		}
		k := staleKey{worker: worker, job: t.Job, attempt: t.Attempt}
		if seen[k] {
			continue
		}
		seen[k] = true
		m.mu.Lock()
		j, ctx := m.jobs[t.Job], m.ctx
		if ctx == nil || ctx.Err() != nil || m.canceling[k] || (j != nil && j.current(t.Attempt)) {
			m.mu.Unlock()
			continue
		}
		m.canceling[k] = true
		m.wg.Add(1)
		m.mu.Unlock()
		go func() {
			defer m.wg.Done()
			reason := fmt.Sprintf("attempt %d is no longer current", k.attempt)
			if j == nil {
				reason = "the coordinator does not know the job"
			}
			m.log.Warn("canceling a stale attempt", "job", k.job, "attempt", k.attempt, "worker", k.worker, "reason", reason)
			c, cancel := context.WithTimeout(ctx, m.opts.RequestTimeout)
			err := m.ctl.Cancel(c, k.worker, control.Cancel{Job: k.job, Attempt: k.attempt, Reason: reason, Stale: true})
			cancel()
			if err == nil {
				m.attemptStopped(k.worker, k.job, k.attempt)
			}
			if err != nil {
				m.log.Warn("cancel of a stale attempt failed", "job", k.job, "attempt", k.attempt, "worker", k.worker, "err", err)
			}
			m.mu.Lock()
			delete(m.canceling, k)
			m.mu.Unlock()
		}()
	}
}

// Event routes a task event to its job.
func (m *Manager) Event(e control.Event) error {
	m.mu.Lock()
	j := m.jobs[e.Job]
	m.mu.Unlock()
	if j == nil {
		return nil // a job that is gone; the worker's tasks are canceled
	}
	j.event(e)
	return nil
}

func (m *Manager) job(name string) (*job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[name]
	if j == nil || j.isGone() {
		if c := m.closestJobLocked(name); c != "" {
			return nil, control.Errorf(control.ErrNotFound, "no job %q (did you mean %s?)", name, c)
		}
		return nil, control.Errorf(control.ErrNotFound, "no job %q", name)
	}
	return j, nil
}

// closestJob returns the name of a job (not removed) that name likely
// misspells, or "".
func (m *Manager) closestJob(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closestJobLocked(name)
}

// closestJobLocked is closestJob with m.mu held.
func (m *Manager) closestJobLocked(name string) string {
	var names []string
	for n, k := range m.jobs {
		if !k.isGone() {
			names = append(names, n)
		}
	}
	return spell.Closest(name, names)
}

// Submit starts a job.
func (m *Manager) Submit(ctx context.Context, r control.SubmitRequest) (control.JobStatus, error) {
	if r.Spec == nil {
		return control.JobStatus{}, control.Errorf(control.ErrInvalid, "submit: no job spec")
	}
	if err := jobspec.CheckReserved(r.Spec, m.reserved()); err != nil {
		return control.JobStatus{}, control.Errorf(control.ErrInvalid, "submit %s: %w", r.Spec.Name, err)
	}
	if err := m.capsRefuse(r.Spec); err != nil {
		return control.JobStatus{}, control.Errorf(control.ErrInvalid, "submit %s: %w", r.Spec.Name, err)
	}
	var from *checkpoint.Metadata
	if r.RestoreFrom != "" {
		k, err := checkpointRef(r.Spec.Name, r.RestoreFrom)
		if err != nil {
			return control.JobStatus{}, err
		}
		done, err := m.startFrom(k)
		if err != nil {
			return control.JobStatus{}, err
		}
		defer done()
		if from, err = m.loadCheckpoint(ctx, k); err != nil {
			return control.JobStatus{}, err
		}
	}
	return m.start(ctx, r.Spec, true, from, restoreAllow{NonRestored: r.AllowNonRestoredState, RenumberedPorts: r.AllowRenumberedPorts}, nil)
}

// reserved is what a submitted spec's sources and sinks may not reach:
// weir's control subjects under this coordinator's prefix and the
// defaults, unless the operator allowed them all.
func (m *Manager) reserved() jobspec.Reserved {
	return jobspec.Reserved{ControlPrefix: m.opts.Prefix, Allow: m.opts.AllowSystemSubjects}
}

// capsRefuse returns why no live worker takes spec under its caps
// (control.Caps: weir worker -max-task-memory and the like), naming one
// worker's refusal; nil when one takes it, or none is live (the job waits
// for one, and a worker refuses a deploy over its caps).
func (m *Manager) capsRefuse(spec *jobspec.Spec) error {
	var refused error
	for _, hb := range m.ctl.Workers() {
		err := hb.Worker.Caps.Refuse(hb.Worker.ID, spec)
		if err == nil {
			return nil
		}
		refused = err
	}
	return refused
}

// startFrom notes that a job is starting from checkpoint k, which is then
// not removed, until done is called — once the job is in m.jobs, where
// neededBy finds it, or did not start. A checkpoint being removed is
// refused (control.ErrConflict), saying what removes it: the job would
// start from one half gone. That includes one its job's retention is
// discarding (claimDiscard), which deletes the metadata first and the
// snapshots after: a restore that read the metadata just before would
// deploy tasks whose snapshot reads fail, and restore it again on every
// failover. Nor is it only a running job's retention: the job's runner
// goes on with the discards queued as it ends after the job's state is
// terminal, when a restore of the job itself is allowed; and another job
// may start from the checkpoint of one that runs. The other way round,
// retention keeps a checkpoint a job is starting from, or restores on a
// failover (claimDiscard, neededBy), until it is needed no more.
func (m *Manager) startFrom(k ckKey) (done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if by, ok := m.removing[k]; ok {
		return nil, control.Errorf(control.ErrConflict, "restore from %s/%d: the checkpoint is being removed (%s); restore another one: weir checkpoint ls %s lists them",
			k.job, k.id, by, k.job)
	}
	m.starting[k]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.starting[k]--; m.starting[k] == 0 {
			delete(m.starting, k)
		}
	}, nil
}

// Restore restarts a stopped job from one of its checkpoints.
func (m *Manager) Restore(ctx context.Context, r control.RestoreRequest) (control.JobStatus, error) {
	spec := r.Spec
	var pinned map[string]control.Module
	if spec == nil {
		j, err := m.job(r.Job)
		if err != nil {
			meant := ""
			if c := m.closestJob(r.Job); c != "" {
				meant = " (did you mean " + c + "?)"
			}
			return control.JobStatus{}, control.Errorf(control.ErrNotFound, "restore %s: no spec given, and no job %q to take it from%s", r.Job, r.Job, meant)
		}
		// A copy: the restore resolves its sources again (keepResolved),
		// and the ended run keeps its spec as it ran.
		c := *j.spec
		c.Sources = slices.Clone(j.spec.Sources)
		spec = &c
		// A job submitted before the coordinator refused weir's and
		// NATS's own subjects is not run again on them.
		if err := m.reserved().Check(spec); err != nil {
			return control.JobStatus{}, control.Errorf(control.ErrInvalid, "restore %s: %w", r.Job, err)
		}
		// And runs the code the ended run ran: a reference to a registry
		// name's latest version would take one pushed since.
		pinned = j.modules
	} else if err := jobspec.CheckReserved(spec, m.reserved()); err != nil {
		return control.JobStatus{}, control.Errorf(control.ErrInvalid, "restore %s: %w", r.Job, err)
	} else if err := r.CheckSpecName(); err != nil {
		return control.JobStatus{}, err
	}
	k, err := checkpointRef(r.Job, r.From)
	if err != nil {
		return control.JobStatus{}, err
	}
	done, err := m.startFrom(k)
	if err != nil {
		return control.JobStatus{}, err
	}
	defer done()
	md, err := m.loadCheckpoint(ctx, k)
	if err != nil {
		return control.JobStatus{}, err
	}
	return m.start(ctx, spec, r.Spec != nil, md, restoreAllow{NonRestored: r.AllowNonRestoredState, RenumberedPorts: r.AllowRenumberedPorts}, pinned)
}

// CheckRestore refuses, in Restore's words, what Restore would refuse of
// r before it reads r.Spec's modules, and starts nothing: a job of the
// name that has not ended, a checkpoint that is not there, a spec that
// would drop or misplace the checkpoint's state or give an input that
// ended more records, streams the spec names that are not there, starts
// and stops that do not resolve. weir job restore -spec asks it before
// it builds the spec's modules and pushes them (seconds, a minute for
// Rust), which Restore needs in the registry. r.Spec is required.
func (m *Manager) CheckRestore(ctx context.Context, r control.RestoreRequest) error {
	spec := r.Spec
	if spec == nil {
		return control.Errorf(control.ErrInvalid, "check restore %s: no spec given", r.Job)
	}
	if err := jobspec.CheckReserved(spec, m.reserved()); err != nil {
		return control.Errorf(control.ErrInvalid, "restore %s: %w", r.Job, err)
	}
	if err := r.CheckSpecName(); err != nil {
		return err
	}
	if j, err := m.job(spec.Name); err == nil {
		if st := j.status().State; !st.Terminal() {
			return NotEnded(spec.Name, st)
		}
	}
	k, err := checkpointRef(r.Job, r.From)
	if err != nil {
		return err
	}
	md, err := m.loadCheckpoint(ctx, k)
	if err != nil {
		return err
	}
	// The spec is the request's, decoded for this check: resolving its
	// sources changes nobody's.
	_, _, _, _, err = m.checkStart(ctx, spec, true, md, restoreAllow{NonRestored: r.AllowNonRestoredState, RenumberedPorts: r.AllowRenumberedPorts}, false)
	return err
}

// checkpointRef parses from, "ID" (of job) or "JOB/ID".
func checkpointRef(job, from string) (ckKey, error) {
	if j, id, ok := strings.Cut(from, "/"); ok {
		job, from = j, id
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(from, "chk-"), 10, 64)
	if err != nil || id <= 0 {
		return ckKey{}, control.Errorf(control.ErrInvalid, "restore from %q: want a checkpoint ID or JOB/ID", from)
	}
	return ckKey{job: job, id: id}, nil
}

// loadCheckpoint reads checkpoint k's metadata.
func (m *Manager) loadCheckpoint(ctx context.Context, k ckKey) (*checkpoint.Metadata, error) {
	job, id := k.job, k.id
	md, err := m.opts.Catalog.Read(ctx, job, id)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, control.Errorf(control.ErrNotFound, "restore from %s/%d: there is no such checkpoint%s", job, id, m.restorable(ctx, job))
	case errors.Is(err, checkpoint.ErrCorrupt):
		return nil, control.Errorf(control.ErrNotFound, "restore: %w", err) // it names the checkpoint
	case err != nil:
		// The store did not answer (for now): nothing says the
		// checkpoint is not there.
		return nil, control.Errorf(control.ErrUnavailable, "restore: %w", err)
	}
	return md, nil
}

// NotEnded is the refusal of a submit or restore of job name while its
// run of that name, in state, has not ended (an ErrConflict). weir run and
// weir job restore say it before they build a spec's modules.
func NotEnded(name string, state control.JobState) error {
	return control.Errorf(control.ErrConflict, "job %s has not ended (it is %s): cancel or stop it first", name, state)
}

// restorable says, for an error about a checkpoint of job that is not
// there, which ones are: a checkpoint the history still lists may have
// been discarded past the retained ones.
func (m *Manager) restorable(ctx context.Context, job string) string {
	ids, err := m.opts.Catalog.IDs(ctx, job)
	if err == nil && len(ids) == 0 {
		j, jerr := m.job(job)
		if jerr != nil {
			if c := m.closestJob(job); c != "" {
				return fmt.Sprintf(" (no job %q: did you mean %s?)", job, c)
			}
			return ""
		}
		// The job has none: say so, and how it goes on (as weir job
		// status does).
		switch st := j.status(); {
		case st.StartedFrom != "":
			return fmt.Sprintf("; job %s has completed no checkpoint of its own: restore it -from %s, the checkpoint it started from", job, st.StartedFrom)
		case st.State.Terminal():
			return fmt.Sprintf("; job %s completed no checkpoint before it ended (%s), so there is nothing to restore: weir run SPEC starts it afresh", job, st.State)
		default:
			return fmt.Sprintf("; job %s has completed no checkpoint yet", job)
		}
	}
	if err != nil || len(ids) == 0 {
		return ""
	}
	const most = 10
	list := make([]string, 0, most)
	for i := len(ids) - 1; i >= 0 && len(list) < most; i-- {
		list = append(list, strconv.FormatInt(ids[i], 10))
	}
	more := ""
	if len(ids) > most {
		more = fmt.Sprintf(" and %d older", len(ids)-most)
	}
	return fmt.Sprintf(" (discarded, or never taken); %s can be restored from %s%s", job, strings.Join(list, ", "), more)
}

// prepare builds a spec's plan, resolves its modules (with modules) and
// its sources' start and stop sequences.
func (m *Manager) prepare(ctx context.Context, spec *jobspec.Spec, fresh, modules bool) (*plan.Plan, map[string]control.Module, error) {
	p, err := plan.Build(spec)
	if err != nil {
		return nil, nil, control.Errorf(control.ErrInvalid, "submit %s: %w", spec.Name, err)
	}
	var mods map[string]control.Module
	if modules {
		if mods, err = m.resolveModules(ctx, spec); err != nil {
			return nil, nil, err
		}
	}
	if js := m.opts.JetStream; js != nil {
		if err := CheckStreams(ctx, js, spec, m.opts.RequestTimeout, nil); err != nil {
			return nil, nil, err
		}
	}
	if err := m.resolveStarts(ctx, spec, fresh); err != nil {
		return nil, nil, err
	}
	if err := m.resolveStops(ctx, spec, fresh); err != nil {
		return nil, nil, err
	}
	return p, mods, nil
}

// checkStart prepares spec to start, restoring checkpoint from if it is
// not nil, and refuses it as start does (see start); with modules it
// resolves the spec's modules too. It returns the vertices that start
// without their state in from (checkChanges), and a note for each.
func (m *Manager) checkStart(ctx context.Context, spec *jobspec.Spec, given bool, from *checkpoint.Metadata, allow restoreAllow, modules bool) (p *plan.Plan, mods map[string]control.Module, without, notes []string, err error) {
	var resolvedNow map[string]bool
	if from != nil {
		if err := m.keepResolved(spec, from, given); err != nil {
			return nil, nil, nil, nil, err
		}
		resolvedNow = stopsResolvedNow(spec)
	}
	p, mods, err = m.prepare(ctx, spec, from == nil, modules)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if from != nil {
		if err := checkRestore(spec, p, from, allow.NonRestored); err != nil {
			return nil, nil, nil, nil, err
		}
		if without, notes, err = m.checkChanges(spec, p, from, allow); err != nil {
			return nil, nil, nil, nil, err
		}
		if err := checkEnded(spec, p, withoutState(from, without), resolvedNow); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return p, mods, without, notes, nil
}

// start runs spec, restoring checkpoint from if it is not nil (see
// checkRestore and checkChanges for allow) — refused when that would drop
// or misplace state (checkRestore, checkChanges), send an operator's
// output to other readers (checkChanges) or give an input port that ended
// in the checkpoint more records (checkEnded). given says that spec came with
// the request (keepResolved). pinned are modules, by operator, that an
// operator whose reference is the same runs instead of what the reference
// resolves to now (a restore of the job's own spec: the ended run's).
func (m *Manager) start(ctx context.Context, spec *jobspec.Spec, given bool, from *checkpoint.Metadata, allow restoreAllow, pinned map[string]control.Module) (control.JobStatus, error) {
	p, mods, without, notes, err := m.checkStart(ctx, spec, given, from, allow, true)
	if err != nil {
		return control.JobStatus{}, err
	}
	for op, pin := range pinned {
		// The module an operator of the same reference ran before.
		if cur, ok := mods[op]; ok && cur.Ref == pin.Ref && pin.Digest != "" {
			mods[op] = pin
		}
	}
	// Numbering continues after every checkpoint in storage, so a new run
	// never reuses a key.
	ids, err := m.opts.Catalog.IDs(ctx, spec.Name)
	if err != nil {
		return control.JobStatus{}, fmt.Errorf("submit %s: %w", spec.Name, err)
	}
	next := int64(1)
	if len(ids) > 0 {
		next = ids[len(ids)-1] + 1
	}
	var restored []*checkpoint.Metadata
	if from != nil && from.Job == spec.Name {
		// The machine keeps (and its retention may discard) checkpoints of
		// this job's name only: it reads and deletes them under that name.
		// Another job's checkpoint stays the job's initial one, which a
		// failover restores while the run has none of its own.
		restored = []*checkpoint.Metadata{from}
	}

	m.mu.Lock()
	if m.ctx == nil || m.ctx.Err() != nil {
		m.mu.Unlock()
		return control.JobStatus{}, control.Errorf(control.ErrUnavailable, "submit %s: the coordinator is not running", spec.Name)
	}
	old := m.jobs[spec.Name]
	if old != nil && !old.status().State.Terminal() {
		m.mu.Unlock()
		return control.JobStatus{}, NotEnded(spec.Name, old.status().State)
	}
	if c, ok := m.clearing[spec.Name]; ok && c.ceiling >= next {
		next = c.ceiling + 1 // objects a removal is deleting: removeEarlier
	}
	if old != nil {
		old.mu.Lock()
		if old.reserved >= next {
			next = old.reserved + 1 // see job.reserved
		}
		// The record is the new run's: a write of the old one still
		// under way lands before the new run's first (recordMu), a later
		// one not at all.
		old.superseded = true
		old.mu.Unlock()
	}
	machine := checkpoint.NewMachine(spec.Name, checkpoint.ConfigFromSpec(spec.Checkpointing), restored, next)
	j := newJob(m, spec, p, mods, machine, from)
	j.firstID, j.idFloor = next, next-1
	j.fromWithout, j.restoreNotes = without, notes
	if old != nil {
		j.recordMu = old.recordMu
	}
	if old != nil {
		// Attempts number on across the job's runs: workers and channels
		// tell runs apart by it, and a task of an earlier run that a
		// cut-off worker still runs must not pass for one of this run.
		// Its failures stay listed too (they name their attempts), and
		// its attempts that were not started.
		// Of a removed run only the numbering stays.
		ost := old.status()
		j.st.Attempt = ost.Attempt
		if !old.isGone() {
			j.st.Failures, j.st.Skipped = ost.Failures, ost.Skipped
		}
	}
	m.jobs[spec.Name] = j
	// One more job that has not ended: its warnings, and the others'.
	m.refreshSharedSinksLocked()
	m.wg.Add(2)
	m.mu.Unlock()
	// The record is written before the job deploys (a coordinator that
	// restarts resumes what it deployed), but not under m.mu: a slow
	// store would hold up every API call meanwhile. Writes of the name's
	// record stay in order (persist, recordMu), each with the record as
	// it is then.
	j.persist()
	// The answer is the job as submitted (created, no attempt of this
	// run begun), read before it starts: read after, it could say either.
	st := j.status()
	go func() { defer m.wg.Done(); j.runner.Run(j.ctx) }()
	go func() { defer m.wg.Done(); j.run() }()
	return st, nil
}

func (m *Manager) resolveModules(ctx context.Context, spec *jobspec.Spec) (map[string]control.Module, error) {
	mods := map[string]control.Module{}
	for _, op := range spec.Operators {
		mod := control.Module{Ref: op.Module}
		ref, err := modref.Parse(op.Module)
		if err != nil {
			return nil, control.Errorf(control.ErrInvalid, "operator %s: %w", op.Name, err)
		}
		switch {
		case ref.Kind == modref.File:
			if _, mm, err := registry.Resolve(ctx, nil, op.Module); err == nil {
				mod.Digest = mm.Digest
			}
		case m.opts.Registry != nil:
			ms, err := m.opts.Registry.Find(ctx, ref)
			if err != nil {
				return nil, control.Errorf(control.ErrInvalid, "operator %s: %w", op.Name, err) // it names the module
			}
			mod.Digest = ms[len(ms)-1].Digest
		}
		mods[op.Name] = mod
	}
	return mods, nil
}

// Jobs lists every job, by name.
func (m *Manager) Jobs(context.Context) ([]control.JobStatus, error) {
	m.mu.Lock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		if !j.isGone() {
			jobs = append(jobs, j)
		}
	}
	m.mu.Unlock()
	out := make([]control.JobStatus, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.status())
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

// Job returns one job's status.
func (m *Manager) Job(_ context.Context, name string) (control.JobStatus, error) {
	j, err := m.job(name)
	if err != nil {
		return control.JobStatus{}, err
	}
	return j.status(), nil
}

// CancelJob cancels a job and waits until its tasks were told to stop. A
// job that has ended already (finished, failed, canceled or stopped) has
// nothing to cancel: that is refused (control.ErrConflict), as a stop or
// savepoint of it is, saying when it ended; so is a cancel that came as
// the job ended otherwise. A job a restarted coordinator could not resume,
// listed as failed, is canceled: no coordinator resumes it any more.
func (m *Manager) CancelJob(ctx context.Context, name string) (control.JobStatus, error) {
	j, err := m.job(name)
	if err != nil {
		return control.JobStatus{}, err
	}
	m.log.Info("cancel requested", "job", name, "reply", control.Requester(ctx))
	if st, ok := j.cancelUnresumed(); ok {
		return st, nil
	}
	if st := j.status(); st.State.Terminal() {
		return st, alreadyEnded(st, "nothing to cancel")
	}
	j.push(jobEvent{kind: evCancel})
	select {
	case <-j.done:
	case <-ctx.Done():
		return j.status(), fmt.Errorf("cancel %s: waiting for its tasks to be told to stop: %w", name, ctx.Err())
	}
	st := j.status()
	switch {
	case st.State == control.JobCanceled:
		return st, nil
	case st.State.Terminal():
		return st, alreadyEnded(st, "nothing to cancel")
	}
	// The job's goroutine ended without an end: the coordinator stops.
	return st, control.Errorf(control.ErrUnavailable, "cancel %s: the coordinator is shutting down; the job was not canceled (it is %s)", name, st.State)
}

// latestHint names an ended job's latest checkpoint, which a restore can
// start from (st.LatestCheckpoint), or "" when it has none; of a drained
// job, that it was drained.
func latestHint(st control.JobStatus) string {
	if st.Drained && st.State == control.JobFinished {
		// Its final savepoint restores into nothing: its sources would
		// read on after their end.
		return fmt.Sprintf(" (it was drained with savepoint %d; %s)", st.DrainedWithSavepoint, moreInput(st.DrainedAt))
	}
	if st.LatestCheckpoint == 0 {
		return ""
	}
	return fmt.Sprintf(" (its latest checkpoint, %d, can be restored)", st.LatestCheckpoint)
}

// alreadyEnded is the error of a request for a job that ended (st is
// terminal), saying how and when, and what follows (what): "job wc
// already finished at 2025-01-02 15:04:05 UTC; nothing to cancel". A job
// stopped with a savepoint (state canceled) is said to be stopped:
// "already canceled" had a weir job stop -drain user look for a cancel.
func alreadyEnded(st control.JobStatus, what string) error {
	how, state := string(st.State), ""
	if st.State == control.JobCanceled && st.StoppedWithSavepoint != 0 {
		how, state = fmt.Sprintf("stopped with savepoint %d", st.StoppedWithSavepoint), " (state "+string(st.State)+")"
	}
	return control.Errorf(control.ErrConflict, "job %s already %s at %s%s; %s",
		st.Name, how, st.Updated.UTC().Format(time.DateTime+" MST"), state, what)
}

// Savepoint takes a savepoint of a running job. While tasks of its
// attempt still restore their state it waits for them, within the
// checkpoint timeout, before it triggers the savepoint.
func (m *Manager) Savepoint(ctx context.Context, name string) (control.CheckpointInfo, error) {
	j, err := m.job(name)
	if err != nil {
		return control.CheckpointInfo{}, err
	}
	if st := j.status(); st.State.Terminal() {
		return control.CheckpointInfo{}, alreadyEnded(st, "nothing to take a savepoint of"+latestHint(st))
	} else if st.State != control.JobRunning {
		return control.CheckpointInfo{}, control.Errorf(control.ErrConflict, "savepoint of %s: the job is %s, not running", name, st.State)
	}
	if t := j.spec.Checkpointing.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t+time.Second)
		defer cancel()
	}
	if err := j.awaitRunning(ctx, "savepoint of"); err != nil {
		return control.CheckpointInfo{}, err
	}
	return j.runner.Savepoint(ctx)
}

// StopJob implements control.API: it takes a stop savepoint — source
// tasks take no input after its barrier — and once it completed has every
// task handle the completion (sinks commit the savepoint's output) before
// it cancels the job, with the reason "stopped with savepoint N" and the
// savepoint's ID in the status (control.JobStatus.StoppedWithSavepoint,
// which clients go by: the reason is for display). Nothing
// after the savepoint was processed, so restoring the job from it repeats
// no output (a savepoint followed by a cancel would: checkpoints completed
// in between have committed output the restored job produces again). If
// the savepoint fails, the sources go on and the job keeps running.
func (m *Manager) StopJob(ctx context.Context, name string) (control.CheckpointInfo, error) {
	j, err := m.job(name)
	if err != nil {
		return control.CheckpointInfo{}, err
	}
	st := j.status()
	if st.State.Terminal() {
		return control.CheckpointInfo{}, alreadyEnded(st, "nothing to stop"+latestHint(st))
	} else if st.Drained {
		// Its sources ended their input: it stops by itself, with its
		// final savepoint, and a stop savepoint would race that one.
		return control.CheckpointInfo{}, control.Errorf(control.ErrConflict, "stop %s: the job is being drained (weir job stop -drain): it finishes with a final savepoint once its operators' end-of-input output went through; cancel it to end it at once", name)
	} else if st.State != control.JobRunning {
		return control.CheckpointInfo{}, control.Errorf(control.ErrConflict, "stop %s: the job is %s, not running", name, st.State)
	}
	sctx := ctx
	if t := j.spec.Checkpointing.Timeout; t > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, t+time.Second)
		defer cancel()
	}
	if err := j.awaitRunning(sctx, "stop"); err != nil {
		return control.CheckpointInfo{}, fmt.Errorf("%w (the job was not stopped)", err)
	}
	cp, err := j.runner.StopSavepoint(sctx)
	if err != nil {
		return cp, fmt.Errorf("stop %s: %w (the job keeps running)", name, err)
	}
	if now := j.status(); now.Attempt != st.Attempt || now.State != control.JobRunning {
		return cp, control.Errorf(control.ErrConflict, "stop %s: the job failed over while its savepoint %d completed and keeps running (is %s)",
			name, cp.ID, now.State)
	}
	j.rest(context.WithoutCancel(ctx), st.Attempt, cp.ID)
	j.push(jobEvent{kind: evCancel, attempt: st.Attempt, reason: fmt.Sprintf("stopped with savepoint %d", cp.ID), savepoint: cp.ID})
	select {
	case <-j.done:
	case <-ctx.Done():
		return cp, fmt.Errorf("stop %s: savepoint %d taken, waiting for the job to end: %w", name, cp.ID, ctx.Err())
	}
	return cp, nil
}

// DrainJob implements control.JobDrainer (weir job stop -drain): once
// every task of the running attempt restored its state (waited for as a
// stop waits, within the checkpoint timeout) it marks the job as being
// drained and has every source task end its input where it has read to
// (job.drain); from there the job ends as a bounded job does: end-of-data
// down every channel, the operators' end-of-input output, a final
// savepoint with which the sinks commit everything, and the state
// finished. It returns that savepoint once the job finished. A failover
// meanwhile does not undo the drain: the next attempt ends its input as
// it restores, where its checkpoint had read to (what the failed attempt
// had read after it was not committed). A job that ends otherwise
// meanwhile (a cancel, a stop, a failure its restart strategy gives up
// on) is an error naming how it ended.
func (m *Manager) DrainJob(ctx context.Context, name string) (control.CheckpointInfo, error) {
	j, err := m.job(name)
	if err != nil {
		return control.CheckpointInfo{}, err
	}
	st := j.status()
	if st.State.Terminal() {
		return control.CheckpointInfo{}, alreadyEnded(st, "nothing to drain"+latestHint(st))
	} else if st.State != control.JobRunning && !st.Drained {
		return control.CheckpointInfo{}, control.Errorf(control.ErrConflict, "drain %s: the job is %s, not running; drain it once it runs (or cancel it)", name, st.State)
	}
	if !st.Drained {
		sctx := ctx
		if t := j.spec.Checkpointing.Timeout; t > 0 {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, t+time.Second)
			defer cancel()
		}
		if err := j.awaitRunning(sctx, "drain"); err != nil {
			return control.CheckpointInfo{}, fmt.Errorf("%w (the job was not drained)", err)
		}
		j.drain(context.WithoutCancel(ctx))
	}
	// else: drained already (a drain asked again, say after the first
	// one's caller stopped waiting): wait for its end.
	select {
	case <-j.done:
	case <-ctx.Done():
		return control.CheckpointInfo{}, control.Errorf(control.ErrUnavailable,
			"drain %s: its sources ended their input; the job finishes with a final savepoint once everything before the end went through, and is not finished yet (%v): weir job status %s says when it is", name, ctx.Err(), name)
	}
	st = j.status()
	j.mu.Lock()
	cp := j.final
	j.mu.Unlock()
	switch {
	case st.State == control.JobFinished && cp.ID != 0:
		return cp, nil
	case st.State == control.JobFinished:
		return control.CheckpointInfo{Job: name, ID: st.DrainedWithSavepoint, Savepoint: true, Status: control.CheckpointCompleted}, nil
	case st.State.Terminal():
		return control.CheckpointInfo{}, control.Errorf(control.ErrConflict, "drain %s: the job ended %s before it finished: %s", name, st.State, st.Reason)
	}
	// The job's goroutine ended without an end: the coordinator stops.
	return control.CheckpointInfo{}, control.Errorf(control.ErrUnavailable, "drain %s: the coordinator is shutting down before the job finished (it is %s; the next coordinator drains it on)", name, st.State)
}

// Checkpoints lists a job's checkpoints, newest first: the history of its
// run (the last checkpoint.Config.HistorySize) and the completed
// checkpoints in storage that history does not hold (storedCheckpoints):
// those of earlier runs of the job's name, which a restore can start from
// too, and for a job known from its record (a coordinator restarted after
// it ended), its run's.
func (m *Manager) Checkpoints(ctx context.Context, name string) ([]control.CheckpointInfo, error) {
	j, err := m.job(name)
	if err != nil {
		return nil, err
	}
	hist := j.runner.History()
	if kept := m.keptFor(name); len(kept) > 0 {
		for i, h := range hist {
			if why := kept[h.ID]; why != "" && h.Status == control.CheckpointDiscarded && h.Reason != checkpoint.ReasonRemoved {
				hist[i].Status, hist[i].Reason = control.CheckpointCompleted, why
			}
		}
	}
	// What the run keeps that its history no longer lists (a savepoint,
	// the checkpoint it started from, a hundred checkpoints ago): stored
	// and restorable, so listed.
	listed := make(map[int64]bool, len(hist))
	for _, h := range hist {
		listed[h.ID] = true
	}
	j.mu.Lock()
	firstID, startID := j.firstID, j.startID
	j.mu.Unlock()
	for _, in := range j.runner.Retained() {
		if !listed[in.ID] {
			in.EarlierRun = in.ID < firstID && in.ID != startID
			hist = append(hist, in)
			listed[in.ID] = true
		}
	}
	out := append(hist, j.storedCheckpoints(ctx, hist)...)
	sort.SliceStable(out, func(a, b int) bool { return out[a].ID > out[b].ID })
	// The topology, for Slowest to name the task a checkpoint's barriers
	// queued before rather than the last one they reached.
	inputs, outputs := control.Topology(j.spec), control.OutputTopology(j.spec)
	for i := range out {
		out[i].Inputs, out[i].Outputs = inputs, outputs
	}
	return out, nil
}

// LastCheckpoint returns the latest checkpoint or savepoint of a job's run
// that completed since this coordinator took the job on — the one its
// status's Checkpoints describes (CheckpointStats.LastID) — with each
// task's metrics (control.Metric* names) as its ack carried them; ID 0 when
// none did. It reads only memory, however many checkpoints the job has:
// what a metrics scrape calls for every job, where Checkpoints also reads
// storage.
func (m *Manager) LastCheckpoint(_ context.Context, name string) (control.CheckpointInfo, error) {
	j, err := m.job(name)
	if err != nil {
		return control.CheckpointInfo{}, err
	}
	in, _ := j.runner.LastCompleted()
	return in, nil
}
