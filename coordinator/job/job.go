package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

type evKind int

const (
	evFailure evKind = iota + 1
	evFinished
	evCancel
	// evInputEnded: a task's input ended (EventInputEnded).
	evInputEnded
	// evRunning: a task restored its state and runs (EventRunning).
	evRunning
	// evEnd: the final savepoint of an attempt whose bounded inputs all
	// ended completed and its output is committed: the job is finished.
	evEnd
)

type jobEvent struct {
	kind    evKind
	attempt int
	task    string
	reason  string
	final   bool // evFailure: restarting cannot help
	// failKind classifies an evFailure (control.Failure.Kind).
	failKind control.FailureKind
	// record is the record an evFailure's operator failed on
	// (control.Failure.Record).
	record string
	// savepoint: evCancel of a stop (Manager.StopJob), the savepoint it
	// took (control.JobStatus.StoppedWithSavepoint); 0 for a cancel. For
	// evEnd, the final savepoint.
	savepoint int64
	// secondary: evFailure caused by another task's failure
	// (control.Event.Secondary)
	secondary bool
	// left: evFailure of a worker that stopped on purpose
	// (Manager.WorkerLeft): no failure of the job's.
	left bool
}

// secondaryGrace is how long a secondary failure waits for the failure
// that caused it before it becomes the attempt's reason. The cause is
// reported at about the same time, by the same worker or a peer's.
const secondaryGrace = time.Second

// failure says why an attempt ended; the zero value is no failure.
type failure struct {
	reason string
	// kind, task and record, if known, are the failure's
	// (control.Failure.Kind, Task, Record).
	kind   control.FailureKind
	task   string
	record string
	// final: the cause would recur on every restart
	// (control.ErrUnrecoverable), so the job fails without one.
	final bool
	// left: a worker of the attempt stopped on purpose: the job is placed
	// again, with no failure counted.
	left bool
}

// job is one submitted job; run is its goroutine.
type job struct {
	m       *Manager
	spec    *jobspec.Spec
	plan    *plan.Plan
	modules map[string]control.Module
	runner  *checkpoint.Runner
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	initial *checkpoint.Metadata
	// startID is the checkpoint of the job's own name its run started
	// from (0: none, or another job's).
	startID int64
	// recordMu orders the writes of the job's record (persist); every
	// run of the job's name shares it (Manager.start hands it on).
	recordMu *sync.Mutex

	mu     sync.Mutex
	st     control.JobStatus
	assign map[string]string // task → worker
	// holds says that the job's slots on the workers of assign count
	// against the other jobs' placement (Manager.slotsUsed): from its
	// placement (or its record's, resumed) until it ends, or until a
	// placement of it finds too few free slots and it waits.
	holds    bool
	finished map[string]bool
	// ended holds the tasks of the attempt whose input ended (a source's
	// bounded input, or end-of-data on every input channel); once it holds
	// them all, ending is set and finishInput runs.
	ended  map[string]bool
	ending bool
	// restoring holds the tasks of the attempt that have not reported
	// running yet (EventRunning: they still restore their state). Once it
	// is empty, wait starts the runner for the attempt and then sets
	// checkpointing; ready is closed then, or when the job leaves the
	// running state (setState), or when the next attempt is deployed
	// (awaitRunning).
	restoring     map[string]bool
	checkpointing bool
	ready         chan struct{}
	// checkpointRun is the runner's run of the attempt checkpointAttempt,
	// the latest whose checkpointing started: a trigger of that run goes
	// to that attempt, one of an earlier run nowhere (Trigger).
	checkpointRun, checkpointAttempt int

	queue []jobEvent
	wake  chan struct{}
	// consecutive counts restarts since the last completed checkpoint
	// that made progress (progressed).
	consecutive int
	// restoredAt are the source positions (control.MetricSourcePosition)
	// of the checkpoint the running attempt restored, by task; empty when
	// it restored none, or one that recorded none.
	restoredAt map[string]int64
	// ackedAt are the source positions the running attempt's source tasks
	// acked, by checkpoint, for the checkpoints not completed yet.
	ackedAt map[int64]map[string]int64
	// caughtUp holds, by checkpoint, the source tasks that acked it having
	// processed everything their source held (MetricSourceCaughtUp).
	caughtUp map[int64]map[string]bool
	// placedBefore says the job was placed in this run (begin): it ran,
	// and in the line of waiting jobs it goes before those never placed
	// (line.go). waitCounted says that a wait for room ran out and was
	// counted as a failure, and no attempt was placed since: the same
	// wait running out again is the same condition, no new failure
	// (place).
	placedBefore, waitCounted bool
	// failed says the running attempt's failure was counted: a notice of
	// one of its checkpoints the runner passes on later counts as no
	// progress (countFailure took it into account already).
	failed bool
	// firstID is the first checkpoint ID of this run.
	firstID int64
	// reserved is the highest checkpoint ID the job record says may have
	// been triggered (Trigger): a coordinator that resumes the job, or a
	// new run of its name, numbers on above it, so that no snapshot key of
	// a checkpoint that was in flight — which a cut-off worker may still
	// write — is used again.
	reserved int64
	// triggered is the highest checkpoint ID triggered since the machine
	// was made, which numbers from idFloor+1; an ended job's record
	// reserves exactly up to the higher of the two.
	triggered, idFloor int64
	// resumed marks a job a restarted coordinator took over.
	resumed bool
	// resumeNote, set by the coordinator that took the job over, says that
	// it resumed from an older checkpoint than the run's newest, which is
	// unusable: the exactly-once sinks commit again what they committed
	// after the one it resumed from. Shown among the status's warnings.
	resumeNote string
	// unusable are the run's checkpoints a restore found unusable though
	// their metadata checks out (a task's snapshot damaged), with why:
	// a failover restored an older one instead (fallBack). The record
	// keeps them, so that a coordinator that resumes the job takes them
	// for unusable too, as those it finds so itself.
	unusable map[int64]string
	// restoreNotes say what the restore that started the run let go
	// (-allow-non-restored-state): each vertex it started without its
	// checkpointed state, and why (checkChanges).
	restoreNotes []string
	// sharedSinks warn of the stream subjects the job's sinks write that
	// other jobs that have not ended write too, kept true as jobs start
	// and end (Manager.refreshSharedSinksLocked). Shown among the
	// status's warnings.
	sharedSinks []string
	// fromWithout are the vertices that start without their state in
	// initial, which a restore of it leaves out (checkChanges).
	fromWithout []string
	// unresumed marks a job a restarted coordinator could not take over
	// (Manager.resume): listed as failed, but not ended — its record is
	// left as the coordinator before left it, for the next one to resume
	// the job from its run's latest checkpoint. So it writes no record
	// (record), and the checkpoints it may be resumed from stay
	// (neededBy), until a cancel gives it up (CancelJob) or a new run of
	// its name replaces it.
	unresumed bool
	// next is why the next attempt begins (begin counts it in the
	// status): set by run and deploy before they place the job.
	next attemptCause
	// deploying is the worker a deploy is waiting for, stopDeploy ends
	// that wait, and deployLost is set when the worker is lost meanwhile.
	deploying  string
	stopDeploy context.CancelFunc
	deployLost bool
	// live holds the latest counters each task of the current attempt
	// reported (observe).
	live map[string]liveTask
	// stored holds, once storedRead, the checkpoints in storage that the
	// runner's history did not hold when first listed (storedCheckpoints).
	stored     []control.CheckpointInfo
	storedRead bool
	// removed holds the checkpoints removed on request (weir checkpoint
	// rm), so that removing one again says it is gone.
	removed map[int64]bool
	// cut holds the checkpoints whose removal was cut short (removalCut):
	// partly removed, they are nobody's latest.
	cut map[int64]bool
	// fromGone is set once initial, a checkpoint of another job, is no
	// longer stored whole (startGone): removed, partly removed, or
	// discarded by that job's retention. The status names it no more
	// (StartedFrom), and neither does the record's.
	fromGone bool
	// superseded is set once a new run of the job's name replaced it: its
	// record is the new run's to write.
	superseded bool
	// final is the final savepoint of an attempt whose input ended, once
	// it completed (finishInput): what a drain returns.
	final control.CheckpointInfo
	// drainAt maps each source task of a job being drained to the stream
	// sequence the drain chose for its source (holdSources), kept in the
	// record: a later attempt reads on to it (control.Deploy.EndInputAt).
	drainAt map[string]uint64
	// gone is set once the job was removed (weir job rm, RemoveJob): it is
	// not listed nor found, and is kept only for its name's numbering.
	gone bool
}

// liveTask is what the heartbeats said about one task: the latest
// counters and, oldest first, the earlier ones base may still need.
type liveTask struct {
	attempt int
	worker  string
	latest  control.TaskStats
	earlier []control.TaskStats
}

// rateWindow is the least span a task's rates cover when its reports
// allow: with heartbeats every second, a task inside one long operator
// call would otherwise show no records at all in most reports.
const rateWindow = 5 * time.Second

// base returns the counters to compute l's rates from: the newest earlier
// report at least rateWindow before the latest, else the oldest (nil:
// none).
func (l *liveTask) base() *control.TaskStats {
	if len(l.earlier) == 0 {
		return nil
	}
	for i := len(l.earlier) - 1; i >= 0; i-- {
		if time.Duration(l.latest.RunningNanos-l.earlier[i].RunningNanos) >= rateWindow {
			return &l.earlier[i]
		}
	}
	return &l.earlier[0]
}

