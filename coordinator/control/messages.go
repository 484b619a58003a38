// Package control is the protocol between weir's coordinator and its
// workers, and the job API the CLI uses: plain JSON messages on NATS
// subjects, with request/reply for everything that needs an answer and
// heartbeats that tell the coordinator which workers are alive. It is the
// same path whether the coordinator and the workers share one process (on
// the embedded server) or run on different machines.
//
// # Subjects (Prefix defaults to "weir.ctl")
//
//	PREFIX.register               worker → coordinator, request: WorkerInfo → RegisterReply
//	PREFIX.heartbeat              worker → coordinator, publish: Heartbeat
//	PREFIX.unregister             worker → coordinator, publish: WorkerInfo (graceful stop)
//	PREFIX.event                  worker → coordinator, request: Event → Reply
//	PREFIX.worker.ID.deploy       coordinator → worker, request: Deploy → Reply
//	PREFIX.worker.ID.cancel       coordinator → worker, request: Cancel → Reply
//	PREFIX.worker.ID.trigger      coordinator → worker, request: Trigger → Reply
//	PREFIX.worker.ID.complete     coordinator → worker, request: Complete → Reply
//	PREFIX.worker.ID.abort        coordinator → worker, request: Abort → Reply
//	PREFIX.worker.ID.stop         coordinator → worker, request: Stop → Reply
//	PREFIX.worker.ID.end-input    coordinator → worker, request: EndInput → Reply
//	PREFIX.worker.ID.hold-input   coordinator → worker, request: HoldInput → HoldInputReply
//	PREFIX.api.OP                 client → coordinator, request (see API)
//
// # Flow
//
//  1. A worker starts (Worker.Run): it subscribes to PREFIX.worker.ID.>,
//     sends register and then a Heartbeat every HeartbeatInterval listing
//     the tasks it runs. A heartbeat from an unknown worker registers it too,
//     so start order does not matter. When no heartbeat arrived for
//     HeartbeatTimeout (counted from when the coordinator last found its
//     own connection cut off, a flush unanswered, or reconnected: while it
//     hears nothing, nobody is lost), when the worker unregisters (it stops), or when a
//     heartbeat carries a new Session (the worker restarted and lost its
//     tasks), the coordinator declares the worker lost: every job with a
//     task there fails over. Heartbeats of a session that unregistered are
//     ignored, and the caller may drop a worker at once (Forget) when a
//     request finds no responders. The coordinator's handler sees the tasks
//     of every heartbeat (WorkerTasks) and cancels those of attempts that
//     are no longer current.
//  2. The coordinator deploys a job attempt: for every worker with assigned
//     tasks, a Deploy carrying the job spec, the plan, the worker's task IDs,
//     the attempt number and, when recovering, the Restore handles of the
//     checkpoint to restore. The worker replies once the tasks are set up
//     (or with an error). Each task then restores its state (a sink's
//     recovery may re-publish a large staged backlog) and sends
//     EventRunning once it has — at once when it has nothing to restore —
//     and says so in every heartbeat from then on (TaskStats.Restored),
//     which stands in for an EventRunning a NATS blip lost.
//  3. Checkpointing of an attempt starts once every task of it sent
//     EventRunning (Flink's tasks go from INITIALIZING to RUNNING): a
//     checkpoint triggered while a task still restores would wait for it
//     and could expire. Checkpoint n: the coordinator sends Trigger to
//     the workers of the source tasks (listing those tasks). Each source
//     records its position and emits barrier n; every task of the job,
//     once its snapshot is stored, sends EventAck (task, n, state handle,
//     metrics) — or EventDecline (kind, reason). When all tasks acked, the
//     coordinator writes the checkpoint's metadata and sends Complete to
//     every worker of the job (exactly-once sinks commit n). An aborted checkpoint (timeout,
//     decline, subsumed, task failure) is announced with Abort. A task
//     whose ack had MetricCommitReport (an exactly-once sink) sends
//     EventCommitting (n) once it handed n's output to its sink's commits
//     — after waiting, if its earlier commits left no room, for one of
//     them to end; the next periodic Trigger waits for these (at most a
//     checkpoint timeout), so that no barrier waits behind a commit.
//  4. Stopping a job (API StopJob) is a savepoint whose Trigger says Stop:
//     the sources take no input after its barrier. Once it completed, Stop
//     to every worker brings the attempt's tasks to rest (sinks finish
//     committing; a worker whose Complete of the savepoint never came
//     passes the completion on first), then Cancel ends them. An Abort of
//     it lets the sources go on.
//  5. A source task whose bounded source read everything up to its stop
//     takes no more input, sends end-of-data downstream and sends
//     EventInputEnded; so does every other task once all its input
//     channels delivered end-of-data (after its operator's final output).
//     Once every task of the attempt did, the coordinator ends the job as
//     in 4, with a final savepoint (its completion commits the sinks'
//     rest), and marks it finished. Draining a job (API DrainJob, weir
//     job stop -drain) first sends HoldInput to the workers of its source
//     tasks: each JetStream source holds (it takes in nothing more) and
//     says the highest stream sequence it covered. The coordinator takes
//     the highest of each source's subtasks and sends EndInput with it
//     (EndInput.At): each subtask reads on to that one sequence and ends
//     there, so that the drained job read exactly its stream up to it;
//     the other source tasks end their input where they have read to, as
//     a bounded source does at its stop, and the job ends the same way.
//     Every later attempt of a job being drained is deployed with
//     Deploy.EndInput (and EndInputAt, once the sequences are chosen):
//     its sources end their input once restored.
//  6. A task that fails sends EventFailed (reason) — again, until it is
//     answered or its attempt stops on the worker: a lost report left the
//     attempt running without the task until a checkpoint expired; a task
//     that reached the end of its input sends EventFinished. On a failure
//     the coordinator sends Cancel (job, attempt) to every worker of the
//     job, waits per the restart strategy and deploys attempt+1 with the
//     latest completed checkpoint's handles.
//
// Every message after Deploy carries the job name and attempt: a worker
// ignores messages for attempts it does not run, and the coordinator ignores
// events from an attempt that is over. The coordinator sends every request
// but Trigger again each time its connection comes back while it waits for
// the answer (a NATS blip may have lost the request or the answer), so a
// worker handles them the same however often they come: a Deploy of the
// attempt it runs already changes nothing, and a checkpoint's Complete is
// passed on to the tasks once. A worker runs the handlers of one job one
// at a time, in arrival order, and those of different jobs side by side
// (WorkerHandler); they should return quickly and do long work (running
// tasks) in their own goroutines.
package control

