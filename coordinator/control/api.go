package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// JobState is the state of a job.
type JobState string

// Job states.
const (
	JobCreated    JobState = "created"
	JobRunning    JobState = "running"
	JobRestarting JobState = "restarting"
	JobFailed     JobState = "failed"
	JobCanceled   JobState = "canceled"
	JobFinished   JobState = "finished"
)

// Terminal reports whether a job in state s will not run again.
func (s JobState) Terminal() bool { return s == JobFailed || s == JobCanceled || s == JobFinished }

// JobStatus describes a job.
type JobStatus struct {
	Name  string   `json:"name"`
	State JobState `json:"state"`
	// FailureCounts counts the job's failures by kind (FailureUnknown
	// for those of none) in its run, for metrics and alerts; Failures
	// keeps only the latest. Its record keeps them, as it does Restarts:
	// a restarted coordinator counts on from them.
	FailureCounts map[FailureKind]int `json:"failure_counts,omitempty"`
	// Modules are the operators' modules as the job pinned them at
	// submit, by operator name: the reference the spec wrote and the
	// digest it resolved to, which every attempt runs (weir module rm
	// refuses to remove a module a job that has not ended runs).
	Modules map[string]Module `json:"modules,omitempty"`
	// Attempt counts deployments, from 1, across the job's runs: a job
	// submitted again or restored numbers on from its last run's attempt,
	// so that no two runs share an attempt number.
	Attempt int `json:"attempt"`
	// Restarts counts the restarts made so far after failures, those the
	// restart strategy counts (restart.attempts): a job that failed once
	// its restart attempts ran out shows them, not the final failure.
	Restarts int `json:"restarts"`
	// Replacements counts the attempts of this run that placed the job
	// again, no failure of its own, because a worker was lost while
	// the attempt before was deployed, or refused its tasks for want of
	// slots (Skipped says which), or stopped saying goodbye, or was
	// drained (Drainer.MoveJob); Resumes those that resumed it after a
	// coordinator restarted (but for one that begins the restart after
	// failures the coordinator before was due to make, its delay running
	// or its worker awaited: that counts once, in Restarts, as the
	// restart strategy counts it). Neither is a restart: the other attempts are
	// the run's first and those of the job's earlier runs (Attempt
	// numbers on across runs). AttemptsExplained says so in words.
	Replacements int `json:"replacements,omitempty"`
	Resumes      int `json:"resumes,omitempty"`
	// Reason says why the job is in its state, now: a failed job's cause,
	// what a finished or canceled job ended with, a restarting job's
	// failure, or what a created or restarting job waits for (a worker,
	// free slots, or — job.ReasonCoordinatorRestarted, no failure — its
	// next attempt after the coordinator restarted). A running job has
	// none: the failure a failover recovered from is LastFailure. (A
	// coordinator without LastFailure kept that cause as a running job's
	// reason.)
	Reason    string    `json:"reason,omitempty"`
	Submitted time.Time `json:"submitted"`
	Updated   time.Time `json:"updated"`
	// Assignment maps task ID to worker ID for the current attempt.
	Assignment map[string]string `json:"assignment,omitempty"`
	// LatestCheckpoint is the ID of the job's latest completed checkpoint
	// or savepoint (0: none): the newest of its run, counting the one a
	// restored job started from (of this job) and, after a coordinator
	// restart, those its run completed before — what a failover restores.
	// Checkpoints of earlier runs (before a restore or a new submit) are
	// not counted; weir checkpoint ls lists them.
	LatestCheckpoint int64 `json:"latest_checkpoint,omitempty"`
	// RestoredFrom is the checkpoint the current attempt started from.
	RestoredFrom int64 `json:"restored_from,omitempty"`
	// StoppedWithSavepoint is the ID of the savepoint the job was stopped
	// with (API.StopJob, weir job stop): set as the job is canceled after
	// it, and 0 for a job not stopped so — one running, finished, failed or
	// canceled otherwise, or whose attempt failed over while it stopped
	// (that attempt ran past the savepoint), and 0 again once that
	// savepoint is removed (weir checkpoint rm; Reason then says "stopped
	// with savepoint N, removed since"). It tells a stopped job from a
	// canceled one; Reason says the same in words ("stopped with savepoint
	// N") for display only. A coordinator that does not send it, or a job
	// record written before it was kept, reads 0.
	StoppedWithSavepoint int64 `json:"stopped_with_savepoint,omitempty"`
	// Drained says the job was asked to drain (API JobDrainer.DrainJob,
	// weir job stop -drain): its sources end their input where they have
	// read to, and it finishes as a bounded job does, with a final
	// savepoint (DrainedWithSavepoint, once finished). Set from the
	// request on, also on the attempts after a failover, and kept once
	// the job ended.
	Drained              bool  `json:"drained,omitempty"`
	DrainedWithSavepoint int64 `json:"drained_with_savepoint,omitempty"`
	// DrainedAt says, once a drained job finished, where the input of
	// each of its JetStream sources ended, from its final savepoint: what
	// a job that continues after it starts from. While the job drains, it
	// is where the drain ends them, once it chose that (each source's
	// subtasks held, none reads past it from then on). Empty for a job
	// with no JetStream source, one whose sources could not be held (they
	// end where each has read to, which the final savepoint then says),
	// and from a coordinator that does not send it.
	DrainedAt []SourceEnd `json:"drained_at,omitempty"`
	// StartedFrom is the checkpoint of another job that the run started
	// from (a restore or submit from JOB/ID), as "JOB/ID", what a restore
	// takes as its -from: until the run completes a checkpoint of its own
	// (LatestCheckpoint, which counts only this job's), a failover
	// restores that one. Empty for a run that started fresh or from a
	// checkpoint of its own name, and once that checkpoint is no longer
	// stored whole (removed, partly removed, or discarded by its job's
	// retention), also after a coordinator restart: nothing names a
	// checkpoint that cannot be restored.
	StartedFrom string `json:"started_from,omitempty"`
	// Guarantees says what each source and sink promises (a core-NATS
	// source is at-most-once, for one), and what the checkpointing mode
	// adds.
	Guarantees []Guarantee `json:"guarantees,omitempty"`
	// Warnings are what the spec does that a job seldom means, which it
	// runs anyway: a source or operator nothing reads
	// (jobspec.Unread), a sink writing where a source of the job reads
	// (jobspec.FeedbackLoops), a sink subject another job writes too;
	// and what its checkpoints show of it: keyed state kept in several
	// subtasks behind an input not partitioned by key, so that each
	// holds a part of a key's state. Always in the JSON, empty ([]) when
	// there are none, so that a script reads it without guessing.
	Warnings []string `json:"warnings"`
	// FsyncEachWrite says the coordinator's NATS server fsyncs every
	// JetStream write (Deploy.FsyncEachWrite): the job's at-least-once
	// sinks in publish mode auto publish atomic batches where their
	// streams allow atomic publish.
	FsyncEachWrite bool `json:"fsync_each_write,omitempty"`
	// Restoring, while the job runs, lists the current attempt's tasks
	// that have not reported running yet: they still restore their state
	// (a sink re-publishing its staged output may take long). The attempt's
	// checkpoints start once it is empty.
	Restoring []string `json:"restoring,omitempty"`
	// Tasks are the current attempt's tasks as their workers last reported
	// them (in heartbeats), by task ID; empty unless the job runs.
	Tasks []TaskStatus `json:"tasks,omitempty"`
	// Failures are the job's latest failures, newest first, at most
	// MaxFailures: a job that keeps restarting shows whether it fails the
	// same way each time, and what ended each attempt.
	Failures []Failure `json:"failures,omitempty"`
	// LastFailure is the newest of Failures (nil: the job never failed):
	// for a running job, the failure its latest failover recovered from,
	// when it happened and the attempt it ended.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// Skipped are the attempt numbers the job's deploys took and gave up
	// before the attempt started, newest first, at most MaxFailures: a
	// deploy whose worker was lost meanwhile, or that a worker refused
	// for want of free slots, is planned again at once as the next
	// attempt, with no failure and no restart — so that an attempt number
	// missing between the failures and the attempt now is explained.
	Skipped []SkippedAttempt `json:"skipped,omitempty"`
	// FailuresInARow counts the job's failures since its latest completed
	// checkpoint that made progress (or its start), as its restart
	// strategy counts them — a checkpoint whose JetStream sources are
	// where the attempt restored them, taken again before the record an
	// operator traps on is read, does not end the row — and
	// RestartAttempts is how many restarts the strategy allows in such a
	// row (restart.attempts; 0 with strategy none): failure
	// RestartAttempts+1 fails the job. A job restarting in a loop — a
	// record that makes an operator trap is read again after every
	// restore — shows how close it is to failing. The job's record keeps
	// the count: a coordinator restart does not start the row again.
	FailuresInARow  int `json:"failures_in_a_row,omitempty"`
	RestartAttempts int `json:"restart_attempts,omitempty"`
	// Checkpoints counts the checkpoints of the job's run since this
	// coordinator took it on, and describes the latest that completed.
	Checkpoints CheckpointStats `json:"checkpoints,omitzero"`
	// CheckpointMode is the job's checkpointing mode (jobspec.Mode*;
	// empty from a coordinator that does not send it) and AlignedTimeout,
	// in exactly-once mode, the alignment after which a checkpoint turns
	// unaligned (0: never): what to change for a checkpoint that expired
	// depends on how its barriers travel.
	CheckpointMode string        `json:"checkpoint_mode,omitempty"`
	AlignedTimeout time.Duration `json:"aligned_timeout,omitempty"`
	// Sinks are the sinks of the job's spec (its latest: a restore may
	// give a new one), so that a client can follow what the job outputs
	// (weir job output); empty from a coordinator that does not send
	// them.
	Sinks []jobspec.Sink `json:"sinks,omitempty"`
	// SinkDuplicateWindows gives, for each exactly-once JetStream sink of
	// the job (by name), the duplicate window its stream needs
	// (sink.ExactlyOnceDuplicateWindow, as submit checks it): weir stream
	// edit refuses a shorter one while the job has not ended. Empty from a
	// coordinator that does not send it.
	SinkDuplicateWindows map[string]time.Duration `json:"sink_duplicate_windows,omitempty"`
	// Sources are the sources of the job's spec (its latest), so that a
	// client can tell which streams the job reads (weir stream rm refuses
	// one a job that has not ended reads; weir job rm names those it
	// leaves); empty from a coordinator that does not send them.
	Sources []jobspec.Source `json:"sources,omitempty"`
}

