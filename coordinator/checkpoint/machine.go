// Package checkpoint is weir's checkpoint coordinator: when to trigger
// checkpoints at the source tasks, how acks complete them, when they are
// aborted, which completed ones are kept, and where their metadata lives.
//
// The decisions are an explicit state machine (Machine): pure logic with
// the clock passed in, driven by Tick, Ack, Decline, Persisted,
// TriggerSavepoint, Start and Stop, each returning the Actions to carry
// out. Runner carries them out (sending triggers, writing metadata through a
// Catalog, notifying completion, discarding state) and Catalog stores
// checksummed checkpoint metadata in a storage.Store.
//
// The rules, after Flink's CheckpointCoordinator:
//
//   - interval: a checkpoint is due Interval after the previous trigger;
//   - max-concurrent: no trigger while that many checkpoints are pending;
//   - savepoint in progress: no periodic trigger while a savepoint is
//     pending (a task aligns one checkpoint at a time: the newer barrier
//     would subsume the savepoint at every task);
//   - min-pause: no trigger while one is pending or sooner than MinPause
//     after the last one ended;
//   - sink commits: no periodic trigger after a checkpoint or savepoint
//     completed until every task whose ack said it commits in the
//     background (control.MetricCommitReport: an exactly-once sink)
//     reported that it handed the checkpoint's output to its commits
//     (Committing), or Timeout passed (DefaultCommitReportWait without
//     one); a checkpoint completing after a newer savepoint did holds
//     nothing (the savepoint's completion covered it). A sink whose earlier commits still run waits for one of them
//     to end before it takes input again; upstream the channels fill and
//     every task waits with it. A barrier
//     sent then would wait behind that commit, and a checkpoint's duration
//     would hold the commit of an earlier one (with a backlog, the whole
//     checkpoint timeout). Sent once the sink takes input again, the
//     barrier travels at the speed of processing, as Flink's barriers do
//     while its sinks commit after notifyCheckpointComplete;
//   - timeout: a checkpoint still pending Timeout after its trigger is
//     aborted, unless every task acked it and its metadata is being
//     written; that write is bounded by Timeout of its own
//     (MetadataWriteWait), and fails the checkpoint when it runs out;
//   - decline: a task's decline aborts the checkpoint;
//   - subsumed: when checkpoint n completes, pending checkpoints < n are
//     aborted as subsumed;
//   - tolerable failures: timeouts, declines (kinds "declined" and
//     "failed") and metadata write failures are checkpoint failures; more
//     than TolerableFailures in a row produce FailJob. Aborts because of a
//     task failure, subsumption or a cancel marker do not count, nor do
//     failed savepoints, nor a failed trigger — unless triggers have
//     failed in a row for Timeout (TriggerFailed). A completed checkpoint
//     resets the count;
//   - retention: the last Retained completed checkpoints are kept; older
//     ones are discarded (state and metadata). Savepoints are never
//     discarded automatically. A kept checkpoint whose sink snapshot names
//     output staged in earlier ones (Metadata.SinkStateFrom) keeps every
//     completed checkpoint from the oldest it names on, and so does each
//     one kept so, until nothing kept names it any more. Discards come
//     newest first, so that a checkpoint never outlives, in storage, one
//     it names (see Runner: the discarder keeps that order);
//   - failed checkpoints leave nothing behind: an aborted checkpoint or
//     savepoint is discarded at once (what its tasks wrote so far, and
//     metadata written before a subsuming checkpoint completed), and so is
//     what a task acks for it later (a late ack, also one from an attempt
//     that ended: Late), as Flink's discardSubtaskState does. Only the
//     checkpoints the machine itself aborted are discarded so: never one
//     that completed, one still pending, or one of another run. The
//     discards queued as the job ends are carried out before the Runner
//     returns (EndDiscardTimeout);
//   - savepoints are triggered on demand, regardless of interval, min-pause
//     and max-concurrent, and are always aligned;
//   - finished tasks: once a task reported the end of its input, no new
//     checkpoint or savepoint is triggered in the attempt (a finished task
//     cannot snapshot), and pending ones it has not acked are aborted
//     without counting as failures;
//   - stop savepoint (TriggerStop): once it completed, no new checkpoint or
//     savepoint is triggered in the attempt: its sources take no more
//     input, and the attempt ends once the sinks committed it (a job
//     stopped, or a bounded job finishing). One triggered meanwhile would
//     stay pending until then and be listed as failed.
package checkpoint

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// Config is the checkpointing configuration of a job.
type Config struct {
	Interval          time.Duration
	Timeout           time.Duration
	MinPause          time.Duration
	MaxConcurrent     int
	TolerableFailures int
	Retained          int
	// Disabled turns periodic checkpoints off; savepoints still work.
	Disabled bool
	// HistorySize bounds the history kept for queries; default 100.
	HistorySize int
	// Mode is the job's checkpointing mode (jobspec.Mode*), recorded in the
	// history of every checkpoint triggered.
	Mode string
}

// ConfigFromSpec returns the configuration a job spec asks for.
func ConfigFromSpec(c jobspec.Checkpointing) Config {
	return Config{Interval: c.Interval, Timeout: c.Timeout, MinPause: c.MinPause,
		MaxConcurrent: c.MaxConcurrent, TolerableFailures: c.TolerableFailures,
		Retained: c.Retained, Disabled: c.Disabled, Mode: c.Mode}
}