import (
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// DefaultPrefix starts every control subject. A job spec's sources and
// sinks may not reach them (jobspec.Reserved).
const DefaultPrefix = jobspec.DefaultControlPrefix

// Defaults for timing.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatTimeout  = 5 * time.Second
	DefaultRequestTimeout    = 10 * time.Second
)

// Subjects builds control subjects under a prefix.
type Subjects struct{ Prefix string }

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Register is the subject workers register on.
func (s Subjects) Register() string { return s.p() + ".register" }

// Unregister is the subject a stopping worker says goodbye on.
func (s Subjects) Unregister() string { return s.p() + ".unregister" }

// Heartbeat is the subject workers publish heartbeats on.
func (s Subjects) Heartbeat() string { return s.p() + ".heartbeat" }

// Event is the subject workers send task events on.
func (s Subjects) Event() string { return s.p() + ".event" }

// Worker is the subject of operation op on worker id.
func (s Subjects) Worker(id, op string) string { return s.p() + ".worker." + id + "." + op }

// API is the subject of job API operation op.
func (s Subjects) API(op string) string { return s.p() + ".api." + op }

// Worker operations.
const (
	OpDeploy   = "deploy"
	OpCancel   = "cancel"
	OpTrigger  = "trigger"
	OpComplete = "complete"
	OpAbort    = "abort"
	OpStop     = "stop"
	// OpEndInput asks the source tasks of an attempt to end their input
	// where they have read to (EndInput): a drain.
	OpEndInput = "end-input"
	// OpHoldInput holds the JetStream source tasks of an attempt for a
	// drain and asks the sequence each covered (HoldInput).
	OpHoldInput = "hold-input"
)