func newJob(m *Manager, spec *jobspec.Spec, p *plan.Plan, mods map[string]control.Module, machine *checkpoint.Machine, from *checkpoint.Metadata) *job {
	ctx, cancel := context.WithCancel(m.ctx)
	now := time.Now().UTC()
	j := &job{m: m, spec: spec, plan: p, modules: mods, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		initial: from, wake: make(chan struct{}, 1), recordMu: new(sync.Mutex),
		st: control.JobStatus{Name: spec.Name, State: control.JobCreated, Submitted: now, Updated: now}}
	j.runner = checkpoint.NewRunner(machine, m.opts.Catalog, j, checkpoint.RunnerOptions{Log: m.log.With("job", spec.Name), Sources: spec.Sources, Inputs: operatorInputs(spec), Edges: planEdges(p),
		FinishRemoval: func(ctx context.Context, id int64) (int, error) { return m.finishRemoval(ctx, j, id) },
		Claim:         func(id int64) (func(), error) { return m.claimDiscard(spec.Name, id) }})
	if from != nil && from.Job == spec.Name {
		j.startID = from.ID
	}
	return j
}

func (j *job) status() control.JobStatus {
	latest := j.runner.Latest() // before j.mu: the runner calls the job holding its lock
	cps := j.runner.Stats()
	spread := spreadKeyedState(j.runner.LatestMetadata())
	heard, now := j.m.ctl.HeardFrom(), time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.st
	st.LatestCheckpoint = j.latestLocked(latest)
	if in := j.initial; in != nil && in.Job != j.spec.Name && !j.fromGone {
		st.StartedFrom = fmt.Sprintf("%s/%d", in.Job, in.ID)
	}
	st.Checkpoints = cps
	st.CheckpointMode, st.AlignedTimeout = j.spec.Checkpointing.Mode, j.spec.Checkpointing.AlignedTimeout
	st.FailuresInARow = j.consecutive
	if j.spec.Restart.Strategy != jobspec.RestartNone {
		st.RestartAttempts = j.spec.Restart.Attempts
	}
	st.Failures = slices.Clone(j.st.Failures)
	st.FailureCounts = maps.Clone(j.st.FailureCounts)
	st.Skipped = slices.Clone(j.st.Skipped)
	if len(st.Failures) > 0 {
		f := st.Failures[0]
		st.LastFailure = &f
	}
	st.Assignment = make(map[string]string, len(j.assign))
	for k, v := range j.assign {
		st.Assignment[k] = v
	}
	st.Guarantees = Guarantees(j.spec, j.m.opts.FsyncEachWrite)
	st.Warnings = slices.Concat(jobspec.Unread(j.spec), jobspec.OutputPorts(j.spec), jobspec.FeedbackLoops(j.spec))
	if j.resumeNote != "" {
		st.Warnings = append(st.Warnings, j.resumeNote)
	}
	st.Warnings = append(st.Warnings, j.restoreNotes...)
	st.Warnings = append(st.Warnings, j.sharedSinks...)
	st.Warnings = append(st.Warnings, spread...)
	if st.Warnings == nil {
		st.Warnings = []string{} // "warnings": [] in the JSON
	}
	st.FsyncEachWrite = j.m.opts.FsyncEachWrite
	st.Sinks = slices.Clone(j.spec.Sinks)
	st.SinkDuplicateWindows = sinkDuplicateWindows(j.spec)
	st.Sources = slices.Clone(j.spec.Sources)
	st.Modules = maps.Clone(j.modules)
	if st.State == control.JobRunning {
		st.Restoring = j.restoringLocked()
		for task, l := range j.live {
			if l.attempt == st.Attempt && j.assign[task] == l.worker {
				ts := control.NewTaskStatus(task, l.worker, l.latest, l.base())
				if at, ok := heard[l.worker]; ok && now.Sub(at) > control.SilentAfter {
					ts.WorkerSilent = now.Sub(at)
				}
				st.Tasks = append(st.Tasks, ts)
			}
		}
		order := map[string]int{} // the plan's order: sources, operators, sinks
		for _, v := range j.plan.Vertices {
			for _, task := range v.Tasks {
				order[task] = len(order)
			}
		}
		sort.Slice(st.Tasks, func(a, b int) bool { return order[st.Tasks[a].Task] < order[st.Tasks[b].Task] })
	}
	return st
}

// latestLocked returns the job's latest completed checkpoint given the
// runner's (Runner.Latest): the newest its checkpoint machine keeps, which
// counts the checkpoint a restored job started from and, for a job a
// restarted coordinator resumed, the checkpoints its run completed before
// — what a failover would restore. Without one (a job known only from its
// record, or started from another job's checkpoint) it is the latest the
// job noted (Notify, or its record). The caller holds j.mu.
func (j *job) latestLocked(runner int64) int64 {
	if runner > 0 {
		return runner
	}
	return j.st.LatestCheckpoint
}

// observe records the counters a heartbeat of worker carried for a task of
// the current attempt. A task the heartbeat says restored its state
// (TaskStats.Restored) that the attempt still counts as restoring runs,
// as if its EventRunning came: that report is sent once, and lost (a
// NATS blip) it would keep checkpointing from ever starting.
func (j *job) observe(worker string, t control.TaskRef) {
	if j.observeStats(worker, t) {
		j.push(jobEvent{kind: evRunning, attempt: t.Attempt, task: t.Task})
	}
}

// observeStats records t's counters (observe) and reports whether the
// heartbeat says that a task still restoring runs.
func (j *job) observeStats(worker string, t control.TaskRef) (running bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if t.Stats == nil || t.Attempt != j.st.Attempt || j.assign[t.Task] != worker {
		return false
	}
	running = t.Stats.Restored && j.restoring[t.Task] && !j.checkpointing && !j.st.State.Terminal()
	if j.live == nil {
		j.live = map[string]liveTask{}
	}
	l := j.live[t.Task]
	if l.attempt == t.Attempt && l.worker == worker {
		if t.Stats.RunningNanos <= l.latest.RunningNanos {
			return running // counters not newer
		}
		l.earlier = append(l.earlier, l.latest)
		// Keep what base may need: drop the reports older than the
		// newest one that is already rateWindow behind.
		for len(l.earlier) > 1 && time.Duration(t.Stats.RunningNanos-l.earlier[1].RunningNanos) >= rateWindow {
			l.earlier = l.earlier[1:]
		}
	} else {
		l = liveTask{attempt: t.Attempt, worker: worker}
	}
	l.latest = *t.Stats
	j.live[t.Task] = l
	return running
}

func (j *job) setState(s control.JobState, reason string) {
	j.enter(s, reason, 0)
}

// enter is setState, for a job that a stop ends with stoppedWith, the
// savepoint it took (control.JobStatus.StoppedWithSavepoint), if not 0:
// the status and record say so with the state, at once.
func (j *job) enter(s control.JobState, reason string, stoppedWith int64) {
	j.mu.Lock()
	j.st.State = s
	if stoppedWith != 0 {
		j.st.StoppedWithSavepoint = stoppedWith
	}
	if s.Terminal() {
		// No more triggers: IDs are reserved up to the last one exactly,
		// so a new run of the name numbers on from there.
		j.reserved = max(j.triggered, j.idFloor)
	}
	if s != control.JobRunning && j.ready != nil {
		// The attempt is over: a savepoint waiting for its tasks to
		// restore their state (awaitRunning) is refused now, not at the
		// next deploy.
		close(j.ready)
		j.ready = nil
	}
	switch {
	case s == control.JobRunning:
		// The reason was the failure or wait the attempt now running
		// ends: it is no longer why the job is as it is (LastFailure
		// keeps a failure).
		j.st.Reason = ""
	case reason != "":
		j.st.Reason = reason
	}
	j.st.Updated = time.Now().UTC()
	j.mu.Unlock()
	j.persist()
	// A job that fails, or fails over, is logged at the levels a log
	// kept at warnings shows (weir up's default): an SRE trial's weir up
	// said nothing of failing jobs without -v.
	level := slog.LevelInfo
	switch s {
	case control.JobFailed:
		level = slog.LevelError
	case control.JobRestarting:
		level = slog.LevelWarn
	}
	j.m.log.Log(context.Background(), level, "job state", "job", j.spec.Name, "state", s, "reason", reason)
	if s.Terminal() {
		// Its slots are free: a job waiting for them may fit now.
		j.m.roomMade()
		// Its sinks write no more: no job is warned of them now.
		j.m.sharedSinksChanged()
	}
}

// noteFailure adds the current attempt's failure f to the job's history.
func (j *job) noteFailure(fl failure) {
	j.mu.Lock()
	f := control.Failure{Time: time.Now().UTC(), Attempt: j.st.Attempt, Reason: fl.reason, Kind: fl.kind, Task: fl.task, Record: fl.record}
	j.st.Failures = append([]control.Failure{f}, j.st.Failures[:min(len(j.st.Failures), control.MaxFailures-1)]...)
	if j.st.FailureCounts == nil {
		j.st.FailureCounts = map[control.FailureKind]int{}
	}
	j.st.FailureCounts[fl.kind]++
	j.mu.Unlock()
}

