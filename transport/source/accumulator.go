package source

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/weirhq/weir/abi"
)

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("source closed")

// accumulator gathers the messages one or more subscriptions deliver into
// one record batch that Poll takes at once, so a task makes one operator
// call for everything that arrived since its last Poll. It holds at most
// one batch: a full batch blocks the delivering goroutines until Poll takes
// it. Each subscription is a lane with an offset of its own (the last
// message it added or skipped); take returns them all with the batch they
// cover.
type accumulator struct {
	maxRecords, maxBytes int

	mu    sync.Mutex
	limit int // records per batch for now (setLimit): 1..maxRecords
	space *sync.Cond
	b     abi.Builder
	last  []uint64 // per lane: offset of the last message added or skipped
	moved bool     // an offset advanced with no record to carry it
	// ended marks the lanes of a bounded source that read everything up
	// to its stop; open counts the others. Once none is open, take
	// returns what it still holds, then ErrEnded.
	ended []bool
	open  int
	// held is set while a drain holds the lanes (hold): nothing is added
	// or skipped, no offset moves, until release. bound is the highest
	// offset a lane may reach (release; MaxUint64 until then): a message
	// past it ends the lane instead.
	held   bool
	bound  uint64
	err    error
	closed bool
	ready  chan struct{} // capacity 1: something to take
	done   chan struct{} // closed by close
	// taken are the latest batches take returned, oldest first, at
	// most keepTaken: how many records each held and the offsets it
	// carried, for unprocessed to tell which the task has not processed.
	taken []takenBatch
}

// takenBatch is a batch take returned (accumulator.taken).
type takenBatch struct {
	records int
	offs    []uint64
}

// keepTaken is how many batches take returned the accumulator remembers:
// a source task holds at most two it has not processed (one it processes,
// one its poller waits to hand it), and the last it processed is the one
// its offset names.
const keepTaken = 3

func newAccumulator(maxRecords, maxBytes, lanes int) *accumulator {
	if maxRecords <= 0 {
		maxRecords = 4096
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	lanes = max(lanes, 1)
	a := &accumulator{maxRecords: maxRecords, maxBytes: maxBytes, limit: maxRecords, last: make([]uint64, lanes),
		ended: make([]bool, lanes), open: lanes, bound: math.MaxUint64, ready: make(chan struct{}, 1), done: make(chan struct{})}
	a.space = sync.NewCond(&a.mu)
	return a
}

// setLimit bounds the records of the batches gathered from now on to n
// (n <= 0: maxRecords). A batch already larger is taken as it is.
func (a *accumulator) setLimit(n int) {
	if n <= 0 || n > a.maxRecords {
		n = a.maxRecords
	}
	a.mu.Lock()
	raised := n > a.limit
	a.limit = n
	a.mu.Unlock()
	if raised {
		a.space.Broadcast()
	}
}

// setOffset sets lane's offset before anything is added, e.g. to where a
// restored source resumes.
func (a *accumulator) setOffset(lane int, off uint64) {
	a.mu.Lock()
	a.last[lane] = off
	a.mu.Unlock()
}

func (a *accumulator) signal() {
	select {
	case a.ready <- struct{}{}:
	default:
	}
}

// add appends one record of lane with offset off, waiting while the batch
// is full or the lanes are held. It reports false once the accumulator is
// closed, and when off is past the bound: the lane ends then (at the
// bound), without the record. It copies key
// and value into the batch and keeps neither, so a caller may pass bytes
// that alias a string: []byte(s) then copies nothing either.
func (a *accumulator) add(lane int, key, value []byte, ts int64, off uint64) bool {
	a.mu.Lock()
	for !a.closed && (a.held || a.b.Len() > 0 && (a.b.Len() >= a.limit || a.b.Size() >= a.maxBytes)) {
		a.space.Wait()
	}
	if a.closed || a.pastLocked(lane, off) {
		a.mu.Unlock()
		return false
	}
	first := a.b.Len() == 0
	a.b.Add(key, value, ts)
	a.last[lane] = off
	a.mu.Unlock()
	if first {
		// Later records join a batch the taker was already told about.
		a.signal()
	}
	return true
}

// skip advances lane's offset past a message this subtask does not read,
// and lets take return the new offset even without records: a subtask
// whose messages are all another's must not hold its offset back (a
// restore after the stream's retention dropped the skipped messages
// would be refused). Like add it waits while the lanes are held, and
// reports false once closed or when off is past the bound (the lane
// ended).
func (a *accumulator) skip(lane int, off uint64) bool {
	a.mu.Lock()
	for !a.closed && a.held {
		a.space.Wait()
	}
	if a.closed || a.pastLocked(lane, off) {
		a.mu.Unlock()
		return false
	}
	a.last[lane] = off
	// The taker was told already when the batch has records, or when an
	// earlier move is not yet taken.
	tell := a.b.Len() == 0 && !a.moved
	a.moved = true
	a.mu.Unlock()
	if tell {
		a.signal()
	}
	return true
}

// pastLocked ends lane at the bound if off is past it, and reports
// whether it was. The caller holds a.mu.
func (a *accumulator) pastLocked(lane int, off uint64) bool {
	if off <= a.bound {
		return false
	}
	if !a.ended[lane] {
		a.ended[lane] = true
		a.open--
		if a.last[lane] < a.bound {
			a.last[lane], a.moved = a.bound, true
		}
		a.signal() // a non-blocking send: fine under a.mu
	}
	return true
}

// hold stops the lanes (a drain): from now on add and skip wait, and no
// offset moves, until release. It returns every lane's offset: the last
// message each added or skipped, which no later message passes while
// held. Batches already gathered are still taken.
func (a *accumulator) hold() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held = true
	return append([]uint64(nil), a.last...)
}

