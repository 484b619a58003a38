package barrier

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/transport/stream"
)

// maxTracked bounds the checkpoints a Tracker follows at once; the oldest is
// dropped (aborted as subsumed) beyond it.
const maxTracked = 50

type tracked struct {
	id      int64
	barrier stream.Barrier
	first   time.Time
	arrived []bool
	aborted bool
}

// Tracker is the at-least-once handler (Flink's BarrierTracker): it never
// blocks a channel and snapshots checkpoint n when barrier n has arrived on
// every open channel. Several checkpoints may be in flight; completing n
// drops every older one still pending (subsumed).
type Tracker struct {
	channels int
	closed   []bool
	pending  []*tracked // ascending ids
	latest   int64      // latest checkpoint id tracked
}

// NewTracker returns an at-least-once handler over n channels.
func NewTracker(n int) *Tracker {
	if n < 1 {
		n = 1
	}
	return &Tracker{channels: n, closed: make([]bool, n), latest: -1}
}

func (t *Tracker) find(id int64) int {
	for i, p := range t.pending {
		if p.id == id {
			return i
		}
	}
	return -1
}

func (t *Tracker) done(p *tracked) bool {
	for c, ok := range p.arrived {
		if !ok && !t.closed[c] {
			return false
		}
	}
	return true
}

// finish removes pending[0..i], aborting the older ones, and snapshots
// pending[i] unless it was aborted.
func (t *Tracker) finish(i int, now time.Time) []Action {
	var acts []Action
	p := t.pending[i]
	for _, old := range t.pending[:i] {
		if !old.aborted {
			acts = append(acts, Action{Kind: Abort, ID: old.id, Abort: Subsumed,
				Reason: fmt.Sprintf("subsumed by checkpoint %d", p.id)})
		}
	}
	t.pending = append(t.pending[:0], t.pending[i+1:]...)
	if !p.aborted {
		acts = append(acts, Action{Kind: Snapshot, ID: p.id, Barrier: p.barrier,
			Alignment: now.Sub(p.first), StartDelay: startDelay(p.barrier, p.first)})
	}
	return acts
}

// Barrier handles barrier b from channel ch.
func (t *Tracker) Barrier(ch int, b stream.Barrier, now time.Time) []Action {
	if ch < 0 || ch >= t.channels || t.closed[ch] {
		return nil
	}
	if t.channels == 1 {
		if b.ID <= t.latest {
			return nil
		}
		t.latest = b.ID
		return []Action{{Kind: Snapshot, ID: b.ID, Barrier: b, StartDelay: startDelay(b, now)}}
	}
	i := t.find(b.ID)
	if i < 0 {
		if b.ID <= t.latest {
			return nil // older than what we track: already done or dropped
		}
		t.latest = b.ID
		p := &tracked{id: b.ID, barrier: b, first: now, arrived: make([]bool, t.channels)}
		t.pending = append(t.pending, p)
		i = len(t.pending) - 1
		var acts []Action
		if len(t.pending) > maxTracked {
			old := t.pending[0]
			t.pending = t.pending[1:]
			i--
			if !old.aborted {
				acts = append(acts, Action{Kind: Abort, ID: old.id, Abort: Subsumed,
					Reason: fmt.Sprintf("more than %d checkpoints in flight", maxTracked)})
			}
		}
		p.arrived[ch] = true
		if t.done(p) {
			acts = append(acts, t.finish(i, now)...)
		}
		return acts
	}
	p := t.pending[i]
	p.arrived[ch] = true
	if t.done(p) {
		return t.finish(i, now)
	}
	return nil
}

// Cancel handles a cancel marker for checkpoint id.
func (t *Tracker) Cancel(ch int, id int64, now time.Time) []Action {
	reason := fmt.Sprintf("checkpoint %d cancelled upstream", id)
	if t.channels == 1 {
		if id <= t.latest {
			return nil
		}
		t.latest = id
		return []Action{{Kind: Abort, ID: id, Abort: Cancelled, Reason: reason}}
	}
	i := t.find(id)
	if i < 0 {
		if id <= t.latest {
			return nil
		}
		t.latest = id
		t.pending = append(t.pending, &tracked{id: id, first: now, arrived: make([]bool, t.channels), aborted: true})
		i = len(t.pending) - 1
		return append(t.dropBefore(i, id), Action{Kind: Abort, ID: id, Abort: Cancelled, Reason: reason})
	}
	p := t.pending[i]
	if p.aborted {
		return nil
	}
	p.aborted = true
	return append(t.dropBefore(i, id), Action{Kind: Abort, ID: id, Abort: Cancelled, Reason: reason})
}

// dropBefore aborts and removes the checkpoints older than pending[i].
func (t *Tracker) dropBefore(i int, id int64) []Action {
	var acts []Action
	for _, old := range t.pending[:i] {
		if !old.aborted {
			acts = append(acts, Action{Kind: Abort, ID: old.id, Abort: Subsumed,
				Reason: fmt.Sprintf("subsumed by cancelled checkpoint %d", id)})
		}
	}
	t.pending = append(t.pending[:0], t.pending[i:]...)
	return acts
}

// EndOfPartition handles the end of channel ch: pending checkpoints no
// longer wait for it.
func (t *Tracker) EndOfPartition(ch int, now time.Time) []Action {
	if ch < 0 || ch >= t.channels || t.closed[ch] {
		return nil
	}
	t.closed[ch] = true
	for i := len(t.pending) - 1; i >= 0; i-- {
		if t.done(t.pending[i]) {
			return t.finish(i, now)
		}
	}
	return nil
}

// Buffered does nothing: a tracker buffers nothing.
func (t *Tracker) Buffered(int64, time.Time) []Action { return nil }

// Tick does nothing.
func (t *Tracker) Tick(time.Time) []Action { return nil }

// Deadline is never set.
func (t *Tracker) Deadline() (time.Time, bool) { return time.Time{}, false }

// Blocked is always false.
func (t *Tracker) Blocked(int) bool { return false }

// Recording is always false.
func (t *Tracker) Recording(int) (int64, bool) { return 0, false }

// Pending returns the newest checkpoint being tracked.
func (t *Tracker) Pending() (int64, bool) {
	for i := len(t.pending) - 1; i >= 0; i-- {
		if !t.pending[i].aborted {
			return t.pending[i].id, true
		}
	}
	return 0, false
}
