package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/partition"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/stream"
)

// Input is one input channel of a task.
type Input struct {
	// Port is the operator input port the channel feeds.
	Port int
	// Receiver is the channel's consuming end; the task closes it when done.
	Receiver stream.Receiver
}

// Output is one output port: a partitioner over the channels to the
// downstream subtasks.
type Output struct {
	// Partitioner splits batches across Senders; nil means forward.
	Partitioner partition.Partitioner
	// Senders are the channels, one per downstream subtask; the task closes
	// them when done.
	Senders []stream.Sender
	// Check, if set, refuses a batch the task's operator emitted on the
	// port that what the port goes to could never take (an emitted record
	// over the input batch limit of the operator it feeds,
	// wasm.CheckEmitted): the task fails, its operator named, rather than
	// the one the record goes to.
	Check func(batch []byte) error
}

// Checkpointing configures how a task takes checkpoints.
type Checkpointing struct {
	// Mode is the barrier handling mode.
	Mode barrier.Mode
	// AlignmentTimeout switches an AlignedTimeout alignment to unaligned.
	AlignmentTimeout time.Duration
	// MaxBufferedBytes declines an aligned checkpoint whose alignment buffered
	// more; 0 means no limit.
	MaxBufferedBytes int64
	// AlignmentMemory is the alignment buffer's memory budget; beyond it the
	// buffer spills to a temporary file. 0 means 16 MiB.
	AlignmentMemory int64
	// SpillDir holds spill files; "" means os.TempDir().
	SpillDir string
}

// Config describes one task.
type Config struct {
	// Name identifies the task in errors, reports and storage keys, e.g.
	// "join[0]".
	Name string
	// Operator processes the input; nil forwards input batches unchanged.
	Operator Operator
	// Source makes this a source task: it has no Inputs and is driven by the
	// source and by TriggerCheckpoint.
	Source Source
	// Sink, if set, receives everything the operator emits (instead of
	// Outputs).
	Sink Sink
	// Inputs are the input channels (none for a source task).
	Inputs []Input
	// Outputs are the output ports, in port order.
	Outputs []Output
	// Checkpointing configures barrier handling.
	Checkpointing Checkpointing
	// Store receives the snapshots; without one, checkpoints are declined.
	Store Store
	// KeyPrefix is prepended to snapshot keys: <KeyPrefix>chk-<id>/<Name>.
	KeyPrefix string
	// Listener receives acknowledgements, declines and the failure; may be
	// nil.
	Listener CheckpointListener
	// Restore is the handle (storage key) of the snapshot to restore from,
	// "" for a fresh start.
	Restore string
	// RestoreMerged, for a task whose vertex changed parallelism, holds the
	// handles of several old subtasks' snapshots, in subtask order,
	// instead of Restore. A
	// source task merges their offsets (the Source must implement
	// OffsetMerger) and seeks to the result; an operator task restores the
	// entries of their keyed state (abi.KeyedStateMagic) whose key routes
	// to Subtask of Parallelism; a sink task re-commits each one's staged
	// output as that task would have (the Sink must implement SinkMerger).
	// The snapshots must hold no channel state, unless ChannelPlan.
	RestoreMerged []string
	// Subtask and Parallelism place the task among its vertex's subtasks
	// (for RestoreMerged and a ChannelPiece's ByKey).
	Subtask, Parallelism int
	// ChannelPlan, on a restore after a parallelism changed, has the task
	// leave the channel state of the snapshots it restores from alone
	// (another task replays it) and replay RestoreChannels instead, in
	// order, before any new input.
	ChannelPlan bool
	// RestoreChannels lists the in-flight records of old channels that the
	// task replays under ChannelPlan.
	RestoreChannels []ChannelPiece
	// Clock returns the time; nil means time.Now. Tests inject one.
	Clock func() time.Time
	// Debloat sizes the input channels' buffers to what the task takes
	// in a target time; the zero value leaves them as built.
	Debloat Debloat
}

// TaskError is a task's failure: its Error is one line naming the task.
type TaskError struct {
	Task string
	Err  error
}

// Error returns one line: "task <name>: <cause>".
func (e *TaskError) Error() string {
	return "task " + e.Task + ": " + e.Cause()
}

// Cause returns the cause's message on one line, without the task's name:
// for a report that names the task itself (the coordinator's "task <name>
// failed: <cause>").
func (e *TaskError) Cause() string {
	return strings.ReplaceAll(e.Err.Error(), "\n", " ")
}

// Unwrap returns the cause.
func (e *TaskError) Unwrap() error { return e.Err }

type ctrlKind uint8

const (
	ctrlTrigger ctrlKind = iota + 1
	ctrlComplete
	ctrlAbort
	ctrlRest
	ctrlEndInput
)

type ctrlMsg struct {
	kind    ctrlKind
	barrier stream.Barrier
	id      int64
	stop    bool       // ctrlTrigger: take no input after the barrier
	done    chan error // ctrlRest: closed (after a send on error) once at rest
	// ctrlEndInput: at says where (EndInputAt: a DrainableSource's
	// sequence; atSet false: where the task has read to).
	at    uint64
	atSet bool
}

type outChannel struct {
	sender stream.Sender
	port   int
}

type outItem struct {
	ch int
	e  stream.Element
}

// Task runs one operator instance between its input and output channels.
// Create it with New, run it with Run; TriggerCheckpoint and
// NotifyCheckpointComplete may be called from any goroutine.
type Task struct {
	cfg     Config
	name    string
	clock   func() time.Time
	handler barrier.Handler
	ctx     context.Context
	// lateDue is when a barrier queued at an input, not yet over the
	// alignment timeout, will be (prioritizeLate; zero: none): a task
	// blocked sending its output is woken then (flush).
	lateDue time.Time

	// foreignID is the checkpoint a restore from another job's snapshot
	// had the sink commit (0: none). That commit is not one of this job's
	// checkpoints: no marker of it goes under this job's keys, where it
	// would claim the commit of the job's own checkpoint of that ID.
	foreignID atomic.Int64

	// input gate
	drained  []bool // the receiver delivered end-of-partition: poll no more
	ended    []bool // end-of-partition was handled
	portOpen map[int]int
	// dataEnded marks the channels that delivered end-of-data or
	// end-of-partition; portLive counts, per port, the channels not yet
	// so; endedPorts holds the ports whose end the operator handled
	// (EndOfInput), in this run or before the snapshot restored;
	// dataEndSent is set once every channel's data ended and the task
	// forwarded end-of-data and told its listener.
	dataEnded   []bool
	portLive    map[int]int
	endedPorts  map[int]bool
	dataEndSent bool
	sawEndData  bool // a channel delivered end-of-data in this run
	rr          int
	wake        chan struct{}
	replay      []*sequence // stack: the top is read first
	align       *spillBuffer
	deferred    [][]deferredBarrier // per channel, in arrival order
	finished    bool
	inputDone   bool
	// sourceEnded is set once a bounded source said its input ended
	// (InputEnded): the task takes no more input and waits for the job's
	// final savepoint.
	sourceEnded bool
	// endAsked is set once EndInput asked a source task to end its input
	// where it has read to (a drain); inputDrained once it did so.
	// drainTo is set once EndInputAt bounded its source (a drain to one
	// sequence): the input ends where the source does.
	endAsked, inputDrained, drainTo bool
	// rest is what is left of the input batch being processed in pieces
	// while the task services barriers between them (processInput).
	rest *restOfBatch

	// urgent events: control messages and interrupts of a blocked send
	mu          sync.Mutex
	ctrl        []ctrlMsg
	interrupted bool
	sendCancel  context.CancelFunc

	// outputs
	outs     []outChannel
	portBase []int
	outq     []outItem
	emitFn   func(port int, batch []byte) error

	// checkpoints
	pending    *pendingCheckpoint
	lastOffset []byte
	offsets    map[int64][]byte
	restoredID int64
	writes     sync.WaitGroup
	// commitSpans are the sink's Commit calls (from start to end) that
	// may overlap a checkpoint not snapshotted yet: the time a barrier
	// waited behind earlier commits (MetricCommitWaitNanos).
	commitSpans []span
	// blockedOut is when the task was blocked sending its output
	// (MetricOutputBlockedNanos).
	blockedOut blockedLog

	stats        counters
	debloat      *debloater   // nil: not debloating
	debloatSize  atomic.Int64 // Stats.InputBufferBytes
	sourceClosed bool
	// stopAt is the stop savepoint after whose barrier a source task takes
	// no input (0: none); runDone is closed when Run returns.
	stopAt  int64
	runDone chan struct{}
	// outer is the context Run was given: done when the task is
	// canceled, not when it ends by itself (reportCtx).
	outer context.Context
}

