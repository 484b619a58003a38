// Package jobspec reads and validates weir job specs: a YAML file naming a
// job's sources, operators, sinks, checkpointing and restart strategy.
//
// Decoding is strict — an unknown option is an error — and every error
// names the file, the line and the field path, for example
//
//	job.yaml:14: operators[1].inputs[0].from: unknown operator or source "inp" (the job has: events, parse, count)
//
// All errors of a spec are reported together as an Errors value.
// coordinator/README.md documents every field and its default.
package jobspec

import (
	"fmt"
	"strconv"
	"time"

	"github.com/weirhq/weir/transport/source"
)

// Source kinds.
const (
	KindNATS      = "nats"
	KindJetStream = "jetstream"
)

// Where a source takes each record's key from (Source.Key).
const (
	// KeyFromHeader takes the key from the message's Weir-Key header; a
	// message without it gives an empty key. The default.
	KeyFromHeader = "header"
	// KeyFromSubject takes the key from the message's full subject, e.g.
	// orders.eu.1234 (for a jetstream source, the subject the stream
	// stored), whatever headers it has.
	KeyFromSubject = "subject"
)

// Partitioners: how a producer's records are spread over a consumer's
// parallel instances.
const (
	// Forward sends instance i's output to instance i of the consumer; both
	// must have the same parallelism.
	Forward = "forward"
	// KeyHash sends a record to instance hash(key) mod parallelism.
	KeyHash = "key"
	// Broadcast sends every record to every instance.
	Broadcast = "broadcast"
	// RoundRobin spreads batches over the instances in turn.
	RoundRobin = "round-robin"
)

// Sink delivery guarantees.
const (
	AtMostOnce  = "at-most-once"
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)

// JetStream sink publish modes (Sink.Publish); the sink package
// describes each.
const (
	PublishAuto   = "auto"
	PublishFast   = "fast"
	PublishAtomic = "atomic"
	PublishAsync  = "async"
)

// Checkpointing modes.
const (
	// ModeExactlyOnce takes aligned checkpoints (optionally switching to
	// unaligned after Checkpointing.AlignedTimeout).
	ModeExactlyOnce = "exactly-once"
	// ModeAtLeastOnce tracks barriers without blocking inputs.
	ModeAtLeastOnce = "at-least-once"
	// ModeUnaligned takes unaligned checkpoints: barriers overtake in-flight
	// data, which is stored as channel state.
	ModeUnaligned = "unaligned"
)

// The shortest checkpointing.interval and checkpointing.timeout.
const (
	// MinCheckpointInterval is Flink's shortest checkpoint interval too:
	// a job triggered more often than this (a trial's 1ns ran 37
	// checkpoints a second) spends its time checkpointing. A job takes no
	// periodic checkpoints with disabled: true, not with an interval of 0.
	MinCheckpointInterval = 10 * time.Millisecond
	// MinCheckpointTimeout is the shortest checkpoint timeout: a
	// checkpoint of a job that keeps up takes 2–20ms on one machine
	// (barriers through every task, snapshots stored, acks and metadata
	// written), more across a network or under load, and a timeout
	// shorter than that expires every checkpoint (a trial's 1ms failed
	// the job over in a loop).
	MinCheckpointTimeout = 50 * time.Millisecond
)

// The hints after a checkpointing.interval or timeout refused as too
// short (MinCheckpointInterval, MinCheckpointTimeout).
const (
	intervalHint = "checkpoint interval (as in Flink); to take no periodic checkpoints, write disabled: true"
	timeoutHint  = "checkpoint timeout: a checkpoint takes a few ms even on one machine; the default is 60s"
)

// checkpointingProblem is a checkpointing option at fault (its path) and
// why.
type checkpointingProblem struct{ path, msg string }

