// Package barrier holds the checkpoint barrier handlers of a task's input:
// pure state machines, with no I/O and no clock of their own. The task feeds
// them what its input channels deliver (barriers, cancel markers,
// end-of-partition, the alignment buffer's size, the time) and executes the
// Actions they return, in order: take a snapshot, abort a checkpoint,
// release the blocked channels, finish an unaligned checkpoint's channel
// state. Between events the task asks Blocked (divert a channel's elements
// into the alignment buffer) and Recording (copy a channel's elements into
// the channel state of an unaligned checkpoint while processing them).
//
// The rules follow Flink's BarrierBuffer/SingleCheckpointBarrierHandler
// (exactly-once: aligned, unaligned, aligned with timeout) and BarrierTracker
// (at-least-once).
package barrier

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/transport/stream"
)

// Mode is a task's checkpointing mode.
type Mode uint8

// Modes.
const (
	// Aligned blocks each channel after its barrier until every channel
	// delivered it (exactly-once).
	Aligned Mode = iota
	// AtLeastOnce tracks barriers and never blocks.
	AtLeastOnce
	// Unaligned snapshots at the first barrier; in-flight data becomes channel
	// state (exactly-once).
	Unaligned
	// AlignedTimeout is Aligned until the alignment takes longer than
	// Config.AlignmentTimeout, then Unaligned for that checkpoint.
	AlignedTimeout
)

// String names the mode as ParseMode reads it.
func (m Mode) String() string {
	switch m {
	case Aligned:
		return "aligned"
	case AtLeastOnce:
		return "at-least-once"
	case Unaligned:
		return "unaligned"
	case AlignedTimeout:
		return "aligned-timeout"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses a mode's String form.
func ParseMode(s string) (Mode, error) {
	for m := Aligned; m <= AlignedTimeout; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown checkpointing mode %q (want aligned, at-least-once, unaligned or aligned-timeout)", s)
}

// Config configures a handler.
type Config struct {
	// Channels is the number of input channels (at least 1).
	Channels int
	// Mode is the checkpointing mode.
	Mode Mode
	// AlignmentTimeout is AlignedTimeout's switch-over duration, measured from
	// the first barrier; 0 or less switches at once.
	AlignmentTimeout time.Duration
	// MaxBufferedBytes declines an aligned checkpoint whose alignment buffer
	// grows beyond it; 0 means no limit.
	MaxBufferedBytes int64
}

// ActionKind tells what an Action asks of the task.
type ActionKind uint8

// Action kinds.
const (
	// Snapshot: snapshot the operator for Action.Barrier and forward the
	// barrier on every output — as a priority element when Action.Unaligned.
	// An unaligned snapshot starts channel-state collection: elements of
	// channels for which Recording is true are processed and recorded until
	// ChannelStateDone.
	Snapshot ActionKind = iota + 1
	// Abort: checkpoint Action.ID will not complete here; report it
	// (Action.Abort, Action.Reason) and forward a cancel marker.
	Abort
	// Release: the blocked channels are free; the alignment buffer's
	// elements are processed, in order, before new input.
	Release
	// ChannelStateDone: every channel delivered barrier Action.ID (or ended);
	// the unaligned checkpoint's channel state is complete.
	ChannelStateDone
)

// String names the action kind.
func (k ActionKind) String() string {
	switch k {
	case Snapshot:
		return "snapshot"
	case Abort:
		return "abort"
	case Release:
		return "release"
	case ChannelStateDone:
		return "channel-state-done"
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// AbortKind tells why a checkpoint was aborted.
type AbortKind uint8

// Abort kinds.
const (
	// Subsumed: a newer checkpoint's barrier arrived first.
	Subsumed AbortKind = iota + 1
	// Cancelled: a cancel marker arrived.
	Cancelled
	// Declined: the task refused it (alignment buffer over its limit).
	Declined
)

// String names the abort kind.
func (k AbortKind) String() string {
	switch k {
	case Subsumed:
		return "subsumed"
	case Cancelled:
		return "cancelled"
	case Declined:
		return "declined"
	}
	return fmt.Sprintf("abort(%d)", uint8(k))
}

// Action is one thing the task must do.
type Action struct {
	Kind ActionKind
	// ID is the checkpoint concerned.
	ID int64
	// Barrier is the barrier to snapshot for and forward (Snapshot).
	Barrier stream.Barrier
	// Unaligned: the snapshot is unaligned (Snapshot).
	Unaligned bool
	// TimedOut: an aligned-with-timeout checkpoint switched to unaligned
	// (Snapshot).
	TimedOut bool
	// Alignment is the time from the first barrier to this snapshot
	// (Snapshot).
	Alignment time.Duration
	// StartDelay is the time from the barrier's trigger timestamp to the
	// first barrier seen (Snapshot).
	StartDelay time.Duration
	// Abort and Reason explain an Abort.
	Abort  AbortKind
	Reason string
}

// String renders the action for tests and logs, e.g. "snapshot(3, unaligned)".
func (a Action) String() string {
	switch a.Kind {
	case Snapshot:
		if a.Unaligned {
			return fmt.Sprintf("snapshot(%d, unaligned)", a.ID)
		}
		return fmt.Sprintf("snapshot(%d)", a.ID)
	case Abort:
		return fmt.Sprintf("abort(%d, %s: %s)", a.ID, a.Abort, a.Reason)
	case Release:
		return "release"
	case ChannelStateDone:
		return fmt.Sprintf("channel-state-done(%d)", a.ID)
	}
	return a.Kind.String()
}

// Handler is a task's barrier state machine. It is not safe for concurrent
// use: the task goroutine owns it.
type Handler interface {
	// Barrier handles barrier b delivered by channel ch.
	Barrier(ch int, b stream.Barrier, now time.Time) []Action
	// Cancel handles a cancel marker for checkpoint id delivered by ch.
	Cancel(ch int, id int64, now time.Time) []Action
	// EndOfPartition handles the end of channel ch.
	EndOfPartition(ch int, now time.Time) []Action
	// Buffered reports the alignment buffer's size in bytes after it grew.
	Buffered(bytes int64, now time.Time) []Action
	// Tick reports the time; call it when Deadline has passed.
	Tick(now time.Time) []Action
	// Deadline is when Tick must be called next, if at all.
	Deadline() (time.Time, bool)
	// Blocked reports whether channel ch's elements go into the alignment
	// buffer instead of being processed.
	Blocked(ch int) bool
	// Recording reports whether channel ch's elements are, while processed,
	// recorded as channel state of unaligned checkpoint id.
	Recording(ch int) (id int64, ok bool)
	// Pending returns the checkpoint in progress (aligning or collecting
	// channel state), if any.
	Pending() (id int64, ok bool)
}

// New returns the handler for cfg.Mode.
func New(cfg Config) Handler {
	if cfg.Channels < 1 {
		cfg.Channels = 1
	}
	if cfg.Mode == AtLeastOnce {
		return NewTracker(cfg.Channels)
	}
	return NewAligner(cfg)
}

func startDelay(b stream.Barrier, now time.Time) time.Duration {
	if b.Timestamp <= 0 {
		return 0
	}
	d := now.Sub(time.UnixMilli(b.Timestamp))
	if d < 0 {
		return 0
	}
	return d
}