// release lets held lanes go on, bounded at bound: a lane no message
// past it reaches (add, skip and advance end the lane there instead).
func (a *accumulator) release(bound uint64) {
	a.mu.Lock()
	a.held = false
	a.bound = min(a.bound, bound)
	for i, off := range a.last {
		// Only an end moves a held lane's offset (to a StopSeq past the
		// bound, where nothing of the lane's lies in between): the lane
		// covered everything of its up to the bound, and ends there.
		if a.ended[i] && off > a.bound {
			a.last[i], a.moved = a.bound, true
		}
	}
	a.mu.Unlock()
	a.space.Broadcast()
}

// advance moves lane's offset from from to to (at most to the bound),
// unless a record moved it meanwhile or the lanes are held, and lets take
// return the new offsets even without records.
func (a *accumulator) advance(lane int, from, to uint64) {
	a.mu.Lock()
	to = min(to, a.bound)
	ok := !a.held && a.last[lane] == from && to > from
	if ok {
		a.last[lane], a.moved = to, true
	}
	a.mu.Unlock()
	if ok {
		a.signal()
	}
}

// end marks lane ended (it read everything up to the stop of a bounded
// source) with its offset at least at, and tells the taker: the last lane
// to end makes take return ErrEnded once the records are taken.
func (a *accumulator) end(lane int, at uint64) {
	a.mu.Lock()
	if a.ended[lane] {
		a.mu.Unlock()
		return
	}
	a.ended[lane] = true
	a.open--
	if a.last[lane] < at {
		a.last[lane], a.moved = at, true
	}
	a.mu.Unlock()
	a.signal()
}

// state is lane's current offset and whether it ended.
func (a *accumulator) state(lane int) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateLocked(lane)
}

// stateLocked is state with a.mu held.
func (a *accumulator) stateLocked(lane int) (uint64, bool) {
	return a.last[lane], a.ended[lane]
}

// locked calls f holding a.mu: what f reads of the accumulator (its
// ...Locked methods) does not change meanwhile.
func (a *accumulator) locked(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// allEnded reports whether every lane ended.
func (a *accumulator) allEnded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.open == 0
}

// offset is lane's current offset.
func (a *accumulator) offset(lane int) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[lane]
}

// fail makes the next take return err.
func (a *accumulator) fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
	a.signal()
}

// take waits for records and returns them as a new batch with the offsets
// of every lane, each the last message of that lane covered; an offset that
// advanced without records comes with an empty batch. Once every lane
// ended and no record is left, it returns no batch, the final offsets and
// ErrEnded, every time.
func (a *accumulator) take(ctx context.Context) ([]byte, []uint64, error) {
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if a.b.Len() > 0 {
			out := append([]byte(nil), a.b.Bytes()...)
			offs := append([]uint64(nil), a.last...)
			a.noteTaken(a.b.Len(), offs)
			a.b.Reset()
			a.moved = false
			a.mu.Unlock()
			a.space.Broadcast()
			return out, offs, nil
		}
		if a.open == 0 {
			// The last offsets go with ErrEnded, not an empty batch
			// before it; a failure after the end changes nothing.
			offs := append([]uint64(nil), a.last...)
			if n := len(a.taken); n == 0 || !slices.Equal(a.taken[n-1].offs, offs) {
				// The task ends at offs, which may be past the last
				// batch's (a lane ended past its last record):
				// unprocessedLocked must find it among those taken.
				a.noteTaken(0, offs)
			}
			a.mu.Unlock()
			return nil, offs, ErrEnded
		}
		if a.moved {
			a.moved = false
			offs := append([]uint64(nil), a.last...)
			a.noteTaken(0, offs)
			a.mu.Unlock()
			return append([]byte(nil), abi.EmptyBatch...), offs, nil
		}
		if a.err != nil {
			err := a.err
			a.mu.Unlock()
			return nil, nil, err
		}
		a.mu.Unlock()
		select {
		case <-a.ready:
		case <-a.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// noteTaken remembers a batch of records that take returns with offs.
// The caller holds a.mu.
func (a *accumulator) noteTaken(records int, offs []uint64) {
	if len(a.taken) == keepTaken {
		a.taken = append(a.taken[:0], a.taken[1:]...)
	}
	a.taken = append(a.taken, takenBatch{records: records, offs: offs})
}

// unprocessedLocked returns how many records the accumulator holds,
// and of those take returned, how many came in batches after the one
// whose offsets are processed (the lanes' offsets of the last batch the
// task processed; nil, or none take returned lately: every batch it
// remembers). The caller holds a.mu, which take holds as it hands a batch
// on, so that no record is counted twice or missed.
func (a *accumulator) unprocessedLocked(processed []uint64) int {
	n := a.b.Len()
	from := 0
	for i, t := range a.taken {
		if processed != nil && slices.Equal(t.offs, processed) {
			from = i + 1
		}
	}
	for _, t := range a.taken[from:] {
		n += t.records
	}
	return n
}

func (a *accumulator) close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.done)
	}
	a.mu.Unlock()
	a.space.Broadcast()
}