// Metadata describes a completed checkpoint: what tasks restore from.
type Metadata struct {
	Job       string    `json:"job"`
	ID        int64     `json:"id"`
	Savepoint bool      `json:"savepoint,omitempty"`
	Triggered time.Time `json:"triggered"`
	Completed time.Time `json:"completed"`
	// Handles maps task ID to the storage key of its snapshot.
	Handles map[string]string `json:"handles"`
	// Metrics maps task ID to its metrics (control.Metric* names).
	Metrics map[string]map[string]int64 `json:"metrics,omitempty"`
	// Sources are the job's sources as the run that took the checkpoint
	// ran them, their start and stop resolved to stream sequences
	// (RunnerOptions.Sources): a restore of the checkpoint starts and
	// stops where that run did. Nil in metadata written before they were
	// recorded (a restore then takes the sources of the job's latest run
	// for its own checkpoints, and refuses a start: new of an earlier
	// run's: coordinator/job keepResolved).
	Sources []jobspec.Source `json:"sources,omitempty"`
	// Inputs are the job's operators' inputs, by operator, as the run
	// that took the checkpoint had them partitioned
	// (RunnerOptions.Inputs): a restore that no longer partitions by key
	// an input that was, of an operator with state, would hand a key's
	// records to subtasks that do not hold its state (coordinator/job
	// checkRestore refuses it). Nil in metadata written before they were
	// recorded.
	Inputs map[string][]jobspec.Input `json:"inputs,omitempty"`
	// Edges are the edges of the job's plan as the run that took the
	// checkpoint had them (RunnerOptions.Edges): with the parallelisms
	// the handles give, they say which producer and consumer each
	// channel of a task's in-flight channel state connected, so that a
	// restore with another parallelism can redistribute it
	// (coordinator/job channelMoves). Nil in metadata written before they
	// were recorded.
	Edges []plan.Edge `json:"edges,omitempty"`
	// Removing marks a checkpoint whose removal (Catalog.Remove) began:
	// its state objects may be partly gone, so nothing restores it
	// (Catalog.Read returns a RemovingError), and a removal done again
	// finishes it. Catalog.Remove writes it before it deletes anything.
	Removing bool `json:"removing,omitempty"`
}

// Restore returns the restore instructions for a deploy.
func (m *Metadata) Restore() *control.Restore {
	h := make(map[string]string, len(m.Handles))
	for k, v := range m.Handles {
		h[k] = v
	}
	return &control.Restore{CheckpointID: m.ID, Handles: h}
}

// Action is something the machine asks its runner to do: one of
// TriggerAction, PersistAction, NotifyAction, AbortAction, DiscardAction,
// FailJobAction.
type Action interface{ isAction() }

// TriggerAction: send a trigger for checkpoint ID to every source task.
type TriggerAction struct {
	ID        int64
	Timestamp time.Time
	Savepoint bool
	// Stop marks the savepoint of a job being stopped (TriggerStop).
	Stop bool
	// Run is the attempt the checkpoint was triggered in (Machine.Run):
	// its trigger goes to that attempt's tasks only.
	Run int
}

// PersistAction: every task acked; write Metadata, then call Persisted.
type PersistAction struct{ Metadata *Metadata }

// NotifyAction: checkpoint ID is complete; tell every task (sinks commit).
type NotifyAction struct{ ID int64 }

// AbortAction: checkpoint ID was aborted; tell every task.
type AbortAction struct {
	ID        int64
	Reason    string
	Savepoint bool
	// Failed says the abort counts as a checkpoint failure (expired,
	// declined); false, it is no failure of its own (cut by the
	// attempt's end — a failover, a stop — or by a newer one), as
	// control.CheckpointInfo.Aborted says.
	Failed bool
}

// DiscardAction: delete checkpoint ID's state and metadata. The machine
// asks for it when retention drops a completed checkpoint, when a pending
// one is aborted, and when a late ack brings the state of an aborted one.
type DiscardAction struct {
	ID int64
	// Completed is the checkpoint's metadata when retention drops a
	// completed checkpoint, nil otherwise: its sinks may store their
	// commit of it, and write their commit markers next to its snapshots,
	// after the discard (see Runner).
	Completed *Metadata
}

// FailJobAction: too many checkpoint failures; fail the job over. Run is
// the attempt (Machine.Run) whose checkpoints failed: once it ended, the
// action is moot and must not fail the attempt that replaced it.
type FailJobAction struct {
	Reason string
	Run    int
}

func (TriggerAction) isAction() {}
func (PersistAction) isAction() {}
func (NotifyAction) isAction()  {}
func (AbortAction) isAction()   {}
func (DiscardAction) isAction() {}
func (FailJobAction) isAction() {}

type pending struct {
	id        int64
	savepoint bool
	stop      bool // the savepoint of TriggerStop
	triggered time.Time
	handles   map[string]string
	metrics   map[string]map[string]int64
	persist   bool // all acked, metadata being written
	info      *control.CheckpointInfo
}

