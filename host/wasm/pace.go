package wasm

import "time"

// A task hands an operator whatever its input delivered since the last
// call, up to thousands of records — a backlog arrives in the largest
// batches. The call deadline is there to catch an operator that is stuck,
// not one that is merely slow per record, so the instance cuts a batch into
// pieces it expects to take at most a quarter of the deadline each, judged
// from the time its earlier calls took per record. The guest cannot tell:
// batch boundaries were never meaningful (they follow how input arrived).
//
// Until one call has been timed, a piece is a single record: even the
// first backlog of an operator at a second per record fits a 5 s deadline.
// After that a piece has at most rampFactor times the records of the
// largest call timed so far: a call of a few records that runs within one
// slice of CPU says little of a piece of a quarter second on a machine
// whose CPU is shared — such a piece gets its share of the CPU, and on a
// loaded machine ran ten times slower per record than the single record
// before it, past the deadline. Growing by doubling, each piece is timed
// at a pace measured over at least half its length; a fast operator pays
// a dozen extra calls on its first backlog of thousands of records.
const (
	// Timing a call costs two clock reads (~80 ns each on a VM's kvm-clock),
	// a lot beside a short call of a few records. A call is timed when it
	// has minTimedRecords or more, when it is expected to take longTimedCall
	// or more, and otherwise one in sampleShortCalls — so an operator that
	// turns slow while its batches are small is noticed within a few calls.
	minTimedRecords  = 32
	longTimedCall    = 20 * time.Microsecond
	sampleShortCalls = 16
	// paceShare is the part of the call deadline one piece aims at.
	paceShare = 4
	// rampFactor bounds a piece by the largest timed call's records.
	rampFactor = 2
)

// pacer estimates an operator's time per record and sizes pieces from it.
// It is touched only by the instance's calling goroutine.
type pacer struct {
	budget    time.Duration // the time one piece aims at
	perRecord time.Duration // estimated time per record; 0 until a call was timed
	largest   int           // the most records a timed call had
	untimed   int           // short calls not timed since the last timed one
}

func newPacer(callTimeout time.Duration) pacer {
	return pacer{budget: callTimeout / paceShare}
}

// piece returns how many records the next call may take: all n when they
// are expected to fit the budget and are at most rampFactor times the
// largest timed call.
func (p *pacer) piece(n int) int {
	if p.perRecord == 0 {
		return min(n, 1)
	}
	fit := int(p.budget / p.perRecord)
	return max(1, min(n, fit, rampFactor*p.largest))
}

// times reports whether a call of n records is to be timed: always when it
// is larger than any timed before, so that pieces can grow.
func (p *pacer) times(n int) bool {
	if n >= minTimedRecords || n > p.largest || time.Duration(n)*p.perRecord >= longTimedCall {
		p.untimed = 0
		return true
	}
	p.untimed++
	if p.untimed < sampleShortCalls {
		return false
	}
	p.untimed = 0
	return true
}

// observe records that a call of n records took d. The estimate rises at
// once and falls slowly, so one fast call after slow ones does not let the
// next piece grow past what the slow records need.
func (p *pacer) observe(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	p.largest = max(p.largest, n)
	per := max(d/time.Duration(n), 1)
	if per >= p.perRecord {
		p.perRecord = per
		return
	}
	p.perRecord = (3*p.perRecord + per) / 4
}

// within returns how many records are expected to take d: 1 until a call
// was timed.
func (p *pacer) within(d time.Duration) int {
	if p.perRecord == 0 {
		return 1
	}
	return int(max(1, min(d/p.perRecord, 1<<31-1)))
}
