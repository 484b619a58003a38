package wasm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// instantiateWithin instantiates m in a goroutine and fails the test if
// that takes longer than a generous hang detector.
func instantiateWithin(t *testing.T, m *Module, cfg InstanceConfig) (*Instance, error) {
	t.Helper()
	type result struct {
		inst *Instance
		err  error
	}
	done := make(chan result, 1)
	go func() {
		inst, err := m.Instantiate(context.Background(), cfg)
		done <- result{inst, err}
	}()
	select {
	case r := <-done:
		if r.inst != nil {
			t.Cleanup(func() { r.inst.Close(context.Background()) })
		}
		return r.inst, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Instantiate still runs after 30s")
		return nil, nil
	}
}

// TestStartFunction: a module's start function (its start section, which
// AssemblyScript emits for top-level code) runs under the call deadline
// like every export, and its failures are one-line typed errors.
func TestStartFunction(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()

	m, err := e.Load(ctx, "spin", readFile(t, filepath.Join("testdata", "start_loop.wasm")), Limits{CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = instantiateWithin(t, m, InstanceConfig{})
	var de *DeadlineError
	if !errors.As(err, &de) || err.Error() != "operator spin: start function: exceeded the 200ms call deadline (stuck; if merely slow, raise limits.timeout)" {
		t.Fatalf("looping start function: got %v", err)
	}

	m, err = e.Load(ctx, "abort", readFile(t, filepath.Join("testdata", "start_abort.wasm")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = instantiateWithin(t, m, InstanceConfig{})
	var te *TrapError
	if !errors.As(err, &te) || err.Error() != "operator abort: start function: trap: abort in top-level code (wasm error: unreachable)" {
		t.Fatalf("aborting start function: got %v", err)
	}

	// A start function that returns is run once, before weir_init, as
	// before: an AssemblyScript guest works.
	code := readFile(t, filepath.Join("..", "..", "guests", "assemblyscript", "examples", "uppercase.wasm"))
	inst := instantiate(t, e, "as", code, Limits{}, InstanceConfig{})
	o := newOut()
	if err := inst.Process(ctx, 0, batchOf(kv{"k", "abc", 1}), o.emit); err != nil {
		t.Fatal(err)
	}
	if got, want := o.port(0), []kv{{"k", "ABC", 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// oneLine fails the test unless err is a one-line error.
func oneLine(t *testing.T, err error) {
	t.Helper()
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("want a one-line error, got %q", err)
	}
}

func bombs(t testing.TB) []byte { return readFile(t, filepath.Join("testdata", "bombs.wasm")) }

// countingWriter counts what it is given and keeps none of it. Past stopAt
// bytes it fails, so a test of a host that never stops a guest ends.
type countingWriter struct {
	n, stopAt int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.n > w.stopAt {
		return 0, errors.New("test writer: too much state")
	}
	return len(p), nil
}

// TestSnapshotStateLimit: a guest that writes state without end is stopped
// at the state limit. The task collects a snapshot in memory, so without a
// limit such a guest takes down the host before its call deadline: it
// writes its whole memory per call, gigabytes a second.
func TestSnapshotStateLimit(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "hoard", bombs(t), Limits{CallTimeout: time.Second}, InstanceConfig{Config: []byte("s")})
	w := &countingWriter{stopAt: 2 * DefaultMaxStateBytes}
	err := inst.Snapshot(context.Background(), w)
	if w.n > DefaultMaxStateBytes {
		t.Fatalf("the writer was handed %d bytes, over the %d-byte limit (%v)", w.n, DefaultMaxStateBytes, err)
	}
	oneLine(t, err)
	var fe *FaultError
	if !errors.As(err, &fe) || err.Error() != "operator hoard: weir_snapshot: snapshot_write: state over the 1073741824-byte limit" {
		t.Fatalf("got %v", err)
	}
}

// countingHandler counts the log records below warn level (the operator's
// lines, not the host's warnings) and remembers the longest message.
type countingHandler struct {
	mu           sync.Mutex
	records      int
	longest      int
	total        int
	slog.Handler // for Enabled, WithAttrs, WithGroup
}

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		return nil // the host's warnings, not the operator's lines
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records++
	h.total += len(r.Message)
	h.longest = max(h.longest, len(r.Message))
	return nil
}

// TestHugeStdoutWrite: one fd_write of a guest's whole memory without a
// newline is cut into log records in time linear in its size. The host is
// inside the write, where no deadline can stop it.
func TestHugeStdoutWrite(t *testing.T) {
	e := newEngine(t)
	h := &countingHandler{Handler: slog.NewTextHandler(io.Discard, nil)}
	inst := instantiate(t, e, "chatty", bombs(t), Limits{}, InstanceConfig{Config: []byte("o"), Logger: slog.New(h), LogRate: -1})
	done := make(chan error, 1)
	go func() { done <- inst.Process(context.Background(), 0, batchOf(), newOut().emit) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a 63 MiB write to stdout still runs after 30s")
	}
	inst.Close(context.Background())
	want := DefaultMemoryBytes - PageSize
	if h.total != want || h.longest != maxLogLine || h.records != (want+maxLogLine-1)/maxLogLine {
		t.Fatalf("%d records of %d bytes in all, the longest %d; want %d bytes in records of %d", h.records, h.total, h.longest, want, maxLogLine)
	}
}

// withLocals returns testdata/bad/locals.wasm with the single i64 local of
// each of its first n functions that declare one raised to count locals.
func withLocals(t *testing.T, n int, count uint64) []byte {
	t.Helper()
	b := bad(t, "locals")
	out := append([]byte(nil), b[:8]...)
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		if id != secCode {
			out = append(out, b[start:r.off]...)
			continue
		}
		s := &reader{b: body}
		fns, _ := s.u32()
		nb := appendULEB(nil, uint64(fns))
		for range fns {
			size, _ := s.u32()
			fn, _ := s.bytes(uint64(size))
			if n > 0 && bytes.HasPrefix(fn, []byte{1, 1, 0x7e}) { // one i64
				n--
				fn = append(append(appendULEB([]byte{1}, count), 0x7e), fn[3:]...)
			}
			nb = appendULEB(nb, uint64(len(fn)))
			nb = append(nb, fn...)
		}
		out = appendSection(out, secCode, nb)
	}
	if n > 0 {
		t.Fatalf("%d functions short", n)
	}
	return out
}

// TestLocals: a local declaration is a count and a type, so a module of a
// few hundred bytes can declare billions of locals, and wazero allocates
// host memory for each one when it compiles the module (1.3 GiB and 7 s
// for 50 million). Modules declaring more than real code does are refused
// before that.
func TestLocals(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		code   []byte
		detail string
	}{
		{"many functions", withLocals(t, 100, maxFunctionLocals), "declares 5000000 locals in all, over the limit of 4194304"},
		{"one function", withLocals(t, 1, 1<<32-1), "function 6 declares 4294967295 locals, over the limit of 50000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, check := range []struct {
				how string
				err error
			}{
				{"Check", Check("m", c.code, Limits{})},
				{"Load", func() error { _, err := e.Load(ctx, "m", c.code, Limits{}); return err }()},
				{"Validate", e.Validate(ctx, "m", c.code, Limits{})},
			} {
				var ve *ValidationError
				if !errors.As(check.err, &ve) || !errors.Is(check.err, ErrMemoryLimit) || check.err.Error() != "module m: "+c.detail {
					t.Fatalf("%s: got %v, want a *ValidationError %q", check.how, check.err, c.detail)
				}
			}
		})
	}
	// As many as real code declares load.
	inst := instantiate(t, e, "m", withLocals(t, 100, 1000), Limits{}, InstanceConfig{})
	if err := inst.Process(ctx, 0, batchOf(), newOut().emit); err != nil {
		t.Fatal(err)
	}
}