// Machine is the checkpoint coordinator's state for one job. It is not safe
// for concurrent use; Runner serializes access.
type Machine struct {
	job  string
	cfg  Config
	task map[string]bool // tasks that must ack
	// order holds the tasks as Start got them: in plan order, sources
	// first, so that the first not to ack is the nearest the sources.
	order []string

	running     bool
	run         int // counts Starts: the attempt being coordinated
	finished    map[string]bool
	stopped     int64 // the stop savepoint that completed in this attempt (0: none)
	nextID      int64
	pending     map[int64]*pending
	completed   []*Metadata // periodic checkpoints, oldest first
	savepoints  []*Metadata
	lastTrigger time.Time
	lastEnd     time.Time
	// committing holds the tasks that have not reported the hand-over of
	// checkpoint commitID's output to their sinks' commits since it
	// completed (at commitSince): no periodic trigger until it is empty
	// or Timeout passed.
	committing  map[string]bool
	commitID    int64
	commitSince time.Time
	failures    int
	// triggerFailing is when the first of the triggers that failed in a
	// row since the last that reached its tasks failed (zero: none).
	triggerFailing time.Time
	// aborted holds the IDs of the checkpoints and savepoints this machine
	// aborted (the newest abortedKept): a late ack for one is discarded.
	aborted map[int64]bool

	history []*control.CheckpointInfo // oldest first
	stats   control.CheckpointStats
	// last is the latest completed checkpoint or savepoint, the one
	// stats.LastID names (nil: none yet), as it completed.
	last *control.CheckpointInfo
	// sources, inputs and edges are what the metadata of each checkpoint
	// this machine completes records of the run that took it
	// (Metadata.Sources, Inputs, Edges; RunnerOptions): the metadata it
	// keeps (Latest, Retained) as the one written to storage, so that
	// what reads it in memory — the job status's warning of keyed state
	// behind an input not partitioned by key — sees them too.
	sources []jobspec.Source
	inputs  map[string][]jobspec.Input
	edges   []plan.Edge
}

// record sets what the metadata of each checkpoint completed from now on
// records of the run that takes it (NewRunner).
func (m *Machine) record(sources []jobspec.Source, inputs map[string][]jobspec.Input, edges []plan.Edge) {
	m.sources, m.inputs, m.edges = sources, inputs, edges
}

// metadata is the metadata of pending checkpoint id, completed at now.
func (m *Machine) metadata(id int64, p *pending, now time.Time) *Metadata {
	return &Metadata{Job: m.job, ID: id, Savepoint: p.savepoint, Triggered: p.triggered, Completed: now,
		Handles: p.handles, Metrics: p.metrics, Sources: m.sources, Inputs: m.inputs, Edges: m.edges}
}

