// Package host is weir's task runtime: it runs one operator instance per task,
// feeds it the record batches of the task's input channels, aligns checkpoint
// barriers per input (aligned, at-least-once, unaligned, aligned with
// timeout), snapshots module state and in-flight channel data, and writes the
// operator's output through partitioners onto the task's output channels.
//
// The interfaces in this file (Operator, Source, Sink, CheckpointListener,
// Store) use standard-library types only, so that the WebAssembly instance
// (host/wasm), the NATS sources and sinks (transport) and the checkpoint
// coordinator (coordinator) satisfy them structurally without importing host.
package host

import (
	"context"
	"errors"
	"io"
	"time"
)

// Operator is one operator instance, driven by exactly one task goroutine.
// host/wasm's instance satisfies it; tests use native Go operators.
type Operator interface {
	// Process handles one record batch from input port `port`. Each emitted
	// batch is handed to emit after the call succeeded, in emit order; emit's
	// callee owns the batch (it is already a copy).
	Process(ctx context.Context, port int, batch []byte, emit func(port int, batch []byte) error) error
	// EndOfInput tells the operator that input port `port` delivers nothing
	// more; it may emit final output.
	EndOfInput(ctx context.Context, port int, emit func(port int, batch []byte) error) error
	// Snapshot streams the operator state to w, in chunks.
	Snapshot(ctx context.Context, w io.Writer) error
	// Restore reads back a state written by Snapshot.
	Restore(ctx context.Context, r io.Reader) error
	// CheckpointComplete tells the operator that checkpoint id is durable
	// everywhere.
	CheckpointComplete(ctx context.Context, id int64) error
	// Close releases the instance.
	Close(ctx context.Context) error
}

// MemoryReporter is an Operator that can tell its memory's size and limit
// in bytes (host/wasm's instance: its linear memory after the latest call).
// A task reports them in its Stats.
type MemoryReporter interface {
	MemoryBytes() (size, limit uint64)
}

// CallReporter is an Operator that can tell how long the call into it
// that runs now has run, 0 between calls, and which export it runs, ""
// between calls (host/wasm's instance). A task reports them in its Stats
// (InCall, InCallExport). Any goroutine may call them.
type CallReporter interface {
	InCall() time.Duration
	InCallExport() string
}

// Named is implemented by an Operator whose errors name it and the call
// that failed, as host/wasm's instance's do ("operator count[0]:
// weir_process: trap at record 2: …"): the task adds to them only what
// they cannot know (the input port, the checkpoint), so that a failure
// names the operator once.
type Named interface {
	// Name returns the operator's name, as its errors give it.
	Name() string
}

// Paced is implemented by an Operator that times its calls (host/wasm's
// instance). A task with input channels hands it no more records in one
// call than it is expected to process in PieceTime: a large input batch
// goes in pieces, with output, control messages and priority barriers
// serviced between them, so that a slow operator holds an unaligned
// checkpoint up for about PieceTime, not for a whole backlog batch. A
// source task runs its operator on each polled batch whole (the offset
// covers the batch), so it asks a BatchLimiter source for batches of that
// size instead.
type Paced interface {
	// RecordsWithin returns how many records the operator is expected to
	// process in d: at least 1 when it has an estimate, 0 when a piece of
	// any size is fine.
	RecordsWithin(d time.Duration) int
}

// PieceTime is how long a task aims to spend in one call of a Paced
// operator: the longest a checkpoint barrier or trigger waits for the
// operator at a slow pace.
const PieceTime = 100 * time.Millisecond

// BatchLimiter is implemented by a Source whose batches can be made
// smaller (the NATS sources). A source task with a Paced operator limits
// them to what the operator processes in PieceTime, so that a checkpoint
// trigger waits about that long for the batch in progress. LimitBatch may
// be called while Poll runs; a batch gathered before is returned as it is.
type BatchLimiter interface {
	// LimitBatch bounds the records of the batches Poll returns from now
	// on; n <= 0 lifts the bound to the source's own maximum.
	LimitBatch(n int)
}

// ErrCannotRescale is wrapped by the error of a task that restores from
// several old subtasks' snapshots (Config.RestoreMerged) whose state
// cannot be redistributed: operator state not in the keyed layout, a key
// in two subtasks' state, or a snapshot with channel or sink state.
var ErrCannotRescale = errors.New("state cannot be redistributed to a new parallelism")