// checkpointingConflicts returns the options of c that contradict
// another one: an aligned-timeout that the checkpoint's timeout cuts
// before it takes effect, concurrent checkpoints that are unaligned
// (which abort each other at a task) or held one at a time by a
// min-pause. Parse and Check refuse them alike.
func checkpointingConflicts(c Checkpointing) []checkpointingProblem {
	var out []checkpointingProblem
	if c.AlignedTimeout > 0 && c.Timeout > 0 && c.AlignedTimeout >= c.Timeout {
		out = append(out, checkpointingProblem{"checkpointing.aligned-timeout", fmt.Sprintf(
			"%s is not less than checkpointing.timeout (%s): a checkpoint expires before it turns unaligned; make it shorter than the timeout, or 0 for never",
			c.AlignedTimeout, c.Timeout)})
	}
	switch {
	case c.MaxConcurrent <= 1:
	case c.Mode == ModeUnaligned || c.Mode == ModeExactlyOnce && c.AlignedTimeout > 0:
		how := "mode: unaligned"
		if c.Mode != ModeUnaligned {
			how = "aligned-timeout turns them so"
		}
		out = append(out, checkpointingProblem{"checkpointing.max-concurrent", fmt.Sprintf(
			"%d: unaligned checkpoints (%s) are taken one at a time, as in Flink: a task records one checkpoint's in-flight data at a time, and the next one's barrier, which nothing holds back, aborts it there; leave max-concurrent out (1)",
			c.MaxConcurrent, how)})
	case c.MinPause > 0:
		out = append(out, checkpointingProblem{"checkpointing.max-concurrent", fmt.Sprintf(
			"%d has no effect with min-pause %s: each checkpoint waits for the one before to end, and min-pause more, so one is pending at a time (as in Flink); leave max-concurrent out (1), or min-pause",
			c.MaxConcurrent, c.MinPause)})
	}
	return out
}

// Restart strategies.
const (
	RestartFixedDelay         = "fixed-delay"
	RestartExponentialBackoff = "exponential-backoff"
	RestartNone               = "none"
)

// Defaults applied by Parse to fields the spec leaves out.
const (
	DefaultInterval          = 10 * time.Second
	DefaultTimeout           = 60 * time.Second
	DefaultMaxConcurrent     = 1
	DefaultRetained          = 3
	DefaultRestartDelay      = time.Second
	DefaultRestartAttempts   = 10
	DefaultBackoffInitial    = time.Second
	DefaultBackoffMax        = time.Minute
	DefaultBackoffMultiplier = 2.0
)

// MaxRetained is the most completed checkpoints checkpointing.retained
// may keep: each one is stored, listed (weir checkpoint ls) and removed
// (weir job rm) on its own, and thousands at a short interval fill the
// checkpoint bucket and make a removal take minutes. Older restore points
// are savepoints' job, which retention never discards.
const MaxRetained = 1000

// Limits on the size of a job. Parse refuses more; so does plan.Build,
// for a spec that did not come from Parse.
const (
	// MaxParallelism is the most parallel instances of one source,
	// operator or sink (as many as a source's offsets can be merged from
	// on a rescale).
	MaxParallelism = 1 << 16
	// MaxPartitions is the most partitions a partitioned JetStream source
	// can name.
	MaxPartitions = 1 << 16
)

// Spec is a parsed and validated job spec. It is plain data and
// JSON-serializable: the coordinator ships it to workers in deploy messages.
type Spec struct {
	Name          string        `json:"name"`
	Sources       []Source      `json:"sources"`
	Operators     []Operator    `json:"operators"`
	Sinks         []Sink        `json:"sinks"`
	Checkpointing Checkpointing `json:"checkpointing"`
	Restart       Restart       `json:"restart"`
	Channels      Channels      `json:"channels"`
}