// heldHandler holds every record until release is closed, like a logger
// writing to a pipe nobody drains; entered gets a value as a record
// arrives, once the guest waits in the host function.
type heldHandler struct {
	slog.Handler
	entered chan<- struct{}
	release <-chan struct{}
}

func (h heldHandler) Handle(context.Context, slog.Record) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	return nil
}

// inHeldLog starts inst, of bombs' mode 'l' with a heldHandler logger,
// processing one record with ctx, and returns once the guest waits in its
// log call, with the function that releases the logger and returns
// Process's error.
func inHeldLog(t *testing.T, e *Engine, lim Limits, ctx context.Context) (*Instance, func() error) {
	t.Helper()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	logger := slog.New(heldHandler{Handler: slog.NewTextHandler(io.Discard, nil), entered: entered, release: release})
	inst := instantiate(t, e, "slowlog", bombs(t), lim, InstanceConfig{Config: []byte("l"), Logger: logger})
	done := make(chan error, 1)
	go func() { done <- inst.Process(ctx, 0, batchOf(kv{"k", "v", 1}), newOut().emit) }()
	<-entered
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	return inst, func() error {
		once.Do(func() { close(release) })
		return <-done
	}
}

// tickPastDeadline ticks the watchdog of a tickedEngine an interval apart
// until it has counted inst's running call past its deadline limit (the
// first tick starts the count): it interrupted the call, or left it alone
// as interrupted already. Each tick is taken only after the one before
// was handled, so when it returns the watchdog has handled them all.
func tickPastDeadline(t *testing.T, ticks chan<- time.Time, limit time.Duration) {
	t.Helper()
	now := time.Now()
	for range int(limit/DefaultWatchdogInterval) + 3 {
		ticks <- now
		now = now.Add(DefaultWatchdogInterval)
	}
}