// noteSkipped adds to the job's status that attempt was not started, for
// why (naming worker): its deploy is planned again as the next attempt,
// with no failure, so that the status says why the number is missing.
func (j *job) noteSkipped(attempt int, worker, why string) {
	j.mu.Lock()
	sk := control.SkippedAttempt{Time: time.Now().UTC(), Attempt: attempt, Worker: worker, Reason: why}
	j.st.Skipped = append([]control.SkippedAttempt{sk}, j.st.Skipped[:min(len(j.st.Skipped), control.MaxFailures-1)]...)
	j.mu.Unlock()
}

func (j *job) push(e jobEvent) {
	j.mu.Lock()
	j.queue = append(j.queue, e)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// current reports whether attempt is the job's current attempt and the
// job has not ended: whether tasks of it should be running.
func (j *job) current(attempt int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return attempt == j.st.Attempt && !j.st.State.Terminal()
}

func (j *job) attempt() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st.Attempt
}

// event handles a task event from the control protocol.
func (j *job) event(e control.Event) {
	if e.Attempt != j.attempt() {
		// From an attempt that is over. An ack still names a snapshot
		// written for a checkpoint the attempt's end aborted: the runner
		// deletes it, or the snapshot would stay in storage for good.
		if e.Type == control.EventAck {
			j.runner.Late(e.CheckpointID)
		}
		return
	}
	switch e.Type {
	case control.EventAck:
		if pos, ok := e.Metrics[control.MetricSourcePosition]; ok {
			j.mu.Lock()
			if j.ackedAt == nil { // an attempt a restarted coordinator took on
				j.ackedAt = map[int64]map[string]int64{}
			}
			if j.ackedAt[e.CheckpointID] == nil {
				j.ackedAt[e.CheckpointID] = map[string]int64{}
			}
			j.ackedAt[e.CheckpointID][e.Task] = pos
			if e.Metrics[control.MetricSourceCaughtUp] == 1 {
				if j.caughtUp == nil {
					j.caughtUp = map[int64]map[string]bool{}
				}
				if j.caughtUp[e.CheckpointID] == nil {
					j.caughtUp[e.CheckpointID] = map[string]bool{}
				}
				j.caughtUp[e.CheckpointID][e.Task] = true
			}
			j.mu.Unlock()
		}
		j.runner.Ack(e.Task, e.CheckpointID, e.Handle, e.Metrics)
	case control.EventDecline:
		j.runner.Decline(e.Task, e.CheckpointID, e.Kind, e.Reason)
	case control.EventFailed:
		// The worker reports the cause alone; one of an earlier version
		// began it with "task <name>: ", which the reason names already.
		cause := strings.TrimPrefix(e.Reason, "task "+e.Task+": ")
		reason, final := fmt.Sprintf("task %s failed: %s", e.Task, cause), e.Unrecoverable
		if final && e.FailureKind == control.FailureBadRecord {
			// A record no restart meets again, where the input cannot
			// replay it: the restart strategy decides.
			if lost := lostRecord(j.spec, j.plan, e.Task); lost != "" {
				reason, final = reason+"; "+lost, false
			}
		}
		j.push(jobEvent{kind: evFailure, attempt: e.Attempt, task: e.Task, failKind: e.FailureKind, record: e.Record,
			reason: reason, final: final, secondary: e.Secondary})
	case control.EventFinished:
		j.push(jobEvent{kind: evFinished, attempt: e.Attempt, task: e.Task})
	case control.EventInputEnded:
		j.push(jobEvent{kind: evInputEnded, attempt: e.Attempt, task: e.Task})
	case control.EventRunning:
		j.push(jobEvent{kind: evRunning, attempt: e.Attempt, task: e.Task})
	case control.EventCommitting:
		j.runner.Committing(e.Task, e.CheckpointID)
	}
}

func (j *job) workerLost(id string, left bool) {
	j.mu.Lock()
	if j.deploying == id {
		// A deploy waiting for an answer the worker will never give.
		j.deployLost = true
		j.stopDeploy()
	}
	hit := false
	for _, w := range j.assign {
		if w == id {
			hit = true
			break
		}
	}
	attempt := j.st.Attempt
	j.mu.Unlock()
	switch {
	case hit && left:
		j.push(jobEvent{kind: evFailure, attempt: attempt, left: true,
			reason: fmt.Sprintf("worker %s stopped (it said goodbye): placing the job again from its latest checkpoint", id)})
	case hit:
		j.push(jobEvent{kind: evFailure, attempt: attempt, failKind: control.FailureWorkerLost,
			reason: fmt.Sprintf("worker %s lost", id)})
	}
}

// workers returns the workers of the current attempt, sorted.
func (j *job) workers() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	set := map[string]bool{}
	for _, w := range j.assign {
		set[w] = true
	}
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// attemptCause is why an attempt begins, for the status to tell
// restarts from the attempts that are none (control.JobStatus.Restarts,
// Replacements, Resumes).
type attemptCause int

const (
	causeFirst       attemptCause = iota // the run's first
	causeReplacement                     // placed again: a worker lost or full while deploying
	causeResume                          // resumed by a restarted coordinator
	// causeRestartDue is a restart after failures while its delay runs,
	// not counted in Restarts yet; causeRestart one counted as the delay
	// ended (its attempt waits to be placed). The record keeps both
	// (record.NextRestart): a coordinator restarted meanwhile begins that
	// restart, counted once, and no resume.
	causeRestartDue
	causeRestart
)

// nextAttempt sets why the next attempt begins.
func (j *job) nextAttempt(c attemptCause) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next = c
}

// run is the job's goroutine: deploy, wait for the end or a failure, fail
// over, repeat.
func (j *job) run() {
	defer close(j.done)
	// Out of the line of waiting jobs (line.go), if in it: those behind
	// may go.
	defer j.m.leaveLine(j, true)
	defer func() {
		// The job has ended once its runner has: the state of the
		// checkpoints its end aborted is deleted by then (unless the
		// store is out of reach; no coordinator resumes an ended job to
		// do it, and the runner says so).
		if j.status().State.Terminal() {
			j.runner.JobEnded()
		}
		j.cancel()
		<-j.runner.Done()
	}()
	restore := j.initial
	var readErr error
	if j.resumed {
		// Give the workers a heartbeat timeout to find the new coordinator,
		// then make them drop the attempt the old one ran.
		if !j.sleep(j.m.opts.HeartbeatTimeout) {
			return
		}
		// Every live worker, not only the record's assignment: the old
		// coordinator may have deployed the attempt before it recorded
		// where. All at once, as on a failover (cancelAttempt).
		j.cancelAttempt(j.m.ctl.LiveWorkers(), ReasonCoordinatorRestarted)
		restore, readErr = j.latest()
		// Its cause (next) is the record's, set by resumeOne: a resume, or
		// the restart after failures the coordinator before had decided on.
	}
	for {
		var f failure
		var ok bool
		if readErr != nil {
			// Not knowing the latest checkpoint is no reason to start
			// from nothing: that would replay the input and repeat what
			// exactly-once sinks committed. It costs an attempt instead,
			// and the next one reads again.
			f = failure{reason: fmt.Sprintf("read the latest checkpoint: %v", readErr), kind: control.FailureRestore}
		} else if f, ok = j.deploy(restore); !ok {
			return
		} else if f.reason == "" {
			var done bool
			done, f = j.wait()
			if done {
				return
			}
		}
		if j.ctx.Err() != nil {
			// The coordinator stops (weir up stopped, or its lease
			// lost): the attempt's tasks run on where they run, as after
			// a crash of the coordinator, and the next one resumes the
			// job from its record, taking them over (see the resume
			// above). Canceled here, they cost a planned restart more
			// than a crash: the input of a core NATS source from the
			// stop until the next coordinator's attempt ran, 8-10 s in a
			// trial against under 0.1 s after a kill -9. The attempt's
			// checkpoints cannot complete meanwhile, so its exactly-once
			// sinks commit nothing the next attempt would repeat.
			return
		}
		reason := f.reason
		if f.left {
			// A worker stopped on purpose: placed again, no failure.
			j.setState(control.JobRestarting, reason)
			j.runner.Stop(reason)
			j.stopTasks(reason)
			j.nextAttempt(causeReplacement)
			restore, readErr = j.latest()
			continue
		}
		if f.kind == control.FailureCheckpointCorrupt && restore != nil {
			if j.fallBack(restore, reason) {
				// Not counted in the failures in a row: the checkpoint
				// is unusable, not the job failing, as for one found
				// unusable before a restore.
				j.noteFailure(f)
				j.setState(control.JobRestarting, reason)
				j.runner.Stop(reason)
				j.stopTasks(reason)
				j.mu.Lock()
				j.st.Restarts++
				j.next = causeRestart
				j.mu.Unlock()
				restore, readErr = j.latest()
				if readErr == nil {
					j.noteFallBack(restore)
				}
				continue
			}
			// A checkpoint a person chose: another one is theirs to
			// choose, as it decides what output is published again.
			f.final = true
			f.reason = reason + "; " + j.olderAdvice(restore)
			reason = f.reason
		}
		j.noteFailure(f)
		if f.final {
			j.runner.Stop(reason)
			j.stopTasks(reason)
			j.setState(control.JobFailed, reason+" (not restarted: it would fail the same way again)")
			return
		}
		// Fail over. The failure counts, and the restart it is due, before
		// the restarting state is recorded, so that a coordinator
		// restarted during the restart delay resumes the job with it in
		// its failures in a row, and begins that restart, counted as one
		// (record.NextRestart).
		latest := j.runner.Latest()
		if f.kind == control.FailurePlacement {
			// No attempt was placed: no progress since the failure
			// before, whatever the runner's latest says (the checkpoint
			// the job was started from, which the job's own latest does
			// not count: taken for progress, it ended the row at each
			// such failure, and "failures in a row: 1" stayed for good).
			latest = 0
		}
		n, why := j.countFailure(latest)
		j.setState(control.JobRestarting, reason)
		j.runner.Stop(reason)
		j.stopTasks(reason)
		if why != "" {
			j.setState(control.JobFailed, reason+" ("+why+")")
			return
		}
		if !j.sleep(j.spec.Restart.RestartDelay(n)) {
			return
		}
		// Restarts counts the restarts made: this one, not the failure
		// that ends the job once the attempts ran out.
		j.mu.Lock()
		j.st.Restarts++
		j.next = causeRestart
		j.mu.Unlock()
		restore, readErr = j.latest()
	}
}

