package host_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

var _ host.Paced = (*wasm.Instance)(nil)

// wasmOperators compiles a Go guest example and returns a factory of
// instances.
func wasmOperators(t *testing.T, example string, config []byte) func() host.Operator {
	t.Helper()
	ctx := context.Background()
	bin := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/"+example)
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	m, err := e.Load(ctx, example, bin, wasm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return func() host.Operator {
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Name: example, Config: config, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
}

// TestSeed004Wasm runs seed 004's example in every mode with the Go guest
// join compiled to WebAssembly and run by host/wasm (wazero).
func TestSeed004Wasm(t *testing.T) {
	checkSeed004(t, wasmOperators(t, "join", nil))
}

// TestRecoveryPropertyWasm runs the recovery property over random cases with
// the wasm join.
func TestRecoveryPropertyWasm(t *testing.T) {
	newJoin := wasmOperators(t, "join", nil)
	n := 4
	if testing.Short() {
		n = 2
	}
	if s := os.Getenv("WEIR_PROPERTY_CASES_WASM"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < n; i++ {
		checkCase(t, genCase(uint64(1000+i)), newJoin, verifyJoin)
	}
}

// TestWordcountExactlyOnceWasm runs the wasm wordcount between two word
// sources and a two-phase-commit sink, with failures and recoveries in the
// exactly-once modes: every word's committed running counts must be exactly
// 1..N, no gap and no repeat.
func TestWordcountExactlyOnceWasm(t *testing.T) {
	newWC := wasmOperators(t, "wordcount", nil)
	n := 6
	if testing.Short() {
		n = 3
	}
	for i := 0; i < n; i++ {
		c := genCase(uint64(2000 + i))
		if c.mode == barrier.AtLeastOnce {
			c.mode = barrier.Unaligned
		}
		c.left, c.right = wordsOf(c.left), wordsOf(c.right)
		checkCase(t, c, newWC, verifyRunningCounts)
	}
}

// A wasm operator that is slow per record gets a large batch in pieces
// (wasm.Instance is a host.Paced operator), so an unaligned barrier is
// taken in the middle of the batch: the snapshot holds the rest as input
// channel state, and with the output before the barrier and the output
// channel state it adds up to the batch — every record once, in order.
func TestWasmSlowBatchUnalignedBetweenPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin, err := os.ReadFile(filepath.Join("wasm", "testdata", "misbehave.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, "slow", bin, wasm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// Mode 'd' spins per record and passes the batch through: about 2 ms
	// per record, from the best of a few timed calls.
	slow := func(spin uint32) *wasm.Instance {
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Name: "slow", Config: binary.LittleEndian.AppendUint32([]byte("d"), spin)})
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	const probeSpin = 1 << 20
	cal := slow(probeSpin)
	best := time.Hour
	for range 5 {
		start := time.Now()
		if err := cal.Process(ctx, 0, batchOf("x"), func(int, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	cal.Close(ctx)
	spin := uint32(max(1, float64(probeSpin)*float64(2*time.Millisecond)/float64(best)))

	const n = 300 // ~600 ms of work in one batch
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	store, _ := storage.NewDir(t.TempDir())
	si, ri := local.New(local.Options{Name: "up->slow"})
	so, ro := local.New(local.Options{Name: "slow->down"})
	si.Send(ctx, stream.Records(batchOf(vals...)))
	rc, acks := ackWaiter()
	op := slow(spin)
	defer op.Close(ctx)
	task, err := host.New(host.Config{Name: "slow", Operator: op, Inputs: []host.Input{{Receiver: ri}},
		Outputs:       []host.Output{{Senders: []stream.Sender{so}}},
		Checkpointing: host.Checkpointing{Mode: barrier.Unaligned}, Store: store, Listener: rc})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	for task.Stats().RecordsIn < n {
		time.Sleep(time.Millisecond)
	}
	// The batch is being processed.
	if _, err := si.SendPriority(ctx, stream.BarrierElement(stream.Barrier{ID: 1, Unaligned: true})); err != nil {
		t.Fatal(err)
	}
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "slow"))
	if len(snap.Inputs) != 1 || len(snap.Inputs[0].Elements) != 1 {
		t.Fatalf("input channel state %+v: want the rest of the batch", snap.Inputs)
	}
	rest, err := abi.DecodeBatch(snap.Inputs[0].Elements[0].Batch)
	if err != nil || len(rest) == 0 || len(rest) >= n {
		t.Fatalf("rest of the batch: %d records (%v)", len(rest), err)
	}
	// Downstream: output before the barrier, then the barrier.
	var before []stream.Element
	for {
		d, ok, err := ro.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		if d.Kind == stream.KindBarrier {
			break
		}
		before = append(before, d.Element)
	}
	var outState []stream.Element
	for _, cs := range snap.Outputs {
		outState = append(outState, cs.Elements...)
	}
	var got []string
	for _, els := range [][]stream.Element{before, outState, {snap.Inputs[0].Elements[0]}} {
		for _, e := range els {
			rs, err := abi.DecodeBatch(e.Batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				got = append(got, string(r.Value))
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(vals, ",") {
		t.Fatalf("output before the barrier, output state and input state: %d records, want %d in order:\n%v", len(got), n, got)
	}
	cancel()
	<-done // the task no longer calls op: its pace can be read
	t.Logf("checkpoint taken with %d of %d records left (pieces of ~%d)", len(rest), n, op.RecordsWithin(host.PieceTime))
}
