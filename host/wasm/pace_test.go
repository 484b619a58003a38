package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
)

// slowConfig is misbehave's mode 'd' spinning spin times per record.
func slowConfig(spin uint32) []byte {
	return binary.LittleEndian.AppendUint32([]byte("d"), spin)
}

// spinPerMillisecond measures how many of misbehave's spin iterations take
// a millisecond on this machine.
func spinPerMillisecond(t *testing.T, e *Engine) uint32 {
	const spin, records = 1 << 20, 8
	inst := instantiate(t, e, "calibrate", misbehave(t), Limits{}, InstanceConfig{Config: slowConfig(spin)})
	batch := benchBatch(records)
	best := time.Duration(1<<63 - 1)
	// The fastest of several runs: a busy machine only makes a run slower,
	// and a too-slow calibration would make the records cheaper than meant.
	for range 10 {
		start := time.Now()
		if err := inst.Process(context.Background(), 0, batch, func(int, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return uint32(max(1, float64(spin)*records*float64(time.Millisecond)/float64(best)))
}

// TestSlowOperatorBacklogFitsDeadline: an operator at about a millisecond
// per record, handed a backlog that takes several times its call deadline
// (1 s), processes it all — the instance cuts the batch into pieces that
// fit — and its output keeps the input's order.
//
// A piece fits when it holds no more records than the operator processes
// within the deadline at its pace (1000): the test counts the records of
// each call rather than timing it against the watchdog. A loaded machine
// stretches a call's wall-clock time as it pleases — four times from one
// piece to the next, past the deadline, even with pieces growing by
// doubling (pace.go) — but cannot make the pacer hand over more records
// than fit: its pace is measured on this machine, and so never faster than
// the calibration's, the fastest of several runs. The instance's own
// deadline is a minute, far past any call here. Without pacing the backlog
// goes in one call of 3000 records.
func TestSlowOperatorBacklogFitsDeadline(t *testing.T) {
	e := newEngine(t)
	const deadline, records = time.Second, 3000 // ~3 s of work: 3 deadlines
	batch := benchBatch(records)
	spin := spinPerMillisecond(t, e)
	inst := instantiate(t, e, "slow", misbehave(t), Limits{CallTimeout: time.Minute}, InstanceConfig{Config: slowConfig(spin)})
	inst.pace = newPacer(deadline)
	var pieces []int
	o, start := newOut(), time.Now()
	err := inst.Process(context.Background(), 0, batch, func(port int, b []byte) error {
		// misbehave's 'd' passes each call's records through in one batch.
		pieces = append(pieces, int(binary.LittleEndian.Uint32(b)))
		return o.emit(port, b)
	})
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	want, _ := abi.DecodeBatch(batch)
	if !reflect.DeepEqual(o.recs[0], want) {
		t.Fatalf("output of %d records differs from the input's %d", len(o.recs[0]), len(want))
	}
	fit := int(deadline / time.Millisecond)
	if len(pieces) < records/fit {
		t.Fatalf("the batch went in %d call(s): %v", len(pieces), pieces)
	}
	for i, k := range pieces {
		if k > fit {
			t.Fatalf("call %d of %d had %d records, more than the %d of the deadline at a millisecond each: %v", i+1, len(pieces), k, fit, pieces)
		}
	}
	t.Logf("%d records in %d calls, %v (deadline %v): %v", records, len(pieces), time.Since(start), deadline, pieces)
}

// TestPiecesReportRecordOfBatch: a trap in a later piece names the record's
// index in the batch Process was given, not in the piece.
func TestPiecesReportRecordOfBatch(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "slow", misbehave(t), Limits{}, InstanceConfig{Config: slowConfig(1)})
	inst.pace = pacer{budget: 10, perRecord: 1, largest: 10} // pieces of ten records, then (timed) of one
	recs := make([]kv, 100)
	for i := range recs {
		recs[i] = kv{K: fmt.Sprint(i), V: "v"}
	}
	recs[57].V = "!"
	o := newOut()
	err := inst.Process(context.Background(), 0, batchOf(recs...), o.emit)
	var te *TrapError
	if !errors.As(err, &te) || te.RecordIndex != 57 || te.Record != `key "57", value "!"` {
		t.Fatalf("got %v, want a trap at record 58 of the batch naming its key and value", err)
	}
	// The pieces before the failing one went through, in order.
	want, _ := abi.DecodeBatch(batchOf(recs[:57]...))
	if got := o.recs[0]; len(got) < 10 || !reflect.DeepEqual(got, want[:len(got)]) {
		t.Fatalf("forwarded before the failing piece: %d records, want a prefix of the 57 before it", len(got))
	}
}

func TestPacer(t *testing.T) {
	p := newPacer(4 * time.Second) // a piece aims at 1 s
	if got := p.piece(4096); got != 1 {
		t.Fatalf("first piece %d, want 1", got)
	}
	if got := p.within(100 * time.Millisecond); got != 1 {
		t.Fatalf("records within 100ms before a call was timed: %d, want 1", got)
	}
	p.observe(64, 64*time.Microsecond) // 1 µs per record
	if got := p.piece(4096); got != rampFactor*64 {
		t.Fatalf("fast operator after a call of 64 records: piece %d, want %d", got, rampFactor*64)
	}
	p.observe(2048, 2048*time.Microsecond)
	if got := p.piece(4096); got != 4096 {
		t.Fatalf("fast operator after a call of 2048 records: piece %d, want the whole batch", got)
	}
	if got := p.within(100 * time.Millisecond); got != 100_000 {
		t.Fatalf("fast operator: %d records within 100ms, want 100000", got)
	}
	p.observe(100, time.Second) // 10 ms per record: the estimate rises at once
	if got := p.piece(4096); got != 100 {
		t.Fatalf("slow operator: piece %d, want 100", got)
	}
	if got := p.within(100 * time.Millisecond); got != 10 {
		t.Fatalf("slow operator: %d records within 100ms, want 10", got)
	}
	if got := p.within(time.Millisecond); got != 1 {
		t.Fatalf("slow operator: %d records within 1ms, want 1 (at least one)", got)
	}
	p.observe(100, 100*time.Millisecond) // one fast call: the estimate falls slowly
	if got, want := p.piece(4096), int(time.Second/((3*10*time.Millisecond+time.Millisecond)/4)); got != want {
		t.Fatalf("after one fast call: piece %d", got)
	}
	p.observe(1, 10*time.Second) // one record over the budget
	if got := p.piece(4096); got != 1 {
		t.Fatalf("a record over the budget: piece %d, want 1", got)
	}
}

func TestPacerTimes(t *testing.T) {
	p := newPacer(4 * time.Second)
	if !p.times(1) {
		t.Fatal("a call before any was timed is not timed")
	}
	p.observe(1, 100*time.Nanosecond)
	if !p.times(minTimedRecords) {
		t.Fatal("a call of many records is not timed")
	}
	timed := 0
	for range 10 * sampleShortCalls {
		if p.times(1) {
			timed++
		}
	}
	if timed != 10 {
		t.Fatalf("%d of %d short calls timed, want 10", timed, 10*sampleShortCalls)
	}
	if !p.times(2) {
		t.Fatal("a call larger than any timed is not timed: pieces could not grow")
	}
	p.observe(1, time.Millisecond) // now slow: every call takes long enough
	for range 3 {
		if !p.times(1) {
			t.Fatal("a call expected to take a millisecond is not timed")
		}
	}
}

// TestPacerRamps: a piece has at most twice the records of the largest
// timed call, however fast the calls before it were, so that a piece is
// timed at a pace measured over half its length at least.
func TestPacerRamps(t *testing.T) {
	p := newPacer(time.Second) // a piece aims at 250 ms
	var pieces []int
	for n := 3000; n > 0; {
		k := p.piece(n)
		pieces = append(pieces, k)
		if !p.times(k) {
			t.Fatalf("piece %d of %d records is not timed", len(pieces), k)
		}
		p.observe(k, time.Duration(k)*time.Millisecond) // 1 ms per record
		n -= k
	}
	want := []int{1, 2, 4, 8, 16, 32, 64, 128, 250, 250}
	if !reflect.DeepEqual(pieces[:len(want)], want) {
		t.Fatalf("pieces %v, want them to start %v", pieces, want)
	}
}
