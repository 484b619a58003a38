package barrier

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/transport/stream"
)

// State is an Aligner's state.
type State uint8

// Aligner states.
const (
	// Idle: no checkpoint in progress.
	Idle State = iota
	// Aligning: an aligned checkpoint waits for barriers; channels that
	// delivered theirs are blocked.
	Aligning
	// Collecting: an unaligned checkpoint was snapshotted; channels still
	// without its barrier are recorded as channel state.
	Collecting
)

// String names the state.
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Aligning:
		return "aligning"
	case Collecting:
		return "collecting"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Aligner is the exactly-once handler for the Aligned, Unaligned and
// AlignedTimeout modes. It runs one checkpoint at a time: a newer barrier
// subsumes the one in progress.
type Aligner struct {
	cfg     Config
	state   State
	current int64 // latest checkpoint id seen (started, completed or aborted)
	barrier stream.Barrier
	start   time.Time
	delay   time.Duration
	arrived []bool
	closed  []bool
}

// NewAligner returns an exactly-once handler. cfg.Mode must not be
// AtLeastOnce.
func NewAligner(cfg Config) *Aligner {
	if cfg.Channels < 1 {
		cfg.Channels = 1
	}
	return &Aligner{cfg: cfg, current: -1, arrived: make([]bool, cfg.Channels), closed: make([]bool, cfg.Channels)}
}

// State returns the current state.
func (a *Aligner) State() State { return a.state }

// Current returns the latest checkpoint id seen, -1 before the first.
func (a *Aligner) Current() int64 { return a.current }

// unalignedFor reports whether barrier b starts an unaligned snapshot.
func (a *Aligner) unalignedFor(b stream.Barrier) bool {
	if b.Type == stream.Savepoint {
		return false
	}
	switch a.cfg.Mode {
	case Unaligned:
		return true
	case AlignedTimeout:
		return b.Unaligned || a.cfg.AlignmentTimeout <= 0
	}
	return false
}

func (a *Aligner) complete() bool {
	for c := range a.arrived {
		if !a.arrived[c] && !a.closed[c] {
			return false
		}
	}
	return true
}

func (a *Aligner) reset() {
	a.state = Idle
	clear(a.arrived)
}

// Barrier handles barrier b from channel ch.
func (a *Aligner) Barrier(ch int, b stream.Barrier, now time.Time) []Action {
	if ch < 0 || ch >= len(a.arrived) || a.closed[ch] {
		return nil
	}
	id := b.ID
	if a.cfg.Channels == 1 { // fast path: nothing to align
		if id <= a.current {
			return nil
		}
		a.current = id
		un := a.unalignedFor(b)
		acts := []Action{{Kind: Snapshot, ID: id, Barrier: b, Unaligned: un, StartDelay: startDelay(b, now)}}
		if un {
			acts = append(acts, Action{Kind: ChannelStateDone, ID: id})
		}
		return acts
	}
	switch {
	case id < a.current:
		return nil // stale: from a subsumed or cancelled checkpoint
	case id == a.current:
		if a.state == Idle || a.arrived[ch] {
			return nil // completed or aborted already, or a duplicate
		}
		a.arrived[ch] = true
		if a.state == Aligning && a.cfg.Mode == AlignedTimeout && b.Unaligned && b.Type != stream.Savepoint {
			// Upstream switched to unaligned: so do we.
			return a.switchToUnaligned(now, false)
		}
		return a.maybeComplete(now)
	}
	// id > current: a new checkpoint; it subsumes the one in progress.
	var acts []Action
	if a.state != Idle {
		acts = append(acts, Action{Kind: Abort, ID: a.current, Abort: Subsumed,
			Reason: fmt.Sprintf("subsumed by checkpoint %d", id)})
		if a.state == Aligning {
			acts = append(acts, Action{Kind: Release})
		}
		a.reset()
	}
	a.current = id
	a.barrier = b
	a.start = now
	a.delay = startDelay(b, now)
	a.arrived[ch] = true
	if a.unalignedFor(b) {
		a.state = Collecting
		acts = append(acts, Action{Kind: Snapshot, ID: id, Barrier: b, Unaligned: true, StartDelay: a.delay})
		return append(acts, a.maybeComplete(now)...)
	}
	a.state = Aligning
	return append(acts, a.maybeComplete(now)...)
}

// maybeComplete finishes the checkpoint in progress once every channel
// delivered its barrier or ended.
func (a *Aligner) maybeComplete(now time.Time) []Action {
	if a.state == Idle || !a.complete() {
		return nil
	}
	id := a.current
	if a.state == Collecting {
		a.reset()
		return []Action{{Kind: ChannelStateDone, ID: id}}
	}
	a.reset()
	return []Action{
		{Kind: Snapshot, ID: id, Barrier: a.barrier, Alignment: now.Sub(a.start), StartDelay: a.delay},
		{Kind: Release},
	}
}