// WorkerInfo describes a worker when it registers.
type WorkerInfo struct {
	ID   string `json:"id"`
	Host string `json:"host,omitempty"`
	// Slots is how many tasks the worker wants at most; 0 means no limit.
	Slots int `json:"slots,omitempty"`
	// Session is random per Worker.Run: a new session means the worker
	// restarted and runs none of its former tasks.
	Session string `json:"session,omitempty"`
	// Store is where the worker writes its tasks' snapshots
	// (storage.Location), "" from a worker that does not say. A
	// coordinator that reads checkpoints from elsewhere places no tasks on
	// it: their snapshots would be out of its reach.
	Store string `json:"store,omitempty"`
	// Caps are the worker's bounds on what operators ask of it: its
	// memory budget and per-instance maximums. The coordinator places no
	// job on it that they refuse, and counts its operator tasks' memory
	// against the budget.
	Caps Caps `json:"caps,omitzero"`
}

// RegisterReply answers a registration.
type RegisterReply struct {
	Error string `json:"error,omitempty"`
	// HeartbeatTimeout is how long the coordinator waits for a heartbeat
	// before it declares the worker lost.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	// Refused, if set, says why the coordinator places no tasks on the
	// worker (CoordinatorOptions.Unusable): the worker stops, saying so.
	Refused string `json:"refused,omitempty"`
}

// TaskRef names one task of one job attempt.
type TaskRef struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Task    string `json:"task"`
	// Stats, in a heartbeat, are the task's counters so far.
	Stats *TaskStats `json:"stats,omitempty"`
}

// TaskStats are a running task's counters since it started (host.Stats).
type TaskStats struct {
	RecordsIn  int64 `json:"records_in"`
	RecordsOut int64 `json:"records_out"`
	// RunningNanos is the time since the task started; BusyNanos the part
	// of it spent processing input and taking snapshots,
	// BackpressuredNanos the part blocked on output (a channel without
	// credit, a sink's commit).
	RunningNanos       int64 `json:"running_ns"`
	BusyNanos          int64 `json:"busy_ns"`
	BackpressuredNanos int64 `json:"backpressured_ns"`
	// Checkpoints counts the snapshots the task took.
	Checkpoints int64 `json:"checkpoints"`
	// MemoryBytes and MemoryLimit are an operator task's operator's linear
	// memory size and its limit (limits.memory), in bytes; 0 for other
	// tasks and from a worker that does not say.
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	MemoryLimit uint64 `json:"memory_limit,omitempty"`
	// InCallNanos is how long the call into an operator task's operator
	// that runs now has run, 0 between calls (host.Stats.InCall): a task
	// in one call for long is stuck, or very slow, on a record, which its
	// Busy alone does not tell from a task slow on every record.
	InCallNanos int64 `json:"in_call_ns,omitempty"`
	// InCallExport is the export that call runs (weir_process,
	// weir_snapshot, weir_restore, …; host.Stats.InCallExport), "" between
	// calls and from a worker that does not say: a long weir_snapshot is
	// a large state being written, not a record the operator is stuck on.
	InCallExport string `json:"in_call_export,omitempty"`
	// InCallCheckpoint is, while that call is weir_snapshot or
	// weir_restore, the checkpoint whose state it writes or reads; else 0.
	InCallCheckpoint int64 `json:"in_call_checkpoint,omitempty"`
	// QueuedRecords is how many records the task's input channels hold
	// that it has not processed (0 for a source task): with a source's
	// SourcePending, what a job has still to do, channel by channel.
	QueuedRecords int64 `json:"queued_records,omitempty"`
	// InputBufferBytes is, for a task that debloats its input buffers
	// (channels.debloat), the sum of their sizes in effect; 0 when it
	// does not or has not resized them yet.
	InputBufferBytes int64 `json:"input_buffer_bytes,omitempty"`
	// SourcePending, for a source task that can tell, is how many messages
	// of its input the task has not processed yet (a core NATS source: what
	// its subscription buffers and the batch it gathers, CoreSubscription;
	// a JetStream source: the server's count of what its consumers have
	// not delivered, plus what they delivered that the task has not processed — fetched and
	// gathered into the next batch, or polled and not yet handed on to
	// the task's output channels; source.JetStream.Unread). The records
	// in the channels after the source task are not counted: their
	// credit bounds them. A worker before Unread counted only what was
	// not delivered. Nil otherwise.
	SourcePending *int64 `json:"source_pending,omitempty"`
	// CoreSubscription, for a core NATS source task, is what its
	// subscription holds and dropped (SourcePending counts its messages
	// too); nil for other tasks and from a worker older than this field.
	CoreSubscription *CoreSubscription `json:"core_subscription,omitempty"`
	// SourceReadSeq, for a source task that can tell (a JetStream source),
	// is the stream sequence up to which it has processed every message of
	// its input: a checkpoint triggered after this report covers all of
	// them (host.Stats.SourceOffset); 0 until it processed any. Nil for a
	// task that cannot tell: another kind of source, or a worker older
	// than this field.
	SourceReadSeq *uint64 `json:"source_read_seq,omitempty"`
	// SinkCommitted, for a sink task whose sink reports its commits (an
	// exactly-once JetStream sink), is the latest checkpoint whose output
	// the sink has stored in the current attempt (0: none yet); nil for
	// other tasks. Other sinks store their output before their task acks
	// a checkpoint.
	SinkCommitted *int64 `json:"sink_committed,omitempty"`
	// AwaitedStop, for a bounded source task whose stream has not reached
	// the source's stop yet, is that stop sequence, and StreamLastSeq the
	// stream's last sequence when the task last looked (at most a second
	// before): the job waits for more messages. 0 otherwise.
	AwaitedStop   uint64 `json:"awaited_stop,omitempty"`
	StreamLastSeq uint64 `json:"stream_last_seq,omitempty"`
	// InputEnded says that the task's input ended (EventInputEnded): it
	// waits for the job's final savepoint.
	InputEnded bool `json:"input_ended,omitempty"`
	// Restored says that the task restored its state and runs, what its
	// EventRunning reports: the coordinator takes it for that report,
	// which a NATS blip may have lost (checkpointing would otherwise never
	// start in the attempt, and nothing fail it).
	Restored bool `json:"restored,omitempty"`
}

