package host_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// A savepoint's alignment blocks input 1 with y buffered; while the operator
// is in the first piece of a batch of input 0, unaligned checkpoint 2's
// barrier arrives on both inputs. Between the pieces, the task takes the
// barrier of input 0 (the savepoint is subsumed, its alignment buffer
// released to the replay stack) and then, in the same pass, the barrier of
// input 1 — although y, released but not yet processed, comes before it.
// y must then be input channel state of checkpoint 2.
func TestPriorityBarrierBehindReleasedBufferBetweenPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	s0, r0 := local.New(local.Options{Name: "up0->x"})
	s1, r1 := local.New(local.Options{Name: "up1->x"})
	so, _ := local.New(local.Options{Name: "x->down"})
	s0.Send(ctx, stream.Records(batchOf("z")))
	s0.Send(ctx, stream.Records(batchOf("z2")))
	s0.Send(ctx, stream.Records(batchOf("a", "b", "c")))
	s1.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Type: stream.Savepoint}))
	s1.Send(ctx, stream.Records(batchOf("y")))
	rc, acks := ackWaiter()
	op := newGatedOp()
	task, err := host.New(host.Config{Name: "x", Operator: op,
		Inputs:        []host.Input{{Port: 0, Receiver: r0}, {Port: 1, Receiver: r1}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	op.release(t, "z")
	op.release(t, "z2")
	// Now in a (the first piece): the savepoint aligns, y is buffered.
	select {
	case v := <-op.entered:
		if v != "a" {
			t.Fatalf("got %q", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("operator never got a")
	}
	for _, s := range []*local.Sender{s0, s1} {
		if over, err := s.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 2, Unaligned: true})); err != nil || len(over) != 0 {
			t.Fatalf("overtaken %v %v", over, err)
		}
	}
	op.gate <- struct{}{}
	// The rest of the batch, then y (released by the savepoint's abort).
	for _, v := range []string{"b", "c", "y"} {
		op.release(t, v)
	}
	if id := waitAck(t, acks, rc); id != 2 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(2, "x"))
	if string(snap.ModuleState) != "z,z2,a" {
		t.Fatalf("state %q", snap.ModuleState)
	}
	got := map[int]string{}
	for _, cs := range snap.Inputs {
		got[cs.Channel] = render(t, cs.Elements)
	}
	// Input 0: the rest of the batch; input 1: y, which the operator had
	// not seen when the snapshot was taken.
	if got[0] != "b,c" || got[1] != "y" {
		t.Errorf("input channel state %v; want input 0 \"b,c\", input 1 \"y\" (y processed after the snapshot and missing from it: lost on restore)", got)
	}
	cancel()
	<-done

	// Restored from checkpoint 2, the operator must see every record once.
	s0b, r0b := local.New(local.Options{Name: "up0->x"})
	s1b, r1b := local.New(local.Options{Name: "up1->x"})
	so2, _ := local.New(local.Options{Name: "x->down", CapacityElements: 100})
	s0b.Send(context.Background(), stream.EndOfPartition())
	s1b.Send(context.Background(), stream.EndOfPartition())
	op2 := newGatedOp()
	for range 10 {
		op2.gate <- struct{}{}
	}
	task2, err := host.New(host.Config{Name: "x", Operator: op2,
		Inputs:        []host.Input{{Port: 0, Receiver: r0b}, {Port: 1, Receiver: r1b}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so2}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Restore: rc.handle(2, "x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := task2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(op2.seen, ","); s != "z,z2,a,b,c,y" {
		t.Fatalf("restored operator saw %q, want z,z2,a,b,c,y", s)
	}
}

type passOp struct{}

func (p *passOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	return emit(0, append([]byte(nil), batch...))
}
func (p *passOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (p *passOp) Snapshot(context.Context, io.Writer) error                      { return nil }
func (p *passOp) Restore(context.Context, io.Reader) error                       { return nil }
func (p *passOp) CheckpointComplete(context.Context, int64) error                { return nil }
func (p *passOp) Close(context.Context) error                                    { return nil }

// Same as TestPriorityBarrierBehindReleasedBufferBetweenPieces, without pieces:
// the priority barriers are taken while the output is blocked (flush).
func TestPriorityBarrierBehindReleasedBufferFlush(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	s0, r0 := local.New(local.Options{Name: "up0->x"})
	s1, r1 := local.New(local.Options{Name: "up1->x"})
	so, ro := local.New(local.Options{Name: "x->down", CapacityElements: 1})
	so.Send(ctx, rec("k", "full")) // downstream is full: the task's first send blocks
	s1.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Type: stream.Savepoint}))
	s1.Send(ctx, rec("k", "y"))
	rc, acks := ackWaiter()
	task, err := host.New(host.Config{Name: "x", Operator: &passOp{},
		Inputs:        []host.Input{{Port: 0, Receiver: r0}, {Port: 1, Receiver: r1}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	// Let the task align (ch1: savepoint barrier, y buffered), then give
	// input 0 a record whose output blocks.
	time.Sleep(50 * time.Millisecond)
	s0.Send(ctx, rec("k", "a"))
	for so.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, s := range []*local.Sender{s0, s1} {
		if _, err := s.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 2, Unaligned: true})); err != nil {
			t.Fatal(err)
		}
	}
	go func() { // downstream takes the output again
		for ctx.Err() == nil {
			if _, ok, _ := ro.Poll(); !ok {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	if id := waitAck(t, acks, rc); id != 2 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(2, "x"))
	got := map[int]string{}
	for _, cs := range snap.Inputs {
		got[cs.Channel] = render(t, cs.Elements)
	}
	if got[1] != "y" {
		t.Errorf("input channel state %v; want input 1 \"y\" (y is processed after snapshot 2 and is not in it: lost on restore)", got)
	}
	cancel()
	<-done
}

// Between pieces, the output of the first piece blocks (downstream full);
// an unaligned barrier arriving then is taken inside that flush: the
// snapshot holds the unsent output as output channel state and the rest of
// the batch as input channel state; a restore sees each record once.
func TestBarrierWhileFlushBlocksBetweenPieces(t *testing.T) {
	for _, atReceiver := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		store, _ := storage.NewDir(t.TempDir())
		si, ri := local.New(local.Options{Name: "up->x", PriorityAtReceiver: atReceiver})
		so, ro := local.New(local.Options{Name: "x->down", CapacityElements: 1})
		so.Send(ctx, rec("k", "full"))
		si.Send(ctx, stream.Records(batchOf("a", "b", "c")))
		si.Send(ctx, stream.Records(batchOf("d")))
		rc, acks := ackWaiter()
		op := newGatedOp()
		task, err := host.New(host.Config{Name: "x", Operator: op, Inputs: []host.Input{{Receiver: ri}},
			Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
			Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- task.Run(ctx) }()
		op.release(t, "a")
		for so.Waiting() == 0 {
			time.Sleep(time.Millisecond)
		}
		si.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Unaligned: true}))
		if id := waitAck(t, acks, rc); id != 1 {
			t.Fatalf("ack %d", id)
		}
		snap := readSnap(t, store, rc.handle(1, "x"))
		wantIn := "b,c"
		if atReceiver {
			wantIn = "b,c d"
		}
		if string(snap.ModuleState) != "a" || len(snap.Inputs) != 1 || render(t, snap.Inputs[0].Elements) != wantIn ||
			len(snap.Outputs) != 1 || render(t, snap.Outputs[0].Elements) != "full a" && render(t, snap.Outputs[0].Elements) != "a" {
			t.Fatalf("atReceiver=%v: state %q inputs %+v outputs %+v", atReceiver, snap.ModuleState, snap.Inputs, snap.Outputs)
		}
		t.Logf("atReceiver=%v: outputs %q inputs %q", atReceiver, render(t, snap.Outputs[0].Elements), render(t, snap.Inputs[0].Elements))
		go func() {
			for ctx.Err() == nil {
				if _, ok, _ := ro.Poll(); !ok {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		for _, v := range []string{"b", "c", "d"} {
			op.release(t, v)
		}
		cancel()
		<-done

		si2, ri2 := local.New(local.Options{Name: "up->x"})
		so2, _ := local.New(local.Options{Name: "x->down", CapacityElements: 100})
		si2.Send(context.Background(), stream.EndOfPartition())
		op2 := newGatedOp()
		for range 10 {
			op2.gate <- struct{}{}
		}
		task2, _ := host.New(host.Config{Name: "x", Operator: op2, Inputs: []host.Input{{Receiver: ri2}},
			Outputs:       []host.Output{{Senders: []stream.Sender{so2}}},
			Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Restore: rc.handle(1, "x")})
		if err := task2.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := "a,b,c"
		if atReceiver {
			want = "a,b,c,d"
		}
		if s := strings.Join(op2.seen, ","); s != want {
			t.Fatalf("restored saw %q want %q", s, want)
		}
	}
}

// The alignment of checkpoint 1 (input 1 delivered its barrier, y is
// buffered) times out while input 0's batch is processed in pieces: the
// unaligned snapshot holds the rest of the batch and what input 0 queues
// before its barrier; y (after input 1's barrier) is processed after the
// snapshot and is not channel state. A restore sees each record once.
func TestAlignmentTimeoutWithBufferBetweenPieces(t *testing.T) {
	for _, atReceiver := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		store, _ := storage.NewDir(t.TempDir())
		s0, r0 := local.New(local.Options{Name: "up0->x", PriorityAtReceiver: atReceiver})
		s1, r1 := local.New(local.Options{Name: "up1->x", PriorityAtReceiver: atReceiver})
		so, ro := local.New(local.Options{Name: "x->down", CapacityElements: 100})
		s0.Send(ctx, stream.Records(batchOf("z")))
		s0.Send(ctx, stream.Records(batchOf("a", "b", "c")))
		s0.Send(ctx, stream.Records(batchOf("d")))
		s0.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: time.Now().UnixMilli()}))
		s0.Send(ctx, stream.Records(batchOf("e")))
		s1.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: time.Now().UnixMilli()}))
		s1.Send(ctx, stream.Records(batchOf("y")))
		rc, acks := ackWaiter()
		op := newGatedOp()
		task, err := host.New(host.Config{Name: "x", Operator: op,
			Inputs:        []host.Input{{Port: 0, Receiver: r0}, {Port: 1, Receiver: r1}},
			Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
			Checkpointing: host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: 30 * time.Millisecond},
			Store:         store, Listener: rc})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- task.Run(ctx) }()
		op.release(t, "z")
		// ch1: barrier 1 (aligning), y buffered; ch0: a in the first piece.
		select {
		case v := <-op.entered:
			if v != "a" {
				t.Fatalf("got %q", v)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no a")
		}
		time.Sleep(60 * time.Millisecond) // past the alignment timeout
		op.gate <- struct{}{}
		if id := waitAck(t, acks, rc); id != 1 {
			t.Fatalf("ack %d", id)
		}
		snap := readSnap(t, store, rc.handle(1, "x"))
		got := map[int]string{}
		for _, cs := range snap.Inputs {
			got[cs.Channel] = render(t, cs.Elements)
		}
		t.Logf("atReceiver=%v: unaligned %v state %q inputs %v", atReceiver, snap.Unaligned, snap.ModuleState, got)
		if !snap.Unaligned || string(snap.ModuleState) != "z,a" || got[0] != "b,c d" || got[1] != "" {
			t.Fatalf("atReceiver=%v: unaligned %v state %q inputs %v", atReceiver, snap.Unaligned, snap.ModuleState, got)
		}
		for _, v := range []string{"b", "c", "y", "d", "e"} {
			op.release(t, v)
		}
		drainAll(t, ro, 1)
		cancel()
		<-done

		s0b, r0b := local.New(local.Options{Name: "up0->x"})
		s1b, r1b := local.New(local.Options{Name: "up1->x"})
		so2, _ := local.New(local.Options{Name: "x->down", CapacityElements: 100})
		s0b.Send(context.Background(), stream.Records(batchOf("e")))
		s0b.Send(context.Background(), stream.EndOfPartition())
		s1b.Send(context.Background(), stream.Records(batchOf("y")))
		s1b.Send(context.Background(), stream.EndOfPartition())
		op2 := newGatedOp()
		for range 10 {
			op2.gate <- struct{}{}
		}
		task2, _ := host.New(host.Config{Name: "x", Operator: op2,
			Inputs:        []host.Input{{Port: 0, Receiver: r0b}, {Port: 1, Receiver: r1b}},
			Outputs:       []host.Output{{Senders: []stream.Sender{so2}}},
			Checkpointing: host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: 30 * time.Millisecond},
			Store:         store, Restore: rc.handle(1, "x")})
		if err := task2.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		seen := strings.Join(op2.seen, ",")
		for _, v := range []string{"z", "a", "b", "c", "d", "e", "y"} {
			if strings.Count(","+seen+",", ","+v+",") != 1 {
				t.Fatalf("restored saw %q: %s not once", seen, v)
			}
		}
	}
}