func (a *Aligner) switchToUnaligned(now time.Time, timedOut bool) []Action {
	a.state = Collecting
	b := a.barrier
	b.Unaligned = true
	acts := []Action{
		{Kind: Snapshot, ID: a.current, Barrier: b, Unaligned: true, TimedOut: timedOut,
			Alignment: now.Sub(a.start), StartDelay: a.delay},
		// The blocked channels' buffered data follows their barrier: it is
		// processed after the snapshot and is not channel state.
		{Kind: Release},
	}
	return append(acts, a.maybeComplete(now)...)
}

// Cancel handles a cancel marker for checkpoint id.
func (a *Aligner) Cancel(ch int, id int64, now time.Time) []Action {
	if ch < 0 || ch >= len(a.arrived) {
		return nil
	}
	if a.cfg.Channels == 1 {
		if id <= a.current {
			return nil
		}
		a.current = id
		return []Action{{Kind: Abort, ID: id, Abort: Cancelled, Reason: fmt.Sprintf("checkpoint %d cancelled upstream", id)}}
	}
	switch {
	case id < a.current:
		return nil
	case id == a.current:
		if a.state == Idle {
			return nil
		}
		acts := []Action{{Kind: Abort, ID: id, Abort: Cancelled, Reason: fmt.Sprintf("checkpoint %d cancelled upstream", id)}}
		if a.state == Aligning {
			acts = append(acts, Action{Kind: Release})
		}
		a.reset()
		return acts
	}
	// A newer checkpoint was cancelled before its first barrier got here: it
	// also ends the one in progress.
	var acts []Action
	if a.state != Idle {
		acts = append(acts, Action{Kind: Abort, ID: a.current, Abort: Subsumed,
			Reason: fmt.Sprintf("subsumed by cancelled checkpoint %d", id)})
		if a.state == Aligning {
			acts = append(acts, Action{Kind: Release})
		}
		a.reset()
	}
	a.current = id
	return append(acts, Action{Kind: Abort, ID: id, Abort: Cancelled, Reason: fmt.Sprintf("checkpoint %d cancelled upstream", id)})
}

// EndOfPartition handles the end of channel ch: it counts as aligned.
func (a *Aligner) EndOfPartition(ch int, now time.Time) []Action {
	if ch < 0 || ch >= len(a.closed) || a.closed[ch] {
		return nil
	}
	a.closed[ch] = true
	return a.maybeComplete(now)
}

// Buffered declines the aligned checkpoint in progress when the alignment
// buffer passed the limit.
func (a *Aligner) Buffered(bytes int64, now time.Time) []Action {
	if a.state != Aligning || a.cfg.MaxBufferedBytes <= 0 || bytes <= a.cfg.MaxBufferedBytes {
		return nil
	}
	id := a.current
	a.reset()
	return []Action{
		{Kind: Abort, ID: id, Abort: Declined,
			Reason: fmt.Sprintf("alignment buffered %d bytes > limit %d", bytes, a.cfg.MaxBufferedBytes)},
		{Kind: Release},
	}
}

// Deadline is when an aligned-with-timeout alignment switches to unaligned.
func (a *Aligner) Deadline() (time.Time, bool) {
	if a.state != Aligning || a.cfg.Mode != AlignedTimeout || a.barrier.Type == stream.Savepoint {
		return time.Time{}, false
	}
	return a.start.Add(a.cfg.AlignmentTimeout), true
}

// Tick switches an alignment that passed its deadline to unaligned.
func (a *Aligner) Tick(now time.Time) []Action {
	d, ok := a.Deadline()
	if !ok || now.Before(d) {
		return nil
	}
	return a.switchToUnaligned(now, true)
}

// Blocked reports whether ch delivered the barrier of the alignment in
// progress.
func (a *Aligner) Blocked(ch int) bool {
	return a.state == Aligning && ch >= 0 && ch < len(a.arrived) && a.arrived[ch]
}

// Recording reports whether ch's elements are channel state of the unaligned
// checkpoint in progress.
func (a *Aligner) Recording(ch int) (int64, bool) {
	if a.state != Collecting || ch < 0 || ch >= len(a.arrived) || a.arrived[ch] || a.closed[ch] {
		return 0, false
	}
	return a.current, true
}

// Pending returns the checkpoint in progress.
func (a *Aligner) Pending() (int64, bool) {
	if a.state == Idle {
		return 0, false
	}
	return a.current, true
}