// ErrPortEnded is wrapped by the error of a task given records on an input
// port whose end it handled before the snapshot it restored (the final
// savepoint of a finished bounded job, restored with more input): the
// operator's end-of-input output for that port is out already, and it
// cannot take records after it.
var ErrPortEnded = errors.New("records after the end of an input port")

// OffsetMerger is implemented by a Source whose subtasks' offsets can be
// merged, so that its parallelism may change on restore (a JetStream
// source). MergeOffsets gets the old subtasks' offsets in subtask order
// and returns an offset that the new subtask can Seek to.
type OffsetMerger interface {
	MergeOffsets(offsets [][]byte) ([]byte, error)
}

// BoundedSource is implemented by a Source that can tell from an offset
// whether its input ends there: EndsAt reports whether the source, sought
// to offset (as Poll returned it and a checkpoint stored it), would read
// nothing more. It must not change the source, and may be called while a
// Poll is blocked. A source task's checkpoint acks then say so
// (MetricSourceEnded, from the offset the snapshot recorded, also for a
// task restored to its end that has not polled yet), so that a restore
// whose spec would send the rest of an unfinished source to an input port
// that ended can be refused before it starts.
type BoundedSource interface {
	Source
	EndsAt(offset []byte) bool
}

// SequencedSource is a Source that reads a stream by sequence (a
// JetStream source): ReadThrough reports up to which stream sequence a
// task whose offset is offset has read every message of its input (ok
// false: an offset it cannot read). A source task's checkpoint acks say
// so (MetricSourceReadSeq): a drained job's status names where each
// source ended, for a job that continues after it. It reads only the
// source's configuration: Poll may run meanwhile.
type SequencedSource interface {
	ReadThrough(offset []byte) (seq uint64, ok bool)
}

// CoveredSource is a SequencedSource that can also tell the highest
// stream sequence a task whose offset is offset has covered (a
// partitioned JetStream source's lanes' highest; ReadThrough is their
// lowest). A source task's checkpoint acks say so
// (MetricSourceCoveredSeq): the next attempt of a job being drained that
// restores the checkpoint before the drain chose where its sources end
// ends every subtask of a source at the highest of theirs, as the drain
// would have (DrainableSource).
type CoveredSource interface {
	CoveredThrough(offset []byte) (seq uint64, ok bool)
}

// DrainableSource is a SequencedSource whose subtasks a drain can bring
// to one stream sequence (Task.HoldInput, Task.EndInputAt): DrainHold
// holds it — it gathers nothing more, and Poll returns only what it has
// gathered already — and returns the highest sequence it covered;
// DrainTo(seq) lets it read on, every message of its input up to seq and
// none past it, and end there as a bounded source does (InputEnded, with
// an offset that ReadThrough reads as seq). Both may be called from any
// goroutine, also while Poll is blocked, and again.
type DrainableSource interface {
	SequencedSource
	DrainHold() (seq uint64)
	DrainTo(seq uint64) error
}

// UnreadCounter is a Source that can tell how many of its messages a task
// whose offset is offset has not processed yet (ok false: it cannot tell
// now). A source task's checkpoint acks say whether that was none
// (MetricSourceCaughtUp): a checkpoint of an idle job ends a row of
// failures though no offset moved.
type UnreadCounter interface {
	Unread(offset []byte) (n uint64, ok bool)
}