// Channels configures the channels between the job's tasks.
type Channels struct {
	// Buffer bounds the bytes queued on each channel between two tasks,
	// in flight and at the receiver; 0 means the worker's defaults (1 MiB
	// between tasks of one worker; up to 4 MiB between workers, less when
	// many channels share a worker's connection). Under backpressure an
	// aligned barrier waits behind what the channels hold, and an
	// unaligned checkpoint stores it: a smaller buffer shortens the one
	// and shrinks the other, for less throughput where records are large
	// or workers far apart. Between MinChannelBuffer and MaxChannelBuffer.
	Buffer int64 `json:"buffer,omitempty"`
	// Debloat is how long a task should take to work through what its
	// input channels hold: each task measures how fast it takes input
	// while it works and sizes its input channels' buffers to that much
	// (Flink's buffer debloating), between 16 KiB (a remote channel: its
	// largest frame) and Buffer (or the workers' default). A task that
	// keeps up keeps full-size buffers; behind a slow task an aligned
	// barrier waits about Debloat per task instead of behind full
	// buffers, and an unaligned checkpoint stores about that much. 0
	// means DefaultDebloat; DebloatOff keeps the buffers at their size.
	Debloat time.Duration `json:"debloat,omitempty"`
}

// DefaultDebloat is Channels.Debloat's default, Flink's too; DebloatOff
// turns debloating off; MinDebloat is the least target.
const (
	DefaultDebloat = time.Second
	DebloatOff     = time.Duration(-1)
	MinDebloat     = 10 * time.Millisecond
)

// DebloatTarget returns the debloating target the channels run with: 0
// when off.
func (c Channels) DebloatTarget() time.Duration {
	switch {
	case c.Debloat < 0:
		return 0
	case c.Debloat == 0:
		return DefaultDebloat
	}
	return c.Debloat
}

// Bounds of Channels.Buffer: a channel's frames are at most half of it,
// and a worker's connection holds up to 64 MiB of its channels' data.
const (
	MinChannelBuffer = 16 << 10
	MaxChannelBuffer = 16 << 20
)

// CheckChannelBuffer reports why a channel buffer of n bytes cannot be
// honoured, or nil: 0 (the workers' defaults) and MinChannelBuffer to
// MaxChannelBuffer pass.
func CheckChannelBuffer(n int64) error {
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("must not be negative, got %d", n)
	case n < MinChannelBuffer:
		return fmt.Errorf("%s is less than %s (a frame of the channel must fit in half of it)", FormatSize(n), FormatSize(MinChannelBuffer))
	case n > MaxChannelBuffer:
		return fmt.Errorf("%s is more than %s (a worker's connection holds 64 MiB of its channels' data)", FormatSize(n), FormatSize(MaxChannelBuffer))
	}
	return nil
}