// reportCtx is the context of the task's acknowledgements and declines:
// not done when the task ends by itself — the acks of the snapshots a
// task wrote before it failed still count —, done once the task is
// canceled. A canceled task's reports are of no use to its attempt, which
// is over, and one waiting for an answer (during a NATS reconnect, up to
// the request's timeout) would hold up the task's end: Run waits for its
// snapshots' writes and their acknowledgements.
func (t *Task) reportCtx() context.Context { return t.outer }

// Stats counts a task's work since it started.
type Stats struct {
	// RecordsIn and BatchesIn count what the task took from its inputs
	// (or polled from its source); RecordsOut and BatchesOut what it
	// emitted, to its output channels (before partitioning) or its sink.
	RecordsIn, BatchesIn, RecordsOut, BatchesOut int64
	// Checkpoints counts the snapshots the task took, Declined the
	// checkpoints it declined.
	Checkpoints, Declined int64
	// InputEnded says that the task's input ended: its bounded source
	// delivered everything up to its stop, or every input channel
	// delivered end-of-data. The task waits for the job's final savepoint.
	InputEnded bool
	// Restored says that the task restored its state (at once with
	// nothing to restore) and runs: what it reports to a RunningListener.
	Restored bool
	// Running is the time since the task started; Busy the part of it
	// spent processing input batches (its operator, and a sink task's
	// writes) and taking snapshots (the operator's state, a sink's staged
	// output); Backpressured the part blocked on its output: sending to a
	// channel without credit, or waiting for its sink's commit.
	Running, Busy, Backpressured time.Duration
	// SourceOffset, of a source task, is the source's offset after the
	// last input the task processed (or restored from): what its next
	// snapshot records, so a checkpoint triggered later covers that
	// input. Nil until there is one.
	SourceOffset []byte
	// ReportsCommits says that the task's sink reports when its commits
	// are stored (CommitReporter), and Committed is the latest checkpoint
	// whose output it has stored since the task started (0: none yet).
	ReportsCommits bool
	Committed      int64
	// MemoryBytes and MemoryLimit are an operator task's operator's
	// memory size and limit (MemoryReporter), 0 for other tasks.
	MemoryBytes, MemoryLimit uint64
	// QueuedRecords is how many records the task's input channels hold
	// that it has not taken (stream.QueueReporter; 0 for a source task).
	QueuedRecords int64
	// InputBufferBytes is, while the task debloats its input buffers
	// (Config.Debloat), the sum of their sizes in effect (from the start:
	// they start at the least, Debloat.MinBytes); 0 when not debloating.
	InputBufferBytes int64
	// InCall is how long the call into the task's operator that runs now
	// has run (CallReporter), 0 between calls and for other tasks: a
	// long one is an operator stuck, or very slow, on a record.
	InCall time.Duration
	// InCallExport is the export that call runs (weir_process,
	// weir_snapshot, weir_restore, …), "" between calls: a long
	// weir_snapshot is a large state, not a record.
	InCallExport string
	// InCallCheckpoint is, while that call is weir_snapshot or
	// weir_restore, the checkpoint whose state it writes or reads; else 0.
	InCallCheckpoint int64
}

// counters hold a task's Stats: written by the task's goroutine, read by
// any. A span of busy or blocked time counts while it lasts, so a task
// stuck in its operator or on a full channel shows it.
type counters struct {
	recordsIn, batchesIn, recordsOut, batchesOut atomic.Int64
	checkpoints, declined                        atomic.Int64
	ended, restored                              atomic.Bool
	offset                                       atomic.Pointer[[]byte] // Stats.SourceOffset
	committed                                    atomic.Int64           // Stats.Committed
	// stateCheckpoint is the checkpoint whose state the operator writes
	// (Snapshot) or reads (Restore) now, 0 at other times.
	stateCheckpoint atomic.Int64

	mu                      sync.Mutex
	started                 time.Time // zero: not running yet
	busy, backpressured     time.Duration
	busySince, blockedSince time.Time // zero: not in such a span
}

// begin starts a span of the time that since marks.
func (c *counters) begin(since *time.Time) {
	c.mu.Lock()
	*since = time.Now()
	c.mu.Unlock()
}

// end ends the span since marks, adding it to total.
func (c *counters) end(since *time.Time, total *time.Duration) {
	c.mu.Lock()
	*total += time.Since(*since)
	*since = time.Time{}
	c.mu.Unlock()
}

// busyFor runs fn and counts its time as busy. It runs between batches
// (process's emit only queues output; the queue is sent, and barriers
// that overtake it are taken, after process returned), but a busy span
// open already is left to end as it would: begin and end do not nest.
func (c *counters) busyFor(fn func() error) error {
	c.mu.Lock()
	open := !c.busySince.IsZero()
	if !open {
		c.busySince = time.Now()
	}
	c.mu.Unlock()
	err := fn()
	if !open {
		c.end(&c.busySince, &c.busy)
	}
	return err
}

// deferredBarrier is a priority barrier that an aligned handler must see
// after the elements it overtook: remaining more elements of its channel
// come first.
type deferredBarrier struct {
	d         stream.Delivery
	remaining int
}