// Source feeds a source task (a task without input channels). A source task
// calls Poll from one goroutine of its own, and Seek, CheckpointComplete and
// Close from the task goroutine: CheckpointComplete may run while a Poll is
// blocked, Seek and Close never do. Its errors name the source (e.g.
// "jetstream source ORDERS: ..."): the task adds only its own name.
type Source interface {
	// Poll blocks until the next record batch is available and returns it with
	// the source offset just after it: Seek(offset) resumes with the batch
	// that follows. A batch without records only moves the offset (e.g.
	// past messages the source skipped). It returns ctx.Err() when ctx is
	// done. The task owns the returned slices. A bounded source ends in
	// one of two ways:
	//   - io.EOF: the task finishes at once (final output, the sink's
	//     EndOfInput, end-of-partition downstream), without a checkpoint;
	//   - an error with a method InputEnded() bool that reports true (see
	//     InputEnded), with the final offset: the task takes no more input,
	//     sends end-of-data downstream and tells its listener
	//     (InputEndListener), and the job ends with a final savepoint,
	//     whose completion commits the output after the last checkpoint
	//     exactly once.
	Poll(ctx context.Context) (batch []byte, offset []byte, err error)
	// Seek positions the source at offset, as returned by Poll and stored in
	// a checkpoint; called once before the first Poll when restoring. A nil
	// offset means nothing was read: the source starts where it would
	// without a checkpoint (the beginning, unless it is configured to start
	// elsewhere).
	Seek(ctx context.Context, offset []byte) error
	// CheckpointComplete says checkpoint id, which recorded offset, is
	// durable: the source may acknowledge or trim what lies before offset.
	CheckpointComplete(ctx context.Context, id int64, offset []byte) error
	// Close releases the source; a blocked Poll returns.
	Close() error
}

// InputEnded reports whether err says that a bounded source delivered all
// of its input and waits for the job's final savepoint: err, or an error it
// wraps, has a method InputEnded() bool that returns true. The method
// keeps sources free of this package (transport/source.ErrEnded has it).
func InputEnded(err error) bool {
	var e interface{ InputEnded() bool }
	return errors.As(err, &e) && e.InputEnded()
}

// InputEndListener is implemented by a CheckpointListener that wants to
// hear when a task's input ended: a source task's bounded source said so
// (InputEnded), or every input channel of another task delivered
// end-of-data (after the operator's EndOfInput output). The coordinator
// takes the job's final savepoint once every task's has, and ends the job
// once it completed. A task reports it once per run.
type InputEndListener interface {
	InputEnded(ctx context.Context, task string) error
}

// RunningListener is implemented by a CheckpointListener that wants to
// hear when a task starts running: it restored its state (operator state,
// source offsets, and a sink's Recover, which may re-publish a large staged
// backlog) — at once when it has nothing to restore — and takes input from
// now on. The coordinator triggers checkpoints only once every task of the
// job's attempt is running: a checkpoint triggered earlier would wait for
// the restoring tasks and could expire. A task reports it once per run,
// before any ack; an error fails the task. A task whose restore fails
// reports its failure instead.
type RunningListener interface {
	Running(ctx context.Context, task string) error
}

// SinkMerger is implemented by a Sink that can re-commit what another
// sink task of its vertex staged, so that a sink's parallelism may shrink
// on restore: RecoverTask is Recover for the state task (an old subtask
// that no longer exists) wrote, committed as that task would have (for
// example under its message ids, so that what it had already published is
// deduplicated). A task restoring from several snapshots calls it once per
// snapshot, its own included, before any Write.
type SinkMerger interface {
	RecoverTask(ctx context.Context, task string, id int64, state []byte) error
}

// IncrementalSink is implemented by a Sink whose state for a checkpoint
// may name, instead of holding it again, what it staged and put into its
// state for an earlier checkpoint that has completed (the exactly-once
// JetStream sink: output waiting for a commit slower than the checkpoint
// interval is written into one snapshot, not into every one taken
// meanwhile). The task calls PreCommitIncremental instead of PreCommit
// and reports the oldest checkpoint the state names in its
// acknowledgement (MetricSinkStateFrom), so that retention keeps that
// checkpoint's snapshots while the newer one is kept; a restore reads the
// named checkpoints' snapshots of the same task, stored next to the
// restored one, and hands Recover (RecoverTask) the state InlineState
// makes whole.
type IncrementalSink interface {
	// PreCommitIncremental is PreCommit; the state may name the task's
	// snapshots of earlier completed checkpoints, the oldest of which is
	// from (0: none). With selfContained (a savepoint, which must
	// restore on its own) it names none.
	PreCommitIncremental(ctx context.Context, id int64, selfContained bool) (state []byte, from int64, err error)
	// InlineState returns state, a result of PreCommitIncremental, with
	// what it names put in: load returns the sink state of the task's
	// snapshot of a checkpoint it names.
	InlineState(ctx context.Context, state []byte, load func(ctx context.Context, checkpoint int64) ([]byte, error)) ([]byte, error)
}