// fallBack takes checkpoint md, which an attempt restored and a task
// found damaged (why), for unusable, as one a resume finds so: reports
// whether the next attempt restores an older one (latest), which it does
// unless md is the checkpoint the run was started from (a restore -from,
// or another job's), which a person chose. The record keeps md as
// unusable, so that no coordinator restores it again.
func (j *job) fallBack(md *checkpoint.Metadata, why string) bool {
	if md.Job != j.spec.Name || j.initial != nil && j.initial.Job == md.Job && j.initial.ID == md.ID {
		return false
	}
	j.runner.Unusable(md.ID)
	j.mu.Lock()
	if j.unusable == nil {
		j.unusable = map[int64]string{}
	}
	j.unusable[md.ID] = why
	j.mu.Unlock()
	j.m.log.Warn("checkpoint unusable: restoring an older one", "job", j.spec.Name, "checkpoint", md.ID, "err", why)
	j.persist()
	return true
}

// noteFallBack sets the status's warning (resumeNote) once a failover
// took the run's checkpoints in j.unusable for unusable: which one the
// next attempt restores instead (to; nil: none), and what that means for
// its output.
func (j *job) noteFallBack(to *checkpoint.Metadata) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ids []int64
	for id := range j.unusable {
		if to == nil || to.Job != j.spec.Name || id > to.ID {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	newest := ids[len(ids)-1]
	var skipped []string
	for _, id := range ids {
		skipped = append(skipped, strconv.FormatInt(id, 10))
	}
	from := "no checkpoint: its sources start over"
	switch {
	case to != nil && to.Job == j.spec.Name:
		from = fmt.Sprintf("checkpoint %d", to.ID)
	case to != nil:
		from = fmt.Sprintf("checkpoint %d of job %s, which it started from", to.ID, to.Job)
	}
	newer := "its newer checkpoint " + skipped[0] + " is"
	if len(skipped) > 1 {
		newer = "its newer checkpoints " + strings.Join(skipped, ", ") + " are"
	}
	j.resumeNote = fmt.Sprintf("restored from %s, as %s unusable (%s): what its exactly-once sinks committed after that is committed again, under new message IDs (what they committed with it goes again under its own, which their streams drop within their duplicate window)",
		from, newer, j.unusable[newest])
}

// olderAdvice says, of checkpoint md that a person chose to restore and
// that a task found damaged, which older stored checkpoint of md's job
// to restore instead, if any reads.
func (j *job) olderAdvice(md *checkpoint.Metadata) string {
	what := fmt.Sprintf("checkpoint %d of job %s is unusable", md.ID, md.Job)
	ids, err := j.m.opts.Catalog.IDs(j.ctx, md.Job)
	if err != nil {
		return what + ": restore the job from an older one (weir checkpoint ls " + md.Job + " lists them)"
	}
	for _, id := range slices.Backward(ids) {
		if id >= md.ID {
			continue
		}
		if _, err := j.m.opts.Catalog.Read(j.ctx, md.Job, id); err != nil {
			continue
		}
		from := strconv.FormatInt(id, 10)
		if md.Job != j.spec.Name {
			from = md.Job + "/" + from
		}
		return fmt.Sprintf("%s: restore the job from an older one, %d (weir job restore %s -from %s): what its exactly-once sinks committed after that is published again",
			what, id, j.spec.Name, from)
	}
	return what + ", and no older one of it is stored whole: submit the job anew"
}

// countFailure counts the running attempt's failure in its job's failures
// in a row, and returns their number and why the job is not restarted
// (giveUp; "" restarts it). latest is the newest checkpoint the runner
// completed: the runner passes a completion's notice on asynchronously
// (Notify), so one the attempt took just before it failed may not have
// reached the job yet. Such a checkpoint, if it made progress, ends the
// failures before this one; its notice, arriving after, counts nothing —
// counted then, it undid this failure, and a job trapping on a record got
// one restart more than restart.attempts. (A failure of no attempt — a
// wait for room that ran out — passes 0: it made no progress.)
func (j *job) countFailure(latest int64) (int, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.failed && latest > j.st.LatestCheckpoint && j.progressed(latest) {
		j.consecutive = 0
	}
	j.failed = true
	j.consecutive++
	why := j.giveUp(j.consecutive)
	if why == "" {
		j.next = causeRestartDue
	}
	return j.consecutive, why
}

// giveUp says why the job is not restarted after its nth consecutive
// failure (n counts since the last completed checkpoint that made
// progress: progressed), or "" to restart it. When the run restarted
// more often than that (RESTARTS, j.st.Restarts, counts the whole run),
// it says which restarts it counted, so that the two numbers a user sees
// side by side do not seem to disagree. Call with j.mu held.
func (j *job) giveUp(n int) string {
	rs := j.spec.Restart
	switch {
	case rs.Strategy == jobspec.RestartNone:
		return "not restarted: the restart strategy is none"
	case n <= rs.Attempts:
		return ""
	case n == 1:
		return "not restarted: the restart strategy allows no attempts"
	}
	why := "after 1 restart attempt"
	if n > 2 {
		why = fmt.Sprintf("after %d restart attempts", n-1)
	}
	if all := j.st.Restarts; all > n-1 {
		why += fmt.Sprintf(" since a checkpoint last made progress (%d in this run)", all)
	}
	return why
}

// latest returns the checkpoint a new attempt restores: the newest valid
// one, else the one the job was started from (nil: none). An error means
// the checkpoints could not be read (storage unavailable), not that there
// are none.
func (j *job) latest() (*checkpoint.Metadata, error) {
	md, err := j.runner.LatestValid(j.ctx)
	if err != nil {
		j.m.log.Warn("reading checkpoints failed", "job", j.spec.Name, "err", err)
		return nil, err
	}
	if md == nil {
		md = j.initial
	}
	return md, nil
}

// sleep waits d before a restart; it returns false when the job was
// canceled meanwhile (its state set) or the coordinator stops. Only the
// job's goroutine (run) may call it: it takes the queued events.
func (j *job) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if j.takeCancel() {
				j.setState(control.JobCanceled, "job canceled")
				return false
			}
			return true
		case <-j.ctx.Done():
			return false
		case <-j.wake:
			if j.takeCancel() {
				j.setState(control.JobCanceled, "job canceled")
				return false
			}
		}
	}
}

// ReasonWaitingForWorker is a created or restarting job's reason while it
// waits for a worker to join because none is live.
const ReasonWaitingForWorker = "waiting for a worker to join (none is live)"

// ReasonWaitingForSlots begins a created or restarting job's reason while
// the live workers have fewer free slots than it has tasks; what is
// missing follows (plan.CapacityError.Shortfall): "waiting for free
// slots: needs 4 tasks, workers have 2 free (w1 0 of 2, w2 2 of 4)" — or
// the job ahead of it in the line of waiting jobs (line.go), which gets
// the slots that come free first: "waiting for free slots: job j02 is
// ahead in line: …".
const ReasonWaitingForSlots = "waiting for free slots: "

// ReasonTooBig begins a created or restarting job's reason while it has
// more tasks than the live workers have slots in all, used or not: no
// job that ends makes room for it. What it needs and what they have
// follow, and what to do (tooBigError): "waiting for workers with more
// slots: needs 72 tasks, and the live workers have 64 slots in all (w1
// 24, w2 24, w3 16): lower the job's parallelism, or add workers or
// slots (weir worker -slots)".
const ReasonTooBig = "waiting for workers with more slots: "

// ReasonTooBigMemory begins a created or restarting job's reason while
// its operators' memory (limits.memory) does not fit in the memory
// budgets (weir worker -memory) of the live workers that take it, even
// with nothing else on them: no job that ends makes room for it. What it
// needs and what they have follow, and what to do (tooBigError): "waiting
// for workers with more memory: needs 3GiB of operator memory
// (limits.memory), which the live workers' memory budgets do not hold
// with nothing else on them (w1 1GiB, w2 1GiB: 2GiB in all): lower the
// operators' limits.memory or their parallelism, or add workers or
// memory (weir worker -memory)".
const ReasonTooBigMemory = "waiting for workers with more memory: "

// ranBefore reports whether j was placed before: in this run, or by the
// coordinator before a restart (resumed).
func (j *job) ranBefore() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.placedBefore || j.resumed
}