// CoreSubscription is what a core NATS source task's subscription holds
// and dropped (source.CoreStats). Core NATS has no flow control: while
// the job takes messages slower than they come, the NATS client buffers
// them up to the source's pending limits and drops the rest.
type CoreSubscription struct {
	// Dropped counts the messages the client dropped, in this attempt:
	// they came while the buffer was at a limit, and are lost.
	Dropped int64 `json:"dropped,omitempty"`
	// PendingBytes is what the buffer holds, in bytes (messages:
	// TaskStats.SourcePending): what a cancel or a failure would lose.
	PendingBytes int64 `json:"pending_bytes,omitempty"`
	// LimitMessages and LimitBytes are the source's pending limits
	// (jobspec.Source.PendingMessages, PendingBytes, or their defaults).
	LimitMessages int64 `json:"limit_messages,omitempty"`
	LimitBytes    int64 `json:"limit_bytes,omitempty"`
}

// Heartbeat says a worker is alive and which tasks it runs.
type Heartbeat struct {
	Worker WorkerInfo `json:"worker"`
	Tasks  []TaskRef  `json:"tasks,omitempty"`
}

// Module tells a worker which module an operator runs.
type Module struct {
	// Ref is the reference as the spec wrote it (see coordinator/modref).
	Ref string `json:"ref"`
	// Digest is the sha256 (hex) the coordinator resolved Ref to; the worker
	// must run a module with this digest.
	Digest string `json:"digest,omitempty"`
}