// CheckpointStats counts a job's checkpoints and savepoints by how they
// ended, since its coordinator took the job on (a restarted coordinator
// counts from 0), and describes the latest that completed: what an
// operator alerts on (failures, durations near the timeout, growing size,
// no checkpoint for too long).
type CheckpointStats struct {
	// Completed and Failed count checkpoints and savepoints that
	// completed, and that failed: expired, declined by a task (not as
	// subsumed) or whose metadata could not be written. Those aborted as
	// a newer one completed, or as the job failed over or stopped, are
	// not counted.
	Completed int64 `json:"completed,omitempty"`
	Failed    int64 `json:"failed,omitempty"`
	// Aborted counts those aborted that are no failure: cut as the job
	// failed over or stopped, or as a newer one completed. With Completed
	// and Failed they add up to the checkpoints triggered that ended (a
	// trial's 27 completed and 0 failed, latest 28, did not).
	Aborted int64 `json:"aborted,omitempty"`
	// LastID is the latest completed one (0: none yet); LastDuration runs
	// from its trigger to its completion, at LastCompleted; LastSize is
	// the sum of its tasks' snapshot bytes.
	LastID        int64         `json:"last_id,omitempty"`
	LastDuration  time.Duration `json:"last_duration,omitempty"`
	LastSize      int64         `json:"last_size,omitempty"`
	LastCompleted time.Time     `json:"last_completed,omitzero"`
	// DurationBuckets counts the completed ones whose duration was at most
	// each of CheckpointDurationBounds, and DurationSum is their total
	// duration: a histogram, as the latest duration alone hides the slow
	// checkpoints between two scrapes (an SRE trial's scrapes saw 1 in 60).
	// Its JSON key names the bounds' layout: a status from a coordinator
	// of the older bounds (legacyDurationBounds, key duration_buckets) is
	// read into these bounds (UnmarshalJSON), and a client of the older
	// bounds reads none from a newer coordinator rather than counts in
	// the wrong buckets.
	DurationBuckets [len(CheckpointDurationBounds)]int64 `json:"duration_buckets_v2,omitzero"`
	DurationSum     time.Duration                        `json:"duration_sum,omitempty"`
	// FailedInARow counts the failures (as Failed does) since the latest
	// completed checkpoint, across the job's attempts: a job whose
	// checkpoints keep failing (each failover restores the same one) shows
	// it. LastFailedID is the newest failed one (0: none), at LastFailed,
	// with its reason, LastFailure ("expired after 30s; no snapshot from
	// …").
	FailedInARow int64     `json:"failed_in_a_row,omitempty"`
	LastFailedID int64     `json:"last_failed_id,omitempty"`
	LastFailed   time.Time `json:"last_failed,omitzero"`
	LastFailure  string    `json:"last_failure,omitempty"`
	// LastFailureCause classifies LastFailure, for clients that branch on
	// it rather than read its words (CheckpointExpired: what to change
	// depends on the checkpointing mode). Empty from a coordinator that
	// does not send it.
	LastFailureCause CheckpointFailureCause `json:"last_failure_cause,omitempty"`
}

// CheckpointDurationBounds are the upper bounds of
// CheckpointStats.DurationBuckets: from 5ms, as a checkpoint of a job
// that keeps up typically takes 2–20ms. Changing them changes the JSON
// key of DurationBuckets (see there).
var CheckpointDurationBounds = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, time.Second,
	5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute}

// legacyDurationBounds are the bounds of the JSON key duration_buckets,
// which coordinators before the bounds under 100ms sent.
var legacyDurationBounds = [...]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second,
	5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute}