// Source reads records from NATS.
type Source struct {
	Name string `json:"name"`
	// Kind is KindNATS (core subject) or KindJetStream (a stream).
	Kind string `json:"kind"`
	// Subject is the core NATS subject (nats); for jetstream, an optional
	// alias of Filter.
	Subject string `json:"subject,omitempty"`
	// Stream is the JetStream stream (jetstream).
	Stream string `json:"stream,omitempty"`
	// Filter is an optional subject filter within Stream (jetstream).
	Filter string `json:"filter,omitempty"`
	// Partitions, with PartitionFilter, says the stream's subjects carry a
	// partition number 0..Partitions-1 (jetstream): the subtasks then split
	// the partitions among themselves and the server sends each only its
	// own. Without, every subtask reads the whole stream and keeps its
	// share by a hash of the subject.
	Partitions int `json:"partitions,omitempty"`
	// PartitionFilter is the subject filter of one partition with {p} for
	// its number, e.g. "orders.{p}.>".
	PartitionFilter string `json:"partition_filter,omitempty"`
	// Key is where each record's key comes from: KeyFromHeader (the
	// default, which Parse fills in) or KeyFromSubject, for either kind.
	// Keyed by subject, an operator sees the subject and a partition: key
	// edge or keyed state can use it.
	Key string `json:"key,omitempty"`
	// Start is where a jetstream source reads from when the job has no
	// checkpoint to restore: StartAll (the stream's first message, also
	// when empty), StartNew (the first message stored after the job
	// started), a stream sequence ("1042"), or an RFC 3339 time (the first
	// message stored at or after it). See ParseStart.
	Start string `json:"start,omitempty"`
	// StartSequence is Start resolved to a stream sequence; the
	// coordinator sets it when it starts the job (0: the beginning), so
	// that every subtask, and every restart before the first checkpoint,
	// starts at the same message. A restore continues from the
	// checkpoint's offsets instead.
	StartSequence uint64 `json:"start_sequence,omitempty"`
	// Stop bounds a jetstream source (empty: it never ends): StopEnd (the
	// stream's last message when the job started), a stream sequence
	// ("5000", which the stream may not have reached yet), or an RFC 3339
	// time (the last message stored at or before it). Once every source
	// of a job read up to its stop, the job takes a final savepoint,
	// commits the sinks' output with it, and finishes. See ParseStop.
	Stop string `json:"stop,omitempty"`
	// StopSequence is Stop resolved to the last stream sequence the
	// source reads (0: unbounded); the coordinator sets it when it starts
	// the job, so that every subtask and every restart stops at the same
	// message.
	StopSequence uint64 `json:"stop_sequence,omitempty"`
	// PendingMessages and PendingBytes bound what a nats source task's
	// subscription buffers while the job takes messages slower than they
	// come (0: DefaultPendingMessages, DefaultPendingBytes). Core NATS has
	// no flow control: past either limit the NATS client drops what comes,
	// and the task counts it (weir job status, Prometheus). The buffer is
	// memory of the worker that runs the task, and a cancel, a stop or a
	// failure discards what it holds.
	PendingMessages int   `json:"pending_messages,omitempty"`
	PendingBytes    int64 `json:"pending_bytes,omitempty"`
	Parallelism     int   `json:"parallelism"`
	Line            int   `json:"line,omitempty"`
}

// The pending limits of a nats source (Source.PendingMessages,
// PendingBytes): the defaults are nats.go's for a subscription, and the
// bounds keep a typo from taking a worker's memory, or a limit from
// dropping every message of the server's default max_payload (1 MiB).
const (
	DefaultPendingMessages = source.DefaultCorePendingMsgs
	DefaultPendingBytes    = source.DefaultCorePendingBytes
	MaxPendingMessages     = 100_000_000
	MinPendingBytes        = 1 << 20
	MaxPendingBytes        = 16 << 30
)

// CheckPendingBytes reports why a nats source's pending-bytes of n cannot
// be honoured, or nil: 0 (the default) and MinPendingBytes to
// MaxPendingBytes pass.
func CheckPendingBytes(n int64) error {
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("must not be negative, got %d", n)
	case n < MinPendingBytes:
		return fmt.Errorf("%s is less than %s: a message of the server's default max_payload would never fit, and every one would be dropped", FormatSize(n), FormatSize(MinPendingBytes))
	case n > MaxPendingBytes:
		return fmt.Errorf("%s is more than %s: the buffer is the worker's memory", FormatSize(n), FormatSize(MaxPendingBytes))
	}
	return nil
}

// StopEnd, as a Source.Stop, bounds a jetstream source at the stream's
// last message when the job started.
const StopEnd = "end"

// StopPoint is a parsed Source.Stop: the zero value is no stop.
type StopPoint struct {
	// End is StopEnd.
	End bool
	// Seq, when not 0, is the last stream sequence to read.
	Seq uint64
	// Time, when not zero, stops after the last message stored at or
	// before it.
	Time time.Time
}

// Bounded reports whether p stops the source at all.
func (p StopPoint) Bounded() bool { return p.End || p.Seq != 0 || !p.Time.IsZero() }

// ParseStop reads a Source.Stop: "" (no stop), StopEnd, a stream
// sequence of 1 or more, or an RFC 3339 time.
func ParseStop(s string) (StopPoint, error) {
	switch s {
	case "":
		return StopPoint{}, nil
	case StopEnd:
		return StopPoint{End: true}, nil
	}
	if seq, err := strconv.ParseUint(s, 10, 64); err == nil && seq > 0 {
		return StopPoint{Seq: seq}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return StopPoint{Time: t}, nil
	}
	return StopPoint{}, fmt.Errorf("want end, a stream sequence (1 or more) or an RFC 3339 time (2026-11-30T09:00:00Z), got %q", s)
}

