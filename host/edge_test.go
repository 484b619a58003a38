package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// scripted is a receiver that hands out a fixed sequence of deliveries, as a
// remote receiver would: a priority barrier carries the elements it overtook
// in Delivery.Overtaken, and those elements follow it.
type scripted struct {
	mu  sync.Mutex
	ds  []stream.Delivery
	err error // returned once ds is exhausted
}

func (s *scripted) Poll() (stream.Delivery, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ds) == 0 {
		return stream.Delivery{}, false, s.err
	}
	d := s.ds[0]
	s.ds = s.ds[1:]
	return d, true, nil
}
func (s *scripted) Notify(fn func()) { fn() }
func (s *scripted) Close() error     { return nil }

// plain turns elements into deliveries.
func plain(els ...stream.Element) []stream.Delivery {
	var ds []stream.Delivery
	for _, e := range els {
		ds = append(ds, stream.Delivery{Element: e})
	}
	return ds
}

// priority is an unaligned barrier that overtook over at the receiver,
// followed by over itself (still delivered after it).
func priority(id int64, over ...stream.Element) []stream.Delivery {
	d := stream.Delivery{Element: stream.BarrierElement(stream.Barrier{ID: id, Unaligned: true}), Overtaken: over}
	return append([]stream.Delivery{d}, plain(over...)...)
}

func concat(dss ...[]stream.Delivery) []stream.Delivery {
	var out []stream.Delivery
	for _, ds := range dss {
		out = append(out, ds...)
	}
	return out
}

// recordsIn counts the records of channel-state elements.
func recordsIn(cs []snapshot.ChannelState) int {
	n := 0
	for _, c := range cs {
		for _, e := range c.Elements {
			n += e.Count()
		}
	}
	return n
}