// NewMachine returns a stopped machine for job. restored are the completed
// checkpoints and savepoints already in storage (any order): the machine
// keeps them and numbers new checkpoints after the highest ID; nextID, if
// higher, is the next ID to use.
func NewMachine(job string, cfg Config, restored []*Metadata, nextID int64) *Machine {
	if cfg.MaxConcurrent < 1 {
		cfg.MaxConcurrent = 1
	}
	if cfg.Retained < 1 {
		cfg.Retained = 1
	}
	if cfg.HistorySize <= 0 {
		cfg.HistorySize = 100
	}
	m := &Machine{job: job, cfg: cfg, pending: map[int64]*pending{}, nextID: 1, aborted: map[int64]bool{}}
	rs := append([]*Metadata(nil), restored...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	for _, md := range rs {
		if md.Savepoint {
			m.savepoints = append(m.savepoints, md)
		} else {
			m.completed = append(m.completed, md)
		}
		if md.ID >= m.nextID {
			m.nextID = md.ID + 1
		}
		in := md.Info()
		m.history = append(m.history, &in)
	}
	if nextID > m.nextID {
		m.nextID = nextID
	}
	_, kept := m.retention()
	m.noteKept(kept)
	return m
}

// SinkStateFrom returns the oldest checkpoint whose snapshot of a task
// md's snapshot of that task names (control.MetricSinkStateFrom), and
// the task (of those naming it, the first by name); 0 and "" when md is
// self-contained. A restore of md reads the snapshots of that checkpoint
// and, for all md records, of any after it.
func (md *Metadata) SinkStateFrom() (id int64, task string) {
	for t, mt := range md.Metrics {
		f := mt[control.MetricSinkStateFrom]
		if f > 0 && (id == 0 || f < id || f == id && t < task) {
			id, task = f, t
		}
	}
	return id, task
}

// retention returns the index in m.completed of the oldest completed
// checkpoint retention keeps, and why each kept one before the newest
// Retained is kept. It keeps the newest Retained and every one from the
// oldest checkpoint one of them or a kept savepoint names
// (Metadata.SinkStateFrom) on.
func (m *Machine) retention() (start int, kept map[int64]string) {
	start = max(len(m.completed)-m.cfg.Retained, 0)
	var lo, by int64
	var task string
	note := func(md *Metadata) {
		if f, t := md.SinkStateFrom(); f > 0 && (lo == 0 || f < lo) {
			lo, by, task = f, md.ID, t
		}
	}
	for _, md := range m.completed[start:] {
		note(md)
	}
	for _, md := range m.savepoints {
		note(md)
	}
	// Not what those kept for the newer ones name in turn: a restore of
	// the newer ones reads only the output staged in them, which they
	// hold themselves (commits that lag one checkpoint behind would keep
	// every checkpoint otherwise).
	for start > 0 && lo > 0 && m.completed[start-1].ID >= lo {
		start--
	}
	for _, md := range m.completed[start : len(m.completed)-min(m.cfg.Retained, len(m.completed))] {
		if kept == nil {
			kept = map[int64]string{}
		}
		kept[md.ID] = fmt.Sprintf("kept past checkpointing.retained: checkpoint %d's snapshot of task %s names output staged from checkpoint %d on, which its restore reads", by, task, lo)
	}
	return start, kept
}

// noteKept gives the history entries of the completed checkpoints kept
// past Retained (retention) their reason.
func (m *Machine) noteKept(kept map[int64]string) {
	for _, h := range m.history {
		if why, ok := kept[h.ID]; ok && h.Status == control.CheckpointCompleted {
			h.Reason = why
		}
	}
}

// Info returns what the history says of completed checkpoint md.
func (md *Metadata) Info() control.CheckpointInfo {
	in := control.CheckpointInfo{Job: md.Job, ID: md.ID, Savepoint: md.Savepoint, Status: control.CheckpointCompleted,
		Triggered: md.Triggered, Duration: md.Completed.Sub(md.Triggered), Tasks: md.Metrics,
		Acked: len(md.Handles), Total: len(md.Handles)}
	summarize(&in)
	return in
}

// summarize fills Size, Alignment and Unaligned from the task metrics.
func summarize(in *control.CheckpointInfo) {
	in.Size, in.Alignment, in.Unaligned = 0, 0, false
	for _, mt := range in.Tasks {
		in.Size += mt[control.MetricSnapshotBytes]
		if a := time.Duration(mt[control.MetricAlignmentNanos]); a > in.Alignment {
			in.Alignment = a
		}
		if mt[control.MetricUnaligned] != 0 {
			in.Unaligned = true
		}
	}
}

// NextID returns the ID the next checkpoint will get.
func (m *Machine) NextID() int64 { return m.nextID }

// Running reports whether the machine is between Start and Stop.
func (m *Machine) Running() bool { return m.running }

// Run numbers the attempts the machine coordinated: Start increments it.
func (m *Machine) Run() int { return m.run }

// Current reports whether run is the attempt being coordinated (Start
// began it and Stop has not ended it).
func (m *Machine) Current(run int) bool { return m.running && run == m.run }

// Start begins coordinating a job attempt whose tasks are tasks (every task
// must ack). The first periodic checkpoint is due one interval from now.
func (m *Machine) Start(now time.Time, tasks []string) {
	m.running = true
	m.run++
	m.task = make(map[string]bool, len(tasks))
	for _, t := range tasks {
		m.task[t] = true
	}
	m.order = slices.Clone(tasks)
	m.lastTrigger = now
	m.lastEnd = time.Time{}
	m.finished = map[string]bool{}
	m.stopped = 0
	m.committing = nil
	m.triggerFailing = time.Time{}
}

// Finished records that task reached the end of its input. No checkpoint is
// triggered afterwards in this attempt; pending checkpoints the task has not
// acked are aborted (not counted as failures).
func (m *Machine) Finished(now time.Time, task string) []Action {
	if !m.task[task] || m.finished[task] {
		return nil
	}
	m.finished[task] = true
	return m.abortAll(now, fmt.Sprintf("task %s finished", task), func(p *pending) bool {
		_, acked := p.handles[task]
		return !acked && !p.persist
	})
}

// Stop ends the attempt: every pending checkpoint is aborted with reason
// (not counted as a checkpoint failure).
func (m *Machine) Stop(now time.Time, reason string) []Action {
	m.running = false
	m.committing = nil
	return m.abortAll(now, reason, func(*pending) bool { return true })
}

func (m *Machine) abortAll(now time.Time, reason string, match func(*pending) bool) []Action {
	ids := make([]int64, 0, len(m.pending))
	for id, p := range m.pending {
		if match(p) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var acts []Action
	for _, id := range ids {
		acts = append(acts, m.abort(now, id, reason, "")...)
	}
	return acts
}

// abort ends pending checkpoint id; cause, if not "", is the checkpoint
// failure it counts as (control.CheckpointStats.LastFailureCause), and ""
// an abort that is no checkpoint failure.
func (m *Machine) abort(now time.Time, id int64, reason string, cause control.CheckpointFailureCause) []Action {
	p := m.pending[id]
	if p == nil {
		return nil
	}
	delete(m.pending, id)
	m.remember(id)
	m.lastEnd = now
	p.info.Status = control.CheckpointFailed
	p.info.Reason = reason
	p.info.Duration = now.Sub(p.triggered)
	counted := cause != ""
	if !counted {
		m.stats.Aborted++
		p.info.Aborted = true
	}
	if counted {
		m.stats.Failed++
		m.stats.FailedInARow++
		m.stats.LastFailedID, m.stats.LastFailed, m.stats.LastFailure, m.stats.LastFailureCause = id, now, reason, cause
	}
	acts := []Action{AbortAction{ID: id, Reason: reason, Savepoint: p.savepoint, Failed: counted}, DiscardAction{ID: id}}
	if counted && !p.savepoint {
		m.failures++
		if m.failures > m.cfg.TolerableFailures {
			acts = append(acts, FailJobAction{Reason: fmt.Sprintf(
				"%d consecutive checkpoint failures exceed the %d tolerated; last: checkpoint %d: %s",
				m.failures, m.cfg.TolerableFailures, id, reason), Run: m.run})
			m.failures = 0
		}
	}
	return acts
}

// abortedKept bounds how many aborted checkpoint IDs a machine remembers
// for late acks. Late acks come within the write time of a snapshot after
// the abort; one for a checkpoint older than the newest abortedKept
// aborted ones is left to Catalog.Leftovers.
const abortedKept = 1024

// remember records that checkpoint id was aborted, forgetting the oldest
// aborted IDs beyond abortedKept.
func (m *Machine) remember(id int64) {
	m.aborted[id] = true
	if len(m.aborted) <= abortedKept {
		return
	}
	ids := make([]int64, 0, len(m.aborted))
	for a := range m.aborted {
		ids = append(ids, a)
	}
	slices.Sort(ids)
	// Down to three quarters, so that the sort is not paid on every abort.
	for _, a := range ids[:len(ids)-abortedKept*3/4] {
		delete(m.aborted, a)
	}
}

// savepointPending reports whether a savepoint is pending.
func (m *Machine) savepointPending() bool {
	for _, p := range m.pending {
		if p.savepoint {
			return true
		}
	}
	return false
}

func (m *Machine) periodicPending() int {
	n := 0
	for _, p := range m.pending {
		if !p.savepoint {
			n++
		}
	}
	return n
}

// unacked names, for an expiry's reason, the tasks that had not acked p:
// "; no snapshot from counts-0, counts-1" (the first three, and how many
// more) — the tasks holding the checkpoint up, in plan order: a task
// whose barrier is stuck behind its input (a slow operator under aligned
// checkpoints) holds up every task after it, and is named first.
func (m *Machine) unacked(p *pending) string {
	var missing []string
	for _, t := range m.order {
		if _, ok := p.handles[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	const shown = 3
	more := ""
	if len(missing) > shown {
		more = fmt.Sprintf(" and %d more", len(missing)-shown)
		missing = missing[:shown]
	}
	return "; no snapshot from " + strings.Join(missing, ", ") + more
}

// Tick aborts expired checkpoints and triggers a periodic checkpoint when
// one is due and allowed.
func (m *Machine) Tick(now time.Time) []Action {
	var acts []Action
	ids := make([]int64, 0, len(m.pending))
	for id := range m.pending {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		p := m.pending[id]
		if p != nil && !p.persist && m.cfg.Timeout > 0 && !now.Before(p.triggered.Add(m.cfg.Timeout)) {
			acts = append(acts, m.abort(now, id, fmt.Sprintf("expired after %s%s", m.cfg.Timeout, m.unacked(p)), control.CheckpointExpired)...)
		}
	}
	if !m.running || m.cfg.Disabled || m.cfg.Interval <= 0 || len(m.finished) > 0 || m.stopped != 0 {
		return acts
	}
	if now.Before(m.lastTrigger.Add(m.cfg.Interval)) {
		return acts
	}
	if m.periodicPending() >= m.cfg.MaxConcurrent || m.savepointPending() {
		return acts
	}
	if m.awaitsCommits(now) {
		return acts
	}
	if m.cfg.MinPause > 0 {
		if m.periodicPending() > 0 || (!m.lastEnd.IsZero() && now.Before(m.lastEnd.Add(m.cfg.MinPause))) {
			return acts
		}
	}
	return append(acts, m.trigger(now, false))
}

// DefaultCommitReportWait bounds the wait for commit reports (see
// Committing) of a machine without a checkpoint timeout.
const DefaultCommitReportWait = time.Minute

// commitReportWait is how long a periodic trigger waits for commit
// reports at most: a checkpoint timeout.
func (m *Machine) commitReportWait() time.Duration {
	if m.cfg.Timeout > 0 {
		return m.cfg.Timeout
	}
	return DefaultCommitReportWait
}

// DefaultMetadataWriteWait bounds the write of a checkpoint's metadata
// (PersistAction) for a machine without a checkpoint timeout.
const DefaultMetadataWriteWait = time.Minute

// MetadataWriteWait is how long the write of a checkpoint's metadata
// (PersistAction) may take: a checkpoint timeout. A checkpoint whose
// metadata is being written does not expire, so a write that never came
// back would hold up every checkpoint after it; one that runs out fails
// the checkpoint (Persisted), counted.
func (m *Machine) MetadataWriteWait() time.Duration {
	if m.cfg.Timeout > 0 {
		return m.cfg.Timeout
	}
	return DefaultMetadataWriteWait
}

// TriggerFailed aborts checkpoint id of attempt run, whose trigger did not
// reach its tasks; reason says why. A trigger lost in a NATS blip costs
// its checkpoint and is no checkpoint failure, but triggers that failed
// in a row for a checkpoint timeout (MetadataWriteWait: a worker that
// refuses them because it no longer runs the attempt, or whose answers
// never come) are: the attempt would otherwise run on without a
// checkpoint and without a failure. The one that fails a checkpoint
// timeout after the first counts, and so does one each checkpoint timeout
// after it while they go on failing. A failure of a run that ended
// meanwhile changes nothing.
func (m *Machine) TriggerFailed(now time.Time, run int, id int64, reason string) []Action {
	if !m.Current(run) {
		return nil
	}
	if m.triggerFailing.IsZero() {
		m.triggerFailing = now
	}
	wait := m.MetadataWriteWait()
	var cause control.CheckpointFailureCause
	if !now.Before(m.triggerFailing.Add(wait)) {
		reason = fmt.Sprintf("triggers failed in a row for %s; the last: %s", wait, reason)
		m.triggerFailing = now
		cause = control.CheckpointTriggerFailed
	}
	return m.abort(now, id, "trigger failed: "+reason, cause)
}

// Triggered records that the trigger of a checkpoint of attempt run
// reached its tasks: failed triggers before it no longer count
// (TriggerFailed).
func (m *Machine) Triggered(run int) {
	if m.Current(run) {
		m.triggerFailing = time.Time{}
	}
}

// awaitsCommits reports whether a periodic trigger waits for tasks to
// report the hand-over of the last completed checkpoint's output to their
// sinks' commits: some have not, and commitReportWait has not passed
// since it completed.
func (m *Machine) awaitsCommits(now time.Time) bool {
	if len(m.committing) == 0 {
		return false
	}
	if !now.Before(m.commitSince.Add(m.commitReportWait())) {
		m.committing = nil // a report lost, or a commit stuck: the task fails on its own
		return false
	}
	return true
}

// Committing records that task handed its sink's output up to checkpoint
// id to its commits (control.EventCommitting). It reports whether that
// ended the wait for such reports, when a due periodic checkpoint may be
// triggered at once.
func (m *Machine) Committing(task string, id int64) bool {
	if len(m.committing) == 0 || id < m.commitID || !m.committing[task] {
		return false
	}
	delete(m.committing, task)
	return len(m.committing) == 0
}

func (m *Machine) trigger(now time.Time, savepoint bool) Action {
	id := m.nextID
	m.nextID++
	if !savepoint {
		m.lastTrigger = now
	}
	info := &control.CheckpointInfo{Job: m.job, ID: id, Savepoint: savepoint, Status: control.CheckpointPending,
		Triggered: now, Total: len(m.task), Tasks: map[string]map[string]int64{}, Mode: m.cfg.Mode}
	m.pending[id] = &pending{id: id, savepoint: savepoint, triggered: now,
		handles: map[string]string{}, metrics: info.Tasks, info: info}
	m.history = append(m.history, info)
	if over := len(m.history) - m.cfg.HistorySize; over > 0 {
		m.history = append([]*control.CheckpointInfo(nil), m.history[over:]...)
	}
	return TriggerAction{ID: id, Timestamp: now, Savepoint: savepoint, Run: m.run}
}

// TriggerSavepoint starts a savepoint at once and returns its ID.
func (m *Machine) TriggerSavepoint(now time.Time) (int64, []Action, error) {
	if !m.running {
		return 0, nil, fmt.Errorf("savepoint of %s: job is not running", m.job)
	}
	if len(m.finished) > 0 {
		return 0, nil, fmt.Errorf("savepoint of %s: some tasks already finished", m.job)
	}
	if m.stopped != 0 {
		return 0, nil, fmt.Errorf("savepoint of %s: the job is stopping with savepoint %d", m.job, m.stopped)
	}
	a := m.trigger(now, true).(TriggerAction)
	return a.ID, []Action{a}, nil
}

// TriggerStop is TriggerSavepoint for a job being stopped: its trigger
// says so (TriggerAction.Stop), and source tasks take no input after its
// barrier. Once it completed, nothing more is triggered in the attempt;
// if it fails, the attempt checkpoints on.
func (m *Machine) TriggerStop(now time.Time) (int64, []Action, error) {
	id, acts, err := m.TriggerSavepoint(now)
	if err != nil {
		return 0, nil, err
	}
	a := acts[0].(TriggerAction)
	a.Stop = true
	m.pending[id].stop = true
	return id, []Action{a}, nil
}

// NextWake returns when Tick next has something to do; zero when nothing
// is scheduled.
func (m *Machine) NextWake() time.Time {
	var t time.Time
	earlier := func(c time.Time) {
		if t.IsZero() || c.Before(t) {
			t = c
		}
	}
	if m.cfg.Timeout > 0 {
		for _, p := range m.pending {
			if !p.persist {
				earlier(p.triggered.Add(m.cfg.Timeout))
			}
		}
	}
	if m.running && !m.cfg.Disabled && m.cfg.Interval > 0 && len(m.finished) == 0 && m.stopped == 0 {
		due := m.lastTrigger.Add(m.cfg.Interval)
		if m.cfg.MinPause > 0 && !m.lastEnd.IsZero() && due.Before(m.lastEnd.Add(m.cfg.MinPause)) {
			due = m.lastEnd.Add(m.cfg.MinPause)
		}
		// While blocked by pending checkpoints, the end of one (an event)
		// or a timeout wakes the runner.
		if m.periodicPending() < m.cfg.MaxConcurrent && !m.savepointPending() && (m.cfg.MinPause == 0 || m.periodicPending() == 0) {
			if len(m.committing) > 0 {
				// A report (an event) or the end of the wait.
				if end := m.commitSince.Add(m.commitReportWait()); due.Before(end) {
					due = end
				}
			}
			earlier(due)
		}
	}
	return t
}

// Ack records task's snapshot of checkpoint id. When every task acked, it
// returns a PersistAction. An ack for a checkpoint no longer pending is a
// late one (Late).
func (m *Machine) Ack(now time.Time, task string, id int64, handle string, metrics map[string]int64) []Action {
	p := m.pending[id]
	if p == nil {
		return m.Late(id)
	}
	if !m.task[task] || p.persist {
		return nil
	}
	if _, dup := p.handles[task]; dup {
		return nil
	}
	p.handles[task] = handle
	if metrics == nil {
		metrics = map[string]int64{}
	}
	p.metrics[task] = metrics
	p.info.Acked = len(p.handles)
	summarize(p.info)
	if len(p.handles) < len(m.task) {
		return nil
	}
	p.persist = true
	md := m.metadata(id, p, now)
	return []Action{PersistAction{Metadata: md}}
}

// Late handles a late ack of checkpoint id: one that came after the
// checkpoint ended, or from a task of an attempt that ended (whose acks
// never count). The snapshot it names was written for nothing if this
// machine aborted the checkpoint: it returns a DiscardAction for it, as
// the abort did for the snapshots written by then. An ack for a checkpoint
// that completed, is still pending, or that this machine did not trigger
// or no longer remembers (abortedKept) returns nothing: its state is kept.
func (m *Machine) Late(id int64) []Action {
	if !m.aborted[id] {
		return nil
	}
	return []Action{DiscardAction{ID: id}}
}

// Decline aborts checkpoint id because task declined it. Kinds
// control.DeclineRefused and control.DeclineFailed (and unknown kinds)
// count as checkpoint failures.
func (m *Machine) Decline(now time.Time, task string, id int64, kind, reason string) []Action {
	if m.pending[id] == nil || m.pending[id].persist {
		return nil
	}
	var cause control.CheckpointFailureCause
	if kind != control.DeclineSubsumed && kind != control.DeclineCancelled {
		cause = control.CheckpointDeclined
	}
	return m.abort(now, id, fmt.Sprintf("declined by %s (%s): %s", task, kind, reason), cause)
}

// Persisted reports the outcome of a PersistAction. On success the
// checkpoint is complete: it returns NotifyAction, aborts older pending
// checkpoints as subsumed and discards checkpoints beyond retention.
func (m *Machine) Persisted(now time.Time, id int64, err error) []Action {
	p := m.pending[id]
	if p == nil || !p.persist {
		return nil
	}
	if err != nil {
		return m.abort(now, id, fmt.Sprintf("writing metadata failed: %v", err), control.CheckpointMetadataFailed)
	}
	delete(m.pending, id)
	m.lastEnd = now
	md := m.metadata(id, p, now)
	p.info.Status = control.CheckpointCompleted
	p.info.Duration = now.Sub(p.triggered)
	m.stats.Completed++
	m.stats.FailedInARow = 0
	m.stats.LastID, m.stats.LastDuration, m.stats.LastSize, m.stats.LastCompleted = id, p.info.Duration, p.info.Size, now
	last := *p.info // its task metrics no ack changes any more
	m.last = &last
	m.stats.Observe(p.info.Duration)
	acts := []Action{NotifyAction{ID: id}}
	if p.stop {
		m.stopped = id
	}
	if id > m.commitID {
		// Not for a checkpoint older than a savepoint that completed
		// before it (triggered while it was pending): that completion
		// reached the tasks first and covers this one, which no worker
		// passes on to its tasks, and no sink would report its commits.
		m.committing, m.commitID, m.commitSince = nil, id, now
		for task, mt := range p.metrics {
			if mt[control.MetricCommitReport] != 0 && m.task[task] {
				if m.committing == nil {
					m.committing = map[string]bool{}
				}
				m.committing[task] = true
			}
		}
	}
	if p.savepoint {
		m.savepoints = append(m.savepoints, md)
		return acts
	}
	m.failures = 0
	m.completed = append(m.completed, md)
	// Older periodic checkpoints are subsumed, also one whose metadata is
	// being written (its acks came after this one's): completing it now
	// would make it the newest in retention, which would discard this
	// one, whose output sinks are about to commit, and restore the older.
	// Its write ends with nothing to do, and the discard below follows it.
	acts = append(acts, m.abortAll(now, fmt.Sprintf("subsumed by checkpoint %d", id), func(q *pending) bool {
		return !q.savepoint && q.id < id
	})...)
	// Newest first: a checkpoint whose sink snapshot names output staged
	// in an older one (SinkStateFrom) goes before the one it names, so
	// that discards cut short (the coordinator killed, the store failing)
	// never leave it stored without what its restore reads — a restart
	// would find it corrupt ("names output staged in checkpoint N, which
	// cannot be restored"), and keep it for good.
	start, kept := m.retention()
	for i := start - 1; i >= 0; i-- {
		old := m.completed[i]
		acts = append(acts, DiscardAction{ID: old.ID, Completed: old})
		for _, h := range m.history {
			if h.ID == old.ID {
				h.Status, h.Reason = control.CheckpointDiscarded, ""
			}
		}
	}
	m.completed = m.completed[start:]
	m.noteKept(kept)
	return acts
}

// Latest returns the newest completed checkpoint or savepoint (nil if none).
func (m *Machine) Latest() *Metadata {
	var best *Metadata
	for _, l := range [][]*Metadata{m.completed, m.savepoints} {
		for _, md := range l {
			if best == nil || md.ID > best.ID {
				best = md
			}
		}
	}
	return best
}

// Retained returns the kept completed checkpoints and savepoints, newest
// first.
func (m *Machine) Retained() []*Metadata {
	out := append(append([]*Metadata(nil), m.completed...), m.savepoints...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out
}

// Forget drops a completed checkpoint the runner found corrupt or missing.
func (m *Machine) Forget(id int64) {
	drop := func(l []*Metadata) []*Metadata {
		out := l[:0]
		for _, md := range l {
			if md.ID != id {
				out = append(out, md)
			}
		}
		return out
	}
	m.completed = drop(m.completed)
	m.savepoints = drop(m.savepoints)
	for _, h := range m.history {
		if h.ID == id && h.Status == control.CheckpointCompleted {
			h.Status = control.CheckpointFailed
			h.Reason = "metadata corrupt or missing"
		}
	}
}

// Removed drops completed checkpoint or savepoint id, which is being
// removed from storage on request, from those the machine keeps: no
// failover restores it, and retention does not count or discard it. Its
// history entry says it was removed.
func (m *Machine) Removed(id int64) {
	drop := func(l []*Metadata) []*Metadata {
		return slices.DeleteFunc(l, func(md *Metadata) bool { return md.ID == id })
	}
	m.completed = drop(m.completed)
	m.savepoints = drop(m.savepoints)
	for _, h := range m.history {
		if h.ID == id && (h.Status == control.CheckpointCompleted || h.Status == control.CheckpointRemoving) {
			h.Status = control.CheckpointDiscarded
			h.Reason = ReasonRemoved
		}
	}
}

// RemovalCut notes that the removal of checkpoint id (Removed) was cut
// short: its history says it is being removed, for reason. The machine
// keeps it no more than a removed one.
func (m *Machine) RemovalCut(id int64, reason string) {
	for _, h := range m.history {
		if h.ID == id && (h.Status == control.CheckpointDiscarded && h.Reason == ReasonRemoved || h.Status == control.CheckpointRemoving) {
			h.Status = control.CheckpointRemoving
			h.Reason = reason
		}
	}
}

// ReasonRemoved is the history's reason for a checkpoint removed on
// request (Machine.Removed). Every removal is one: it begins with weir
// checkpoint rm (or rm -earlier), also one cut short that the coordinator
// finishes later (as it starts, or as retention goes on), since only a
// removal marks a checkpoint as being removed; retention's own discards
// give no reason.
const ReasonRemoved = "removed (weir checkpoint rm)"

// Ended reports whether checkpoint id was triggered and is no longer
// pending: it completed or failed, and nothing of the machine's attempts
// writes it any more. Once true, it stays true.
func (m *Machine) Ended(id int64) bool {
	_, pending := m.pending[id]
	return id < m.nextID && !pending
}

// Pending returns the IDs of pending checkpoints, ascending.
func (m *Machine) Pending() []int64 {
	ids := make([]int64, 0, len(m.pending))
	for id := range m.pending {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Stats counts the checkpoints and savepoints the machine completed and
// failed, and describes the latest it completed.
func (m *Machine) Stats() control.CheckpointStats { return m.stats }

// History returns copies of the recent checkpoints' records, newest first.
func (m *Machine) History() []control.CheckpointInfo {
	out := make([]control.CheckpointInfo, 0, len(m.history))
	for i := len(m.history) - 1; i >= 0; i-- {
		h := *m.history[i]
		h.Tasks = copyTasks(h.Tasks)
		out = append(out, h)
	}
	return out
}

// LastCompleted returns a copy of the record of the latest checkpoint or
// savepoint the machine completed, the one Stats describes (its LastID),
// with each task's metrics as its ack carried them, as it completed; false
// when none completed yet. Unlike History, which keeps the newest
// HistorySize triggered, it is there however many failed since.
func (m *Machine) LastCompleted() (control.CheckpointInfo, bool) {
	if m.last == nil {
		return control.CheckpointInfo{}, false
	}
	in := *m.last
	in.Tasks = copyTasks(in.Tasks)
	return in, true
}

// copyTasks returns a deep copy of a checkpoint's task metrics.
func copyTasks(tasks map[string]map[string]int64) map[string]map[string]int64 {
	out := make(map[string]map[string]int64, len(tasks))
	for k, v := range tasks {
		c := make(map[string]int64, len(v))
		for mk, mv := range v {
			c[mk] = mv
		}
		out[k] = c
	}
	return out
}