// Deploy starts a job attempt's tasks on a worker.
type Deploy struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	// Submitted is when the job's run was submitted (JobStatus.Submitted,
	// the same for every attempt of the run, after a coordinator restart
	// too): it tells a run from one submitted again under the job's name,
	// whose attempts number on from it. Zero from a coordinator that does
	// not say.
	Submitted time.Time     `json:"submitted,omitzero"`
	Spec      *jobspec.Spec `json:"spec"`
	Plan      *plan.Plan    `json:"plan"`
	// Tasks are the IDs of the tasks this worker runs.
	Tasks []string `json:"tasks"`
	// Assignment maps every task of the plan to its worker ID.
	Assignment map[string]string `json:"assignment"`
	// Modules maps operator name to its module.
	Modules map[string]Module `json:"modules,omitempty"`
	// Restore, when set, is the checkpoint the tasks start from.
	Restore *Restore `json:"restore,omitempty"`
	// StateStore is where the coordinator reads the tasks' snapshots
	// (storage.Location of its checkpoint store; "" if it does not say).
	// A worker whose snapshots go elsewhere refuses the deploy: the
	// coordinator could restore none of its checkpoints.
	StateStore string `json:"state_store,omitempty"`
	// FsyncEachWrite says the coordinator's NATS server, which the
	// workers share, fsyncs every JetStream write before acknowledging it
	// (weir up -sync always): at-least-once sinks in publish mode auto
	// then publish atomic batches where their streams allow atomic
	// publish (sink.ResolveAtLeastOnceMode). False from a coordinator that
	// does not know, or does not say.
	FsyncEachWrite bool `json:"fsync_each_write,omitempty"`
	// EndInput says the job is being drained (API DrainJob): the
	// attempt's source tasks end their input once they restored their
	// state, where the checkpoint they restore had read to, as EndInput
	// has them do, so that an attempt after a failover of a drain ends
	// too. A worker that does not know it runs the attempt on: the
	// coordinator sends EndInput to the running attempt as well.
	EndInput bool `json:"end_input,omitempty"`
	// EndInputAt, with EndInput, maps a source task to the stream
	// sequence its input ends at (EndInput.At, as the drain chose it):
	// the task reads on to it once restored. A source task it does not
	// name ends where its checkpoint had read to.
	EndInputAt map[string]uint64 `json:"end_input_at,omitempty"`
}

// EndInput asks a worker's source tasks Tasks of a job attempt to end
// their input where they have read to (host.Task.EndInput): each takes
// no more input, sends end-of-data downstream and reports
// EventInputEnded, and the job ends with a final savepoint as a bounded
// job does. A worker handles it the same however often it comes.
//
// At maps a source task held for the drain (HoldInput) to the stream
// sequence its input ends at: it reads on to it (host.Task.EndInputAt),
// so that every subtask of a source ends at the same one.
type EndInput struct {
	Job     string            `json:"job"`
	Attempt int               `json:"attempt"`
	Tasks   []string          `json:"tasks"`
	At      map[string]uint64 `json:"at,omitempty"`
}

// HoldInput asks a worker to hold the JetStream source tasks Tasks of a
// job attempt for a drain (host.Task.HoldInput): each takes in nothing
// more and says the highest stream sequence it covered
// (HoldInputReply.Held), which the EndInput that follows gives the
// highest of to every subtask of its source. A task not held within
// Millis of an EndInput ends its input where it has read to. A worker
// handles it the same however often it comes.
type HoldInput struct {
	Job     string   `json:"job"`
	Attempt int      `json:"attempt"`
	Tasks   []string `json:"tasks"`
	Millis  int64    `json:"millis"`
}

// HoldInputReply answers HoldInput: Held maps each task held to the
// stream sequence it covered; a task it does not name (its source reads
// no stream, or it had not restored yet) was not held.
type HoldInputReply struct {
	Reply
	Held map[string]uint64 `json:"held,omitempty"`
}

// Restore is what tasks restore from.
type Restore struct {
	CheckpointID int64 `json:"checkpoint_id"`
	// Handles maps task ID to the state handle it acked; a task without a
	// handle starts empty.
	Handles map[string]string `json:"handles"`
	// Merged maps a task of a vertex whose parallelism changed to the
	// handles of several of the vertex's old subtasks, in subtask order: a
	// source merges their offsets, an operator their keyed state, a sink
	// re-commits what they staged (its own handle among them). Such a task
	// has no entry in Handles.
	Merged map[string][]string `json:"merged,omitempty"`
	// ChannelPlan says that the checkpoint's in-flight channel state
	// (unaligned) is redistributed because a parallelism changed: every
	// task leaves the channel state of the snapshots it restores from
	// alone and takes, before any new input, the records Channels lists
	// for it instead (none when it has no entry).
	ChannelPlan bool `json:"channel_plan,omitempty"`
	// Channels maps a task to the channel state it replays under
	// ChannelPlan, in order.
	Channels map[string][]ChannelPiece `json:"channels,omitempty"`
}

