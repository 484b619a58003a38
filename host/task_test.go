package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// countOp forwards its input and counts records; its state is the count.
type countOp struct {
	count    uint64
	endPorts []int
	err      error
	closed   bool
}

func (o *countOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	if o.err != nil {
		return o.err
	}
	n, _ := abi.BatchCount(batch)
	o.count += uint64(n)
	return emit(0, batch)
}
func (o *countOp) EndOfInput(ctx context.Context, port int, emit func(int, []byte) error) error {
	o.endPorts = append(o.endPorts, port)
	return nil
}
func (o *countOp) Snapshot(ctx context.Context, w io.Writer) error {
	_, err := w.Write(binary.LittleEndian.AppendUint64(nil, o.count))
	return err
}
func (o *countOp) Restore(ctx context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err == nil && len(b) == 8 {
		o.count = binary.LittleEndian.Uint64(b)
	}
	return err
}
func (o *countOp) CheckpointComplete(context.Context, int64) error { return nil }
func (o *countOp) Close(context.Context) error                     { o.closed = true; return nil }

// fixture is one task over pre-filled input channels and one output.
type fixture struct {
	t       *testing.T
	senders []*local.Sender
	inputs  []host.Input
	out     *local.Receiver
	outS    *local.Sender
	store   *storage.Dir
	rc      *recorder
}

func newFixture(t *testing.T, ports []int, opts local.Options) *fixture {
	f := &fixture{t: t, rc: newRecorder()}
	for _, p := range ports {
		s, r := local.New(opts)
		f.senders = append(f.senders, s)
		f.inputs = append(f.inputs, host.Input{Port: p, Receiver: r})
	}
	f.outS, f.out = local.New(local.Options{Name: "out"})
	f.store, _ = storage.NewDir(t.TempDir())
	return f
}