// waitRanOutAgain notes that a wait for room ran out again with no
// attempt placed since the one that was counted (waitCounted): the
// newest failure, that wait's, counts one more period (Failure.Repeats,
// Failure.Last), and no failure is added — the failures before it stay
// in the list, and the failures in a row and the restarts stay as they
// were.
func (j *job) waitRanOutAgain(reason string) {
	j.mu.Lock()
	if len(j.st.Failures) > 0 && j.st.Failures[0].Kind == control.FailurePlacement {
		f := &j.st.Failures[0]
		f.Repeats++
		f.Last = time.Now().UTC()
		f.Reason = reason
	}
	j.mu.Unlock()
	j.persist()
}

// place waits until the job's tasks fit on the live workers, places them
// and begins the next attempt (Manager.place); it returns the assignment
// and the attempt. It waits while no worker is live, or while the workers
// have too few free slots, woken by a worker that joins, a job that ends
// and a job placed again. The wait is no restart attempt: the job keeps
// its state (created or restarting) with the reason
// ReasonWaitingForWorker or ReasonWaitingForSlots, and the reason before
// is put back once it is placed. It returns a failure once *expire fires
// (set to the manager's WorkerWait when the first wait begins, so that
// the waits of one deploy share it), and false when the job was canceled
// meanwhile (its state set) or the coordinator stops. Only the job's
// goroutine (run) may call it: it takes the queued events.
func (j *job) place(expire *<-chan time.Time, full map[string]uint64) (map[string][]string, int, failure, bool) {
	var before, waiting string
	for {
		room := j.m.roomSignal()
		assignment, attempt, err := j.m.place(j, full)
		var short *plan.CapacityError
		var big *tooBigError
		var queued *queuedError
		var capped *cappedError
		var reason string
		switch {
		case err == nil:
			if waiting != "" {
				j.mu.Lock()
				if j.st.Reason == waiting {
					j.st.Reason = before
				}
				j.mu.Unlock()
			}
			return assignment, attempt, failure{}, true
		case errors.As(err, &capped):
			reason = ReasonWaitingForCaps + capped.Error()
		case errors.Is(err, plan.ErrNoWorkers):
			reason = ReasonWaitingForWorker + j.m.cordonedLive()
		case errors.As(err, &short):
			reason = ReasonWaitingForSlots + short.Shortfall()
		case errors.As(err, &big):
			reason = big.reason()
		case errors.As(err, &queued):
			reason = ReasonWaitingForSlots + queued.Error()
		default:
			return nil, 0, failure{reason: err.Error()}, true
		}
		if reason != waiting {
			j.mu.Lock()
			state := j.st.State
			if waiting == "" {
				before = j.st.Reason
			}
			j.mu.Unlock()
			j.setState(state, reason)
			waiting = reason
		}
		if *expire == nil {
			*expire = time.After(j.m.opts.WorkerWait)
		}
		select {
		case <-room:
		case <-*expire:
			var why string
			switch {
			case short != nil:
				why = fmt.Sprintf("no free slots within %v: %s", j.m.opts.WorkerWait, short.Shortfall())
			case big != nil:
				why = fmt.Sprintf("no room within %v: %s", j.m.opts.WorkerWait, big.Error())
			case queued != nil:
				why = fmt.Sprintf("no free slots within %v: %s", j.m.opts.WorkerWait, queued.Error())
			default:
				why = fmt.Sprintf("no worker joined within %v%s", j.m.opts.WorkerWait, j.m.unusableLive())
			}
			j.mu.Lock()
			again := j.waitCounted
			j.waitCounted = true
			j.mu.Unlock()
			if again {
				// The same wait, one more period: no new failure.
				j.waitRanOutAgain(why)
				*expire = time.After(j.m.opts.WorkerWait)
				continue
			}
			return nil, 0, failure{reason: why, kind: control.FailurePlacement}, true
		case <-j.ctx.Done():
			return nil, 0, failure{}, false
		case <-j.wake:
			if j.takeCancel() {
				j.setState(control.JobCanceled, "job canceled")
				return nil, 0, failure{}, false
			}
		}
	}
}

// takeCancel drains the queue and reports whether a cancel was in it.
func (j *job) takeCancel() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.queue {
		if e.kind == evCancel {
			j.queue = nil
			return true
		}
	}
	j.queue = nil
	return false
}

// deploy places (waiting for workers or slots, see place) and starts the
// next attempt; it returns why it failed, or no failure, and false when
// the job was canceled meanwhile or the coordinator stops.
//
// A worker that no longer answers at all (no responders: it crashed
// between heartbeats) is dropped at once and the attempt is planned again
// on the workers left, without using up a restart attempt: nothing about
// the job failed, only the placement did (the status counts that attempt
// in Replacements, not Restarts). So is a worker that refused its
// tasks for want of slots (control.ErrNoSlots: it runs tasks the
// manager did not count, e.g. stale ones its heartbeats had not shown
// yet): the attempt is planned again with that worker full until its
// heartbeats report fewer tasks than before (the job's own release of its
// slots as it waits makes room, which would ask the worker again at once,
// and again).
// With no worker left, or too few slots, that placement waits as the
// first one does — for room, which a heartbeat reporting fewer tasks makes
// too —; a wait that runs out is a failure, and the restart after it asks
// every worker again.
func (j *job) deploy(restore *checkpoint.Metadata) (failure, bool) {
	j.noteRestore(restore)
	dropped, full := map[string]bool{}, map[string]uint64{}
	var expire <-chan time.Time
	for {
		assignment, attempt, f, ok := j.place(&expire, full)
		if !ok || f.reason != "" {
			return f, ok
		}
		f, gone, refused := j.deployOnce(restore, assignment, attempt)
		if refused != "" {
			j.noteSkipped(attempt, refused, fmt.Sprintf("its worker %s refused its tasks for want of free slots", refused))
			full[refused] = j.m.freedSlots(refused)
			j.m.log.Warn("worker refused the deploy for want of slots; planning again with it full until its tasks are fewer",
				"job", j.spec.Name, "attempt", attempt, "worker", refused, "reason", f.reason)
			j.stopTasks("worker " + refused + " refused its tasks: no free slots")
			j.nextAttempt(causeReplacement)
			continue
		}
		if gone == "" {
			return f, true
		}
		if dropped[gone] {
			// Back again by heartbeat but still deaf to deploys: a
			// real failure, which the restart strategy bounds.
			return failure{reason: fmt.Sprintf("deploy to worker %s: no responders for deploys although it heartbeats", gone),
				kind: control.FailureDeploy}, true
		}
		dropped[gone] = true
		j.m.log.Warn("worker gone while deploying; planning again without it", "job", j.spec.Name, "worker", gone)
		j.noteSkipped(attempt, gone, fmt.Sprintf("its worker %s was lost while it was deployed", gone))
		j.stopTasks("worker " + gone + " gone while deploying")
		// Forget reports the worker lost; the failure it queues names the
		// attempt just abandoned, which wait ignores.
		j.m.ctl.Forget(gone)
		j.nextAttempt(causeReplacement)
	}
}

// begin makes assignment (worker → tasks) the job's and begins its next
// attempt, whose number it returns. Manager.place calls it as it places
// the job.
func (j *job) begin(assignment map[string][]string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.st.Attempt++
	switch j.next {
	case causeReplacement:
		j.st.Replacements++
	case causeResume:
		j.st.Resumes++
	}
	j.next = causeFirst
	j.holds = true
	j.placedBefore, j.waitCounted = true, false
	j.assign = map[string]string{}
	for w, tasks := range assignment {
		for _, t := range tasks {
			j.assign[t] = w
		}
	}
	j.finished = map[string]bool{}
	j.ended, j.ending = map[string]bool{}, false
	j.restoring, j.checkpointing = map[string]bool{}, false
	j.checkpointRun, j.checkpointAttempt = 0, 0 // no trigger of an earlier attempt's run goes out now
	for _, t := range j.plan.Tasks {
		j.restoring[t.ID] = true
	}
	if j.ready != nil {
		close(j.ready) // the attempt before never ran all its tasks
	}
	j.ready = make(chan struct{})
	// Queued events stay: failures and ends of earlier attempts are
	// filtered by attempt in wait, a cancel must not be lost.
	return j.st.Attempt
}