// ChannelPiece is one channel of an old subtask's snapshot whose in-flight
// records a task replays as input after a rescale (Restore.ChannelPlan).
type ChannelPiece struct {
	// Handle is the snapshot that holds the channel state.
	Handle string `json:"handle"`
	// Output selects the snapshot's output channel state (records its
	// task had not sent yet) instead of its input channel state.
	Output bool `json:"output,omitempty"`
	// Channel is the channel's index among the snapshot's input or
	// output channels.
	Channel int `json:"channel"`
	// Port is the task's input port the records are replayed on.
	Port int `json:"port"`
	// ByKey keeps only the records whose key the task's key-partitioned
	// input would route to it (the others go to other subtasks).
	ByKey bool `json:"by_key,omitempty"`
}

// RestTimeout bounds how long a worker's Stop waits for the attempt's
// tasks to come to rest (sinks' commits are bounded by their ack timeout,
// 10 s by default); a coordinator that needs the answer waits this long
// besides its request timeout.
const RestTimeout = 30 * time.Second

// Cancel stops every task of a job attempt on a worker.
type Cancel struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason,omitempty"`
	// Stale says that the attempt is no longer the job's current one, or
	// of a job the coordinator does not know: the worker ran it on while
	// cut off, or missed its cancel. The worker logs its end as a
	// warning.
	Stale bool `json:"stale,omitempty"`
}

// Trigger asks source tasks to start checkpoint CheckpointID.
type Trigger struct {
	Job          string `json:"job"`
	Attempt      int    `json:"attempt"`
	CheckpointID int64  `json:"checkpoint_id"`
	// Timestamp is the trigger time in ms since the epoch; it goes into the
	// barrier.
	Timestamp int64 `json:"timestamp"`
	// Savepoint marks a savepoint: always aligned.
	Savepoint bool `json:"savepoint,omitempty"`
	// Stop marks the savepoint of a job being stopped: a source task
	// takes no input after its barrier, until the savepoint completes (a
	// Stop follows) or is aborted (it goes on).
	Stop bool `json:"stop,omitempty"`
	// Tasks are the source tasks on this worker to trigger.
	Tasks []string `json:"tasks"`
}

// Complete says checkpoint CheckpointID is durable: sinks may commit.
type Complete struct {
	Job          string `json:"job"`
	Attempt      int    `json:"attempt"`
	CheckpointID int64  `json:"checkpoint_id"`
}

// Abort says checkpoint CheckpointID was aborted.
type Abort struct {
	Job          string `json:"job"`
	Attempt      int    `json:"attempt"`
	CheckpointID int64  `json:"checkpoint_id"`
	Reason       string `json:"reason"`
}

// Stop asks a worker to bring the tasks of a job attempt to rest after the
// stop savepoint CheckpointID completed: each task handles the completion
// (sinks commit the savepoint's output) and then takes no more input. The
// reply comes once they have; a Cancel ends them.
type Stop struct {
	Job          string `json:"job"`
	Attempt      int    `json:"attempt"`
	CheckpointID int64  `json:"checkpoint_id"`
}

// EventType says what happened to a task.
type EventType string

// Event types.
const (
	// EventRunning: the task restored its state (if any) and processes
	// input. The coordinator triggers an attempt's checkpoints only once
	// every task of it sent this. (Workers before it was sent after the
	// restore sent it as the task started; a coordinator that waits for it
	// then starts checkpointing early, as before.)
	EventRunning EventType = "running"
	// EventAck: the task stored its snapshot for a checkpoint.
	EventAck EventType = "ack"
	// EventDecline: the task will not complete a checkpoint.
	EventDecline EventType = "decline"
	// EventFailed: the task stopped with an error.
	EventFailed EventType = "failed"
	// EventFinished: the task reached the end of its input and stopped.
	EventFinished EventType = "finished"
	// EventInputEnded: the task's input ended (a source task's bounded
	// source read everything up to its stop; any other task's channels
	// all delivered end-of-data); it waits for the job's final savepoint.
	EventInputEnded EventType = "input-ended"
	// EventCommitting: the task handed the output its sink staged up to
	// checkpoint CheckpointID to the sink's commits (they run in the
	// background), after the checkpoint completed; sent by a task whose
	// ack of the checkpoint had MetricCommitReport. Until every such task
	// sent it, the coordinator triggers no periodic checkpoint: a sink
	// whose earlier commits still run waits for room before it takes
	// input again, and a barrier sent meanwhile would wait with it.
	EventCommitting EventType = "committing"
)

