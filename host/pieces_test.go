package host_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// gatedOp is a slow, Paced operator under the test's control: it takes one
// record per call, tells entered which record it is about to process and
// waits for gate; it keeps the values it processed as its state and passes
// each record through.
type gatedOp struct {
	entered chan string
	gate    chan struct{}
	seen    []string
}

func newGatedOp() *gatedOp {
	return &gatedOp{entered: make(chan string, 64), gate: make(chan struct{}, 64)}
}

func (g *gatedOp) RecordsWithin(time.Duration) int { return 1 }

func (g *gatedOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	var out abi.Builder
	for it.Next() {
		r := it.Record()
		g.entered <- string(r.Value)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.seen = append(g.seen, string(r.Value))
		out.Add(r.Key, r.Value, r.Timestamp)
	}
	return emit(0, append([]byte(nil), out.Bytes()...))
}

func (g *gatedOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }

func (g *gatedOp) Snapshot(ctx context.Context, w io.Writer) error {
	_, err := io.WriteString(w, strings.Join(g.seen, ","))
	return err
}

func (g *gatedOp) Restore(ctx context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	if len(b) > 0 {
		g.seen = strings.Split(string(b), ",")
	}
	return err
}

func (g *gatedOp) CheckpointComplete(context.Context, int64) error { return nil }
func (g *gatedOp) Close(context.Context) error                     { return nil }

// release lets the operator process its next record, which must be want.
func (g *gatedOp) release(t *testing.T, want string) {
	t.Helper()
	select {
	case v := <-g.entered:
		if v != want {
			t.Fatalf("operator got %q, want %q", v, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("operator never got %q", want)
	}
	g.gate <- struct{}{}
}

func batchOf(vals ...string) []byte {
	var b abi.Builder
	for _, v := range vals {
		b.Add([]byte("k"), []byte(v), 1)
	}
	return append([]byte(nil), b.Bytes()...)
}

// drainAll polls r until it has n elements.
func drainAll(t *testing.T, r stream.Receiver, n int) []stream.Element {
	t.Helper()
	var got []stream.Element
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		d, ok, err := r.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, d.Element)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %q, want %d elements", render(t, got), n)
		}
		time.Sleep(time.Millisecond)
	}
	return got
}

// An unaligned barrier that arrives while a slow operator works through a
// large batch does not wait for the batch: the task takes it between two
// pieces, the snapshot holds the operator's state so far and the rest of
// the batch as input channel state, and a task restored from it processes
// the rest, so that every record counts exactly once.
//
// The barrier overtakes e, queued behind the batch: with the priority taken
// at the sender, e is the upstream task's output channel state; at the
// receiver, it is this task's input channel state, after the rest.
func TestUnalignedBarrierBetweenPieces(t *testing.T) {
	for _, atReceiver := range []bool{false, true} {
		t.Run(fmt.Sprintf("atReceiver=%v", atReceiver), func(t *testing.T) { testUnalignedBarrierBetweenPieces(t, atReceiver) })
	}
}

func testUnalignedBarrierBetweenPieces(t *testing.T, atReceiver bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->x", PriorityAtReceiver: atReceiver})
	so, ro := local.New(local.Options{Name: "x->down"})
	if err := si.Send(ctx, stream.Records(batchOf("a", "b", "c", "d"))); err != nil {
		t.Fatal(err)
	}
	if err := si.Send(ctx, stream.Records(batchOf("e"))); err != nil {
		t.Fatal(err)
	}
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

	// The operator is in the batch's first record when the barrier comes.
	select {
	case v := <-op.entered:
		if v != "a" {
			t.Fatalf("first record %q", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("operator never called")
	}
	over, err := si.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Unaligned: true}))
	wantOver, wantIn := "e", "b,c,d"
	if atReceiver {
		wantOver, wantIn = "", "b,c,d e"
	}
	if err != nil || render(t, over) != wantOver {
		t.Fatalf("overtaken upstream %q %v", render(t, over), err)
	}
	op.gate <- struct{}{}
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "x"))
	if string(snap.ModuleState) != "a" {
		t.Fatalf("state %q, want the first record's", snap.ModuleState)
	}
	// The rest of the batch, then what the barrier overtook.
	if len(snap.Inputs) != 1 || render(t, snap.Inputs[0].Elements) != wantIn {
		t.Fatalf("input channel state %+v", snap.Inputs)
	}
	if len(snap.Outputs) != 1 || render(t, snap.Outputs[0].Elements) != "a" {
		t.Fatalf("output channel state %+v", snap.Outputs)
	}
	// The first run goes on: the rest of the batch was not lost to it.
	for _, v := range []string{"b", "c", "d", "e"} {
		op.release(t, v)
	}
	if s := render(t, drainAll(t, ro, 6)); s != "B1 a b c d e" {
		t.Fatalf("first run's output %q", s)
	}
	cancel()
	<-done

	// Restored from checkpoint 1: the output channel state goes out again,
	// the operator gets the input channel state, then new input.
	si2, ri2 := local.New(local.Options{Name: "up->x"})
	so2, ro2 := local.New(local.Options{Name: "x->down"})
	si2.Send(context.Background(), stream.Records(batchOf("f")))
	si2.Send(context.Background(), stream.EndOfPartition())
	op2 := newGatedOp()
	for range 5 {
		op2.gate <- struct{}{}
	}
	task2, err := host.New(host.Config{Name: "x", Operator: op2, Inputs: []host.Input{{Receiver: ri2}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so2}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Restore: rc.handle(1, "x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := task2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "a,b,c,d,f"
	if atReceiver {
		want = "a,b,c,d,e,f"
	}
	if s := strings.Join(op2.seen, ","); s != want {
		t.Fatalf("restored operator saw %q, want %q", s, want)
	}
	n := strings.Count(want, ",") + 2
	if s := render(t, drainAll(t, ro2, n)); s != strings.ReplaceAll(want, ",", " ")+" EOP" {
		t.Fatalf("restored output %q", s)
	}
}

// Between the pieces of a batch the task sends what the operator emitted so
// far, in every mode: downstream does not wait for the whole batch.
func TestOutputFlowsBetweenPieces(t *testing.T) {
	for _, mode := range []barrier.Mode{barrier.Aligned, barrier.AtLeastOnce, barrier.Unaligned} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			si, ri := local.New(local.Options{Name: "up->x"})
			so, ro := local.New(local.Options{Name: "x->down"})
			si.Send(ctx, stream.Records(batchOf("a", "b", "c")))
			si.Send(ctx, stream.EndOfPartition())
			op := newGatedOp()
			task, err := host.New(host.Config{Name: "x", Operator: op, Inputs: []host.Input{{Receiver: ri}},
				Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Checkpointing: host.Checkpointing{Mode: mode}})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx) }()
			op.release(t, "a")
			// b is being processed (and waits): a is already downstream.
			if s := render(t, drainAll(t, ro, 1)); s != "a" {
				t.Fatalf("output %q", s)
			}
			op.release(t, "b")
			op.release(t, "c")
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if s := render(t, drainAll(t, ro, 3)); s != "b c EOP" {
				t.Fatalf("output %q", s)
			}
		})
	}
}