// Source.Start values besides a sequence and a time.
const (
	// StartAll reads a stream from its first message.
	StartAll = "all"
	// StartNew reads the messages stored after the job started.
	StartNew = "new"
)

// StartPoint is a parsed Source.Start: the zero value is StartAll.
type StartPoint struct {
	// New is StartNew.
	New bool
	// Seq, when not 0, is a stream sequence to start at.
	Seq uint64
	// Time, when not zero, starts at the first message stored at or
	// after it.
	Time time.Time
}

// ParseStart reads a Source.Start: "" or StartAll, StartNew, a stream
// sequence of 1 or more, or an RFC 3339 time.
func ParseStart(s string) (StartPoint, error) {
	switch s {
	case "", StartAll:
		return StartPoint{}, nil
	case StartNew:
		return StartPoint{New: true}, nil
	}
	if seq, err := strconv.ParseUint(s, 10, 64); err == nil && seq > 0 {
		return StartPoint{Seq: seq}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return StartPoint{Time: t}, nil
	}
	return StartPoint{}, fmt.Errorf("want all, new, a stream sequence (1 or more) or an RFC 3339 time (2026-11-30T09:00:00Z), got %q", s)
}

// Operator runs a WebAssembly module.
type Operator struct {
	Name string `json:"name"`
	// Module is the module reference as written: NAME@VERSION, NAME,
	// sha256:DIGEST or a file path (see coordinator/modref). ParseFile
	// makes a relative file path relative to the spec's directory.
	Module      string `json:"module"`
	Parallelism int    `json:"parallelism"`
	// Config is handed to weir_init: a YAML string verbatim, any other YAML
	// value as compact JSON. Empty when absent.
	Config []byte  `json:"config,omitempty"`
	Limits Limits  `json:"limits"`
	Inputs []Input `json:"inputs"`
	Line   int     `json:"line,omitempty"`
}

// Limits bound one operator instance.
type Limits struct {
	// Memory is the maximum linear memory in bytes; 0 means the host's
	// default. Otherwise it is a whole number of wasm pages between
	// MinMemory and MaxMemory (see CheckMemory).
	Memory int64 `json:"memory,omitempty"`
	// Timeout bounds a single call into the module; 0 means the host's
	// default. Otherwise it is at least MinTimeout (see CheckTimeout).
	Timeout time.Duration `json:"timeout,omitempty"`
	// SnapshotTimeout bounds a single weir_snapshot or weir_restore call,
	// which writes or reads the whole state and takes longer the more
	// keys it holds; 0 means the host's default (60s, or Timeout when
	// that is longer). Otherwise it is at least MinTimeout (see
	// CheckTimeout).
	SnapshotTimeout time.Duration `json:"snapshot_timeout,omitempty"`
	// LogRate bounds the lines each instance logs a second (weir.log,
	// stdout and stderr together; ten seconds' worth may come at once);
	// those over it are dropped and counted in a warning. 0 means the
	// host's default (100), and it is at most MaxLogRate.
	LogRate int `json:"log_rate,omitempty"`
}

// MaxLogRate is the highest limits.log-rate: lines a second, each up to
// 4 KiB.
const MaxLogRate = 100_000

// The operator limits the host (host/wasm) can honour as written.
const (
	// WasmPage is the unit of wasm linear memory (host/wasm.PageSize):
	// a memory limit is a whole number of 64 KiB pages.
	WasmPage = 64 << 10
	// MinMemory is the smallest memory limit: one wasm page.
	MinMemory = WasmPage
	// MaxMemory is the largest memory limit: all a wasm32 module can
	// address (65536 pages, host/wasm.MaxMemoryBytes). The host would cap
	// a larger one silently.
	MaxMemory = 4 << 30
	// MinTimeout is the shortest call timeout. The host checks call
	// deadlines every 10ms (host/wasm.DefaultWatchdogInterval) and
	// interrupts a call at the first check past its timeout, so a call
	// runs for the timeout rounded up to 10ms, plus up to 10ms more: below
	// 10ms, every timeout would act as 10ms.
	MinTimeout = 10 * time.Millisecond
)