// UnmarshalJSON implements json.Unmarshaler: it reads a status of the
// older bounds (key duration_buckets, legacyDurationBounds) into
// CheckpointDurationBounds. Each bound counts what the largest older
// bound not above it counted: the same count at each older bound, and
// 0 at each bound under the smallest older one (100ms), whose counts
// that status did not keep — the bounds stay cumulative, so a
// histogram of them stays valid.
func (c *CheckpointStats) UnmarshalJSON(b []byte) error {
	type plain CheckpointStats // without this method
	var v struct {
		plain
		Legacy []int64 `json:"duration_buckets"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = CheckpointStats(v.plain)
	if len(v.Legacy) == 0 || c.DurationBuckets != [len(CheckpointDurationBounds)]int64{} {
		return nil
	}
	for i, bound := range CheckpointDurationBounds {
		for j, old := range legacyDurationBounds {
			if old <= bound && j < len(v.Legacy) {
				c.DurationBuckets[i] = v.Legacy[j]
			}
		}
	}
	return nil
}

// Observe counts a completed checkpoint of duration d in DurationBuckets
// and DurationSum.
func (c *CheckpointStats) Observe(d time.Duration) {
	for i, b := range CheckpointDurationBounds {
		if d <= b {
			c.DurationBuckets[i]++
		}
	}
	c.DurationSum += d
}

// LastFailedFor reports whether the newest failed checkpoint
// (LastFailure) failed for cause. From a coordinator that does not send
// LastFailureCause, an expiry is told by its reason's words ("expired
// after …"), and no other cause is.
func (c CheckpointStats) LastFailedFor(cause CheckpointFailureCause) bool {
	if c.LastFailureCause != "" || c.LastFailure == "" {
		return c.LastFailureCause == cause
	}
	return cause == CheckpointExpired && strings.HasPrefix(c.LastFailure, "expired after")
}

// CheckpointFailureCause says why a checkpoint failed
// (CheckpointStats.LastFailureCause).
type CheckpointFailureCause string

// Checkpoint failure causes.
const (
	// CheckpointExpired: the checkpoint timeout ran out before every task
	// acked.
	CheckpointExpired CheckpointFailureCause = "expired"
	// CheckpointDeclined: a task declined it (refused, or failed to take
	// its snapshot).
	CheckpointDeclined CheckpointFailureCause = "declined"
	// CheckpointTriggerFailed: its triggers did not reach the tasks for a
	// checkpoint timeout in a row.
	CheckpointTriggerFailed CheckpointFailureCause = "trigger-failed"
	// CheckpointMetadataFailed: its metadata could not be written.
	CheckpointMetadataFailed CheckpointFailureCause = "metadata-failed"
)

// MaxFailures is how many failures a JobStatus keeps.
const MaxFailures = 10

// Failure is one failure of a job: an attempt that ended with an error.
type Failure struct {
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason"`
	// Kind classifies the failure, for clients that branch on it rather
	// than read Reason's words: FailureUnknown for one of no kind known,
	// and for failures a coordinator (or a worker) recorded before kinds
	// were kept — read their Reason as before.
	Kind FailureKind `json:"kind,omitempty"`
	// Task is the task that failed, "" for a failure of none (a worker
	// lost, checkpoints that kept failing, a deploy that failed in no
	// task's setup). A deploy that failed setting up a task (its
	// operator's weir_init, its source or sink) names it.
	Task string `json:"task,omitempty"`
	// Record is the record the task's operator failed on, as Reason names
	// it: its key and the start of its value (`key "k99", value "{…"`;
	// wasm.FailedRecord). "" where the failure names none: not on a record
	// (weir_snapshot, weir_init, a sink, a worker lost), or reported by a
	// worker that does not send it.
	Record string `json:"record,omitempty"`
	// Repeats counts how often more a wait for room (FailurePlacement)
	// ran out, with no attempt placed between, Last the latest: one
	// ongoing condition, counted once — in the failures in a row, the
	// restarts and FailureCounts — and listed once, so that the
	// failures before it stay in the list.
	Repeats int       `json:"repeats,omitempty"`
	Last    time.Time `json:"last,omitzero"`
}

// SameAs reports whether f and g failed the same way (SameKindAs) and on
// the same record, or on none: a job that fails the same way again and
// again is not helped by restarting. Failures of one kind in one task on
// different records are a fault that comes and goes, which restarting
// goes on past: an operator that fails on a record fails on that record
// each time it is read again.
func (f Failure) SameAs(g Failure) bool {
	return f.SameKindAs(g) && f.Record == g.Record
}

// SameKindAs reports whether f and g failed alike, whatever record each
// failed on: of the same kind in the same task or, for failures of
// unknown kind, with the same reason but for its numbers (a record's
// index, an attempt, a duration). Deploy failures (FailureDeploy), of no
// task, have many causes, which only their reasons tell: they are alike
// when those are too.
func (f Failure) SameKindAs(g Failure) bool {
	alike := digits.ReplaceAllString(f.Reason, "N") == digits.ReplaceAllString(g.Reason, "N")
	if f.Kind != FailureUnknown && g.Kind != FailureUnknown {
		return f.Kind == g.Kind && f.Task == g.Task && (f.Kind != FailureDeploy || alike)
	}
	return alike
}

// digits matches the numbers that Failure.SameKindAs disregards.
var digits = regexp.MustCompile(`[0-9]+`)

// IsKind reports whether f is a failure of kind k. One of unknown kind —
// recorded by a coordinator, or reported by a worker, that did not keep
// kinds — is told by the words its reason had then, for the kinds
// clients branch on: FailureTrap ("trap"), FailureMemoryLimit (the
// refused memory.grow's note, "refused: the operator's memory limit")
// and FailureCheckpointsFailed ("consecutive checkpoint failures
// exceed"). Such a failure of a trap after a refused grow is of both
// FailureTrap and FailureMemoryLimit, as its kind was not kept.
func (f Failure) IsKind(k FailureKind) bool {
	if f.Kind != FailureUnknown || k == FailureUnknown {
		return f.Kind == k
	}
	switch k {
	case FailureTrap:
		return strings.Contains(f.Reason, "trap")
	case FailureMemoryLimit:
		return strings.Contains(f.Reason, "refused: the operator's memory limit")
	case FailureCheckpointsFailed:
		return strings.Contains(f.Reason, "consecutive checkpoint failures exceed")
	}
	return false
}

// FailureKind classifies a job's failure (Failure.Kind, Event.FailureKind).
type FailureKind string

// Failure kinds. A worker derives a task's from its error's type (the
// host's and the wasm package's); the coordinator sets its own.
const (
	// FailureUnknown: none of the kinds below, or not classified (a
	// worker or coordinator that does not send kinds).
	FailureUnknown FailureKind = ""
	// FailureTrap: an operator trapped (wasm.TrapError): on a record, it
	// traps again each time the record is read after a restore. A trap
	// after a memory.grow its memory limit refused is FailureMemoryLimit.
	FailureTrap FailureKind = "trap"
	// FailureMemoryLimit: an operator failed (trapped, exited, returned
	// an error or ran past its deadline) in a call in which its memory
	// limit refused a memory.grow (wasm.TrapError.GrowRefused and its
	// kin): how Go, Rust and AssemblyScript guests (a trap) and C guests
	// (weir_fail's "out of memory") run out of memory. Raising
	// limits.memory is what helps, not a fix of the operator; on a record,
	// it fails again each time the record is read after a restore.
	FailureMemoryLimit FailureKind = "memory-limit"
	// FailureDeadline: an operator's call ran past its call deadline
	// (wasm.DeadlineError).
	FailureDeadline FailureKind = "deadline"
	// FailureExit: an operator's module exited (wasm.ExitError).
	FailureExit FailureKind = "exit"
	// FailureOperatorError: an operator returned an error status
	// (wasm.OperatorError).
	FailureOperatorError FailureKind = "operator-error"
	// FailureFault: an operator misused a host import (wasm.FaultError).
	FailureFault FailureKind = "fault"
	// FailureSinkRefused: a sink's stream refused its output for one of
	// its limits (sink.StreamFullError): a job fails over into the same
	// refusal until the limit is raised.
	FailureSinkRefused FailureKind = "sink-refused"
	// FailureBadRecord: a sink could not publish a record it was given:
	// its key cannot form the keyed sink's subject ("out.{key}" and an
	// empty key, a key with whitespace), or no message can carry it
	// (sink.ErrBadKey, sink.ErrRecordTooLarge); or an operator emitted a
	// record over the input batch limit of the operator it goes to
	// (wasm.ErrRecordTooLarge), and the emitting task fails. The sink
	// refuses it before any of its batch is staged, so the checkpoints
	// hold none of it; where a JetStream source upstream replays the input,
	// every replay meets it again, so the job fails at once. What helps is
	// a fixed operator (or sink subject), restored from the latest
	// checkpoint. Where the sink's input comes from core NATS subjects
	// alone, which replay nothing, the record is lost and the failure
	// follows the restart strategy like any other.
	FailureBadRecord FailureKind = "bad-record"
	// FailureStream: a stream the job reads or writes is not the one it
	// was: deleted (jetstream.ErrStreamNotFound), deleted and created
	// again, or it dropped messages the job had not read
	// (source.ErrStreamGone, ErrOffsetGone, ErrOffsetAhead;
	// source.ErrMessagesLost while the job ran, which the restore of a
	// restart then refuses with ErrOffsetGone); or a sink's
	// stream no longer stores the sink's subject, or the one a
	// checkpoint's output was staged with (sink.ErrSubjectNotStored,
	// sink.ErrStagedSubjectNotStored: its subjects were edited). A restart
	// meets it again until the stream is back, and one recreated holds
	// other sequences than the checkpoints' offsets.
	FailureStream FailureKind = "stream"
	// FailureCheckpointsFailed: more checkpoints failed in a row than
	// checkpointing.tolerable-failures allows; or an exactly-once sink
	// staged more output than its bound since its last checkpoint
	// (sink.ErrStagedTooMuch): checkpoints are not completing.
	FailureCheckpointsFailed FailureKind = "checkpoints-failed"
	// FailureWorkerLost: a worker that ran tasks of the attempt, or was
	// being deployed to, was lost.
	FailureWorkerLost FailureKind = "worker-lost"
	// FailureConnection: a task lost its connection to NATS: a channel
	// between workers broke as the connection went (remote.ErrDisconnected)
	// or missed a frame (remote.ErrSequenceGap), or a source's or sink's
	// connection was lost or closed (nats.ErrDisconnected,
	// nats.ErrConnectionClosed), or a report of the task's to the
	// coordinator went unanswered (ErrNotHeard: "report running: send
	// running event of …: context deadline exceeded (no answer from the
	// coordinator)"). The network or the NATS server, not the job: a
	// restart succeeds once the connection is back.
	FailureConnection FailureKind = "connection"
	// FailureDeploy: the attempt could not be deployed: a worker could
	// not set up its tasks (a module that does not load, a stream gone)
	// or did not answer the deploy though it heartbeats, or the
	// coordinator could not store the attempt's number in the job's
	// record before it deployed it. The reason names the worker (or the
	// record) and the cause. An operator that failed setting up (in
	// weir_init) fails the deploy with the kind the worker gives its
	// failure (Reply.FailureKind: FailureMemoryLimit, FailureTrap, ...),
	// with the deploy's reason; one that fails restoring its state
	// (weir_restore, once its task runs) fails its task. A worker that
	// does not send kinds makes every failed deploy FailureDeploy. A
	// module the worker refuses whatever the attempt — gone from the
	// registry, changed since the submit, over the registry's size
	// limit, refused by validation at load — fails the job at once
	// (ErrUnrecoverable), of this kind, without using up restarts.
	FailureDeploy FailureKind = "deploy"
	// FailurePlacement: the attempt found no room: no worker joined, or
	// the workers had too few free slots, within the coordinator's
	// worker wait. More workers, or more slots on them, is what helps.
	FailurePlacement FailureKind = "placement"
	// FailureRestore: on a failover, the coordinator could not read the
	// latest checkpoint to restore (the checkpoint store out of reach):
	// the attempt is not deployed from an older one, or from none, and
	// the next attempt reads it again.
	FailureRestore FailureKind = "restore"
	// FailureCheckpointCorrupt: a task could not restore its snapshot of
	// the checkpoint its attempt restored: the bytes are damaged
	// (snapshot.ErrCorrupt: truncated, edited by hand). The coordinator
	// takes the checkpoint for unusable, as one found so before a
	// restore, and restores the next older one that it finds usable, or
	// fails the job, saying which older one to restore, where the
	// checkpoint was one a person chose (a restore -from, a start from
	// another job's).
	FailureCheckpointCorrupt FailureKind = "checkpoint-corrupt"
	// FailureFinalSavepoint: a job whose bounded inputs all ended took
	// its final savepoint, but a worker could not commit its sinks'
	// output with it; the job fails over and ends again.
	FailureFinalSavepoint FailureKind = "final-savepoint"
)

// AttemptsExplained says how a job's attempts came about, or "" when
// its restarts alone do (the first deployment and one per restart): "12
// attempts: 1 restart after failures, 9 placements again after a worker
// was lost or refused its tasks while deploying, 1 resume after a
// coordinator restart, 1 first deployment". Only the restarts count
// against restart.attempts.
func (s JobStatus) AttemptsExplained() string {
	first := s.Attempt - s.Restarts - s.Replacements - s.Resumes
	if s.Attempt == 0 || s.Replacements == 0 && s.Resumes == 0 && first <= 1 {
		return ""
	}
	plural := func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	var parts []string
	if s.Restarts > 0 {
		parts = append(parts, plural(s.Restarts, "restart after failures", "restarts after failures"))
	}
	if s.Replacements > 0 {
		parts = append(parts, plural(s.Replacements, "placement again", "placements again")+
			" after a worker was drained or stopped, or was lost or refused its tasks while deploying")
	}
	if s.Resumes > 0 {
		parts = append(parts, plural(s.Resumes, "resume", "resumes")+" after a coordinator restart")
	}
	switch {
	case first == 1:
		parts = append(parts, "1 first deployment")
	case first > 1:
		// Attempts number on across runs: the others are the earlier
		// runs' (a trial could not parse "2 of the first deployment and
		// the job's earlier runs").
		parts = append(parts, "1 first deployment of this run", plural(first-1, "of the job's earlier runs", "of the job's earlier runs"))
	}
	return fmt.Sprintf("%s: %s", plural(s.Attempt, "attempt", "attempts"), strings.Join(parts, ", "))
}

// SkippedAttempt is an attempt that was not started (JobStatus.Skipped).
type SkippedAttempt struct {
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt"`
	// Worker is the worker that was lost, or refused the attempt's tasks.
	Worker string `json:"worker"`
	// Reason says why, naming Worker: "its worker w2 was lost while it
	// was deployed".
	Reason string `json:"reason"`
}

// String returns one line: "attempt 2 was not started: its worker w2 was
// lost while it was deployed".
func (s SkippedAttempt) String() string {
	return fmt.Sprintf("attempt %d was not started: %s", s.Attempt, s.Reason)
}

// Latest returns the job's newest failure, nil if none: LastFailure, or,
// from a coordinator that does not send it, the first of Failures.
func (s JobStatus) Latest() *Failure {
	if s.LastFailure != nil {
		return s.LastFailure
	}
	if len(s.Failures) > 0 {
		f := s.Failures[0]
		return &f
	}
	return nil
}

// TaskStatus is one running task as its worker last reported it.
type TaskStatus struct {
	Task   string    `json:"task"`
	Worker string    `json:"worker"`
	Stats  TaskStats `json:"stats"`
	// InRate and OutRate are records per second; Busy and Backpressured
	// the fractions of the time (0 to 1) the task spent processing input
	// (and taking snapshots) and blocked on its output. They cover about the last five seconds of
	// the worker's reports (less while the task is young), so that a task
	// inside a long call does not read 0.
	InRate        float64 `json:"in_rate"`
	OutRate       float64 `json:"out_rate"`
	Busy          float64 `json:"busy"`
	Backpressured float64 `json:"backpressured"`
	// UnreadRate, for a source task that reported SourcePending at both
	// ends of that span, is how fast that count changed, in messages per
	// second: negative while the source catches up on a backlog, positive
	// while it falls further behind. Nil otherwise.
	UnreadRate *float64 `json:"unread_rate,omitempty"`
	// WorkerSilent is how long the task's worker has not been heard from,
	// when that is longer than a few heartbeats (0 otherwise): a worker
	// killed or cut off counts as live until its heartbeat timeout, and
	// the task's figures are its last report's meanwhile.
	WorkerSilent time.Duration `json:"worker_silent,omitempty"`
}

// SilentAfter is how long a worker's heartbeats must have stopped for
// TaskStatus.WorkerSilent and WorkerStatus to say so: several of the
// default heartbeat interval (1 s).
const SilentAfter = 2500 * time.Millisecond

// NewTaskStatus computes the status of task on worker from its latest
// counters and the ones reported at the start of the span its rates cover
// (nil: since the task started).
func NewTaskStatus(task, worker string, latest TaskStats, prev *TaskStats) TaskStatus {
	st := TaskStatus{Task: task, Worker: worker, Stats: latest}
	var base TaskStats
	if prev != nil {
		base = *prev
	}
	d := latest.RunningNanos - base.RunningNanos
	if d <= 0 {
		return st
	}
	perSec := func(n int64) float64 { return max(float64(n)*1e9/float64(d), 0) }
	frac := func(n int64) float64 { return min(max(float64(n)/float64(d), 0), 1) }
	st.InRate = perSec(latest.RecordsIn - base.RecordsIn)
	st.OutRate = perSec(latest.RecordsOut - base.RecordsOut)
	st.Busy = frac(latest.BusyNanos - base.BusyNanos)
	st.Backpressured = frac(latest.BackpressuredNanos - base.BackpressuredNanos)
	if latest.SourcePending != nil && prev != nil && prev.SourcePending != nil {
		r := float64(*latest.SourcePending-*prev.SourcePending) * 1e9 / float64(d)
		st.UnreadRate = &r
	}
	return st
}

// Guarantee is what one part of a job promises about delivery.
type Guarantee struct {
	// Role is "source", "sink" or "checkpointing".
	Role string `json:"role"`
	// Name is the source's or sink's name, or the checkpointing mode.
	Name string `json:"name"`
	// Text says it in one line.
	Text string `json:"text"`
}

// String returns "role name: text".
func (g Guarantee) String() string { return g.Role + " " + g.Name + ": " + g.Text }

// Checkpoint statuses.
const (
	CheckpointPending   = "pending"
	CheckpointCompleted = "completed"
	CheckpointFailed    = "failed"
	CheckpointDiscarded = "discarded"
	// CheckpointRemoving is a checkpoint whose removal (weir checkpoint
	// rm) began and did not finish: part of it may be gone, so it is
	// never restored, and weir checkpoint rm done again finishes it.
	CheckpointRemoving = "removing"
)

// SourceEnd is where a drained job's JetStream source ended its input
// (JobStatus.DrainedAt).
type SourceEnd struct {
	// Source is the source's name in the spec, Stream its stream.
	Source string `json:"source"`
	Stream string `json:"stream"`
	// Seq is the stream sequence up to which every subtask of the source
	// read every message of its input (its filter's, its partitions'), and
	// none past it: a job with start Seq+1 reads exactly the rest. When
	// the subtasks ended at different sequences (Tasks), it is the lowest
	// of them: from Seq+1 on, a subtask that read further is read again.
	Seq uint64 `json:"seq"`
	// Tasks maps each subtask to the sequence it read to, when they
	// differ (a drain that could not bring them to one: an older worker,
	// a hold that ran out); empty when they all ended at Seq.
	Tasks map[string]uint64 `json:"tasks,omitempty"`
}

// Exact reports whether every subtask of the source ended at Seq.
func (e SourceEnd) Exact() bool { return len(e.Tasks) == 0 }

// ContinueHint says where a drained job's JetStream sources ended (its
// JobStatus.DrainedAt) and the start of each in a job that continues
// after it: "source in read stream ORDERS up to sequence 145477: a job
// with start: 145478 on it continues exactly after this one". "" for
// none.
func ContinueHint(ends []SourceEnd) string {
	var parts []string
	for _, e := range ends {
		if e.Exact() {
			parts = append(parts, fmt.Sprintf("source %s read stream %s up to sequence %d: a job with start: %d on it continues exactly after this one",
				e.Source, e.Stream, e.Seq, e.Seq+1))
			continue
		}
		var at []string
		for _, id := range slices.Sorted(maps.Keys(e.Tasks)) {
			at = append(at, fmt.Sprintf("%s at %d", id, e.Tasks[id]))
		}
		parts = append(parts, fmt.Sprintf("source %s's subtasks ended at different sequences of stream %s (%s): a job with start: %d on it reads again what they read past %d",
			e.Source, e.Stream, strings.Join(at, ", "), e.Seq+1, e.Seq))
	}
	return strings.Join(parts, "; ")
}

// CheckpointInfo describes one checkpoint or savepoint of a job.
type CheckpointInfo struct {
	Job       string `json:"job"`
	ID        int64  `json:"id"`
	Savepoint bool   `json:"savepoint,omitempty"`
	// Status is one of the Checkpoint* statuses.
	Status string `json:"status"`
	// Reason is why a failed checkpoint was aborted.
	Reason string `json:"reason,omitempty"`
	// Aborted marks a failed one that is no failure of its own: cut as
	// the job failed over or stopped, or subsumed as a newer one
	// completed (CheckpointStats.Aborted counts them).
	Aborted   bool      `json:"aborted,omitempty"`
	Triggered time.Time `json:"triggered"`
	// Duration runs from trigger to completion or abort.
	Duration time.Duration `json:"duration,omitempty"`
	// Size is the sum of the tasks' snapshot bytes.
	Size int64 `json:"size"`
	// Alignment is the longest alignment among the tasks.
	Alignment time.Duration `json:"alignment"`
	// Unaligned is true when any task's snapshot ended unaligned.
	Unaligned bool `json:"unaligned"`
	// Mode is the job's checkpointing mode (jobspec.Mode*) when the
	// checkpoint was triggered; empty for one read back from storage (a
	// completed one's Unaligned tells how it was taken). It says how a
	// checkpoint that failed before any task acked it was to be taken.
	Mode string `json:"mode,omitempty"`
	// Acked and Total count the tasks (Total 0: not known, for one read
	// back from storage that does not check out).
	Acked int `json:"acked"`
	Total int `json:"total"`
	// Tasks holds each acked task's metrics (Metric* names).
	Tasks map[string]map[string]int64 `json:"tasks,omitempty"`
	// Inputs is the job's topology (Topology of its spec as the
	// coordinator holds it now: each vertex and the vertices feeding it),
	// for Slowest to tell which task a barrier queued before; empty from
	// a coordinator that does not send it.
	Inputs map[string][]string `json:"inputs,omitempty"`
	// Outputs is the job's output topology (OutputTopology: each vertex
	// and the vertices it feeds, by output port), for Slowest to name the
	// task a task's output was blocked on; empty from a coordinator that
	// does not send it.
	Outputs map[string][]OutputPort `json:"outputs,omitempty"`
	// EarlierRun marks a checkpoint an earlier run of the job took
	// (before the restore or submit that began the current run) that is
	// still stored: a restore can start from it, and the current run's
	// retention does not discard it. The history of earlier runs is not
	// kept, so their discarded and failed checkpoints are not listed.
	EarlierRun bool `json:"earlier_run,omitempty"`
}

// SubmitRequest submits a job.
type SubmitRequest struct {
	Spec *jobspec.Spec `json:"spec"`
	// RestoreFrom, if set, is the checkpoint to start from: "ID" (of a job
	// with the spec's name) or "JOB/ID".
	RestoreFrom string `json:"restore_from,omitempty"`
	// AllowNonRestoredState lets a restore drop the state of vertices the
	// spec no longer has (see RestoreRequest).
	AllowNonRestoredState bool `json:"allow_non_restored_state,omitempty"`
	// AllowRenumberedPorts lets a restore lead an operator's output ports
	// to other readers (see RestoreRequest).
	AllowRenumberedPorts bool `json:"allow_renumbered_ports,omitempty"`
}

// CheckSpecName refuses (ErrInvalid) a restore whose spec names another job than the one
// restored: it would start that other job from r.Job's checkpoint, beside
// r.Job's, both writing the same sinks — output repeated, silently. A job
// started from another's checkpoint is asked for by its own name, the
// checkpoint's job in From ("JOB/ID").
func (r RestoreRequest) CheckSpecName() error {
	if r.Spec == nil || r.Spec.Name == r.Job {
		return nil
	}
	from := r.From
	if !strings.Contains(from, "/") {
		from = r.Job + "/" + from
	}
	return Errorf(ErrInvalid, "restore %s: the spec is of job %s, not %s: give a spec named %s, or start job %s from this checkpoint by its own name (restore %s -from %s)",
		r.Job, r.Spec.Name, r.Job, r.Job, r.Spec.Name, r.Spec.Name, from)
}

// RestoreRequest restarts a stopped job from one of its checkpoints.
type RestoreRequest struct {
	Job string `json:"job"`
	// From is "ID" or "JOB/ID".
	From string `json:"from"`
	// Spec, if set, replaces the job's last spec. A restore is refused
	// (ErrInvalid) when the spec would drop state or hand it to the wrong
	// subtask: a vertex with state that the spec no longer has, or a
	// change of parallelism for a vertex whose state is kept per subtask
	// (operator state, JetStream source offsets, a vanishing sink
	// subtask's staged output), or for any vertex while the checkpoint
	// holds in-flight channel data; or when it changes what state means:
	// a JetStream source that reads another stream, partitioning or a
	// wider filter than its offsets were of, or an input partitioned by
	// key that was not, of an operator whose keyed state is spread over
	// its subtasks; or when an operator's output ports lead to other
	// readers than they did (jobspec.OutputReaders).
	Spec *jobspec.Spec `json:"spec,omitempty"`
	// AllowNonRestoredState lets the restore drop the state of vertices
	// the spec no longer has, and start without their state the sources
	// and operators whose state the spec changes the meaning of (the
	// job's status says which: Warnings).
	AllowNonRestoredState bool `json:"allow_non_restored_state,omitempty"`
	// AllowRenumberedPorts lets the restore lead an operator's output
	// ports to other readers than when the checkpoint was taken: for an
	// operator whose new build emits to the new ports.
	AllowRenumberedPorts bool `json:"allow_renumbered_ports,omitempty"`
}

// RemoveRequest deletes checkpoints or savepoints of a job from storage
// for good: their metadata and every task's snapshot. One that is still
// needed is refused (ErrConflict, saying why): the latest of a job that has
// not ended (what a failover restores — for a job restored, the checkpoint
// it started from until it completed one of its own, also of another job),
// one that another checkpoint of the job still stored names (its sink's
// snapshot names output staged in it: MetricSinkStateFrom), and one being
// written.
type RemoveRequest struct {
	Job string `json:"job"`
	// ID is the checkpoint or savepoint to remove; one that is not stored
	// is ErrNotFound.
	ID int64 `json:"id,omitempty"`
	// Earlier, instead of ID, removes every checkpoint and savepoint that
	// earlier runs of the job left stored (CheckpointInfo.EarlierRun) and
	// that nothing needs (Removed.Kept says why one is), and the objects
	// of their checkpoints that never completed.
	Earlier bool `json:"earlier,omitempty"`
}

// Removed says what a RemoveRequest deleted.
type Removed struct {
	// Checkpoints are the checkpoints and savepoints removed, newest
	// first.
	Checkpoints []RemovedCheckpoint `json:"checkpoints,omitempty"`
	// Kept are the refusals of checkpoints of earlier runs that Earlier
	// left stored because something needs them, one line each.
	Kept []string `json:"kept,omitempty"`
	// Leftovers are the checkpoints that never completed whose objects
	// Earlier deleted (snapshots written after the checkpoint was
	// aborted), of earlier runs or of the run of a job that has ended,
	// ascending; LeftoverObjects counts them.
	Leftovers       []int64 `json:"leftovers,omitempty"`
	LeftoverObjects int     `json:"leftover_objects,omitempty"`
	// StrayMarkers counts the sinks' commit markers deleted that were
	// written after their checkpoint had been deleted (by retention or a
	// removal), so that nothing else would ever delete them.
	StrayMarkers int `json:"stray_markers,omitempty"`
}

// RemovedCheckpoint is a checkpoint or savepoint removed from storage: as
// weir checkpoint ls listed it (Status failed for one whose metadata or
// state did not check out), and how many storage objects went with it —
// its metadata, each task's snapshot (which holds the task's in-flight
// channel data too), sinks' commit markers.
type RemovedCheckpoint struct {
	CheckpointInfo
	Objects int `json:"objects"`
	// Readvised are the jobs that had ended whose advice named the
	// checkpoint as where each goes on — its LatestCheckpoint, else the
	// checkpoint of another job it started from (StartedFrom), which weir
	// job status, ls and cancel print — with what it names now, by name.
	Readvised []Readvised `json:"readvised,omitempty"`
}

// Readvised is an ended job whose advice named a checkpoint that a
// removal took: what its status names now. LatestCheckpoint and
// StartedFrom are the status's (both empty: no checkpoint of it is left
// to restore, and it starts afresh).
type Readvised struct {
	Job              string   `json:"job"`
	State            JobState `json:"state"`
	LatestCheckpoint int64    `json:"latest_checkpoint,omitempty"`
	StartedFrom      string   `json:"started_from,omitempty"`
}

// API is the job API the coordinator serves and the CLI calls.
type API interface {
	// Submit submits a job, or starts it from a checkpoint (RestoreFrom).
	Submit(ctx context.Context, r SubmitRequest) (JobStatus, error)
	// Jobs lists every job.
	Jobs(ctx context.Context) ([]JobStatus, error)
	// Job returns one job's status.
	Job(ctx context.Context, name string) (JobStatus, error)
	// CancelJob cancels a job; one that has ended is refused (ErrConflict).
	CancelJob(ctx context.Context, name string) (JobStatus, error)
	// Savepoint takes a savepoint of a running job and waits for it.
	Savepoint(ctx context.Context, job string) (CheckpointInfo, error)
	// StopJob stops a running job with a savepoint and waits until it is
	// stopped.
	StopJob(ctx context.Context, job string) (CheckpointInfo, error)
	// Restore restarts a stopped job from one of its checkpoints.
	Restore(ctx context.Context, r RestoreRequest) (JobStatus, error)
	// CheckRestore refuses what Restore would refuse of r (with its
	// Spec, required) without looking at the spec's modules, which a
	// client builds and stores after the check, and starts nothing.
	CheckRestore(ctx context.Context, r RestoreRequest) error
	// Checkpoints lists a job's checkpoints and savepoints, newest first.
	Checkpoints(ctx context.Context, job string) ([]CheckpointInfo, error)
	// RemoveCheckpoints deletes checkpoints or savepoints from storage
	// (see RemoveRequest).
	RemoveCheckpoints(ctx context.Context, r RemoveRequest) (Removed, error)
	// RemoveJob removes a job that has ended: every checkpoint and
	// savepoint of it still stored, then the job, which is listed no
	// more. A job submitted again under its name numbers its attempts and
	// checkpoints on past the removed one's. A job that has not ended, or
	// whose checkpoint another job needs, is refused (ErrConflict).
	RemoveJob(ctx context.Context, job string) (Removed, error)
	// Workers lists the live workers with their slots, then the cordoned
	// workers that are not live (Down).
	Workers(ctx context.Context) ([]WorkerStatus, error)
}

// WorkerStatus is one worker as the coordinator sees it: a live one, or
// a cordoned one that is not live (Down).
type WorkerStatus struct {
	ID   string `json:"id"`
	Host string `json:"host,omitempty"`
	// Slots is the most tasks the worker takes at a time (0: no limit).
	Slots int `json:"slots,omitempty"`
	// Unusable, if set, says why the coordinator places no tasks on the
	// worker (its checkpoint store is not the coordinator's).
	Unusable string `json:"unusable,omitempty"`
	// Used counts the tasks placed on the worker of the jobs that have
	// not ended (a job waiting for room holds none): what placement
	// counts against Slots.
	Used int `json:"used"`
	// Caps are the worker's memory budget (Caps.Memory, weir worker
	// -memory) and its caps on one operator instance (-max-task-memory
	// and the like); zero fields bound nothing.
	Caps Caps `json:"caps,omitzero"`
	// MemoryUsed adds up the memory limits (limits.memory) of the
	// operator tasks among Used: what placement counts against
	// Caps.Memory. Counted with a budget or without.
	MemoryUsed int64 `json:"memory_used,omitempty"`
	// LastHeartbeat is when the worker was last heard from (zero from a
	// coordinator that does not say).
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	// Cordoned says no task is placed on the worker (weir worker drain,
	// until weir worker uncordon); with tasks still on it (Used), it is
	// being drained.
	Cordoned bool `json:"cordoned,omitempty"`
	// Down says the worker is not live: a cordoned worker that stopped
	// (after a drain, say), listed so that its cordon is not forgotten —
	// it gets no task when it comes back until weir worker uncordon.
	Down bool `json:"down,omitempty"`
}

// API operations (subject suffixes).
const (
	APISubmit       = "submit"
	APIJobs         = "jobs"
	APIJob          = "job"
	APICancel       = "cancel"
	APISavepoint    = "savepoint"
	APIStop         = "stop"
	APIRestore      = "restore"
	APICheckRestore = "check_restore"
	APICheckpoints  = "checkpoints"
	APIRemove       = "remove_checkpoints"
	APIRemoveJob    = "remove_job"
	APIWorkers      = "workers"
	// APIDrainJob drains a job (JobDrainer).
	APIDrainJob = "drain_job"
)

// JobDrainer is the part of the job API that drains a job (weir job stop
// -drain, Flink's stop --drain). The job manager implements it; ServeAPI
// serves it when its API does.
type JobDrainer interface {
	// DrainJob ends a running job's input now: every source task ends its
	// input where it has read to (the batch its source would hand it next
	// is not taken), sends end-of-data downstream, the operators emit
	// their end-of-input output, and the job ends as a bounded job does —
	// a final savepoint, with which the sinks commit everything, exactly
	// once — as finished. It returns that savepoint once the job
	// finished. A job that is not running is refused (ErrConflict).
	DrainJob(ctx context.Context, job string) (CheckpointInfo, error)
}

// DrainJob drains a job and waits until it finished (see JobDrainer).
func (c *APIClient) DrainJob(ctx context.Context, job string) (CheckpointInfo, error) {
	return call[CheckpointInfo](ctx, c, APIDrainJob, nameRequest{job})
}

type nameRequest struct {
	Name string `json:"name"`
}

type apiReply[T any] struct {
	Reply
	Result T `json:"result"`
}

// APIClient calls the job API over NATS.
type APIClient struct {
	nc   *nats.Conn
	subj Subjects
	// Timeout bounds requests without a ctx deadline; savepoints take up to
	// the checkpoint timeout. Default DefaultRequestTimeout.
	Timeout time.Duration
	// ReadAttempt bounds one attempt of a read-only request (Jobs, Job,
	// Checkpoints), which is sent again until ctx ends: a request lost
	// while the connection reconnects (written to a socket the server
	// closed) is never answered, and would otherwise wait out the whole
	// ctx. It also bounds how long a read waits while nobody listens on
	// the API subject (no coordinator): it then fails with ErrUnavailable;
	// so does a request that changes something (Submit, CancelJob, ...),
	// which is sent again only while nobody listens.
	// Default DefaultReadAttempt. A read the coordinator answers from
	// memory (Job, Jobs, Workers) is sent again after at most
	// QuickReadAttempt: one sent to a coordinator whose NATS server fell
	// silent is lost, and its answer comes only to a request sent after
	// the coordinator's connection moved to another server (4 to 6 s
	// later, natsconn.PingInterval).
	ReadAttempt time.Duration
	// Waiting, if set, is called once for each request that has had no
	// answer for WaitingAfter (default DefaultWaitingAfter), with its
	// operation (APIJob, ...) and how long it waits in all, so that the
	// caller can say what it waits for. It is not called once the request
	// returned.
	Waiting      func(op string, wait time.Duration)
	WaitingAfter time.Duration
}

// DefaultReadAttempt is APIClient.ReadAttempt's default.
const DefaultReadAttempt = 5 * time.Second

// QuickReadAttempt bounds one try of a read the coordinator answers from
// memory (APIClient.ReadAttempt).
const QuickReadAttempt = time.Second

// DefaultWaitingAfter is APIClient.WaitingAfter's default.
const DefaultWaitingAfter = time.Second

// waiting arranges for c.Waiting to be called once the request op, which
// waits until ctx's deadline, has had no answer for c.WaitingAfter; stop
// cancels that, or waits for a call under way to return.
func (c *APIClient) waiting(ctx context.Context, op string) (stop func()) {
	if c.Waiting == nil {
		return func() {}
	}
	after := c.WaitingAfter
	if after <= 0 {
		after = DefaultWaitingAfter
	}
	var wait time.Duration
	if deadline, ok := ctx.Deadline(); ok {
		wait = time.Until(deadline)
	}
	var (
		mu      sync.Mutex
		stopped bool
	)
	t := time.AfterFunc(after, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			c.Waiting(op, wait)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// NewAPIClient returns a client of the job API under prefix ("" = default).
func NewAPIClient(nc *nats.Conn, prefix string) *APIClient {
	return &APIClient{nc: nc, subj: Subjects{prefix}}
}

// call sends a request that changes something (Submit, CancelJob, ...)
// once, and waits for its answer until ctx ends (Timeout without a
// deadline) — sending it again only while nobody listens (no
// responders), for up to ReadAttempt.
func call[T any](ctx context.Context, c *APIClient, op string, req any) (T, error) {
	var rep apiReply[T]
	if _, ok := ctx.Deadline(); !ok && c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	defer c.waiting(ctx, op)()
	attempt := c.ReadAttempt
	if attempt <= 0 {
		attempt = DefaultReadAttempt
	}
	deaf := deafness{limit: attempt}
	for {
		err := requestWith(ctx, c.nc, c.subj.API(op), req, &rep, true)
		if !errors.Is(err, nats.ErrNoResponders) {
			return rep.Result, err
		}
		// Nobody received the request, so sending it again repeats
		// nothing: a coordinator that is subscribing again — its
		// connection reconnected after its server restarted, or it
		// restarted itself — listens within moments, and a request sent
		// just before that would fail for nothing. A missing coordinator
		// is reported once nobody has listened for ReadAttempt, as read
		// reports it.
		if !deaf.wait(ctx) {
			return rep.Result, err
		}
	}
}

// deafness paces a request sent again while nobody listens (no
// responders, which comes back at once: asking again at once would spin
// until the caller's deadline, and end with it instead of the reason).
type deafness struct {
	limit time.Duration // how long nobody may listen
	since time.Time     // since when nobody has listened; zero: listened
	pause time.Duration // the next pause, from 20 ms doubling to a second
}

// wait pauses before the next try and reports true, or reports false once
// nobody has listened for limit, or ctx ended.
func (d *deafness) wait(ctx context.Context) bool {
	if d.since.IsZero() {
		d.since = time.Now()
	} else if time.Since(d.since) >= d.limit {
		return false
	}
	if d.pause == 0 {
		d.pause = 20 * time.Millisecond
	}
	t := time.NewTimer(d.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	d.pause = min(2*d.pause, time.Second)
	return true
}

// heard notes that a try was not met by no responders: nobody listening
// counts from the next one that is.
func (d *deafness) heard() { d.since = time.Time{} }

// read is call for read-only requests: it sends the request again after
// each try of ReadAttempt (QuickReadAttempt for one answered from memory)
// without an answer, until ctx ends, and takes the answer to any of the
// tries (they share a reply subject): one lost — written to a socket
// the server closed, or sent to a coordinator whose server fell silent —
// is never answered, and the answer to one that is slow still counts.
// While nobody listens (no responders: the coordinator is restarting, or
// not running) it asks again after a pause that grows to a second, and
// gives up with ErrUnavailable once nobody has listened for ReadAttempt:
// a coordinator that restarts subscribes again well within it, and a
// missing one is reported instead of waited for until ctx ends.
func read[T any](ctx context.Context, c *APIClient, op string, req any) (T, error) {
	var zero T
	if _, ok := ctx.Deadline(); !ok {
		timeout := c.Timeout
		if timeout <= 0 {
			timeout = DefaultRequestTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer c.waiting(ctx, op)()
	attempt := c.ReadAttempt
	if attempt <= 0 {
		attempt = DefaultReadAttempt
	}
	try := attempt
	switch op {
	case APIJob, APIJobs, APIWorkers:
		try = min(try, QuickReadAttempt)
	}
	subject := c.subj.API(op)
	data, err := json.Marshal(req)
	if err != nil {
		return zero, fmt.Errorf("encode %s: %w", subject, err)
	}
	answers, err := subscribeAnswers(c.nc)
	if err != nil {
		return zero, fmt.Errorf("%s: subscribe to the answers: %w", subject, err)
	}
	defer answers.close()
	deadline, _ := ctx.Deadline()
	deaf := deafness{limit: attempt}
	for {
		msg := nats.NewMsg(subject)
		msg.Reply, msg.Data = answers.inbox, data
		msg.Header.Set(HeaderWait, time.Until(deadline).String())
		if err := c.nc.PublishMsg(msg); err != nil {
			return zero, fmt.Errorf("%s: %w", subject, err)
		}
		tctx, cancel := context.WithTimeout(ctx, try)
		ans, err := answers.next(tctx) // parts of an earlier try's answer count
		cancel()
		var unavailable error
		switch {
		case errors.Is(err, nats.ErrNoResponders),
			err == nil && len(ans.Data) == 0 && ans.Header.Get("Status") == "503":
			unavailable = Errorf(ErrUnavailable, "%s: nobody is listening (no responders)", subject)
		case err == nil:
			var rep apiReply[T]
			err := decodeReply(subject, ans.Data, &rep)
			if !errors.Is(err, ErrUnavailable) {
				return rep.Result, err
			}
			unavailable = err // the coordinator could not answer for now
		case ctx.Err() != nil:
			return zero, fmt.Errorf("%s: %w", subject, ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			deaf.heard() // no answer to this try: send it again
			continue
		default:
			return zero, fmt.Errorf("%s: %w", subject, err)
		}
		if !deaf.wait(ctx) {
			return zero, unavailable
		}
	}
}

// Submit submits a job.
func (c *APIClient) Submit(ctx context.Context, r SubmitRequest) (JobStatus, error) {
	return call[JobStatus](ctx, c, APISubmit, r)
}

// Jobs lists every job.
func (c *APIClient) Jobs(ctx context.Context) ([]JobStatus, error) {
	return read[[]JobStatus](ctx, c, APIJobs, struct{}{})
}

// Workers lists the live workers, by ID, with their slots.
func (c *APIClient) Workers(ctx context.Context) ([]WorkerStatus, error) {
	return read[[]WorkerStatus](ctx, c, APIWorkers, struct{}{})
}

// Job returns one job's status.
func (c *APIClient) Job(ctx context.Context, name string) (JobStatus, error) {
	return read[JobStatus](ctx, c, APIJob, nameRequest{name})
}

// CancelJob cancels a job. A job that has ended already is refused
// (ErrConflict: nothing to cancel), as StopJob and Savepoint refuse it.
func (c *APIClient) CancelJob(ctx context.Context, name string) (JobStatus, error) {
	return call[JobStatus](ctx, c, APICancel, nameRequest{name})
}

// Savepoint takes a savepoint of a running job and waits for it.
func (c *APIClient) Savepoint(ctx context.Context, job string) (CheckpointInfo, error) {
	return call[CheckpointInfo](ctx, c, APISavepoint, nameRequest{job})
}

// StopJob stops a running job with a savepoint and waits until it is
// stopped: nothing after the savepoint was processed, so restoring it
// repeats no output.
func (c *APIClient) StopJob(ctx context.Context, job string) (CheckpointInfo, error) {
	return call[CheckpointInfo](ctx, c, APIStop, nameRequest{job})
}

// Restore restarts a job from a checkpoint.
func (c *APIClient) Restore(ctx context.Context, r RestoreRequest) (JobStatus, error) {
	return call[JobStatus](ctx, c, APIRestore, r)
}

// CheckRestore asks whether Restore would refuse r, before r.Spec's
// modules are built and stored (see API.CheckRestore). A coordinator
// that does not know the request answers nobody: the error is then
// ErrUnavailable, as for one that is not there.
func (c *APIClient) CheckRestore(ctx context.Context, r RestoreRequest) error {
	_, err := read[struct{}](ctx, c, APICheckRestore, r)
	return err
}

// Checkpoints lists a job's checkpoints, newest first.
func (c *APIClient) Checkpoints(ctx context.Context, job string) ([]CheckpointInfo, error) {
	return read[[]CheckpointInfo](ctx, c, APICheckpoints, nameRequest{job})
}

// RemoveCheckpoints deletes checkpoints or savepoints of a job from
// storage (see RemoveRequest).
func (c *APIClient) RemoveCheckpoints(ctx context.Context, r RemoveRequest) (Removed, error) {
	return call[Removed](ctx, c, APIRemove, r)
}

// RemoveJob removes a job that has ended, with its checkpoints (see
// API.RemoveJob).
func (c *APIClient) RemoveJob(ctx context.Context, job string) (Removed, error) {
	return call[Removed](ctx, c, APIRemoveJob, nameRequest{job})
}

// HeaderWait is the header in which an APIClient's request says how long
// its caller waits for the answer, as a Go duration ("29.9s"): what is
// left of its whole wait (a read sent again counts the answer to any of
// its tries).
const HeaderWait = "Weir-Wait"

// How long a handler of ServeAPI works on a request: what its caller
// waits (HeaderWait), less a margin for the answer's way back (a tenth of
// it, at most HandlerMargin), and at most MaxHandlerWait. A request that
// does not say — a client of its own, or an older one — gets
// DefaultHandlerWait, or DefaultLongHandlerWait for a savepoint, a stop or
// a removal (what the weir CLI waits for those).
const (
	DefaultHandlerWait     = 30 * time.Second
	DefaultLongHandlerWait = 3 * time.Minute
	MaxHandlerWait         = 10 * time.Minute
	HandlerMargin          = time.Second
)

// handlerWait returns how long a handler of op works on m, which came in
// at arrival (see HeaderWait), and its deadline.
func handlerWait(op string, m *nats.Msg, arrival time.Time) (time.Duration, time.Time) {
	wait := DefaultHandlerWait
	switch op {
	case APISavepoint, APIStop, APIRemove, APIRemoveJob, APIMoveJob, APIDrainJob:
		wait = DefaultLongHandlerWait
	}
	if m.Header != nil {
		if d, err := time.ParseDuration(m.Header.Get(HeaderWait)); err == nil && d > 0 {
			wait = d
		}
	}
	wait -= min(wait/10, HandlerMargin)
	wait = min(wait, MaxHandlerWait)
	return wait, arrival.Add(wait)
}

// gaveUp returns err, which a handler returned after its context ended
// (hctx, derived from the server's ctx), marked ErrUnavailable — nothing
// is wrong with the request, a later one may succeed — and saying why
// the handler stopped: the coordinator stops, or its caller waits no
// longer than wait. An error that carries another code (a refusal), and
// one returned before the context ended, stays as it is.
func gaveUp(ctx, hctx context.Context, wait time.Duration, err error) error {
	if code := codeOf(err); hctx.Err() == nil || code != "" && !errors.Is(err, ErrUnavailable) {
		return err
	}
	if ctx.Err() != nil {
		return Errorf(ErrUnavailable, "%v (the coordinator is shutting down)", err)
	}
	return Errorf(ErrUnavailable, "%v (the coordinator gave up after %s, as its caller waits no longer)", err, wait.Round(100*time.Millisecond))
}

// requesterKey keys a job API request's reply subject in the context
// ServeAPI gives the handler (Requester).
type requesterKey struct{}

// Requester returns what is known of who sent the job API request whose
// handler ctx is (ServeAPI's): the request's reply subject, whose inbox
// prefix is the requesting connection's; "" outside one. The job API has
// no identity of its own (NATS permissions decide who may send), so this
// is what a log line can say of who canceled or removed a job.
func Requester(ctx context.Context) string {
	s, _ := ctx.Value(requesterKey{}).(string)
	return s
}

// ServeAPI answers job API requests with impl until ctx is done. Each
// request is handled in its own goroutine (savepoints wait long), with a
// context that ends with ctx or shortly before the request's caller stops
// waiting (HeaderWait, handlerWait): a handler waiting on storage (a
// stream electing a leader, say) gives up while its caller still listens,
// and answers why (gaveUp). ready, if not nil, is closed once the
// subscriptions are live.
func ServeAPI(ctx context.Context, nc *nats.Conn, prefix string, impl API, ready chan<- struct{}) error {
	subj := Subjects{prefix}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed bool
	)
	defer func() {
		mu.Lock()
		closed = true
		mu.Unlock()
		wg.Wait()
	}()
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	handle := func(op string, fn func(ctx context.Context, data []byte) (any, error)) error {
		s, err := nc.Subscribe(subj.API(op), func(m *nats.Msg) {
			wait, deadline := handlerWait(op, m, time.Now())
			mu.Lock()
			defer mu.Unlock()
			if closed {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				hctx, cancel := context.WithDeadline(context.WithValue(ctx, requesterKey{}, m.Reply), deadline)
				defer cancel()
				res, err := fn(hctx, m.Data)
				if err != nil {
					respond(nc, m, replyFor(gaveUp(ctx, hctx, wait, err)))
					return
				}
				respond(nc, m, apiReply[any]{Result: res})
			}()
		})
		if err != nil {
			return fmt.Errorf("serve job API: subscribe %s: %w", op, err)
		}
		subs = append(subs, s)
		return nil
	}
	name := func(data []byte) (string, error) {
		var r nameRequest
		if err := json.Unmarshal(data, &r); err != nil {
			return "", Errorf(ErrInvalid, "decode request: %v", err)
		}
		return r.Name, nil
	}
	ops := map[string]func(ctx context.Context, data []byte) (any, error){
		APISubmit: func(ctx context.Context, data []byte) (any, error) {
			var r SubmitRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode submit request: %v", err)
			}
			if r.Spec == nil {
				return nil, Errorf(ErrInvalid, "submit request without a job spec")
			}
			return impl.Submit(ctx, r)
		},
		APIJobs:    func(ctx context.Context, _ []byte) (any, error) { return impl.Jobs(ctx) },
		APIWorkers: func(ctx context.Context, _ []byte) (any, error) { return impl.Workers(ctx) },
		APIJob: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.Job(ctx, n)
		},
		APICancel: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.CancelJob(ctx, n)
		},
		APISavepoint: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.Savepoint(ctx, n)
		},
		APIStop: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.StopJob(ctx, n)
		},
		APIRestore: func(ctx context.Context, data []byte) (any, error) {
			var r RestoreRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode restore request: %v", err)
			}
			return impl.Restore(ctx, r)
		},
		APICheckRestore: func(ctx context.Context, data []byte) (any, error) {
			var r RestoreRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode restore request: %v", err)
			}
			return struct{}{}, impl.CheckRestore(ctx, r)
		},
		APICheckpoints: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.Checkpoints(ctx, n)
		},
		APIRemove: func(ctx context.Context, data []byte) (any, error) {
			var r RemoveRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode remove request: %v", err)
			}
			return impl.RemoveCheckpoints(ctx, r)
		},
		APIRemoveJob: func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return impl.RemoveJob(ctx, n)
		},
	}
	if d, ok := impl.(Drainer); ok {
		for op, fn := range drainOps(d) {
			ops[op] = fn
		}
	}
	if d, ok := impl.(JobDrainer); ok {
		ops[APIDrainJob] = func(ctx context.Context, data []byte) (any, error) {
			n, err := name(data)
			if err != nil {
				return nil, err
			}
			return d.DrainJob(ctx, n)
		}
	}
	for op, fn := range ops {
		if err := handle(op, fn); err != nil {
			return err
		}
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("serve job API: flush: %w", err)
	}
	if ready != nil {
		close(ready)
	}
	<-ctx.Done()
	return nil
}