// New validates cfg and returns a task ready to Run.
func New(cfg Config) (*Task, error) {
	if cfg.Name == "" {
		return nil, errors.New("task: empty name")
	}
	if cfg.Source != nil && len(cfg.Inputs) > 0 {
		return nil, fmt.Errorf("task %s: a source task has no input channels", cfg.Name)
	}
	if cfg.Source == nil && len(cfg.Inputs) == 0 {
		return nil, fmt.Errorf("task %s: no inputs and no source", cfg.Name)
	}
	t := &Task{cfg: cfg, name: cfg.Name, clock: cfg.Clock, wake: make(chan struct{}, 1), runDone: make(chan struct{}),
		offsets: map[int64][]byte{}, portOpen: map[int]int{}, portLive: map[int]int{}, endedPorts: map[int]bool{}, restoredID: -1}
	if d := cfg.Debloat; d.Target > 0 && len(cfg.Inputs) > 0 {
		if d.MinBytes <= 0 {
			d.MinBytes = DefaultDebloatMin
		}
		if d.Period <= 0 {
			d.Period = DefaultDebloatPeriod
		}
		t.debloat = &debloater{cfg: d, sizes: make([]int, len(cfg.Inputs))}
		t.debloatStart()
	}
	if t.clock == nil {
		t.clock = time.Now
	}
	ck := cfg.Checkpointing
	if ck.AlignmentMemory <= 0 {
		ck.AlignmentMemory = 16 << 20
	}
	if ck.SpillDir == "" {
		ck.SpillDir = os.TempDir()
	}
	t.cfg.Checkpointing = ck
	t.cfg.Outputs = append([]Output(nil), cfg.Outputs...) // defaults below must not touch the caller's
	n := len(cfg.Inputs)
	t.drained, t.ended, t.deferred, t.dataEnded = make([]bool, n), make([]bool, n), make([][]deferredBarrier, n), make([]bool, n)
	for _, in := range cfg.Inputs {
		if in.Receiver == nil {
			return nil, fmt.Errorf("task %s: nil input receiver", cfg.Name)
		}
		t.portOpen[in.Port]++
		t.portLive[in.Port]++
	}
	t.handler = barrier.New(barrier.Config{Channels: max(n, 1), Mode: ck.Mode,
		AlignmentTimeout: ck.AlignmentTimeout, MaxBufferedBytes: ck.MaxBufferedBytes})
	t.align = newSpillBuffer(ck.SpillDir, ck.AlignmentMemory)
	for p, o := range cfg.Outputs {
		if o.Partitioner == nil {
			t.cfg.Outputs[p].Partitioner = partition.Forward{}
		}
		t.portBase = append(t.portBase, len(t.outs))
		for _, s := range o.Senders {
			t.outs = append(t.outs, outChannel{sender: s, port: p})
		}
	}
	t.emitFn = t.emit
	if cr, ok := cfg.Sink.(CommitReporter); ok {
		cr.OnCommitted(t.markCommitted)
	}
	return t, nil
}

// markCommitted records that the commit of sink task task's checkpoint id
// is stored: in the task's Stats (Committed) and, with a store, next to
// its snapshot (CommitReporter). The marker is best effort: a restore
// that finds no marker re-commits, as it would without them. The commit
// of another job's checkpoint the task was restored from counts for
// neither: its ID is not one of the job's.
func (t *Task) markCommitted(task string, id int64) {
	if id == t.foreignID.Load() {
		return
	}
	for {
		c := t.stats.committed.Load()
		if id <= c || t.stats.committed.CompareAndSwap(c, id) {
			break
		}
	}
	if t.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = t.cfg.Store.Put(ctx, CommittedMarker(SnapshotKey(t.cfg.KeyPrefix, id, task)), bytes.NewReader(nil))
}

// committed reports whether the commit of the sink state in snap, read
// from handle, is known to be stored: its marker is there. Only a
// snapshot of this job's own (under the task's key prefix) counts.
//
// The marker may be read from a replica that lags (a JetStream object
// store's reads use direct gets, which in a cluster any replica answers):
// a stale read finds no marker, and the restore re-commits, as it would
// without markers — a marker is written once and never changes.
func (t *Task) committed(ctx context.Context, handle string, snap *snapshot.Task) bool {
	if _, ok := t.cfg.Sink.(CommitReporter); !ok || handle != SnapshotKey(t.cfg.KeyPrefix, snap.CheckpointID, snap.Task) {
		return false
	}
	rc, err := t.cfg.Store.Get(ctx, CommittedMarker(handle))
	if err != nil {
		return false
	}
	rc.Close()
	return true
}

// Name returns the task's name.
func (t *Task) Name() string { return t.name }

// TriggerCheckpoint asks a source task to take checkpoint b.ID and emit its
// barrier. Tasks with inputs ignore it: their barriers come in-band.
func (t *Task) TriggerCheckpoint(b stream.Barrier) {
	t.post(ctrlMsg{kind: ctrlTrigger, barrier: b})
}

// TriggerStop is TriggerCheckpoint for the savepoint of a job being
// stopped: after emitting the barrier, a source task takes no more input,
// so nothing past the savepoint is processed, until AbortCheckpoint(b.ID)
// (the savepoint failed: it goes on). Once the savepoint completed, Rest
// and a cancel end the task.
func (t *Task) TriggerStop(b stream.Barrier) {
	t.post(ctrlMsg{kind: ctrlTrigger, barrier: b, stop: true})
}

// EndInput asks a source task to end its input where it has read to (weir
// job stop -drain): the batch its source polls next is not taken, and the
// task ends as a bounded source's does at its stop (endInput) — it keeps
// the offset after the last batch it processed for its snapshots, sends
// end-of-data downstream and tells its InputEndListener, so that the
// operators emit their end-of-input output and the job ends with a final
// savepoint. Its checkpoint acks say so from then on
// (MetricSourceDrained). A stop savepoint's barrier that is out
// (TriggerStop) is waited for first: aborted, the task ends then; a task
// whose input ended already, and one without a source, ignore it. It may
// be called before Run (the deploy of a job being drained): the task ends
// its input once it restored its state, reading nothing.
func (t *Task) EndInput() {
	t.post(ctrlMsg{kind: ctrlEndInput})
}

// HoldInput holds a source task's DrainableSource for a drain that brings
// every subtask of the source to one stream sequence: the source gathers
// nothing more (the task processes what it gathered already) and seq is
// the highest sequence it covered. The drain then gives every subtask the
// highest of their sequences (EndInputAt). A hold that no EndInputAt
// follows within d (the coordinator went away between the two) ends the
// task's input where it has read to, as EndInput does. ok is false, and
// nothing is held, for a task whose source is no DrainableSource, and one
// that has not restored its state yet (its source is not at its offset).
func (t *Task) HoldInput(d time.Duration) (seq uint64, ok bool) {
	src, isD := t.cfg.Source.(DrainableSource)
	if !isD || !t.stats.restored.Load() {
		return 0, false
	}
	seq = src.DrainHold()
	time.AfterFunc(d, t.EndInput) // ignored once EndInputAt came
	return seq, true
}

// EndInputAt ends a source task's input at stream sequence seq (a drain,
// after HoldInput): its DrainableSource reads on up to seq and ends there
// (DrainTo), and the task ends as at a bounded source's stop — end-of-data
// downstream, its listener told — with its checkpoint acks saying it was
// drained (MetricSourceDrained) once it did. For a task whose source is
// no DrainableSource it is EndInput. A later EndInput changes nothing.
func (t *Task) EndInputAt(seq uint64) {
	t.post(ctrlMsg{kind: ctrlEndInput, at: seq, atSet: true})
}

// NotifyCheckpointComplete tells the task that checkpoint id completed
// everywhere: the operator, the sink (commit) and the source hear of it.
func (t *Task) NotifyCheckpointComplete(id int64) {
	t.post(ctrlMsg{kind: ctrlComplete, id: id})
}