// CheckMemory reports why a memory limit of n bytes cannot be honoured as
// written, or nil: 0 (the host's default) and whole numbers of wasm pages
// from MinMemory to MaxMemory pass.
func CheckMemory(n int64) error {
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("must not be negative, got %d", n)
	case n > MaxMemory:
		return fmt.Errorf("%s is more than a wasm32 module can address (%s)", FormatSize(n), FormatSize(MaxMemory))
	case n < MinMemory:
		return fmt.Errorf("%s is less than one wasm page (%s); leave it out for the host's default", FormatSize(n), FormatSize(MinMemory))
	case n%WasmPage != 0:
		down := n / WasmPage * WasmPage
		return fmt.Errorf("%s is not a whole number of %s wasm pages (the host would use %s; say %s or %s)",
			FormatSize(n), FormatSize(WasmPage), FormatSize(down), FormatSize(down), FormatSize(down+WasmPage))
	}
	return nil
}

// CheckTimeout reports why a call timeout of d cannot be honoured as
// written, or nil: 0 (the host's default) and MinTimeout or more pass.
func CheckTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < 0:
		return fmt.Errorf("must not be negative, got %s", d)
	case d < MinTimeout:
		return fmt.Errorf("%s is below the %s the host can time a call to (it checks call deadlines every %s)", d, MinTimeout, MinTimeout)
	}
	return nil
}

// FormatSize writes n bytes in the largest binary unit that divides it
// (GiB, MiB, KiB), or in bytes.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Input connects a consumer's input port to a producer's output port.
// Input ports are numbered in the order they are listed; output ports as
// OutputReaders says.
type Input struct {
	// From names a source or an operator.
	From string `json:"from"`
	// Partition is Forward, KeyHash, Broadcast or RoundRobin. Parse fills
	// in Forward when both sides have the same parallelism, RoundRobin
	// otherwise.
	Partition string `json:"partition"`
	// Port, when set, is the output port of the producer (an operator)
	// that this input reads: the port the operator emits these records
	// to. Inputs without take the ports left in spec order
	// (OutputReaders), so a reader added later does not move the others
	// when they give theirs.
	Port *int `json:"port,omitempty"`
	Line int  `json:"line,omitempty"`
}

// Sink writes records to NATS.
type Sink struct {
	Name string `json:"name"`
	// Kind is KindNATS or KindJetStream.
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	// Stream is the JetStream stream the subject belongs to (jetstream).
	Stream string `json:"stream,omitempty"`
	// Guarantee defaults to ExactlyOnce for jetstream and AtMostOnce for
	// nats; nats sinks only support AtMostOnce.
	Guarantee string `json:"guarantee"`
	// Publish is how a jetstream sink publishes: for exactly-once, a
	// completed checkpoint's output — PublishAuto (default: the best the
	// stream allows), PublishFast, PublishAtomic or PublishAsync; for
	// at-least-once, records as they come — PublishAuto (atomic batches
	// on a server that fsyncs every write where the stream allows atomic
	// publish, else fast where it allows batched publish, else async),
	// PublishFast, PublishAtomic or PublishAsync.
	Publish string `json:"publish,omitempty"`
	// AckTimeout is how long a jetstream sink waits for the server to
	// acknowledge what it published before it fails the checkpoint
	// (at-least-once) or the commit (exactly-once); 0: the sink's default,
	// 10s exactly-once and 30s at-least-once.
	AckTimeout time.Duration `json:"ack_timeout,omitempty"`
	// Timestamps publishes each record's timestamp in the Weir-Time
	// header (sink.TimeHeader), which sources read: a job reading the
	// output takes the event time this one gave. Off by default: the
	// header costs bytes on every message.
	Timestamps  bool  `json:"timestamps,omitempty"`
	Parallelism int   `json:"parallelism"`
	Input       Input `json:"input"`
	Line        int   `json:"line,omitempty"`
}