// runScripted runs a countOp task over scripted input channels (all on port
// 0) and returns its store and recorder.
func runScripted(t *testing.T, ck host.Checkpointing, chans ...[]stream.Delivery) (*storage.Dir, *recorder, *local.Receiver) {
	t.Helper()
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var inputs []host.Input
	for _, ds := range chans {
		inputs = append(inputs, host.Input{Port: 0, Receiver: &scripted{ds: ds}})
	}
	so, ro := local.New(local.Options{Name: "out"})
	rc := newRecorder()
	clock := func() time.Time { return time.Unix(1000, 0) }
	tk, err := host.New(host.Config{Name: "x", Operator: &countOp{}, Inputs: inputs,
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Checkpointing: ck, Store: store, Listener: rc, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store, rc, ro
}

// A priority barrier n+1 that reaches a channel still blocked for n carries
// data it overtook at the receiver (after barrier n, before barrier n+1).
// That data must end up in checkpoint n+1 — in the operator state or in the
// channel state — and not be dropped with the barrier's Overtaken list when
// the barrier goes into the alignment buffer.
func TestPriorityBarrierOnBlockedChannelKeepsOvertaken(t *testing.T) {
	ch0 := concat(plain(b(1)), priority(2, rec("a", "a"), rec("b", "b")), plain(eop))
	ch1 := concat(plain(rec("x", "x"), rec("y", "y"), b(1), rec("z", "z"), b(2), eop))
	store, rc, _ := runScripted(t, host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: time.Hour}, ch0, ch1)
	if len(rc.declines) != 0 || rc.handle(2, "x") == "" {
		t.Fatalf("declines %v acks %v", rc.declines, rc.acks)
	}
	s1 := readSnap(t, store, rc.handle(1, "x"))
	if n := binary.LittleEndian.Uint64(s1.ModuleState); n != 2 || recordsIn(s1.Inputs) != 0 {
		t.Fatalf("checkpoint 1: state %d, channel state %d records; want 2 (x, y) and 0", n, recordsIn(s1.Inputs))
	}
	// Before barrier 2: x, y, z (channel 1) and a, b (channel 0).
	s2 := readSnap(t, store, rc.handle(2, "x"))
	if n := int(binary.LittleEndian.Uint64(s2.ModuleState)) + recordsIn(s2.Inputs); n != 5 {
		t.Fatalf("checkpoint 2 holds %d records (state %d + channel state %d), want 5",
			n, binary.LittleEndian.Uint64(s2.ModuleState), recordsIn(s2.Inputs))
	}
}

// stateCount is the countOp state of task x's snapshot of checkpoint id.
func stateCount(t *testing.T, f *fixture, id int64) uint64 {
	t.Helper()
	h := f.rc.handle(id, "x")
	if h == "" {
		t.Fatalf("checkpoint %d not acknowledged; declines %v", id, f.rc.declines)
	}
	return binary.LittleEndian.Uint64(readSnap(t, f.store, h).ModuleState)
}

// Barrier 2 reaching a channel still blocked for 1 is buffered with the
// channel's data: it neither subsumes 1 nor starts 2 before 1 completes, and
// 2 then aligns from the buffer.
func TestNextBarrierOnBlockedChannelWaits(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	f.send(0, rec("a", "a"), b(1), rec("c", "c"), b(2), rec("d", "d"), eop)
	f.send(1, rec("x", "x"), rec("y", "y"), rec("z", "z"), b(1), rec("w", "w"), b(2), eop)
	if err := f.task(&countOp{}, host.Checkpointing{Mode: barrier.Aligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a x y z B1 c w B2 d EOP" {
		t.Fatalf("output %q", got)
	}
	if len(f.rc.declines) != 0 {
		t.Fatalf("declines %v", f.rc.declines)
	}
	if n1, n2 := stateCount(t, f, 1), stateCount(t, f, 2); n1 != 4 || n2 != 6 {
		t.Fatalf("state counts %d, %d; want 4 (a x y z), 6 (+ c w)", n1, n2)
	}
}

// A cancel marker for a checkpoint this task has not seen yet ends the
// alignment in progress (subsumed), aborts the cancelled one, forwards both
// cancel markers and releases the blocked channel; the late barrier 1 is
// stale.
func TestCancelOfUnseenCheckpointEndsAlignment(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	f.send(0, rec("a", "a"), b(1), rec("c", "c"), eop)
	f.send(1, rec("x", "x"), stream.Cancel(2), rec("y", "y"), b(1), eop)
	if err := f.task(&countOp{}, host.Checkpointing{Mode: barrier.Aligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a x C1 C2 c y EOP" {
		t.Fatalf("output %q", got)
	}
	want := []string{"x 1 subsumed: subsumed by cancelled checkpoint 2", "x 2 cancelled: checkpoint 2 cancelled upstream"}
	if len(f.rc.declines) != 2 || f.rc.declines[0] != want[0] || f.rc.declines[1] != want[1] || len(f.rc.acks) != 0 {
		t.Fatalf("declines %q acks %v", f.rc.declines, f.rc.acks)
	}
}

// End-of-partition on a blocked channel is buffered behind the channel's
// data; when the last channel ends without barrier 1 it counts as aligned:
// the checkpoint completes, then the buffer (including the end) is replayed.
func TestAllChannelsEndDuringAlignment(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	f.send(0, rec("a", "a"), b(1), rec("c", "c"), eop)
	f.send(1, rec("x", "x"), rec("y", "y"), rec("z", "z"), eop)
	op := &countOp{}
	if err := f.task(op, host.Checkpointing{Mode: barrier.Aligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a x y z B1 c EOP" {
		t.Fatalf("output %q", got)
	}
	if n := stateCount(t, f, 1); n != 4 || len(op.endPorts) != 1 {
		t.Fatalf("state count %d (want 4), end of input %v", n, op.endPorts)
	}
}

// The same over local channels, through the aligned-checkpoint timeout
// (prioritizeLate): a late barrier 3 queued behind d1 is prioritized (it
// overtakes d1 at the receiver) while its channel is free, and the channel
// is blocked again — by barrier 2 replayed from the alignment buffer —
// before the task polls it. The timestamps are chosen to force this
// interleaving with a fixed clock (only barrier 3 is late). d1 precedes
// barrier 3 and must be in checkpoint 3.
func TestLateBarrierPrioritizedThenBlocked(t *testing.T) {
	now := time.Unix(10_000, 0)
	bt := func(id int64, ts time.Time) stream.Element {
		return stream.BarrierElement(stream.Barrier{ID: id, Timestamp: ts.UnixMilli()})
	}
	late := now.Add(-2 * time.Hour)
	f := newFixture(t, []int{0, 0}, local.Options{})
	f.send(0, bt(1, now), bt(2, now), rec("d1", "d1"), bt(3, late), eop)
	f.send(1, rec("x", "x"), bt(1, now), rec("y", "y"), bt(2, now), rec("z", "z"), bt(3, late), eop)
	tk, err := host.New(host.Config{Name: "x", Operator: &countOp{}, Inputs: f.inputs,
		Outputs:       []host.Output{{Senders: []stream.Sender{f.outS}}},
		Checkpointing: host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: time.Hour},
		Store:         f.store, Listener: f.rc, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.rc.declines) != 0 {
		t.Fatalf("declines %v", f.rc.declines)
	}
	s3 := readSnap(t, f.store, f.rc.handle(3, "x"))
	if s3 == nil || !s3.Unaligned {
		t.Fatalf("checkpoint 3: %+v", s3)
	}
	// Before barrier 3: d1 (channel 0), x y z (channel 1).
	if n := int(binary.LittleEndian.Uint64(s3.ModuleState)) + recordsIn(s3.Inputs); n != 4 {
		t.Fatalf("checkpoint 3 holds %d records (state %d + channel state %d), want 4",
			n, binary.LittleEndian.Uint64(s3.ModuleState), recordsIn(s3.Inputs))
	}
}

// A channel that fails in the middle of an alignment fails the task with
// the channel named; the checkpoint is neither acknowledged nor declined
// (the coordinator aborts it on the failure) and the spill file is removed.
func TestChannelFailsMidAlignment(t *testing.T) {
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spill := t.TempDir()
	lost := &stream.ChannelError{Channel: "up1 -> x", Err: errors.New("NATS connection lost")}
	inputs := []host.Input{
		{Receiver: &scripted{ds: plain(b(1), rec("a", "a"), rec("b", "b"), rec("c", "c"))}},
		{Receiver: &scripted{ds: plain(rec("x", "x"), rec("y", "y")), err: lost}},
	}
	so, _ := local.New(local.Options{Name: "out"})
	rc := newRecorder()
	tk, err := host.New(host.Config{Name: "x", Operator: &countOp{}, Inputs: inputs,
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Aligned, AlignmentMemory: 1, SpillDir: spill},
		Store:         store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	err = tk.Run(context.Background())
	var te *host.TaskError
	if !errors.As(err, &te) || !errors.Is(err, lost) || err.Error() != "task x: channel up1 -> x: NATS connection lost" {
		t.Fatalf("run: %v", err)
	}
	if len(rc.acks) != 0 || len(rc.declines) != 0 || len(rc.failed) != 1 {
		t.Fatalf("acks %v declines %v failures %v", rc.acks, rc.declines, rc.failed)
	}
	if ents, _ := os.ReadDir(spill); len(ents) != 0 {
		t.Fatalf("spill files left: %v", ents)
	}
}

// A priority barrier that reaches a blocked channel goes back behind the
// data it overtook; when that data overflows the alignment buffer, the
// checkpoint is declined and the buffer released. The barrier must still
// come after the released data: the data precedes it on its channel and
// belongs to its checkpoint.
func TestDeferredBarrierAfterDeclinedBuffer(t *testing.T) {
	big := strings.Repeat("a", 100)
	ch0 := concat(plain(b(1)), priority(2, rec("a", big)), plain(eop))
	ch1 := plain(rec("x", "x"), rec("y", "y"), b(1), b(2), eop)
	store, rc, _ := runScripted(t, host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: time.Hour, MaxBufferedBytes: 50}, ch0, ch1)
	if len(rc.declines) != 1 || !strings.HasPrefix(rc.declines[0], "x 1 declined") || rc.handle(2, "x") == "" {
		t.Fatalf("declines %v acks %v", rc.declines, rc.acks)
	}
	// Before barrier 2: a (channel 0), x and y (channel 1).
	s2 := readSnap(t, store, rc.handle(2, "x"))
	if n := int(binary.LittleEndian.Uint64(s2.ModuleState)) + recordsIn(s2.Inputs); n != 3 {
		t.Fatalf("checkpoint 2 holds %d records (state %d + channel state %d), want 3",
			n, binary.LittleEndian.Uint64(s2.ModuleState), recordsIn(s2.Inputs))
	}
}