// CommitReporter is implemented by a Sink that can say when a
// checkpoint's commit is stored (the exactly-once JetStream sink). The task
// then records it next to the snapshot (CommittedMarker; not for the
// commit of another job's checkpoint it was restored from, whose ID its
// own job may take later), and a restore of
// that checkpoint hands Recover no state: what it held is stored already,
// and re-committing it is only safe while the external system still
// recognizes it as a duplicate (JetStream's duplicate window), which a
// job that fails over again and again, or is restored from a savepoint
// much later, outlives.
type CommitReporter interface {
	// OnCommitted sets fn, to be called from any goroutine once everything
	// that sink task task (this one, or one whose state RecoverTask
	// re-commits) staged up to checkpoint id is stored.
	OnCommitted(fn func(task string, id int64))
}

// CommittedMarker returns the key of the empty object a task writes once
// the commit of the checkpoint whose snapshot is under handle is stored
// (CommitReporter).
func CommittedMarker(handle string) string { return handle + ".committed" }

// Sink consumes a sink task's output with two-phase commit hooks. All methods
// are called from the task goroutine. Its errors name the sink (its
// subject and stream, e.g. "exactly-once sink out (stream OUT): ...") and
// what failed — the checkpoint a pre-commit or commit was for (a commit
// that runs in the background fails a later call, and names its own
// checkpoint), the end of input —: the task adds only its own name, so a
// job's reason reads "task out-0 failed: exactly-once sink out (stream
// OUT): publish checkpoint 4 record 2: ...".
type Sink interface {
	// Write takes one record batch (the sink owns it).
	Write(ctx context.Context, batch []byte) error
	// PreCommit is called when the task snapshots checkpoint id: everything
	// written since the previous PreCommit belongs to id. The sink stages it
	// and returns what it needs to commit it after a restore (e.g. a
	// transaction handle or the staged records); the bytes go into the task's
	// snapshot.
	PreCommit(ctx context.Context, id int64) (state []byte, err error)
	// Commit publishes what was staged for every checkpoint up to id. It is
	// called when the coordinator declares id complete and must be idempotent.
	Commit(ctx context.Context, id int64) error
	// Recover is called once, before any Write, when the task restores
	// checkpoint id: the sink commits (again, idempotently) what state, the
	// result of PreCommit(id), describes, and drops anything staged later.
	// Its error names the sink and the checkpoint it recovers: the task
	// adds only the snapshot it restores.
	Recover(ctx context.Context, id int64, state []byte) error
	// EndOfInput says all input has been written: the sink commits the rest.
	EndOfInput(ctx context.Context) error
	// Close releases the sink.
	Close() error
}

// CommitListener is implemented by a CheckpointListener that wants to hear
// when a task whose sink commits in the background (a Waiter) handed the
// output it staged up to checkpoint id to the sink's commits: Sink.Commit
// returned, after the sink waited, if it had to, for an earlier commit to
// end. Such a task acks its checkpoints with MetricCommitReport. A
// coordinator holds the next checkpoint's trigger until then: a sink
// waiting for its commits takes no input, so neither does any task
// upstream of it once the channels are full, and a barrier sent meanwhile
// would wait for the commit of an earlier checkpoint — the whole output
// of one with a backlog.
type CommitListener interface {
	CommitStarted(ctx context.Context, task string, id int64) error
}

// CheckpointListener receives a task's checkpoint outcomes and failure; the
// checkpoint coordinator implements it (over NATS when tasks run on workers).
// Methods may be called from several goroutines at once.
type CheckpointListener interface {
	// Acknowledge says task wrote its snapshot for checkpoint id; handle is
	// the storage key to restore it from, metrics are named by the Metric*
	// constants (durations in nanoseconds, sizes in bytes, flags 0/1).
	Acknowledge(ctx context.Context, task string, id int64, handle string, metrics map[string]int64) error
	// Decline says task will not complete checkpoint id. kind is one of
	// DeclineSubsumed, DeclineCancelled, DeclineRefused, DeclineFailed;
	// reason is one line.
	Decline(ctx context.Context, task string, id int64, kind string, reason string) error
	// Failed says task stopped with err, a *TaskError whose message is one
	// line naming the task and the cause; the listener may classify it with
	// errors.Is/As. The coordinator recovers the job.
	Failed(ctx context.Context, task string, err error) error
}