// Checkpointing configures the checkpoint coordinator.
type Checkpointing struct {
	// Mode is ModeExactlyOnce (default), ModeAtLeastOnce or ModeUnaligned.
	Mode string `json:"mode"`
	// AlignedTimeout, with ModeExactlyOnce, switches a task to unaligned
	// when alignment takes longer than this; 0 disables.
	AlignedTimeout time.Duration `json:"aligned_timeout,omitempty"`
	// Interval between checkpoint triggers, at least
	// MinCheckpointInterval; 0 is DefaultInterval (Check; Parse refuses a
	// written 0): Disabled takes no periodic checkpoints.
	Interval time.Duration `json:"interval"`
	// Timeout after which a pending checkpoint is aborted, at least
	// MinCheckpointTimeout; 0 is DefaultTimeout.
	Timeout time.Duration `json:"timeout"`
	// MinPause is the least time between the end of one checkpoint and the
	// trigger of the next: more than 0, it allows one pending at a time
	// (MaxConcurrent 1).
	MinPause time.Duration `json:"min_pause,omitempty"`
	// MaxConcurrent is the most checkpoints pending at once: 1 for
	// unaligned ones (ModeUnaligned, or AlignedTimeout) and with a
	// MinPause.
	MaxConcurrent int `json:"max_concurrent"`
	// TolerableFailures is how many consecutive checkpoint failures the job
	// tolerates; one more fails the job over.
	TolerableFailures int `json:"tolerable_failures"`
	// Retained is how many completed checkpoints are kept, at most
	// MaxRetained.
	Retained int `json:"retained"`
	// Disabled turns periodic checkpoints off (savepoints still work).
	Disabled bool `json:"disabled,omitempty"`
}

// Restart is the restart strategy applied when a job fails over.
type Restart struct {
	// Strategy is RestartExponentialBackoff (default), RestartFixedDelay
	// (also the default of a restart block that gives a Delay) or
	// RestartNone.
	Strategy string `json:"strategy"`
	// Delay between restarts (fixed-delay). Always written in JSON: a
	// fixed-delay spec decoded without one gets DefaultRestartDelay.
	Delay time.Duration `json:"delay"`
	// Initial, Max and Multiplier shape exponential backoff: the n-th
	// consecutive restart waits min(Initial*Multiplier^(n-1), Max).
	Initial    time.Duration `json:"initial,omitempty"`
	Max        time.Duration `json:"max,omitempty"`
	Multiplier float64       `json:"multiplier,omitempty"`
	// Attempts is the most consecutive restarts without a completed
	// checkpoint in between that read on from the one the attempt
	// restored (one taken again where the JetStream sources were restored
	// does not count); one more failure fails the job.
	Attempts int `json:"attempts"`
}

// RestartDelay returns how long to wait before the n-th consecutive restart
// (n counts from 1).
func (r Restart) RestartDelay(n int) time.Duration {
	switch r.Strategy {
	case RestartExponentialBackoff:
		d := float64(r.Initial)
		for i := 1; i < n; i++ {
			d *= r.Multiplier
			if d >= float64(r.Max) {
				return r.Max
			}
		}
		if time.Duration(d) > r.Max {
			return r.Max
		}
		return time.Duration(d)
	case RestartNone:
		return 0
	}
	return r.Delay
}

// Producer returns the source or operator named name, as its kind
// ("source" or "operator") and parallelism; ok is false when none exists.
func (s *Spec) Producer(name string) (kind string, parallelism int, ok bool) {
	for _, src := range s.Sources {
		if src.Name == name {
			return "source", src.Parallelism, true
		}
	}
	for _, op := range s.Operators {
		if op.Name == name {
			return "operator", op.Parallelism, true
		}
	}
	return "", 0, false
}