// Decline kinds (the same strings the host uses).
const (
	DeclineSubsumed  = "subsumed"
	DeclineCancelled = "cancelled"
	DeclineRefused   = "declined"
	DeclineFailed    = "failed"
)

// Metric names in an ack's Metrics (the host's names: durations in
// nanoseconds, sizes in bytes, flags 0/1).
const (
	MetricAlignmentNanos    = "alignment_ns"
	MetricStartDelayNanos   = "start_delay_ns"
	MetricBufferedBytes     = "buffered_bytes"
	MetricSpilledBytes      = "spilled_bytes"
	MetricChannelStateBytes = "channel_state_bytes"
	MetricStateBytes        = "state_bytes"
	MetricSyncNanos         = "sync_ns"
	MetricAsyncNanos        = "async_ns"
	MetricUnaligned         = "unaligned"
	MetricSnapshotBytes     = "snapshot_bytes"
	MetricKeyedState        = "keyed_state"
	// MetricCommitReport is 1 in the ack of a task whose sink commits in
	// the background (an exactly-once sink): once the checkpoint
	// completes, the task reports when it handed the checkpoint's output
	// to its commits (EventCommitting). Absent for other tasks.
	MetricCommitReport = "commit_report"
	// MetricCommitWaitNanos is how long a sink task spent in its sink's
	// commit after the checkpoint's trigger, before its barrier came: the
	// barrier waited behind the commits of earlier checkpoints (part of
	// the start delay; PhaseCommitWait). Absent when none.
	MetricCommitWaitNanos = "commit_wait_ns"
	// MetricEndedPorts is the set of input ports whose end the task
	// handled (its operator's EndOfInput ran) as of the snapshot, recorded
	// by consistent snapshots only (not under at-least-once): bit i for
	// port i < 63, and bit 63 (the sign bit: the value is negative) when
	// every port from 63 on ended (host.EndedPortsMask; read it with
	// PortEnded). Absent, as in checkpoints written before it was
	// recorded, it means that no port ended.
	MetricEndedPorts = "ended_ports"
	// MetricStopSequence is the stream sequence a bounded JetStream source
	// task reads up to (its resolved stop), added by the worker to the
	// acks of such tasks: the restored spec may not move it later while a
	// port downstream had ended (Manager's restore checks). Absent for an
	// unbounded source and for any other task.
	MetricStopSequence = "stop_sequence"
	// MetricSourceEnded is 1 when a bounded source task's offset in the
	// checkpoint covers all of its input (every lane at its stop), 0 when
	// it does not (host.MetricSourceEnded). Absent for other tasks and in
	// checkpoints written before it was recorded: such a source task is
	// taken as ended where a port it fed had ended.
	MetricSourceEnded = "source_ended"
	// MetricSourceDrained is 1 when a source task's input was ended where
	// it had read to by a drain (EndInput; host.MetricSourceDrained):
	// its source would read on from its offset. Absent otherwise.
	MetricSourceDrained = "source_drained"
	// MetricSourcePosition identifies a source task's offset in the
	// checkpoint (host.MetricSourcePosition: a hash of the offset's bytes,
	// never 0): two checkpoints with the same value read the source up to
	// the same place. Absent for a source with no offset (a core NATS
	// subject, or one that has read nothing yet), for other tasks and in
	// checkpoints written before it was recorded. The job manager reads it
	// to tell a checkpoint that made progress from one taken again at the
	// place the attempt restored.
	MetricSourcePosition = "source_position"
	// MetricSourceCaughtUp is 1 when a source task had processed
	// everything its source held as it snapshotted (host.UnreadCounter).
	MetricSourceCaughtUp = "source_caught_up"
	// MetricSinkStateFrom is the oldest checkpoint k (k < n) whose
	// snapshot of the same task (checkpoint.StateKey(job, k, task)) the
	// task's snapshot for checkpoint n names: an exactly-once sink's
	// snapshot holds the output it staged for n inline and names the
	// earlier checkpoints whose snapshots hold what it staged before and
	// has not confirmed yet, from k on. A restore of n reads those too,
	// so retention keeps them and a removal of one is refused while n is
	// stored. Absent or 0: the snapshot is self-contained, as a
	// savepoint's always is.
	MetricSinkStateFrom = "sink_state_from"
	// MetricSourceReadSeq is the stream sequence up to which a JetStream
	// source task's offset in the checkpoint read every message of its
	// input (host.MetricSourceReadSeq; 0: nothing yet). The status of a
	// drained job names it per source, for the job that continues after
	// it. Absent for other tasks.
	MetricSourceReadSeq = "source_read_seq"
	// MetricSourceCoveredSeq is the highest stream sequence a JetStream
	// source task's offset in the checkpoint covered (its partitions'
	// highest; MetricSourceReadSeq is their lowest; host.
	// MetricSourceCoveredSeq). An attempt of a job being drained that
	// restores the checkpoint before the drain chose where the source
	// ends ends every subtask of it at the highest of theirs. Absent for
	// other tasks, and from an older worker.
	MetricSourceCoveredSeq = "source_covered_seq"
)

