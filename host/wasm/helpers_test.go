package wasm

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// newEngine returns an engine using the user's compilation cache (so Go
// guests compile once per machine), closed when the test ends.
func newEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// tickedEngine returns an engine whose watchdog sees only the times
// processPastDeadline sends it: a call's deadline counts none of the time
// a loaded machine takes to instantiate a module, or to run it up to the
// call. The engine is closed when the test ends.
func tickedEngine(t testing.TB) (*Engine, chan<- time.Time) {
	t.Helper()
	ticks := make(chan time.Time)
	e, err := NewEngine(Config{ticks: ticks, WatchdogInterval: DefaultWatchdogInterval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e, ticks
}

// processPastDeadline has inst, of a tickedEngine, process in, and once
// its weir_process call runs ticks the watchdog an interval apart until
// the call ends: an operator that does not return runs past its deadline
// as the watchdog counts it. It returns Process's error. The ticks come as
// fast as the watchdog takes them, faster than the clock: it suits an
// operator that loops at once, not one that works a while first.
func processPastDeadline(t testing.TB, inst *Instance, ticks chan<- time.Time, in []byte) error {
	t.Helper()
	// Process makes two calls: weir_input, then weir_process.
	inProcess := inst.calls.Load() + 3
	done := make(chan error, 1)
	go func() { done <- inst.Process(context.Background(), 0, in, newOut().emit) }()
	for inst.calls.Load() < inProcess {
		select {
		case err := <-done: // it ended before weir_process ran
			return err
		default:
			goruntime.Gosched()
		}
	}
	now := time.Now()
	for {
		select {
		case err := <-done:
			return err
		case ticks <- now:
			now = now.Add(DefaultWatchdogInterval)
		}
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func watPassthrough(t testing.TB) []byte {
	return readFile(t, filepath.Join("..", "..", "guests", "wat", "passthrough.wasm"))
}

func misbehave(t testing.TB) []byte { return readFile(t, filepath.Join("testdata", "misbehave.wasm")) }

const examples = "github.com/weirhq/weir/guests/go/examples/"

func goGuest(t testing.TB, name string) []byte { return guestbuild.MustBuild(t, examples+name) }

// testLogger collects the log output of the guests.
func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// instantiate loads and instantiates a module with the given config.
func instantiate(t testing.TB, e *Engine, name string, wasm []byte, lim Limits, cfg InstanceConfig) *Instance {
	t.Helper()
	ctx := context.Background()
	if lim.CallTimeout == 0 {
		lim.CallTimeout = time.Minute // a loaded CI machine is slow; deadlines are tested explicitly
	}
	m, err := e.Load(ctx, name, wasm, lim)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Tests see their batches whole, as they wrote them; pace_test.go
	// gives its instances a pacer.
	cfg.WholeBatches = true
	inst, err := m.Instantiate(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}

// out collects emitted records per port.
type out struct {
	recs map[int][]abi.Record
}

func newOut() *out { return &out{recs: map[int][]abi.Record{}} }

func (o *out) emit(port int, b []byte) error {
	rs, err := abi.DecodeBatch(b)
	if err != nil {
		return err
	}
	o.recs[port] = append(o.recs[port], rs...)
	return nil
}

// kv is a compact record for comparisons.
type kv struct {
	K, V string
	TS   int64
}

func (o *out) port(p int) []kv {
	var r []kv
	for _, x := range o.recs[p] {
		r = append(r, kv{string(x.Key), string(x.Value), x.Timestamp})
	}
	return r
}

func batchOf(recs ...kv) []byte {
	rs := make([]abi.Record, len(recs))
	for i, r := range recs {
		rs[i] = abi.Record{Key: []byte(r.K), Value: []byte(r.V), Timestamp: r.TS}
	}
	return abi.EncodeBatch(rs...)
}