func (f *fixture) send(ch int, els ...stream.Element) {
	f.t.Helper()
	for _, e := range els {
		if err := f.senders[ch].Send(context.Background(), e); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) task(op host.Operator, ck host.Checkpointing) *host.Task {
	f.t.Helper()
	tk, err := host.New(host.Config{Name: "x", Operator: op, Inputs: f.inputs,
		Outputs: []host.Output{{Senders: []stream.Sender{f.outS}}}, Checkpointing: ck, Store: f.store, Listener: f.rc})
	if err != nil {
		f.t.Fatal(err)
	}
	return tk
}

func (f *fixture) output() string {
	var els []stream.Element
	for {
		d, ok, _ := f.out.Poll()
		if !ok {
			return render(f.t, els)
		}
		els = append(els, d.Element)
	}
}

func b(id int64) stream.Element { return stream.BarrierElement(stream.Barrier{ID: id}) }

var eop = stream.EndOfPartition()

// A cancel marker aborts the alignment, releases the blocked channel and is
// forwarded downstream; the late barrier is then stale.
func TestCancelMarkerAbortsAndReleases(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	f.send(0, rec("a", "a"), b(1), rec("b", "b"), eop)
	f.send(1, rec("c", "c"), stream.Cancel(1), rec("d", "d"), b(1), eop)
	if err := f.task(nil, host.Checkpointing{Mode: barrier.Aligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a c C1 b d EOP" {
		t.Fatalf("output %q", got)
	}
	if len(f.rc.declines) != 1 || f.rc.declines[0] != "x 1 cancelled: checkpoint 1 cancelled upstream" {
		t.Fatalf("declines %v", f.rc.declines)
	}
}

// An alignment that buffers more than MaxBufferedBytes declines the
// checkpoint with the reason and goes on processing.
func TestAlignmentOverLimitDeclines(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	big := strings.Repeat("x", 40)
	f.send(0, b(1), rec("1", big), rec("2", big), eop)
	f.send(1, rec("x", "x"), rec("y", "y"), b(1), eop)
	if err := f.task(nil, host.Checkpointing{Mode: barrier.Aligned, MaxBufferedBytes: 100}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "x y C1 "+big+" "+big+" EOP" {
		t.Fatalf("output %q", got)
	}
	if len(f.rc.declines) != 1 || !regexp.MustCompile(`^x 1 declined: alignment buffered \d+ bytes > limit 100$`).MatchString(f.rc.declines[0]) {
		t.Fatalf("declines %v", f.rc.declines)
	}
	if len(f.rc.acks) != 0 {
		t.Fatal("a declined checkpoint was acknowledged")
	}
}

// Beyond its memory budget the alignment buffer spills to a file that is
// removed once the buffered data was processed; the data keeps its order.
func TestAlignmentSpillsAndCleansUp(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	spill := t.TempDir()
	f.send(0, rec("a", "a"), b(1), rec("b", "b"), rec("c", "c"), rec("d", "d"), eop)
	f.send(1, rec("1", "1"), rec("2", "2"), rec("3", "3"), rec("4", "4"), b(1), eop)
	op := &countOp{}
	if err := f.task(op, host.Checkpointing{Mode: barrier.Aligned, AlignmentMemory: 30, SpillDir: spill}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a 1 2 3 4 B1 b c d EOP" {
		t.Fatalf("output %q", got)
	}
	m := host.MetricsFromMap(f.rc.metrics[1]["x"])
	if m.BufferedBytes == 0 || m.SpilledBytes == 0 || m.SpilledBytes >= m.BufferedBytes {
		t.Fatalf("buffered %d spilled %d", m.BufferedBytes, m.SpilledBytes)
	}
	snap := readSnap(t, f.store, f.rc.handle(1, "x"))
	if binary.LittleEndian.Uint64(snap.ModuleState) != 5 {
		t.Fatalf("state count %d, want 5", binary.LittleEndian.Uint64(snap.ModuleState))
	}
	if ents, _ := os.ReadDir(spill); len(ents) != 0 {
		t.Fatalf("spill files left: %v", ents)
	}
}

// A priority barrier reaching an aligned task is handled after the data it
// overtook, so that data is in the snapshot's state, not lost.
func TestPriorityBarrierInAlignedMode(t *testing.T) {
	f := newFixture(t, []int{0}, local.Options{PriorityAtReceiver: true})
	f.send(0, rec("a", "a"), rec("b", "b"))
	for id := int64(1); id <= 2; id++ {
		if _, err := f.senders[0].SendPriority(context.Background(), stream.BarrierElement(stream.Barrier{ID: id, Unaligned: true})); err != nil {
			t.Fatal(err)
		}
	}
	f.send(0, rec("c", "c"), eop)
	op := &countOp{}
	if err := f.task(op, host.Checkpointing{Mode: barrier.Aligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a b B1 B2 c EOP" {
		t.Fatalf("output %q", got)
	}
	for _, id := range []int64{1, 2} {
		snap := readSnap(t, f.store, f.rc.handle(id, "x"))
		if binary.LittleEndian.Uint64(snap.ModuleState) != 2 || snap.Unaligned {
			t.Fatalf("snapshot %d: %+v", id, snap)
		}
	}
}

// Savepoints are aligned even in unaligned mode.
func TestSavepointIsAligned(t *testing.T) {
	f := newFixture(t, []int{0, 1}, local.Options{})
	sp := stream.BarrierElement(stream.Barrier{ID: 1, Type: stream.Savepoint})
	f.send(0, sp, rec("a", "a"), eop)
	f.send(1, rec("b", "b"), sp, eop)
	if err := f.task(&countOp{}, host.Checkpointing{Mode: barrier.Unaligned}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "b B1 a EOP" {
		t.Fatalf("output %q", got)
	}
	snap := readSnap(t, f.store, f.rc.handle(1, "x"))
	if snap.Unaligned || len(snap.Inputs)+len(snap.Outputs) != 0 {
		t.Fatalf("savepoint %+v", snap)
	}
}

// EndOfInput(port) comes once every channel of the port ended.
func TestEndOfInputPerPort(t *testing.T) {
	f := newFixture(t, []int{0, 0, 1}, local.Options{})
	f.send(0, eop)
	f.send(1, rec("a", "a"), rec("b", "b"), eop)
	f.send(2, eop)
	op := &countOp{}
	if err := f.task(op, host.Checkpointing{}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(op.endPorts) != 2 || op.endPorts[0] != 1 || op.endPorts[1] != 0 {
		t.Fatalf("end of input ports %v, want [1 0]", op.endPorts)
	}
	if !op.closed {
		t.Fatal("operator not closed")
	}
}

// An operator error fails the task with a one-line reason naming the task,
// reported to the listener.
func TestOperatorFailureNamesTask(t *testing.T) {
	f := newFixture(t, []int{0}, local.Options{})
	f.send(0, rec("a", "a"))
	op := &countOp{err: errors.New("trap in weir_process\nwasm backtrace ...")}
	err := f.task(op, host.Checkpointing{}).Run(context.Background())
	var te *host.TaskError
	if !errors.As(err, &te) || te.Task != "x" || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "task x: operator: process port 0: trap in weir_process") {
		t.Fatalf("error %q", err)
	}
	if len(f.rc.failed) != 1 || f.rc.failed[0] != err.Error() {
		t.Fatalf("listener failures %v", f.rc.failed)
	}
	// Its channels are released: upstream cannot send anymore.
	if err := f.senders[0].Send(context.Background(), rec("b", "b")); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("send to a failed task: %v", err)
	}
}

// namedOp is a countOp whose errors name it, as host/wasm's do.
type namedOp struct{ countOp }

func (o *namedOp) Name() string { return "join[0]" }

// The error of a Named operator names the operator and the call itself:
// the task adds no "operator: process port N:" before it, only the port
// when it has several; Cause leaves out the task.
func TestNamedOperatorFailureNamesEachOnce(t *testing.T) {
	for _, c := range []struct {
		ports []int
		want  string
	}{
		{[]int{0}, "task x: operator join[0]: weir_process: trap at record 1 of the batch: wasm error: unreachable"},
		{[]int{0, 1}, "task x: operator join[0]: weir_process: trap at record 1 of the batch: wasm error: unreachable (input port 1)"},
	} {
		f := newFixture(t, c.ports, local.Options{})
		f.send(len(c.ports)-1, rec("a", "a"))
		cause := errors.New("operator join[0]: weir_process: trap at record 1 of the batch: wasm error: unreachable")
		op := &namedOp{countOp{err: cause}}
		err := f.task(op, host.Checkpointing{}).Run(context.Background())
		var te *host.TaskError
		if !errors.As(err, &te) || !errors.Is(err, cause) || err.Error() != c.want {
			t.Errorf("ports %v: error %q, want %q", c.ports, err, c.want)
			continue
		}
		if got := te.Cause(); got != strings.TrimPrefix(err.Error(), "task x: ") {
			t.Errorf("ports %v: cause %q", c.ports, got)
		}
	}
}

// Cancelling the context stops the task and releases everything; it is not
// reported as a failure.
func TestCancelReleases(t *testing.T) {
	f := newFixture(t, []int{0, 0}, local.Options{})
	spill := t.TempDir()
	f.send(0, b(1), rec("a", "a"), rec("b", "b"))
	op := &countOp{}
	ctx, cancel := context.WithCancel(context.Background())
	tk := f.task(op, host.Checkpointing{Mode: barrier.Aligned, AlignmentMemory: 1, SpillDir: spill})
	done := make(chan error)
	go func() { done <- tk.Run(ctx) }()
	for n, _ := f.senders[0].Queued(); n > 0; n, _ = f.senders[0].Queued() {
		time.Sleep(time.Millisecond) // until the task took (and buffered) everything
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if !op.closed || len(f.rc.failed) != 0 {
		t.Fatalf("closed %v failures %v", op.closed, f.rc.failed)
	}
	if ents, _ := os.ReadDir(spill); len(ents) != 0 {
		t.Fatalf("spill files left: %v", ents)
	}
}

// failingStore refuses every write, naming the key as a Store does.
type failingStore struct{ *snapshot.MemStore }

func (failingStore) Put(ctx context.Context, key string, r io.Reader) error {
	io.CopyN(io.Discard, r, 10)
	return fmt.Errorf("put %s: disk full", key)
}

// A snapshot that cannot be written declines the checkpoint; the task goes
// on.
func TestSnapshotWriteFailureDeclines(t *testing.T) {
	f := newFixture(t, []int{0}, local.Options{})
	f.send(0, rec("a", "a"), b(1), rec("b", "b"), eop)
	tk, err := host.New(host.Config{Name: "x", Operator: &countOp{}, Inputs: f.inputs,
		Outputs: []host.Output{{Senders: []stream.Sender{f.outS}}}, Store: failingStore{snapshot.NewMemStore()}, Listener: f.rc})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); got != "a B1 b EOP" {
		t.Fatalf("output %q", got)
	}
	if len(f.rc.declines) != 1 || f.rc.declines[0] != "x 1 failed: write snapshot: put chk-1/x: disk full" || len(f.rc.acks) != 0 {
		t.Fatalf("declines %v acks %v", f.rc.declines, f.rc.acks)
	}
}
