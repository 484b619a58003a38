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
		checkCase(t, genCase(uint64(1000+i)), newJoin)
	}
}