// PortEnded reports whether a task's MetricEndedPorts value says that its
// input port ended.
func PortEnded(mask int64, port int) bool {
	switch {
	case port < 0:
		return false
	case port < 63:
		return mask&(1<<port) != 0
	}
	return mask < 0
}

// Event is a task's report to the coordinator.
type Event struct {
	Type    EventType `json:"type"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	Task    string    `json:"task"`
	Worker  string    `json:"worker,omitempty"`
	// CheckpointID is set for EventAck and EventDecline.
	CheckpointID int64 `json:"checkpoint_id,omitempty"`
	// Handle is the storage key of the task's snapshot (EventAck).
	Handle string `json:"handle,omitempty"`
	// Metrics are the task's checkpoint metrics by Metric* name (EventAck).
	Metrics map[string]int64 `json:"metrics,omitempty"`
	// Kind is the Decline* kind (EventDecline).
	Kind string `json:"kind,omitempty"`
	// Reason is one line (EventDecline, EventFailed).
	Reason string `json:"reason,omitempty"`
	// FailureKind classifies an EventFailed's Reason (FailureUnknown from
	// a worker that does not send it).
	FailureKind FailureKind `json:"failure_kind,omitempty"`
	// Record is the record an EventFailed's operator failed on
	// (Failure.Record), "" where it names none.
	Record string `json:"record,omitempty"`
	// Unrecoverable marks an EventFailed whose cause would recur on every
	// restart: the job fails at once.
	Unrecoverable bool `json:"unrecoverable,omitempty"`
	// Secondary marks an EventFailed caused by another task's failure (a
	// channel its peer closed as it failed): the coordinator waits a
	// moment for that failure, so that the job's reason names the cause.
	Secondary bool `json:"secondary,omitempty"`
}

// Reply answers a request; Error is empty on success.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Code classifies Error for callers that branch (see the Err* values).
	Code string `json:"code,omitempty"`
	// FailureKind classifies Error as a job's failure (WithFailureKind):
	// a worker's reply to a deploy that failed in an operator's weir_init
	// says how it failed (FailureMemoryLimit, FailureTrap, ...).
	// FailureUnknown from a peer that does not send it, and for errors
	// of no kind.
	FailureKind FailureKind `json:"failure_kind,omitempty"`
	// FailureTask names the task Error is a failure of (WithFailedTask):
	// a worker's reply to a deploy that failed setting up a task (its
	// operator's weir_init, its source or sink) names it. "" from a peer
	// that does not send it, and for errors of no task.
	FailureTask string `json:"failure_task,omitempty"`
}