// An aligned checkpoint whose barrier waits behind a slow batch longer than
// the alignment timeout goes unaligned between two pieces of the batch.
func TestAlignmentTimeoutBetweenPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->x"})
	so, _ := local.New(local.Options{Name: "x->down"})
	si.Send(ctx, stream.Records(batchOf("a", "b", "c")))
	rc, acks := ackWaiter()
	op := newGatedOp()
	task, err := host.New(host.Config{Name: "x", Operator: op, Inputs: []host.Input{{Receiver: ri}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.AlignedTimeout, AlignmentTimeout: 10 * time.Millisecond},
		Store:         store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	if v := <-op.entered; v != "a" {
		t.Fatalf("first record %q", v)
	}
	// While a is processed: d, and a barrier triggered a second ago, so
	// already over the timeout.
	si.Send(ctx, stream.Records(batchOf("d")))
	si.Send(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Timestamp: time.Now().Add(-time.Second).UnixMilli()}))
	op.gate <- struct{}{}
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "x"))
	if !snap.Unaligned || string(snap.ModuleState) != "a" {
		t.Fatalf("unaligned %v, state %q", snap.Unaligned, snap.ModuleState)
	}
	if len(snap.Inputs) != 1 || render(t, snap.Inputs[0].Elements) != "b,c d" {
		t.Fatalf("input channel state %+v", snap.Inputs)
	}
	for _, v := range []string{"b", "c", "d"} {
		op.release(t, v)
	}
	cancel()
	<-done
}

// limitedSource is a blockingSource that records the batch limits a task
// sets.
type limitedSource struct {
	blockingSource
	mu     sync.Mutex
	limits []int
}

func (s *limitedSource) LimitBatch(n int) {
	s.mu.Lock()
	s.limits = append(s.limits, n)
	s.mu.Unlock()
}

// pacedOp passes batches through; its pace starts at 1 record and is
// paces[i] after call i.
type pacedOp struct {
	joinOp
	paces  []int
	calls  int
	within int
}

func (p *pacedOp) RecordsWithin(time.Duration) int { return p.within }

func (p *pacedOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	if p.calls < len(p.paces) {
		p.within = p.paces[p.calls]
	}
	p.calls++
	return emit(0, append([]byte(nil), batch...))
}

// A source task asks a BatchLimiter source for batches its Paced operator
// processes in PieceTime — before the first Poll, and again whenever the
// operator's pace changes — since it cannot take a checkpoint in the middle
// of a polled batch.
func TestSourceBatchFollowsOperatorPace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &limitedSource{blockingSource: blockingSource{batches: [][]byte{batchOf("a"), batchOf("b"), batchOf("c")}}}
	op := &pacedOp{within: 1, paces: []int{1, 500, 500}} // faster than it first looked
	so, ro := local.New(local.Options{Name: "src->down"})
	task, err := host.New(host.Config{Name: "src", Source: src, Operator: op, Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	drainAll(t, ro, 3)
	cancel()
	<-done
	src.mu.Lock()
	defer src.mu.Unlock()
	if fmt.Sprint(src.limits) != "[1 500]" {
		t.Fatalf("limits set %v, want [1 500]: 1 before the first Poll, 500 once the pace changed", src.limits)
	}
}