// TestOverrunInHostFunction: a call whose deadline passes while the guest
// is in a host function, and which returns without another loop iteration
// (where the interrupt would stop it), fails with the deadline error
// itself, not the instance's next call.
func TestOverrunInHostFunction(t *testing.T) {
	e, ticks := tickedEngine(t)
	const limit = 100 * time.Millisecond
	inst, finish := inHeldLog(t, e, Limits{CallTimeout: limit}, context.Background())
	tickPastDeadline(t, ticks, limit)
	if !inst.timedOut.Load() {
		t.Fatal("the watchdog did not interrupt a call held in the logger past its deadline")
	}
	err := finish()
	var de *DeadlineError
	if !errors.As(err, &de) || de.Export != "weir_process" {
		t.Fatalf("got %v, want the call's deadline error", err)
	}
}

// TestCancelThenDeadline: the caller's cancellation and then the
// watchdog both interrupt one call (whose guest waits on a held logger, so
// that both happen). The call is interrupted once, for the first reason;
// under -race this also catches the two racing on the interrupt.
func TestCancelThenDeadline(t *testing.T) {
	e, ticks := tickedEngine(t)
	const limit = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inst, finish := inHeldLog(t, e, Limits{CallTimeout: limit}, ctx)
	cancel()
	// The cancellation interrupts the call from a goroutine of its own.
	for !inst.callerCanceled.Load() {
		goruntime.Gosched()
	}
	tickPastDeadline(t, ticks, limit)
	err := finish()
	if !errors.Is(err, context.Canceled) || err.Error() != "operator slowlog: weir_process: interrupted: context canceled" {
		t.Fatalf("got %v, want the caller's cancellation", err)
	}
	if inst.timedOut.Load() {
		t.Error("the watchdog interrupted the canceled call again")
	}
}

// An interrupt that comes after its call ended — the watchdog saw the call
// running, then the call returned before the interrupt was set — leaves
// the instance alone: its next call runs. (stop is what the watchdog and
// a caller's cancellation call, for the call they saw.)
func TestLateInterruptSparesTheNextCall(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "late", misbehave(t), Limits{}, InstanceConfig{Config: []byte("p")})
	ctx := context.Background()
	before := inst.calls.Load()
	if err := inst.Process(ctx, 0, benchBatch(3), func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// The watchdog saw a call of the Process running (an odd count after
	// before), and interrupts it only now.
	inst.stop(&inst.timedOut, before+1)
	if err := inst.Process(ctx, 0, benchBatch(3), func(int, []byte) error { return nil }); err != nil {
		t.Fatalf("the call after a late interrupt: %v", err)
	}
}