// AbortCheckpoint tells the task that checkpoint id was aborted: a source
// that stopped taking input for it (TriggerStop) goes on.
func (t *Task) AbortCheckpoint(id int64) {
	t.post(ctrlMsg{kind: ctrlAbort, id: id})
}

// Rest waits until the task has handled every notification posted before
// it — a sink has finished committing what they completed (its commits run
// to the end) — or ctx is done, or Run returned. The job's stop calls it
// after its stop savepoint completed, before canceling the tasks.
func (t *Task) Rest(ctx context.Context) error {
	done := make(chan error, 1)
	t.post(ctrlMsg{kind: ctrlRest, done: done})
	return t.await(ctx, "rest", done)
}

// await waits for the task's answer on done to a control message it was
// posted (closed, after a send on error, once handled), for Run to return
// or for ctx to be done. An answer that arrived wins over both: Run
// closes runDone after it answered, so a caller that finds both ready
// (select picks among ready cases at random) still gets the answer.
func (t *Task) await(ctx context.Context, what string, done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-t.runDone:
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("task %s: %s: %w", t.name, what, ctx.Err())
	}
	return fmt.Errorf("task %s: %s: no longer running", t.name, what)
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// commitWait returns how long, after the trigger of the checkpoint of
// barrier b and until now, the task spent in its sink's Commit — waiting,
// when it had to, for an earlier checkpoint's commit to end while the
// barrier queued behind its input — and drops the spans that ended before
// that trigger: later checkpoints are triggered later. The trigger's time
// is known to the millisecond; a span counts from the millisecond after it,
// so that one which ended before the trigger never counts.
func (t *Task) commitWait(b stream.Barrier, now time.Time) time.Duration {
	if b.Timestamp <= 0 {
		t.commitSpans = t.commitSpans[:0]
		return 0
	}
	from := time.UnixMilli(b.Timestamp + 1)
	var d time.Duration
	kept := t.commitSpans[:0]
	for _, s := range t.commitSpans {
		if !s.to.After(from) {
			continue
		}
		kept = append(kept, s)
		lo, hi := s.from, s.to
		if lo.Before(from) {
			lo = from
		}
		if hi.After(now) {
			hi = now
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	t.commitSpans = kept
	return d
}

// reportsCommits reports whether the task tells its listener when it
// handed a checkpoint's output to its sink's commits (CommitListener):
// its sink commits in the background (a Waiter) and its listener hears
// of it.
func (t *Task) reportsCommits() bool {
	if _, ok := t.cfg.Sink.(Waiter); !ok {
		return false
	}
	_, ok := t.cfg.Listener.(CommitListener)
	return ok
}

// Waiter is implemented by a Sink whose Commit may return before the
// commit is done: Wait returns once every commit has ended (Rest waits).
type Waiter interface {
	Wait(ctx context.Context) error
}

func (t *Task) post(m ctrlMsg) {
	t.mu.Lock()
	t.ctrl = append(t.ctrl, m)
	t.mu.Unlock()
	t.signal()
}

// signal wakes the task loop and interrupts a blocked send.
func (t *Task) signal() {
	t.mu.Lock()
	t.interrupted = true
	if t.sendCancel != nil {
		t.sendCancel()
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run runs the task until its input ends (nil), ctx is done (ctx.Err()) or
// it fails (*TaskError, also reported to the listener). It first restores
// the task's state, then tells a RunningListener that the task runs. It
// releases the operator, source, sink and channels before it returns.
func (t *Task) Run(ctx context.Context) (err error) {
	t.outer = ctx
	ctx, cancel := context.WithCancel(ctx)
	t.ctx = ctx
	defer close(t.runDone)
	t.stats.begin(&t.stats.started)
	defer func() {
		cancel()
		t.writes.Wait()
		t.release()
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return
		}
		if err != nil {
			var te *TaskError
			if !errors.As(err, &te) {
				err = &TaskError{Task: t.name, Err: err}
			}
			if t.cfg.Listener != nil {
				t.cfg.Listener.Failed(context.WithoutCancel(ctx), t.name, err)
			}
		}
	}()
	if err := t.restore(ctx); err != nil {
		return err
	}
	t.stats.restored.Store(true)
	if l, ok := t.cfg.Listener.(RunningListener); ok {
		if err := l.Running(ctx, t.name); err != nil {
			return fmt.Errorf("report running: %w", err)
		}
	}
	if t.cfg.Source != nil {
		return t.runSource(ctx)
	}
	for _, in := range t.cfg.Inputs {
		in.Receiver.Notify(t.signal)
	}
	return t.runInputs(ctx)
}

// release closes everything the task holds.
func (t *Task) release() {
	closeCtx := context.WithoutCancel(t.ctx)
	for _, q := range t.replay {
		q.close()
	}
	t.replay = nil
	t.align.discard()
	for _, in := range t.cfg.Inputs {
		in.Receiver.Close()
	}
	for _, o := range t.outs {
		o.sender.Close()
	}
	if t.cfg.Operator != nil {
		t.cfg.Operator.Close(closeCtx)
	}
	if t.cfg.Sink != nil {
		t.cfg.Sink.Close()
	}
	if t.cfg.Source != nil && !t.sourceClosed {
		t.cfg.Source.Close()
	}
}

// runInputs is the loop of a task with input channels.
func (t *Task) runInputs(ctx context.Context) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.takeInterrupt()
		if err := t.serviceControl(ctx); err != nil {
			return err
		}
		if err := t.flush(ctx); err != nil {
			return err
		}
		t.debloatTick()
		if err := t.checkDeadline(); err != nil {
			return err
		}
		if err := t.prioritizeBarriers(); err != nil {
			return err
		}
		late, err := t.prioritizeLate()
		if err != nil {
			return err
		}
		got, err := t.step(ctx)
		if err != nil {
			return err
		}
		if got {
			continue
		}
		if t.finished {
			return t.finish(ctx)
		}
		// Nothing to do: wait for input, control, the deadline or the end.
		var tc <-chan time.Time
		d, ok := t.handler.Deadline()
		if !late.IsZero() && (!ok || late.Before(d)) {
			d, ok = late, true
		}
		if ok {
			wait := d.Sub(t.clock())
			if wait <= 0 {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-t.wake:
		case <-tc:
		case <-ctx.Done():
			return ctx.Err()
		}
		if timer != nil && tc != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func (t *Task) takeInterrupt() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.interrupted
	t.interrupted = false
	return i
}

func (t *Task) checkDeadline() error {
	if d, ok := t.handler.Deadline(); ok {
		if now := t.clock(); !now.Before(d) {
			return t.exec(t.handler.Tick(now), -1, nil)
		}
	}
	return nil
}

// step handles one input element: from the replay stack (released alignment
// buffers, recovered channel state) first, then from the channels,
// round-robin. It reports whether there was one.
func (t *Task) step(ctx context.Context) (bool, error) {
	for len(t.replay) > 0 {
		q := t.replay[len(t.replay)-1]
		it, ok, err := q.next()
		if err != nil {
			return false, err
		}
		if !ok {
			t.replay = t.replay[:len(t.replay)-1]
			continue
		}
		return true, t.dispatch(ctx, it.ch, stream.Delivery{Element: it.e})
	}
	n := len(t.cfg.Inputs)
	for i := 0; i < n; i++ {
		ch := (t.rr + i) % n
		if t.drained[ch] {
			continue
		}
		d, ok, err := t.cfg.Inputs[ch].Receiver.Poll()
		if err != nil {
			return false, channelErr("input", ch, err)
		}
		if !ok {
			continue
		}
		t.debloatCount(d)
		t.rr = (ch + 1) % n
		if d.Kind == stream.KindEndOfPartition {
			t.drained[ch] = true
		}
		return true, t.deliver(ctx, ch, d)
	}
	// All drained and every end handled: the input is over.
	done := true
	for ch := range t.drained {
		if !t.drained[ch] || !t.ended[ch] {
			done = false
		}
	}
	if done && len(t.replay) == 0 {
		t.finished = true
	}
	return false, nil
}

// deliver hands a delivery from a channel to dispatch, keeping a priority
// barrier that the handler aligns behind the elements it overtook, and one
// that reaches a channel blocked by the alignment in progress: the
// alignment buffer keeps elements, not their Overtaken, so the barrier goes
// back behind the data it overtook.
func (t *Task) deliver(ctx context.Context, ch int, d stream.Delivery) error {
	if d.Kind == stream.KindBarrier && len(d.Overtaken) > 0 && (!t.unalignedBarrier(d.Barrier) || t.handler.Blocked(ch)) {
		// An aligned handler must see the overtaken data before the barrier:
		// the receiver delivers it next.
		t.deferred[ch] = append(t.deferred[ch], deferredBarrier{d: stream.Delivery{Element: d.Element}, remaining: len(d.Overtaken)})
		return nil
	}
	if err := t.dispatch(ctx, ch, d); err != nil {
		return err
	}
	if len(t.deferred[ch]) == 0 || d.Kind == stream.KindBarrier && d.Barrier.Unaligned {
		return nil // a priority element is never among the overtaken ones
	}
	// One more element of the channel went by: release the barriers whose
	// overtaken elements have all been handled, in order.
	for i := range t.deferred[ch] {
		t.deferred[ch][i].remaining--
	}
	for len(t.deferred[ch]) > 0 && t.deferred[ch][0].remaining <= 0 {
		bd := t.deferred[ch][0].d
		t.deferred[ch] = t.deferred[ch][1:]
		if len(t.replay) > 0 {
			// Overtaken elements went into the alignment buffer, which was
			// then released (its checkpoint declined, say): they are
			// replayed, and the barrier must come after them. The replay
			// holds nothing older (the channels are polled only when it
			// is empty), so its bottom comes after all of them.
			t.replay = slices.Insert(t.replay, 0, &sequence{mem: []tagged{{ch: ch, e: bd.Element}}})
			continue
		}
		if err := t.dispatch(ctx, ch, bd); err != nil {
			return err
		}
	}
	return nil
}

// unalignedBarrier reports whether the handler takes b as an unaligned
// barrier.
func (t *Task) unalignedBarrier(b stream.Barrier) bool {
	if b.Type == stream.Savepoint {
		return false
	}
	switch t.cfg.Checkpointing.Mode {
	case barrier.Unaligned:
		return true
	case barrier.AlignedTimeout:
		return b.Unaligned || t.cfg.Checkpointing.AlignmentTimeout <= 0
	}
	return false
}

// dispatch handles one element of channel ch.
func (t *Task) dispatch(ctx context.Context, ch int, d stream.Delivery) error {
	if t.handler.Blocked(ch) {
		if err := t.align.add(ch, d.Element); err != nil {
			return err
		}
		return t.exec(t.handler.Buffered(t.align.total, t.clock()), -1, nil)
	}
	switch d.Kind {
	case stream.KindRecords:
		if id, ok := t.handler.Recording(ch); ok && t.pending != nil && t.pending.snap.CheckpointID == id {
			t.pending.addInput(ch, d.Element)
		}
		t.stats.batchesIn.Add(1)
		t.stats.recordsIn.Add(int64(d.Count()))
		return t.processInput(ctx, ch, d.Batch)
	case stream.KindBarrier:
		if id, ok := t.handler.Recording(ch); ok && id == d.Barrier.ID && t.pending != nil && len(d.Overtaken) > 0 {
			for _, e := range d.Overtaken {
				t.pending.addInput(ch, e)
			}
		}
		return t.exec(t.handler.Barrier(ch, d.Barrier, t.clock()), ch, &d)
	case stream.KindCancel:
		return t.exec(t.handler.Cancel(ch, d.CheckpointID, t.clock()), -1, nil)
	case stream.KindEndOfPartition:
		t.ended[ch] = true
		if err := t.exec(t.handler.EndOfPartition(ch, t.clock()), -1, nil); err != nil {
			return err
		}
		if err := t.endChannelData(ctx, ch); err != nil {
			return err
		}
		if t.sawEndData {
			// The last channels closed after others said end-of-data:
			// the input ended all the same.
			return t.endData(ctx)
		}
	case stream.KindEndOfData:
		t.sawEndData = true
		if err := t.endChannelData(ctx, ch); err != nil {
			return err
		}
		return t.endData(ctx)
	}
	return nil
}

// endChannelData handles the end of channel ch's data (end-of-data or
// end-of-partition): once every channel of its port ended, the operator
// hears of the port's end (EndOfInput) and emits its final output — unless
// it did before the snapshot the task restored.
func (t *Task) endChannelData(ctx context.Context, ch int) error {
	if t.dataEnded[ch] {
		return nil
	}
	t.dataEnded[ch] = true
	port := t.cfg.Inputs[ch].Port
	t.portLive[port]--
	if t.portLive[port] > 0 || t.endedPorts[port] {
		return nil
	}
	t.endedPorts[port] = true
	if t.cfg.Operator != nil {
		if err := t.cfg.Operator.EndOfInput(ctx, port, t.emitFn); err != nil {
			return t.operatorErr(err, fmt.Sprintf("end of input port %d", port), t.portNote(port))
		}
	}
	return nil
}

// endData runs after an end-of-data: once every input channel's data
// ended, the task's input has (the bounded sources upstream read up to
// their stops). It forwards end-of-data behind its final output and tells
// its listener, once per run; the job's final savepoint follows, and a
// sink commits what it staged with it.
func (t *Task) endData(ctx context.Context) error {
	if t.dataEndSent {
		return nil
	}
	for _, e := range t.dataEnded {
		if !e {
			return nil
		}
	}
	return t.reportEnd(ctx)
}

// reportEnd forwards end-of-data on every output and tells the listener
// that the task's input ended (InputEndListener).
func (t *Task) reportEnd(ctx context.Context) error {
	t.dataEndSent = true
	t.stats.ended.Store(true)
	t.broadcast(stream.EndOfData())
	if err := t.flush(ctx); err != nil {
		return err
	}
	if l, ok := t.cfg.Listener.(InputEndListener); ok {
		if err := l.InputEnded(ctx, t.name); err != nil {
			return fmt.Errorf("report the end of input: %w", err)
		}
	}
	return nil
}

// restOfBatch is the part of an input batch of channel ch that the
// operator has not seen yet: its records from byte offset off on, n of them.
type restOfBatch struct {
	ch    int
	batch []byte
	off   int
	n     int
}

// element returns the rest as a batch of its own.
func (r *restOfBatch) element() stream.Element {
	b := make([]byte, abi.BatchHeaderSize, abi.BatchHeaderSize+len(r.batch)-r.off)
	binary.LittleEndian.PutUint32(b, uint32(r.n))
	return stream.Records(append(b, r.batch[r.off:]...))
}

// processInput runs the operator on a batch of input channel ch. A Paced
// operator gets it in pieces of what it processes in PieceTime; between
// them the task sends its output and takes control messages and priority
// barriers, so an unaligned checkpoint waits for one piece, not for the
// batch. Such a checkpoint's snapshot holds the rest of the batch as
// channel state of ch (snapshot), like the data its barrier overtook.
func (t *Task) processInput(ctx context.Context, ch int, batch []byte) error {
	port := t.cfg.Inputs[ch].Port
	if t.endedPorts[port] && !t.dataEnded[ch] {
		// Ended before the snapshot restored, yet more records come: a
		// finished job restored with more input. Its end-of-input output
		// is out already; the records cannot be processed after it.
		return fmt.Errorf("%w: port %d ended before checkpoint %d, which the task restored (a finished job restored with a later stop? submit it as a new job)",
			ErrPortEnded, port, t.restoredID)
	}
	p, ok := t.cfg.Operator.(Paced)
	if !ok {
		return t.process(ctx, port, batch)
	}
	it, err := abi.NewIter(batch)
	k := p.RecordsWithin(PieceTime)
	if err != nil || k <= 0 || it.Count() <= k {
		return t.process(ctx, port, batch) // whole (a malformed batch is the operator's to report)
	}
	defer func() { t.rest = nil }()
	for left := it.Count(); left > 0; {
		if k = p.RecordsWithin(PieceTime); k <= 0 || k >= left {
			k = left
		}
		start, whole := it.Offset(), true
		for range k {
			if whole = it.Next(); !whole {
				break
			}
		}
		end := it.Offset()
		if !whole || k == left {
			// The last piece, or records that do not add up: the rest as
			// it is, for the operator to process or report.
			k, end = left, len(batch)
		}
		// A piece of its own: the operator may keep what it is given, and
		// the batch itself may be channel state of a pending checkpoint.
		piece := make([]byte, abi.BatchHeaderSize, abi.BatchHeaderSize+end-start)
		binary.LittleEndian.PutUint32(piece, uint32(k))
		if err := t.process(ctx, port, append(piece, batch[start:end]...)); err != nil {
			return err
		}
		if left -= k; left == 0 {
			return nil
		}
		t.rest = &restOfBatch{ch: ch, batch: batch, off: end, n: left}
		if err := t.betweenPieces(ctx); err != nil {
			return err
		}
	}
	return nil
}

// betweenPieces does between two pieces of a batch what the task loop
// does between batches, but for taking input: it sends the output so far
// and takes control messages, the alignment deadline and priority
// barriers.
func (t *Task) betweenPieces(ctx context.Context) error {
	t.takeInterrupt()
	if err := t.serviceControl(ctx); err != nil {
		return err
	}
	if err := t.checkDeadline(); err != nil {
		return err
	}
	if err := t.prioritizeBarriers(); err != nil {
		return err
	}
	if _, err := t.prioritizeLate(); err != nil {
		return err
	}
	if err := t.servicePriority(ctx); err != nil {
		return err
	}
	return t.flush(ctx)
}

// process runs the operator on one batch.
func (t *Task) process(ctx context.Context, port int, batch []byte) error {
	t.stats.begin(&t.stats.busySince)
	defer t.stats.end(&t.stats.busySince, &t.stats.busy)
	if t.cfg.Operator == nil {
		// No operator chooses a port: a sink writes the batch, a source
		// sends it to every consumer (an output port each), as each of
		// them takes the source as its input.
		for port := 0; port == 0 || port < len(t.cfg.Outputs); port++ {
			if err := t.emit(port, batch); err != nil {
				return err
			}
		}
		return nil
	}
	if err := t.cfg.Operator.Process(ctx, port, batch, t.emitFn); err != nil {
		return t.operatorErr(err, fmt.Sprintf("process port %d", port), t.portNote(port))
	}
	return nil
}

// operatorErr returns err, an error of the operator's call what (e.g.
// "process port 1"), as "operator: <what>: <err>"; or, from a Named
// operator, whose errors say which operator and call failed, unchanged
// but for note (e.g. "input port 1"), if any, in parentheses at the end.
func (t *Task) operatorErr(err error, what, note string) error {
	if _, ok := t.cfg.Operator.(Named); !ok {
		return fmt.Errorf("operator: %s: %w", what, err)
	}
	if note == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, note)
}

// operatorName is how the task's own errors name its operator: "operator
// <name>" for a Named one, else "operator".
func (t *Task) operatorName() string {
	if n, ok := t.cfg.Operator.(Named); ok {
		return "operator " + n.Name()
	}
	return "operator"
}

// portNote names input port for operatorErr when the task has several:
// with one, the port says nothing.
func (t *Task) portNote(port int) string {
	if len(t.portOpen) <= 1 {
		return ""
	}
	return fmt.Sprintf("input port %d", port)
}

// emit queues an output batch on the channels its partitioner picks, or
// writes it to the sink.
func (t *Task) emit(port int, batch []byte) error {
	if t.cfg.Sink != nil {
		if err := t.cfg.Sink.Write(t.ctx, batch); err != nil {
			return err // the sink names itself and what failed
		}
		t.stats.batchesOut.Add(1)
		t.stats.recordsOut.Add(int64(stream.Records(batch).Count()))
		return nil
	}
	if port < 0 || port >= len(t.cfg.Outputs) {
		if len(t.cfg.Outputs) == 0 {
			return nil // a task without outputs drops its output
		}
		return fmt.Errorf("emit on output port %d: the task has %d", port, len(t.cfg.Outputs))
	}
	o := t.cfg.Outputs[port]
	if len(o.Senders) == 0 {
		return nil
	}
	if o.Check != nil && t.cfg.Operator != nil {
		if err := o.Check(batch); err != nil {
			return err // the operator's Process names it and the port
		}
	}
	parts, err := o.Partitioner.Partition(batch, len(o.Senders))
	if err != nil {
		return fmt.Errorf("output port %d: %w", port, err)
	}
	t.stats.batchesOut.Add(1)
	t.stats.recordsOut.Add(int64(stream.Records(batch).Count()))
	for i, b := range parts {
		if b == nil {
			continue
		}
		ch := t.portBase[port] + i
		if l, ok := t.outs[ch].sender.(stream.ElementLimiter); ok {
			if m := l.MaxElementBytes(); m > 0 && len(b) > m {
				// Pieces the channel can hold (a small or
				// debloated one, a remote one short of credit).
				pieces, err := abi.SplitBatch(b, m)
				if err != nil {
					return fmt.Errorf("output port %d: %w", port, err)
				}
				for _, p := range pieces {
					t.outq = append(t.outq, outItem{ch: ch, e: stream.Records(p)})
				}
				continue
			}
		}
		t.outq = append(t.outq, outItem{ch: ch, e: stream.Records(b)})
	}
	return nil
}

// broadcast queues a control element on every output channel.
func (t *Task) broadcast(e stream.Element) {
	for i := range t.outs {
		t.outq = append(t.outq, outItem{ch: i, e: e})
	}
}

// flush sends the output queue. A blocked send is interrupted by control
// messages and input notifications, which are serviced (checkpoint
// triggers, completions, priority barriers) before it resumes.
func (t *Task) flush(ctx context.Context) error {
	if len(t.outq) == 0 {
		return nil
	}
	// One cancellable context serves the sends of this flush until an
	// interrupt cancels it.
	var sctx context.Context
	var cancel context.CancelFunc
	if d, ok := t.handler.Deadline(); ok {
		// An alignment may time out while the output is blocked.
		tm := time.AfterFunc(d.Sub(t.clock()), t.signal)
		defer tm.Stop()
	}
	// So may a barrier queued at an input before its alignment began
	// (prioritizeLate): nothing else wakes a task blocked sending once
	// its inputs are full.
	var late *time.Timer
	armLate := func() {
		if t.lateDue.IsZero() {
			return
		}
		if late == nil {
			late = time.AfterFunc(t.lateDue.Sub(t.clock()), t.signal)
			return
		}
		late.Reset(t.lateDue.Sub(t.clock()))
	}
	armLate()
	defer func() {
		if late != nil {
			late.Stop()
		}
	}()
	defer func() {
		t.mu.Lock()
		t.sendCancel = nil
		t.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}()
	for len(t.outq) > 0 {
		if t.takeInterrupt() {
			if err := t.serviceControl(ctx); err != nil {
				return err
			}
			if err := t.checkDeadline(); err != nil {
				return err
			}
			if err := t.prioritizeBarriers(); err != nil {
				return err
			}
			if _, err := t.prioritizeLate(); err != nil {
				return err
			}
			armLate()
			if err := t.servicePriority(ctx); err != nil {
				return err
			}
			continue
		}
		if sctx == nil || sctx.Err() != nil {
			if cancel != nil {
				cancel()
			}
			sctx, cancel = context.WithCancel(ctx)
			t.mu.Lock()
			t.sendCancel = cancel
			if t.interrupted {
				cancel()
			}
			t.mu.Unlock()
		}
		it := t.outq[0]
		// The clock first: one that reads the stats sees the send's
		// start taken (a test's clock moves once the task is blocked).
		sent := t.clock()
		t.stats.begin(&t.stats.blockedSince)
		err := t.outs[it.ch].sender.Send(sctx, it.e)
		t.blockedOut.blocked(it.ch, sent, t.clock())
		t.stats.end(&t.stats.blockedSince, &t.stats.backpressured)
		if err == nil {
			t.outq[0] = outItem{}
			t.outq = t.outq[1:]
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if sctx.Err() != nil {
			continue // interrupted: service and retry
		}
		return channelErr("output", it.ch, err)
	}
	t.outq = t.outq[:0]
	return nil
}

// servicePriority takes priority barriers queued on the inputs while the
// output is blocked.
func (t *Task) servicePriority(ctx context.Context) error {
	if len(t.replay) > 0 || t.cfg.Source != nil {
		return nil
	}
	for ch, in := range t.cfg.Inputs {
		if len(t.replay) > 0 {
			// A barrier just taken released the alignment buffer (its
			// checkpoint subsumed another): the released elements come
			// before anything still queued on their channels.
			return nil
		}
		pp, ok := in.Receiver.(stream.PriorityPoller)
		if !ok || t.drained[ch] || len(t.deferred[ch]) > 0 {
			continue
		}
		d, ok, err := pp.PollPriority()
		if err != nil {
			return channelErr("input", ch, err)
		}
		if ok {
			if err := t.deliver(ctx, ch, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// serviceControl handles queued control messages.
func (t *Task) serviceControl(ctx context.Context) error {
	t.mu.Lock()
	msgs := t.ctrl
	t.ctrl = nil
	t.mu.Unlock()
	for _, m := range msgs {
		switch m.kind {
		case ctrlTrigger:
			if t.cfg.Source == nil || t.inputDone {
				continue
			}
			b := m.barrier
			un := t.unalignedBarrier(b)
			acts := []barrier.Action{{Kind: barrier.Snapshot, ID: b.ID, Barrier: b, Unaligned: un}}
			if un {
				acts = append(acts, barrier.Action{Kind: barrier.ChannelStateDone, ID: b.ID})
			}
			if err := t.exec(acts, -1, nil); err != nil {
				return err
			}
			if m.stop {
				t.stopAt = b.ID
			}
		case ctrlComplete:
			if err := t.complete(ctx, m.id); err != nil {
				return err
			}
		case ctrlAbort:
			if t.stopAt == m.id {
				t.stopAt = 0
			}
		case ctrlEndInput:
			if t.cfg.Source == nil || t.drainTo || t.sourceEnded {
				break
			}
			if m.atSet {
				if d, ok := t.cfg.Source.(DrainableSource); ok && !t.sourceClosed {
					if err := d.DrainTo(m.at); err == nil {
						t.drainTo = true
						break
					}
				}
			}
			t.endAsked = true
		case ctrlRest:
			var err error
			if w, ok := t.cfg.Sink.(Waiter); ok {
				err = w.Wait(ctx)
			}
			if err != nil {
				m.done <- fmt.Errorf("task %s: %w", t.name, err)
			}
			close(m.done)
		}
	}
	return nil
}

// complete runs the checkpoint-complete hooks.
func (t *Task) complete(ctx context.Context, id int64) error {
	if op := t.cfg.Operator; op != nil {
		if err := op.CheckpointComplete(ctx, id); err != nil {
			return t.operatorErr(err, fmt.Sprintf("checkpoint %d complete", id), fmt.Sprintf("checkpoint %d", id))
		}
	}
	if s := t.cfg.Sink; s != nil {
		t.stats.begin(&t.stats.blockedSince)
		start := t.clock()
		err := s.Commit(ctx, id)
		t.commitSpans = append(t.commitSpans, span{start, t.clock()})
		t.stats.end(&t.stats.blockedSince, &t.stats.backpressured)
		if err != nil {
			// The sink names itself and what failed: the commit of an
			// earlier checkpoint, running in the background, may be it.
			return err
		}
		if t.reportsCommits() {
			l := t.cfg.Listener.(CommitListener)
			// Off the task's loop: the report is a round trip to the
			// coordinator. One that fails only holds the next trigger
			// until the coordinator stops waiting for it; one the task's
			// end cuts is of no use.
			t.writes.Add(1)
			go func() {
				defer t.writes.Done()
				_ = l.CommitStarted(ctx, t.name, id)
			}()
		}
	}
	if s := t.cfg.Source; s != nil {
		off, ok := t.offsets[id]
		if ok {
			if err := s.CheckpointComplete(ctx, id, off); err != nil {
				return err // the source names itself and the checkpoint
			}
		}
		for k := range t.offsets {
			if k <= id {
				delete(t.offsets, k)
			}
		}
	}
	return nil
}

// endInput handles the end of a bounded source's input (InputEnded): the
// task keeps offset, the source's final one, for its snapshots, takes no
// more input, sends end-of-data downstream and tells its listener; once
// every task of the job did, the coordinator takes the job's final
// savepoint. A listener that cannot be told fails the task: the job
// recovers and its source ends again, rather than wait forever.
func (t *Task) endInput(ctx context.Context, offset []byte) error {
	t.sourceEnded = true
	if offset != nil {
		t.setOffset(offset)
	}
	return t.reportEnd(ctx)
}

// finish ends a task whose input is over: final output, end-of-partition
// downstream, the sink's last commit.
func (t *Task) finish(ctx context.Context) error {
	t.inputDone = true
	if t.cfg.Sink != nil {
		if err := t.cfg.Sink.EndOfInput(ctx); err != nil {
			return err // the sink names itself and the end of input
		}
	}
	t.broadcast(stream.EndOfPartition())
	if err := t.flush(ctx); err != nil {
		return err
	}
	t.writes.Wait()
	return nil
}

// runSource is the loop of a source task.
func (t *Task) runSource(ctx context.Context) error {
	type polled struct {
		batch, offset []byte
		err           error
	}
	pc := make(chan polled)
	limit := t.limitBatch(-1, nil) // before the first Poll
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			b, off, err := t.cfg.Source.Poll(pctx)
			select {
			case pc <- polled{b, off, err}:
			case <-pctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		stop()
		t.cfg.Source.Close() // a Poll that ignores ctx returns now
		t.sourceClosed = true
		wg.Wait()
	}()
	var held *polled // polled when a stop savepoint's barrier went out
	for {
		t.takeInterrupt()
		if err := t.serviceControl(ctx); err != nil {
			return err
		}
		if err := t.flush(ctx); err != nil {
			return err
		}
		if t.endAsked && !t.sourceEnded && t.stopAt == 0 {
			// Drained: the input ends where the task has read to. A
			// batch held for an aborted stop savepoint is not taken.
			held = nil
			t.inputDrained = true
			if err := t.endInput(ctx, nil); err != nil {
				return err
			}
			continue
		}
		var p polled
		if held != nil && t.stopAt == 0 {
			p, held = *held, nil // the stop savepoint was aborted
		} else {
			in := pc
			if t.stopAt != 0 || t.sourceEnded {
				in = nil // stopped after a savepoint's barrier, or ended: no input
			}
			select {
			case p = <-in:
				// Triggers that arrived before this batch go first.
				if err := t.serviceControl(ctx); err != nil {
					return err
				}
				if t.stopAt != 0 {
					// One was a stop savepoint's: its barrier is out, so
					// the batch waits until the savepoint is aborted.
					held = &p
					continue
				}
			case <-t.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if errors.Is(p.err, io.EOF) {
			return t.finish(ctx)
		}
		if InputEnded(p.err) {
			t.inputDrained = t.inputDrained || t.drainTo
			if err := t.endInput(ctx, p.offset); err != nil {
				return err
			}
			continue
		}
		if p.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.err // the source names itself
		}
		if n := int64(stream.Records(p.batch).Count()); n > 0 {
			t.stats.batchesIn.Add(1)
			t.stats.recordsIn.Add(n)
			if err := t.process(ctx, 0, p.batch); err != nil {
				return err
			}
			limit = t.limitBatch(limit, p.batch)
		}
		t.setOffset(p.offset)
	}
}

// setOffset notes off as the source's offset after the input the task
// processed: its next snapshot records it, and Stats reports it.
func (t *Task) setOffset(off []byte) {
	t.lastOffset = off
	t.stats.offset.Store(&off)
}

// limitBatch asks a BatchLimiter source for batches that a Paced operator
// processes in about PieceTime, and that the task's output channels hold
// (stream.ElementLimiter: the pieces the task cuts a batch into wait in
// its output queue, and a barrier behind them), judged by the size of the
// records of batch, the one polled last (nil before the first). It
// returns the limit it set; last is the one set before.
func (t *Task) limitBatch(last int, batch []byte) int {
	l, ok := t.cfg.Source.(BatchLimiter)
	if !ok {
		return last
	}
	n := 0
	if p, paced := t.cfg.Operator.(Paced); paced {
		n = max(p.RecordsWithin(PieceTime), 0)
	}
	if room := t.outputRoom(); room > 0 && len(batch) > 0 {
		if c := stream.Records(batch).Count(); c > 0 {
			m := max(room/(len(batch)/c), 1)
			if n == 0 || m < n {
				n = m
			}
		}
	}
	if n != last {
		l.LimitBatch(n)
	}
	return n
}

// outputRoom returns the bytes a batch may have so that it makes about a
// piece per output channel, when the channels limit their elements
// (stream.ElementLimiter: a local channel's half bound, a remote one's
// frame while short of credit), else 0.
func (t *Task) outputRoom() int {
	least := 0
	for _, o := range t.outs {
		if l, ok := o.sender.(stream.ElementLimiter); ok {
			if m := l.MaxElementBytes(); m > 0 && (least == 0 || m < least) {
				least = m
			}
		}
	}
	return least * len(t.outs)
}

// Stats returns the task's counters so far; it may be called from any
// goroutine, while the task runs or after.
func (t *Task) Stats() Stats {
	c := &t.stats
	s := Stats{
		RecordsIn: c.recordsIn.Load(), BatchesIn: c.batchesIn.Load(),
		RecordsOut: c.recordsOut.Load(), BatchesOut: c.batchesOut.Load(),
		Checkpoints: c.checkpoints.Load(), Declined: c.declined.Load(), InputEnded: c.ended.Load(),
		Restored: c.restored.Load(), Committed: c.committed.Load(),
		InputBufferBytes: t.debloatSize.Load(),
	}
	if p := c.offset.Load(); p != nil {
		s.SourceOffset = *p
	}
	_, s.ReportsCommits = t.cfg.Sink.(CommitReporter)
	if m, ok := t.cfg.Operator.(MemoryReporter); ok {
		s.MemoryBytes, s.MemoryLimit = m.MemoryBytes()
	}
	if c, ok := t.cfg.Operator.(CallReporter); ok {
		s.InCall, s.InCallExport = c.InCall(), c.InCallExport()
		if s.InCallExport == abi.ExportSnapshot || s.InCallExport == abi.ExportRestore {
			s.InCallCheckpoint = t.stats.stateCheckpoint.Load()
		}
	}
	for _, in := range t.cfg.Inputs {
		if q, ok := in.Receiver.(stream.QueueReporter); ok {
			s.QueuedRecords += int64(q.QueuedRecords())
		}
	}
	c.mu.Lock()
	s.Busy, s.Backpressured = c.busy, c.backpressured
	if !c.started.IsZero() {
		s.Running = time.Since(c.started)
	}
	if !c.busySince.IsZero() {
		s.Busy += time.Since(c.busySince)
	}
	if !c.blockedSince.IsZero() {
		s.Backpressured += time.Since(c.blockedSince)
	}
	c.mu.Unlock()
	return s
}

// channelErr returns err, an error of the task's input or output (dir)
// channel ch, unchanged when it names the channel (a *stream.ChannelError),
// else as "<dir> <ch>: <err>".
func channelErr(dir string, ch int, err error) error {
	if ce := (*stream.ChannelError)(nil); errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("%s %d: %w", dir, ch, err)
}
