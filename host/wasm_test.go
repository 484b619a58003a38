package host_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"

	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/wasm"
)

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
