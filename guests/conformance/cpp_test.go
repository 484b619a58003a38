package conformance

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/wasm"
)

// cppProbe starts the C++ probe (guests/cpp/sdktest: probe.cpp and
// emit.cpp, both including weir.h) with the default 64 MiB memory limit.
func cppProbe(t *testing.T) *wasm.Instance {
	t.Helper()
	e := newEngine(t)
	m, err := e.Load(context.Background(), "c++-probe", wasmOf(t, language{"c++", func(string) string {
		return filepath.Join("..", "cpp", "sdktest", "probe.wasm")
	}}, "probe"), wasm.Limits{CallTimeout: time.Minute}) // "grow" ran past the default 5s once in CI, on two loaded cores
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(context.Background(), wasm.InstanceConfig{WholeBatches: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}

// TestCppTwoFiles: a C++ operator of two files that both include weir.h
// links (the header's exports and state are weak definitions in C++), and
// the file without WEIR_OPERATOR emits through the same runtime: its
// records reach the host.
func TestCppTwoFiles(t *testing.T) {
	inst := cppProbe(t)
	var got []emission
	err := inst.Process(context.Background(), 0, records("a", "bc"), func(port int, b []byte) error {
		got = append(got, emission{port: port, batch: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sameEmissions(t, "c++ probe", got, []emission{{port: 0, batch: abi.EncodeBatch(
		abi.Record{Key: []byte("k0"), Value: []byte("<a>"), Timestamp: 0},
		abi.Record{Key: []byte("k1"), Value: []byte("<bc>"), Timestamp: 1})}})
}

// TestCppAllocationFailure: libc++ for wasm32 is built without exceptions,
// and its operator new returns NULL when the memory limit refuses to grow
// the memory; the operator then wrote through NULL, silently. weir.h's
// operator new (and new[], and the aligned forms) fail the call instead:
// a trap at the record, with the SDK's message and the host's note of the
// refused memory.grow, for one allocation past the limit (1 GiB, while the
// memory is far below it) and for a std::string that grows until memory
// runs out. new (std::nothrow) still returns NULL.
func TestCppAllocationFailure(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ value, message string }{
		{"alloc", "weir: operator new of 1073741824 bytes failed: out of memory"},
		{"aligned", "weir: operator new of 1073741824 bytes failed: out of memory"},
		{"grow", "weir: operator new of "},
	} {
		t.Run(c.value, func(t *testing.T) {
			inst := cppProbe(t)
			err := inst.Process(ctx, 0, records("a", c.value), func(int, []byte) error { return nil })
			want := `trap at record 2 of the batch (key "k1", value "` + c.value + `"): ` + c.message
			var te *wasm.TrapError
			if !errors.As(err, &te) || te.RecordIndex != 1 || !strings.HasPrefix(te.Message, c.message) ||
				!strings.HasSuffix(te.Message, " bytes failed: out of memory") || te.GrowRefused == 0 ||
				te.MemoryLimit != wasm.DefaultMemoryBytes || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), "refused: the operator's memory limit (limits.memory) is 64 MiB and it had ") {
				t.Errorf("got %v, want a trap at record 2 of the batch containing %q and naming the refused grow", err, want)
			}
		})
	}
	t.Run("nothrow", func(t *testing.T) {
		var got []emission
		err := cppProbe(t).Process(ctx, 0, records("nothrow"), func(port int, b []byte) error {
			got = append(got, emission{port: port, batch: b})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sameEmissions(t, "new (std::nothrow)", got, []emission{{port: 0, batch: abi.EncodeBatch(
			abi.Record{Key: []byte("k0"), Value: []byte("nothrow: null"), Timestamp: 0})}})
	})
}