// deployOnce deploys attempt, placed as assignment (place). It returns
// why it failed, or the worker that had no responders (the failure is
// then irrelevant), or the worker that refused its tasks for want of
// slots (control.ErrNoSlots; the failure has its reason).
func (j *job) deployOnce(restore *checkpoint.Metadata, assignment map[string][]string, attempt int) (f failure, gone, refused string) {
	j.mu.Lock()
	all := make(map[string]string, len(j.assign))
	for k, v := range j.assign {
		all[k] = v
	}
	j.st.RestoredFrom = 0
	var rst *control.Restore
	if restore != nil {
		if in := j.initial; in != nil && restore.Job == in.Job && restore.ID == in.ID {
			restore = withoutState(restore, j.fromWithout)
		}
		rst = restoreFor(j.spec, j.plan, restore)
		j.st.RestoredFrom = restore.ID
	}
	if j.st.Drained && len(j.drainAt) == 0 && restore != nil {
		// Drained before the drain chose where its sources end: each ends
		// where the hold would have had it, read from the checkpoint,
		// kept in the record below for every later attempt.
		if at := restoredEnds(j.plan, restore.Metrics); len(at) > 0 {
			j.drainAt = at
			j.st.DrainedAt = chosenEnds(j.spec, j.plan, at)
			j.m.log.Info("draining: the sources end their input where the checkpoint restored covered", "job", j.spec.Name, "attempt", attempt, "checkpoint", restore.ID, "at", drainAtLog(j.plan, at))
		}
	}
	submitted, drained, drainAt := j.st.Submitted, j.st.Drained, maps.Clone(j.drainAt)
	j.mu.Unlock()
	// The attempt's number is stored before any worker hears of it. A
	// coordinator that restarts resumes from the record: it cancels the
	// attempt the record names and deploys the next. Had it read the
	// number before this one, it would cancel that, deploy this number
	// again, and a worker still running this attempt keeps it as it runs
	// (a deploy of the attempt running there is one sent again): tasks
	// set up by two coordinators, restored from different checkpoints,
	// wired together. So an attempt whose number could not be stored is
	// not deployed: it fails, and the next one is stored again.
	if err := j.writeRecord(); err != nil {
		return failure{reason: fmt.Sprintf("attempt %d not deployed: %v", attempt, err), kind: control.FailureDeploy}, "", ""
	}
	ws := make([]string, 0, len(assignment))
	for w := range assignment {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	for _, w := range ws {
		ctx, cancel := context.WithTimeout(j.ctx, j.m.opts.DeployTimeout)
		j.mu.Lock()
		j.deploying, j.stopDeploy, j.deployLost = w, cancel, false
		j.mu.Unlock()
		err := j.m.ctl.Deploy(ctx, w, control.Deploy{Job: j.spec.Name, Attempt: attempt, Submitted: submitted, Spec: j.spec, Plan: j.plan,
			Tasks: assignment[w], Assignment: all, Modules: j.modules, Restore: rst, StateStore: j.m.stateStore(),
			FsyncEachWrite: j.m.opts.FsyncEachWrite, EndInput: drained, EndInputAt: drainAt})
		cancel()
		j.mu.Lock()
		lost := j.deployLost
		j.deploying, j.stopDeploy, j.deployLost = "", nil, false
		j.mu.Unlock()
		if err != nil && lost {
			return failure{reason: fmt.Sprintf("deploy to worker %s: worker lost while deploying", w), kind: control.FailureWorkerLost}, "", ""
		}
		if err != nil {
			switch {
			case errors.Is(err, control.ErrUnavailable):
				// Nobody listens for that worker any more.
				return failure{}, w, ""
			case errors.Is(err, control.ErrNoSlots):
				// The worker names itself, its slots and what it runs.
				return failure{reason: err.Error()}, "", w
			}
			// The worker classifies an operator's failure as it set up
			// (weir_init past its memory limit: memory-limit); others,
			// and those of a worker that does not classify them, are
			// the deploy's.
			kind := control.FailureKindOf(err)
			if kind == control.FailureUnknown {
				kind = control.FailureDeploy
			}
			return failure{reason: fmt.Sprintf("deploy to worker %s: %v", w, err), final: errors.Is(err, control.ErrUnrecoverable),
				kind: kind, task: control.FailedTaskOf(err)}, "", ""
		}
	}
	// Checkpointing starts once every task restored its state and runs
	// (evRunning in wait). Running, the job has no reason.
	j.setState(control.JobRunning, "")
	return failure{}, "", ""
}

// wait runs until the attempt ends: done is true when the job reached a
// terminal state, else f says why it must fail over.
func (j *job) wait() (done bool, f failure) {
	// A failure caused by another task's (a channel closed under it)
	// waits secondaryGrace for that one, which names the cause.
	var (
		secondary *failure
		grace     <-chan time.Time
	)
	for {
		expired := false
		select {
		case <-j.ctx.Done():
			return false, failure{reason: "coordinator shutting down"}
		case <-j.wake:
		case <-grace:
			// The events queued meanwhile first: the primary failure
			// may have come as the grace ran out.
			expired = true
		}
		j.mu.Lock()
		q := j.queue
		j.queue = nil
		attempt := j.st.Attempt
		j.mu.Unlock()
		for i, e := range q {
			switch e.kind {
			case evCancel:
				if e.attempt != 0 && e.attempt != attempt {
					// A stop whose attempt failed over meanwhile: this
					// attempt ran past the savepoint, so the job was
					// not stopped with it.
					e.reason = fmt.Sprintf("canceled: the job failed over while it stopped (%s); restore it from its latest checkpoint", e.reason)
					e.savepoint = 0
				}
				reason := e.reason
				if reason == "" {
					reason = "job canceled"
				}
				j.runner.Stop(reason)
				j.stopTasks(reason)
				j.enter(control.JobCanceled, reason, e.savepoint)
				return true, failure{}
			case evFailure:
				if e.attempt == attempt && e.secondary {
					if secondary == nil {
						secondary = &failure{reason: e.reason, final: e.final, kind: e.failKind, task: e.task, record: e.record}
						t := time.NewTimer(j.m.opts.secondaryGrace)
						defer t.Stop()
						grace = t.C
					}
					continue
				}
				if e.attempt == attempt {
					// What came after stays queued: a cancel among it
					// ends the restart's wait.
					j.mu.Lock()
					j.queue = append(q[i+1:len(q):len(q)], j.queue...)
					j.mu.Unlock()
					return false, failure{reason: e.reason, final: e.final, kind: e.failKind, task: e.task, record: e.record, left: e.left}
				}
			case evInputEnded:
				if e.attempt != attempt {
					continue
				}
				if j.inputEnded(e.task) {
					go j.finishInput(attempt)
				}
			case evRunning:
				if e.attempt != attempt {
					continue
				}
				j.taskRunning(attempt, e.task)
			case evEnd:
				if e.attempt != attempt {
					continue
				}
				j.runner.Stop("job finished")
				j.stopTasks(e.reason)
				j.mu.Lock()
				if j.st.Drained {
					j.st.DrainedWithSavepoint = e.savepoint
				}
				j.mu.Unlock()
				j.setState(control.JobFinished, e.reason)
				return true, failure{}
			case evFinished:
				if e.attempt != attempt {
					continue
				}
				j.runner.Finished(e.task)
				j.mu.Lock()
				j.finished[e.task] = true
				all := len(j.finished) == len(j.plan.Tasks)
				j.mu.Unlock()
				if all {
					j.runner.Stop("job finished")
					j.setState(control.JobFinished, "")
					return true, failure{}
				}
			}
		}
		if expired {
			return false, *secondary
		}
	}
}

// taskRunning records that task of attempt restored its state and runs;
// once every task of the attempt does, checkpointing starts. Tasks that
// restore a large state (a sink re-publishing its staged output) may take
// longer than the checkpoint timeout: a checkpoint triggered meanwhile would
// wait for them and expire, and the failover that follows would restore
// the same state again, for good. Only the job's goroutine (wait) calls it.
func (j *job) taskRunning(attempt int, task string) {
	j.mu.Lock()
	delete(j.restoring, task)
	start := len(j.restoring) == 0 && !j.checkpointing
	j.mu.Unlock()
	if !start {
		return
	}
	j.mu.Lock()
	again := j.st.Restarts+j.st.Replacements+j.st.Resumes > 0
	from := j.st.RestoredFrom
	j.mu.Unlock()
	if again {
		// The end of the incident a failover or restart began, at the
		// level that logged its start (weir up's default shows it).
		j.m.log.Warn("job running again: every task runs, checkpointing starts", "job", j.spec.Name, "attempt", attempt,
			"restored_checkpoint", from)
	} else {
		j.m.log.Info("every task runs: checkpointing starts", "job", j.spec.Name, "attempt", attempt, "restored_checkpoint", from)
	}
	// The runner first (not under j.mu: it calls the job holding its own
	// lock), then checkpointing: a savepoint that sees checkpointing set
	// (awaitRunning) finds the runner started.
	run := j.runner.Start(j.plan.TaskIDs())
	j.mu.Lock()
	j.checkpointing = true
	j.checkpointRun, j.checkpointAttempt = run, attempt
	if j.st.Attempt == attempt && j.ready != nil {
		close(j.ready)
		j.ready = nil
	}
	j.mu.Unlock()
}

// restoringLocked returns the tasks of the current attempt that still
// restore their state, in the plan's order (nil once checkpointing
// started). The caller holds j.mu.
func (j *job) restoringLocked() []string {
	if j.checkpointing {
		return nil
	}
	var out []string
	for _, v := range j.plan.Vertices {
		for _, task := range v.Tasks {
			if j.restoring[task] {
				out = append(out, task)
			}
		}
	}
	return out
}

// awaitRunning waits until every task of the current attempt restored its
// state and checkpointing started, so that a savepoint (what: "savepoint
// of" or "stop") can be triggered. It fails when ctx ends first — naming
// the tasks still restoring — or at once when the attempt ends meanwhile:
// a failover is refused naming its cause, rather than carried on to the
// next attempt, which restores the latest checkpoint again and may take
// longer than the caller waits; the savepoint can be asked for again once
// the job runs.
func (j *job) awaitRunning(ctx context.Context, what string) error {
	j.mu.Lock()
	attempt := j.st.Attempt
	j.mu.Unlock()
	logged := false
	for {
		j.mu.Lock()
		st, now, started, ready := j.st.State, j.st.Attempt, j.checkpointing, j.ready
		restoring := j.restoringLocked()
		cause := ""
		for _, f := range j.st.Failures {
			if f.Attempt == attempt {
				cause = f.Reason
				break
			}
		}
		j.mu.Unlock()
		switch {
		case (now != attempt || st != control.JobRunning) && cause != "" && !st.Terminal():
			return control.Errorf(control.ErrConflict, "%s %s: the job failed over while its tasks restored their state (attempt %d: %s); try again once it runs",
				what, j.spec.Name, attempt, cause)
		case now != attempt || st != control.JobRunning:
			return control.Errorf(control.ErrConflict, "%s %s: the job is %s (attempt %d ended while its tasks restored their state)",
				what, j.spec.Name, st, attempt)
		case started:
			return nil
		}
		if !logged {
			j.m.log.Info("savepoint waits for tasks restoring their state", "job", j.spec.Name, "attempt", attempt,
				"restoring", strings.Join(restoring, ","))
			logged = true
		}
		select {
		case <-ready:
		case <-j.done:
		case <-ctx.Done():
			return control.Errorf(control.ErrConflict, "%s %s: %d of %d tasks still restore their state (%s); checkpoints and savepoints start once every task runs",
				what, j.spec.Name, len(restoring), len(j.plan.Tasks), strings.Join(restoring, ", "))
		}
	}
}

// inputEnded records that task's input ended, and reports whether the
// job should now end: every task's has — all data went through the whole
// graph, so the channels carry no more records and a savepoint captures
// everything — and the end is not under way already.
func (j *job) inputEnded(task string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ended[task] = true
	for _, t := range j.plan.Tasks {
		if !j.ended[t.ID] {
			return false
		}
	}
	if j.ending {
		return false
	}
	j.ending = true
	return true
}

// finishRetry is how long finishInput waits before it tries a failed final
// savepoint again.
const finishRetry = time.Second

// finishInput ends attempt, whose bounded sources all read up to their
// stops and whose tasks all handled the end of their input (operators
// emitted their final output): it takes a stop savepoint, has every task
// handle its completion — the sinks commit the output after the last
// checkpoint with it — and then the job is finished. A savepoint that
// fails is tried again. A worker whose tasks could not come to rest (a
// sink's commit failed, or took longer than control.RestTimeout) fails the
// attempt, rather than the job finish without the output: the next
// restores the final savepoint, its sinks commit what it staged again
// (exactly-once sinks deduplicate) before they take input, its sources end
// at once, and its final savepoint has nothing left to commit. (Asking the
// worker again would not do: a task reports a failed commit to one rest
// only.)
func (j *job) finishInput(attempt int) {
	j.m.log.Info("every task's input ended: taking the final savepoint", "job", j.spec.Name, "attempt", attempt)
	var cp control.CheckpointInfo
	for {
		if st := j.status(); st.Attempt != attempt || st.State.Terminal() || j.ctx.Err() != nil {
			return
		}
		ctx, cancel := j.ctx, context.CancelFunc(func() {})
		if t := j.spec.Checkpointing.Timeout; t > 0 {
			ctx, cancel = context.WithTimeout(j.ctx, t+time.Second)
		}
		var err error
		cp, err = j.runner.StopSavepoint(ctx)
		cancel()
		if err == nil {
			break
		}
		j.m.log.Warn("final savepoint failed; trying again", "job", j.spec.Name, "attempt", attempt, "err", err)
		// Not j.sleep: that belongs to the job's goroutine, and takes the
		// events queued for it (the next attempt's, say).
		t := time.NewTimer(finishRetry)
		select {
		case <-t.C:
		case <-j.ctx.Done():
			t.Stop()
			return
		}
	}
	if j.attempt() != attempt {
		return
	}
	for _, w := range j.workers() {
		// The answer says the sinks committed: wait for it as long as the
		// worker waits for its tasks, so that a commit of a few seconds
		// does not cost a restart.
		c, cancel := context.WithTimeout(j.ctx, j.m.opts.RequestTimeout+control.RestTimeout)
		err := j.m.ctl.Stop(c, w, control.Stop{Job: j.spec.Name, Attempt: attempt, CheckpointID: cp.ID})
		cancel()
		if err != nil {
			j.push(jobEvent{kind: evFailure, attempt: attempt, failKind: control.FailureFinalSavepoint,
				reason: fmt.Sprintf("final savepoint %d: worker %s could not commit it: %v", cp.ID, w, err)})
			return
		}
	}
	j.mu.Lock()
	drained := j.st.Drained
	j.final = cp
	if drained {
		j.st.DrainedAt = sourceEnds(j.spec, j.plan, cp.Tasks)
	}
	j.mu.Unlock()
	reason := fmt.Sprintf("every source read up to its stop; output committed with final savepoint %d", cp.ID)
	if drained {
		reason = fmt.Sprintf("drained: every source's input ended where it had read to; output, the operators' end-of-input output included, committed with final savepoint %d", cp.ID)
	}
	j.push(jobEvent{kind: evEnd, attempt: attempt, reason: reason, savepoint: cp.ID})
}

// drain marks the job as being drained (control.JobStatus.Drained, kept
// in its record: every later attempt is deployed to end its input, also
// after a coordinator restart) and tells the workers of the current
// attempt's source tasks to end their input. The JetStream sources are
// held first (holdSources) and each is given one stream sequence, the
// highest its subtasks covered: they all read on to it and end there, so
// that the job read its stream exactly up to it and a job that starts
// after it continues without a gap or a repeat. The other sources end
// where they have read to. A worker that cannot be told fails the attempt
// over: its next attempt ends its input as it restored
// (control.Deploy.EndInput), at the chosen sequences or, if none was
// chosen, where the checkpoint it restores had read to, rather than the
// job run on with part of its input ended.
func (j *job) drain(ctx context.Context) {
	j.mu.Lock()
	j.st.Drained = true
	attempt := j.st.Attempt
	byWorker := map[string][]string{}
	for _, task := range j.plan.SourceTasks() {
		if w := j.assign[task]; w != "" {
			byWorker[w] = append(byWorker[w], task)
		}
	}
	j.mu.Unlock()
	j.persist()
	ws := slices.Sorted(maps.Keys(byWorker))
	at := j.holdSources(ctx, attempt, ws, byWorker)
	j.mu.Lock()
	if j.st.Attempt != attempt {
		// Failed over while held: the next attempt was deployed to end
		// its input, where its checkpoint says (deployOnce); what was
		// held here is not what it reads to.
		j.mu.Unlock()
		j.m.log.Info("draining: the attempt held ended; the next one ends its input as it restores", "job", j.spec.Name, "attempt", attempt)
		return
	}
	if len(at) > 0 {
		j.drainAt = at
		j.st.DrainedAt = chosenEnds(j.spec, j.plan, at)
	}
	j.mu.Unlock()
	if len(at) > 0 {
		j.persist()
	}
	j.m.log.Info("draining: the sources end their input", "job", j.spec.Name, "attempt", attempt, "at", drainAtLog(j.plan, at))
	for _, w := range ws {
		var taskAt map[string]uint64
		for _, t := range byWorker[w] {
			if seq, ok := at[t]; ok {
				if taskAt == nil {
					taskAt = map[string]uint64{}
				}
				taskAt[t] = seq
			}
		}
		c, cancel := context.WithTimeout(ctx, j.m.opts.RequestTimeout)
		err := j.m.ctl.EndInput(c, w, control.EndInput{Job: j.spec.Name, Attempt: attempt, Tasks: byWorker[w], At: taskAt})
		cancel()
		if err != nil {
			j.push(jobEvent{kind: evFailure, attempt: attempt,
				reason: fmt.Sprintf("drain: worker %s could not end its sources' input: %v (the next attempt ends its input as it restores)", w, err)})
			return
		}
	}
}

// rest has every worker bring the attempt's tasks to rest after stop
// savepoint id completed (control.Stop): sinks commit its output first.
func (j *job) rest(ctx context.Context, attempt int, id int64) {
	for _, w := range j.workers() {
		c, cancel := context.WithTimeout(ctx, j.m.opts.RequestTimeout)
		if err := j.m.ctl.Stop(c, w, control.Stop{Job: j.spec.Name, Attempt: attempt, CheckpointID: id}); err != nil {
			j.m.log.Warn("bringing tasks to rest failed", "job", j.spec.Name, "worker", w, "savepoint", id, "err", err)
		}
		cancel()
	}
}

// stopTasks tells every worker of the attempt to cancel it: cancelAttempt
// on the attempt's workers.
func (j *job) stopTasks(reason string) {
	j.cancelAttempt(j.workers(), reason)
}

// cancelAttempt tells workers to cancel the job's current attempt (best
// effort), all at once: a worker answers once its tasks stopped, which under load
// (a sink's commit under way) takes seconds, and one after the other the
// waits would add up. A worker that is no longer live (its heartbeats
// stopped: a process that is frozen, swapping or cut off) is told without
// waiting for its answer: it may give none before the request times out,
// and waiting would hold the failover back by RequestTimeout while giving
// nothing — one heard from again is told to cancel what it still runs of
// an attempt that is no longer current anyway (Manager.WorkerTasks). That
// request ends with the manager.
//
// A coordinator that shuts down leaves the current attempt running
// (run), but a cancel may still be under way as it does (a job canceled
// then): every worker is told, live or not, and its answer is awaited for
// shutdownCancelWait at most: a frozen worker that still counts as live
// would otherwise hold the shutdown for RequestTimeout, and once the
// cancel is sent, its answer changes nothing for a coordinator that goes
// away.
func (j *job) cancelAttempt(workers []string, reason string) {
	attempt := j.attempt()
	live := j.m.ctl.LiveWorkers()
	j.m.mu.Lock()
	mctx := j.m.ctx
	j.m.mu.Unlock()
	shutdown := j.ctx.Err() != nil
	wait := j.m.opts.RequestTimeout
	if shutdown {
		wait = min(wait, shutdownCancelWait)
	}
	var answered sync.WaitGroup
	for _, w := range workers {
		_, isLive := slices.BinarySearch(live, w)
		cancelOn := func(ctx context.Context) {
			c, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := j.m.ctl.Cancel(c, w, control.Cancel{Job: j.spec.Name, Attempt: attempt, Reason: reason}); err != nil {
				// A worker that is not live (lost: killed, cut off) is
				// expected not to answer; one that is should.
				level := slog.LevelWarn
				if !isLive {
					level = slog.LevelDebug
				}
				j.m.log.Log(context.Background(), level, "cancel on worker failed", "job", j.spec.Name, "worker", w, "live", isLive, "err", err)
			} else {
				j.m.attemptStopped(w, j.spec.Name, attempt)
			}
		}
		if isLive || shutdown {
			answered.Go(func() { cancelOn(context.WithoutCancel(j.ctx)) })
			continue
		}
		j.m.wg.Add(1)
		go func() { defer j.m.wg.Done(); cancelOn(mctx) }()
	}
	answered.Wait()
}

// shutdownCancelWait bounds how long a coordinator shutting down waits
// for a worker's answer to the cancel of a job's attempt (stopTasks).
const shutdownCancelWait = time.Second

// idReserve is how many checkpoint IDs the job record reserves at a time:
// it is written once per idReserve checkpoints, not for each.
const idReserve = 100

// Trigger implements checkpoint.Effects: it triggers the source tasks of
// the attempt the checkpoint was triggered in, grouped by worker; once
// another attempt runs it sends nothing.
func (j *job) Trigger(ctx context.Context, t checkpoint.TriggerAction) error {
	j.mu.Lock()
	if t.Run != j.checkpointRun {
		j.mu.Unlock()
		return fmt.Errorf("trigger checkpoint %d: the attempt it was triggered in ended", t.ID)
	}
	attempt := j.checkpointAttempt
	byWorker := map[string][]string{}
	for _, task := range j.plan.SourceTasks() {
		w := j.assign[task]
		byWorker[w] = append(byWorker[w], task)
	}
	j.triggered = max(j.triggered, t.ID)
	reserve, was := t.ID > j.reserved, j.reserved
	if reserve {
		j.reserved = t.ID + idReserve
	}
	j.mu.Unlock()
	if reserve {
		// Before any worker hears of the ID, and not at all unless it is
		// stored: a coordinator that resumed the job from the record as it
		// was would number a checkpoint with this ID again, whose snapshot
		// keys a cut-off worker may still write.
		if err := j.writeRecord(); err != nil {
			j.mu.Lock()
			if j.reserved == t.ID+idReserve {
				j.reserved = was // the next trigger reserves again
			}
			j.mu.Unlock()
			return fmt.Errorf("trigger checkpoint %d: reserving its ID: %w", t.ID, err)
		}
	}
	ws := make([]string, 0, len(byWorker))
	for w := range byWorker {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	for _, w := range ws {
		c, cancel := context.WithTimeout(ctx, j.m.opts.RequestTimeout)
		err := j.m.ctl.Trigger(c, w, control.Trigger{Job: j.spec.Name, Attempt: attempt, CheckpointID: t.ID,
			Timestamp: t.Timestamp.UnixMilli(), Savepoint: t.Savepoint, Stop: t.Stop, Tasks: byWorker[w]})
		cancel()
		if err != nil {
			if errors.Is(err, control.ErrUnavailable) {
				// The worker crashed between heartbeats: fail over now,
				// naming the worker, rather than as a failed checkpoint.
				j.m.ctl.Forget(w)
			}
			return fmt.Errorf("trigger checkpoint %d on worker %s: %w", t.ID, w, err)
		}
	}
	return nil
}

// Notify implements checkpoint.Effects: every worker of the attempt learns
// that checkpoint id completed (sinks commit), all at once (tellWorkers).
// The tasks of a worker that did not answer may not have heard it: their
// sinks commit the checkpoint's output with the next completion, and do
// not report committing it, so the next periodic trigger does not wait for
// their reports (checkpoint.Runner.Untold) — it would wait a checkpoint
// timeout, and the next completion is what their output waits for.
func (j *job) Notify(ctx context.Context, id int64) {
	ended := j.noteCompleted(id)
	j.mu.Lock()
	attempt := j.st.Attempt
	tasks := map[string][]string{} // worker → its tasks
	for t, w := range j.assign {
		tasks[w] = append(tasks[w], t)
	}
	j.mu.Unlock()
	j.tellWorkers(ctx, func(c context.Context, w string) {
		if err := j.m.ctl.Complete(c, w, control.Complete{Job: j.spec.Name, Attempt: attempt, CheckpointID: id}); err != nil {
			j.m.log.Warn("notify checkpoint complete failed", "job", j.spec.Name, "worker", w, "checkpoint", id, "err", err)
			j.runner.Untold(id, tasks[w])
		}
	})
	if ended {
		// After the sinks were told, not to delay their commits: a
		// coordinator restarted from here on resumes the job with no
		// failures in a row, not the ones this checkpoint ended.
		j.persist()
	}
}

// noteCompleted notes that checkpoint id completed, and reports whether
// it ended a row of failures (progressed), which the record keeps. A
// notice that reaches the job after the attempt's failure was counted
// ends none: countFailure counted the progress it made.
func (j *job) noteCompleted(id int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	ended := false
	if !j.failed && j.progressed(id) {
		ended = j.consecutive > 0
		j.consecutive = 0
	}
	for c := range j.ackedAt {
		if c <= id {
			delete(j.ackedAt, c)
			delete(j.caughtUp, c)
		}
	}
	if id > j.st.LatestCheckpoint {
		j.st.LatestCheckpoint = id
	}
	return ended
}

// progressed reports whether completed checkpoint id of the running
// attempt ends its job's failures in a row: unless every source task of
// the checkpoint the attempt restored acked id at the same position, it
// read on from there. One taken again at the restored place is no
// progress: an operator that traps on the next record fails each attempt
// after such a checkpoint, and restart.attempts, counted from it, would
// never run out. A checkpoint with no positions to compare (no restore,
// a core NATS source, a task the restored one lacks after a rescale,
// metadata older than the positions) counts as progress. One the attempt
// did not take — no source task of it acked id, a completion of the
// attempt before whose notice the runner passed on only after this
// attempt was deployed (a loaded machine) — is not its progress: counted
// as progress, it gave a job trapping on a record one restart more than
// restart.attempts. Call it with j.mu held.
func (j *job) progressed(id int64) bool {
	if len(j.restoredAt) == 0 {
		return true
	}
	acked, ok := j.ackedAt[id]
	if !ok {
		return false
	}
	caughtUp := true
	for task, pos := range j.restoredAt {
		if now, ok := acked[task]; !ok || now != pos {
			return true
		}
		caughtUp = caughtUp && j.caughtUp[id][task]
	}
	// At the restored place still, but with nothing left to read: an idle
	// job, whose sources have no record an operator could trap on. Its
	// row of failures ends (an SRE trial's idle job said "failures in a
	// row: 1" for good, its alert firing on). A record that comes later
	// and traps is read again after each restore: the next checkpoint
	// then has it to read, and ends nothing.
	return caughtUp
}

// noteRestore notes the source positions of restore, the checkpoint the
// attempt about to be deployed restores (nil: none), for progressed.
func (j *job) noteRestore(restore *checkpoint.Metadata) {
	at := map[string]int64{}
	if restore != nil {
		for task, m := range restore.Metrics {
			if pos, ok := m[control.MetricSourcePosition]; ok {
				at[task] = pos
			}
		}
	}
	j.mu.Lock()
	j.restoredAt, j.ackedAt, j.caughtUp, j.failed = at, map[int64]map[string]int64{}, map[int64]map[string]bool{}, false
	j.mu.Unlock()
}

// Abort implements checkpoint.Effects.
func (j *job) Abort(ctx context.Context, id int64, reason string) {
	attempt := j.attempt()
	j.tellWorkers(ctx, func(c context.Context, w string) {
		_ = j.m.ctl.Abort(c, w, control.Abort{Job: j.spec.Name, Attempt: attempt, CheckpointID: id, Reason: reason})
	})
}

// tellWorkers sends each of the job's workers a request (send), all at
// once, each bounded by RequestTimeout, and returns once every one ended.
// One after the other, a worker slow to answer (a sink whose commit runs,
// a frozen process) would hold up the others' completions and aborts, and
// the checkpoint runner with them, by RequestTimeout each.
func (j *job) tellWorkers(ctx context.Context, send func(ctx context.Context, worker string)) {
	var told sync.WaitGroup
	for _, w := range j.workers() {
		told.Go(func() {
			c, cancel := context.WithTimeout(ctx, j.m.opts.RequestTimeout)
			defer cancel()
			send(c, w)
		})
	}
	told.Wait()
}

// Fail implements checkpoint.Effects: too many checkpoint failures.
func (j *job) Fail(reason string) {
	j.push(jobEvent{kind: evFailure, attempt: j.attempt(), failKind: control.FailureCheckpointsFailed, reason: reason})
}