// Kinds of Decline.
const (
	// DeclineSubsumed: a newer barrier arrived before this checkpoint's
	// alignment finished.
	DeclineSubsumed = "subsumed"
	// DeclineCancelled: a cancel marker arrived from upstream.
	DeclineCancelled = "cancelled"
	// DeclineRefused: the task could not take it, e.g. the alignment buffered
	// more than its limit.
	DeclineRefused = "declined"
	// DeclineFailed: writing the snapshot failed.
	DeclineFailed = "failed"
)

// Metric names in an Acknowledge.
const (
	MetricAlignmentNanos    = "alignment_ns"        // first barrier seen → all barriers (aligned) or snapshot
	MetricStartDelayNanos   = "start_delay_ns"      // trigger timestamp → first barrier seen
	MetricBufferedBytes     = "buffered_bytes"      // bytes buffered during alignment
	MetricSpilledBytes      = "spilled_bytes"       // of those, bytes spilled to disk
	MetricChannelStateBytes = "channel_state_bytes" // in-flight data persisted (unaligned)
	MetricStateBytes        = "state_bytes"         // operator state size
	MetricSyncNanos         = "sync_ns"             // synchronous part of the snapshot
	MetricAsyncNanos        = "async_ns"            // asynchronous write to storage
	MetricUnaligned         = "unaligned"           // 1 when the checkpoint ended unaligned
	MetricSnapshotBytes     = "snapshot_bytes"      // total bytes written to storage
	MetricKeyedState        = "keyed_state"         // 1 when the operator state is in the keyed layout (abi.KeyedStateMagic)
	MetricEndedPorts        = "ended_ports"         // the input ports that ended, a bitmask (EndedPortsMask)
	MetricSourceEnded       = "source_ended"        // a BoundedSource's task: 1 when its offset covers all of its input, else 0
	MetricSourceDrained     = "source_drained"      // a source task whose input EndInput ended (a drain): 1, else absent
	MetricCommitReport      = "commit_report"       // 1: the task reports when it hands the checkpoint's output to its sink's commits (CommitListener)
	MetricCommitWaitNanos   = "commit_wait_ns"      // trigger → barrier: time in the sink's Commit, waiting for earlier commits
	MetricSourcePosition    = "source_position"     // a source task with an offset: a hash of it, never 0 (SourcePosition)
	MetricSourceCaughtUp    = "source_caught_up"    // a source task that had processed all its source held (UnreadCounter): 1
	MetricSinkStateFrom     = "sink_state_from"     // an IncrementalSink's task: the oldest checkpoint whose snapshot of the task the sink state names (absent: none)
	MetricSourceReadSeq     = "source_read_seq"     // a SequencedSource's task: the stream sequence up to which it read all of its input (0: nothing)
	MetricSourceCoveredSeq  = "source_covered_seq"  // a CoveredSource's task: the highest stream sequence it covered (0: nothing)
)

// Metric names in an Acknowledge: where a task's start delay went when it
// was blocked sending its output (CheckpointMetrics.OutputBlocked).
const (
	MetricOutputBlockedNanos = "output_blocked_ns" // trigger → first barrier: time blocked sending output (absent: none)
	MetricBlockedPort        = "blocked_port"      // with output_blocked_ns: the output port of the channel blocked on longest
	MetricBlockedChannel     = "blocked_channel"   // with output_blocked_ns: that channel's index among the port's (the consumer's subtask; 0 on a forward edge)
)

// Store is checkpoint storage: a flat key space of immutable objects. The
// local-directory implementation is transport/storage.Dir; the coordinator
// provides one on JetStream's object store. Its errors name the key they
// are about (as os.Open's name the file): the task adds only what it was
// doing, not the key again.
type Store interface {
	// Put stores the bytes of r under key, atomically: a reader sees the
	// whole object or none.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the object under key. A missing key gives an error for
	// which errors.Is(err, fs.ErrNotExist) holds.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes every object whose key starts with prefix.
	Delete(ctx context.Context, prefix string) error
	// List returns the keys that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
}
