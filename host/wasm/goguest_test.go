package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

func TestGoUppercase(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "up", goGuest(t, "uppercase"), Limits{}, InstanceConfig{})
	o := newOut()
	in := batchOf(kv{"k", "hello, World ß 123", 7}, kv{"", "", 0})
	if err := inst.Process(context.Background(), 0, in, o.emit); err != nil {
		t.Fatal(err)
	}
	want := []kv{{"k", "HELLO, WORLD ß 123", 7}, {"", "", 0}}
	if got := o.port(0); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestGoFilter(t *testing.T) {
	e := newEngine(t)
	wasm := goGuest(t, "filter")
	inst := instantiate(t, e, "f", wasm, Limits{}, InstanceConfig{Config: []byte("an")})
	o := newOut()
	in := batchOf(kv{"1", "banana", 1}, kv{"2", "apple", 2}, kv{"3", "and", 3})
	if err := inst.Process(context.Background(), 0, in, o.emit); err != nil {
		t.Fatal(err)
	}
	want := []kv{{"1", "banana", 1}, {"3", "and", 3}}
	if got := o.port(0); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	m, _ := e.Load(context.Background(), "f", wasm, Limits{})
	_, err := m.Instantiate(context.Background(), InstanceConfig{Name: "f"})
	if err == nil || err.Error() != "operator f: weir_init: filter: config must be the substring to keep" {
		t.Fatalf("empty config: got %v", err)
	}
}

func TestGoWordcount(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "wc", goGuest(t, "wordcount"), Limits{}, InstanceConfig{})
	o := newOut()
	in := batchOf(kv{"x", "a b\ta", 5}, kv{"y", "  b\r\n", 6}, kv{"z", "", 7})
	if err := inst.Process(context.Background(), 0, in, o.emit); err != nil {
		t.Fatal(err)
	}
	want := []kv{{"a", "1", 5}, {"b", "1", 5}, {"a", "2", 5}, {"b", "2", 6}}
	if got := o.port(0); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	var st bytes.Buffer
	if err := inst.Snapshot(context.Background(), &st); err != nil {
		t.Fatal(err)
	}
	wantState := []byte{1, 2, 0, 0, 0, 1, 0, 0, 0, 'a', 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 'b', 2, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(st.Bytes(), wantState) {
		t.Fatalf("state % x, want % x", st.Bytes(), wantState)
	}
}

func TestGoJoin(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "j", goGuest(t, "join"), Limits{}, InstanceConfig{})
	o := newOut()
	ctx := context.Background()
	steps := []struct {
		port int
		recs []kv
	}{
		{0, []kv{{"k", "L1", 10}, {"q", "Lq", 1}}},
		{1, []kv{{"k", "R1", 5}, {"k", "R2", 20}}},
		{0, []kv{{"k", "L2", 15}}},
	}
	for _, s := range steps {
		if err := inst.Process(ctx, s.port, batchOf(s.recs...), o.emit); err != nil {
			t.Fatal(err)
		}
	}
	want := []kv{{"k", "L1|R1", 10}, {"k", "L1|R2", 20}, {"k", "L2|R1", 15}, {"k", "L2|R2", 20}}
	if got := o.port(0); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	var st bytes.Buffer
	if err := inst.Snapshot(ctx, &st); err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	w.WriteByte(1)
	side := func(recs ...kv) {
		fmt.Fprintf(&w, "%c\x00\x00\x00", len(recs))
		for _, r := range recs {
			fmt.Fprintf(&w, "%c\x00\x00\x00%s%c\x00\x00\x00%s%c\x00\x00\x00\x00\x00\x00\x00", len(r.K), r.K, len(r.V), r.V, r.TS)
		}
	}
	side(kv{"k", "L1", 10}, kv{"q", "Lq", 1}, kv{"k", "L2", 15})
	side(kv{"k", "R1", 5}, kv{"k", "R2", 20})
	if !bytes.Equal(st.Bytes(), w.Bytes()) {
		t.Fatalf("state\n% x\nwant\n% x", st.Bytes(), w.Bytes())
	}
}

// input is a port-tagged batch of a run.
type input struct {
	port int
	recs []kv
}

// runSplit feeds inputs to a fresh instance, snapshots after the first
// split of them, restores the snapshot into another fresh instance and feeds
// it the rest; it returns all output.
func runSplit(t *testing.T, e *Engine, wasm []byte, inputs []input, split int) []kv {
	t.Helper()
	ctx := context.Background()
	o := newOut()
	a := instantiate(t, e, "a", wasm, Limits{}, InstanceConfig{})
	for _, in := range inputs[:split] {
		if err := a.Process(ctx, in.port, batchOf(in.recs...), o.emit); err != nil {
			t.Fatal(err)
		}
	}
	var st bytes.Buffer
	if err := a.Snapshot(ctx, &st); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx)
	b := instantiate(t, e, "b", wasm, Limits{}, InstanceConfig{})
	if err := b.Restore(ctx, &st); err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs[split:] {
		if err := b.Process(ctx, in.port, batchOf(in.recs...), o.emit); err != nil {
			t.Fatal(err)
		}
	}
	return o.port(0)
}

func TestSnapshotRestoreEqualsUninterrupted(t *testing.T) {
	e := newEngine(t)
	words := []string{"to be or not", "to be", "that is the question", "", "be be be", "question or not"}
	var wc []input
	for i, w := range words {
		wc = append(wc, input{0, []kv{{fmt.Sprint(i), w, int64(i)}, {"", w + " x", int64(100 + i)}}})
	}
	var jn []input
	for i := range 8 {
		jn = append(jn, input{i % 2, []kv{{fmt.Sprint("k", i%3), fmt.Sprint("v", i), int64(i * 10)}, {"k0", fmt.Sprint("w", i), int64(50 - i)}}})
	}
	for _, c := range []struct {
		name   string
		inputs []input
	}{{"wordcount", wc}, {"join", jn}} {
		wasm := goGuest(t, c.name)
		want := runSplit(t, e, wasm, c.inputs, len(c.inputs))
		if len(want) == 0 {
			t.Fatalf("%s: no output", c.name)
		}
		for split := 0; split <= len(c.inputs); split++ {
			if got := runSplit(t, e, wasm, c.inputs, split); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s split at %d:\n got %v\nwant %v", c.name, split, got, want)
			}
		}
	}
}

func sdkTest(t testing.TB) []byte {
	return guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest")
}

func TestGoSDKFailures(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	healthy := instantiate(t, e, "healthy", watPassthrough(t), Limits{}, InstanceConfig{})
	in := batchOf(kv{"a", "1", 1}, kv{"b", "2", 2})
	for _, c := range []struct {
		mode string
		want string
		typ  any
	}{
		{"panic", "operator op: weir_process: at record 2 of the batch (key \"b\", value \"2\"): panic in Process at main.go:" +
			sdkTestLine(t, `panic("kaboom")`) + " (main.(*op).Process): kaboom", &OperatorError{}},
		{"error", "operator op: weir_process: no luck", &OperatorError{}},
		// An exit names its record, as a trap does.
		{"exit", "operator op: weir_process: at record 2 of the batch (key \"b\", value \"2\"): the module exited with code 3", &ExitError{}},
		// The Go runtime aborts when its heap cannot grow; the error says the
		// limit refused it.
		{"oom", "operator op: weir_process: trap: fatal error: out of memory (wasm error: unreachable) (memory.grow of ", &TrapError{}},
		// The Go runtime's last words on stderr name what stopped it.
		{"deadlock", "operator op: weir_process: trap: fatal error: all goroutines are asleep - deadlock! (wasm error: unreachable)", &TrapError{}},
		{"gopanic", "operator op: weir_process: trap: panic: kaboom in a goroutine", nil},
		{"loop", "operator op: weir_process: exceeded the 300ms call deadline", &DeadlineError{}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			lim := Limits{MemoryBytes: 48 << 20, CallTimeout: time.Minute}
			process := func(inst *Instance) error { return inst.Process(context.Background(), 0, in, newOut().emit) }
			ie := e
			if c.mode == "loop" {
				// The deadline is the watchdog's, on ticks of the test:
				// the Go runtime's _initialize, which a loaded machine
				// ran past a 300ms deadline, does not count.
				lim.CallTimeout = 300 * time.Millisecond
				var ticks chan<- time.Time
				ie, ticks = tickedEngine(t)
				process = func(inst *Instance) error { return processPastDeadline(t, inst, ticks, in) }
			}
			inst := instantiate(t, ie, "op", wasm, lim, InstanceConfig{Config: []byte(c.mode)})
			err := process(inst)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if c.typ != nil && reflect.TypeOf(errors.Unwrap(fmt.Errorf("%w", err))) != reflect.TypeOf(c.typ) {
				t.Fatalf("got %T", err)
			}
			if err := inst.Process(context.Background(), 0, in, newOut().emit); !errors.Is(err, ErrInstanceFailed) {
				t.Fatalf("second call: %v", err)
			}
			ho := newOut()
			if err := healthy.Process(context.Background(), 0, in, ho.emit); err != nil || len(ho.port(0)) != 2 {
				t.Fatalf("healthy: %v", err)
			}
		})
	}
}

// sdkTestLine returns the number of the line of guests/go/internal/sdktest/
// main.go that has code on it, failing the test unless exactly one has.
func sdkTestLine(t testing.TB, code string) string {
	t.Helper()
	src, err := os.ReadFile("../../guests/go/internal/sdktest/main.go")
	if err != nil {
		t.Fatal(err)
	}
	n := ""
	for k, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, code) {
			if n != "" {
				t.Fatalf("sdktest/main.go has %q on lines %s and %d", code, n, k+1)
			}
			n = strconv.Itoa(k + 1)
		}
	}
	if n == "" {
		t.Fatalf("sdktest/main.go has no %q", code)
	}
	return n
}

// TestGoSDKPanicNamesItsLine: a panic the Go SDK recovers, in any method
// of the operator, fails the call with a message that names the file, line
// and function of the operator's code that panicked — the line that called
// into the standard library for a panic there — and the goroutine's stack
// as the error's Traceback (not logged line by line).
func TestGoSDKPanicNamesItsLine(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	ctx := context.Background()
	in := batchOf(kv{"a", "", 1}, kv{"b", "2", 2})
	at := func(code, fn string) string {
		return " at main.go:" + sdkTestLine(t, code) + " (main.(*op)." + fn + "): "
	}
	for _, c := range []struct {
		mode string
		call func(*Instance) error
		want string
	}{
		{"index", func(i *Instance) error { return i.Process(ctx, 0, in, newOut().emit) },
			"operator op: weir_process: at record 2 of the batch (key \"b\", value \"2\"): panic in Process" +
				at("one[len(in.Record().Value)]", "Process") + "runtime error: index out of range [1] with length 1"},
		{"stdpanic", func(i *Instance) error { return i.Process(ctx, 0, in, newOut().emit) },
			"operator op: weir_process: at record 2 of the batch (key \"b\", value \"2\"): panic in Process" +
				at("bytes.Repeat(in.Record().Value", "Process") + "bytes: negative Repeat count"},
		{"initpanic", nil, "operator op: weir_init: panic in Init" + at(`panic("kaboom in Init")`, "Init") + "kaboom in Init"},
		{"snappanic", func(i *Instance) error { return i.Snapshot(ctx, io.Discard) },
			"operator op: weir_snapshot: panic in Snapshot" + at(`panic("kaboom in Snapshot")`, "Snapshot") + "kaboom in Snapshot"},
		{"restorepanic", func(i *Instance) error { return i.Restore(ctx, bytes.NewReader(nil)) },
			"operator op: weir_restore: panic in Restore" + at(`panic("kaboom in Restore")`, "Restore") + "kaboom in Restore"},
		{"eoipanic", func(i *Instance) error { return i.EndOfInput(ctx, 0, newOut().emit) },
			"operator op: weir_end_of_input: panic in EndOfInput" + at(`panic("kaboom in EndOfInput")`, "EndOfInput") + "kaboom in EndOfInput"},
		{"ckptpanic", func(i *Instance) error { return i.CheckpointComplete(ctx, 7) },
			"operator op: weir_checkpoint_complete: panic in CheckpointComplete" +
				at(`panic(fmt.Sprintf("kaboom in CheckpointComplete %d", id))`, "CheckpointComplete") + "kaboom in CheckpointComplete 7"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := InstanceConfig{Name: "op", Config: []byte(c.mode), Logger: testLogger(&logs)}
			var err error
			if c.call == nil {
				m, lerr := e.Load(ctx, "op", wasm, Limits{CallTimeout: time.Minute})
				if lerr != nil {
					t.Fatal(lerr)
				}
				_, err = m.Instantiate(ctx, cfg)
			} else {
				err = c.call(instantiate(t, e, "op", wasm, Limits{}, cfg))
			}
			var oe *OperatorError
			if !errors.As(err, &oe) || err.Error() != c.want {
				t.Fatalf("got %T %v\nwant an operator error %q", err, err, c.want)
			}
			method := c.want[strings.LastIndex(c.want, "(main.") : strings.LastIndex(c.want, "): ")+1]
			method = strings.Trim(method, "()")
			if !strings.HasPrefix(oe.Traceback, "goroutine 1 [running]:\n") || !strings.Contains(oe.Traceback, "\n"+method+"(") ||
				!strings.Contains(oe.Traceback, "sdktest/main.go:") {
				t.Errorf("traceback, want the stack of %s:\n%s", method, oe.Traceback)
			}
			// The panic's line is logged, as the Go runtime's; the stack
			// after it is the error's.
			if !strings.Contains(logs.String(), "msg=\"panic: ") || strings.Contains(logs.String(), "goroutine 1") {
				t.Errorf("log:\n%s", logs.String())
			}
		})
	}
}

// TestGoSDKKeyedStateAfterOtherState: a keyed state started after other
// state (a version byte) would not be in the keyed layout; the Go SDK
// fails the snapshot, saying what to do, as the other SDKs do
// (guests/conformance TestKeyedStateMisuse), also when Snapshot ignores
// the keyed state writer's errors and returns nil: such a snapshot once
// succeeded, and the job failed at its first restore.
func TestGoSDKKeyedStateAfterOtherState(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	const want = "operator op: weir_snapshot: weir: KeyedStateWriter after other state: the keyed layout is the whole snapshot (create it first, with no version byte before it)"
	for _, mode := range []string{"keyedlate", "keyedlate-ignored"} {
		inst := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Config: []byte(mode)})
		err := inst.Snapshot(context.Background(), io.Discard)
		var oe *OperatorError
		if !errors.As(err, &oe) || err.Error() != want {
			t.Errorf("%s: got %v, want an operator error %q", mode, err, want)
		}
	}
}

// TestGoSDKKeyedStateWithoutClose: a Snapshot that puts its entries in a
// keyed state and returns without KeyedStateWriter.Close, as the Rust and
// AssemblyScript SDKs' writers, which have nothing to close, allow,
// snapshots every entry. The entries once stayed in the writer's buffer:
// the snapshot was empty, and a restore silently lost the state.
func TestGoSDKKeyedStateWithoutClose(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "op", sdkTest(t), Limits{}, InstanceConfig{Config: []byte("keyednoclose")})
	var snap bytes.Buffer
	if err := inst.Snapshot(context.Background(), &snap); err != nil {
		t.Fatal(err)
	}
	want := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("k"), []byte("v"))
	if !bytes.Equal(snap.Bytes(), want) {
		t.Fatalf("snapshot: got % x, want % x", snap.Bytes(), want)
	}
}

// TestRandomIsRandom: random_get gives each instance bytes of its own, as
// crypto/rand promises, not one fixed sequence for all.
func TestRandomIsRandom(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	seen := map[string]bool{}
	for range 2 {
		inst := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Config: []byte("rand")})
		o := newOut()
		if err := inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}), o.emit); err != nil {
			t.Fatal(err)
		}
		v := o.port(0)[0].V
		if seen[v] {
			t.Fatalf("two instances read the same random bytes %q", v)
		}
		seen[v] = true
	}
}

func TestGoSDKLogsPortsAndBigState(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	ctx := context.Background()
	in := batchOf(kv{"a", "1", 1}, kv{"b", "2", 2})

	var logs bytes.Buffer
	inst := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Name: "chatty", Config: []byte("log"), Logger: testLogger(&logs)})
	if err := inst.Process(ctx, 0, in, newOut().emit); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="hello stdout" operator=chatty stream=stdout`,
		`msg="hello stderr" operator=chatty stream=stderr`,
		`level=WARN msg="hello log" operator=chatty`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}

	two := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Config: []byte("ports"), Outputs: 2})
	o := newOut()
	if err := two.Process(ctx, 0, in, o.emit); err != nil || len(o.port(0)) != 2 || len(o.port(1)) != 2 {
		t.Fatalf("two ports: %v %v", err, o.recs)
	}
	one := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Name: "one", Config: []byte("ports")})
	if err := one.Process(ctx, 0, in, newOut().emit); err == nil || !strings.Contains(err.Error(), "emit to output port 1") {
		t.Fatalf("one port: %v", err)
	}

	// 2 records x 300 KiB of state streams in 64 KiB chunks and comes back whole.
	big := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Config: []byte("bigstate")})
	if err := big.Process(ctx, 0, in, newOut().emit); err != nil {
		t.Fatal(err)
	}
	cw := &chunkWriter{}
	if err := big.Snapshot(ctx, cw); err != nil {
		t.Fatal(err)
	}
	if cw.buf.Len() != 2*(300<<10) || cw.max > 64<<10 || cw.writes < 9 {
		t.Fatalf("state of %d bytes in %d writes of at most %d", cw.buf.Len(), cw.writes, cw.max)
	}
	r := instantiate(t, e, "op", wasm, Limits{}, InstanceConfig{Config: []byte("restore")})
	if err := r.Restore(ctx, &cw.buf); err != nil {
		t.Fatal(err)
	}
	o = newOut()
	if err := r.EndOfInput(ctx, 0, o.emit); err != nil || !reflect.DeepEqual(o.port(0), []kv{{"", fmt.Sprint(2 * (300 << 10)), 0}}) {
		t.Fatalf("restored: %v %v", err, o.port(0))
	}
}

type chunkWriter struct {
	buf         bytes.Buffer
	writes, max int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.writes++
	w.max = max(w.max, len(p))
	return w.buf.Write(p)
}

// TestGoSDKHotPathDoesNotAllocate checks that, once warm, the SDK's
// Process path (input buffer, iteration, emitting) allocates nothing in the
// guest.
func TestGoSDKHotPathDoesNotAllocate(t *testing.T) {
	e := newEngine(t)
	// Every call gets the whole batch (instantiate asks for it), so the
	// guest's buffers grow in the first call, which the guest does not
	// count.
	inst := instantiate(t, e, "op", sdkTest(t), Limits{}, InstanceConfig{Config: []byte("allocs")})
	ctx := context.Background()
	batch := benchBatch(1024)
	for range 50 {
		if err := inst.Process(ctx, 0, batch, func(int, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	o := newOut()
	if err := inst.EndOfInput(ctx, 0, o.emit); err != nil {
		t.Fatal(err)
	}
	if got := o.port(0); len(got) != 1 || got[0].V != "0" {
		t.Fatalf("allocations in 48 warm Process calls of 1024 records: %v", got)
	}
}

// A Go guest's runtime error prints every goroutine's stack to stderr
// (out of memory: a dozen of the runtime's own, about 100 lines). None of
// it is logged line by line: the trap's Traceback has the stack of the
// goroutine that failed (running, else the first: a deadlock's sleep
// all) and says how many others it left out; the fatal line is logged
// and in the message.
func TestGoFatalTraceback(t *testing.T) {
	e := newEngine(t)
	wasm := sdkTest(t)
	in := batchOf(kv{"a", "1", 1})
	for _, c := range []struct {
		mode, fatal, header string
		others              bool
	}{
		{"oom", "fatal error: out of memory", "[running]:", true},
		{"deadlock", "fatal error: all goroutines are asleep - deadlock!", "[chan receive]:", false},
		{"gopanic", "panic: kaboom in a goroutine", "[running]:", false},
	} {
		t.Run(c.mode, func(t *testing.T) {
			var logs bytes.Buffer
			inst := instantiate(t, e, "op", wasm, Limits{MemoryBytes: 48 << 20}, InstanceConfig{Config: []byte(c.mode), Logger: testLogger(&logs)})
			err := inst.Process(context.Background(), 0, in, newOut().emit)
			var te *TrapError
			if !errors.As(err, &te) || te.Fatal != c.fatal {
				t.Fatalf("got %v, want a trap with %q", err, c.fatal)
			}
			tb := te.Traceback
			lines := strings.Split(tb, "\n")
			if !strings.HasPrefix(lines[0], "goroutine ") || !strings.HasSuffix(lines[0], c.header) || strings.Count(tb, "\ngoroutine ") != 0 ||
				!strings.Contains(tb, "main.(*op).Process") {
				t.Errorf("traceback, want one goroutine's stack, %s, in main.(*op).Process:\n%s", c.header, tb)
			}
			if last := lines[len(lines)-1]; c.others != strings.HasSuffix(last, "other goroutines left out)") {
				t.Errorf("traceback ends %q; want other goroutines left out: %v", last, c.others)
			}
			if strings.Contains(logs.String(), "goroutine ") || !strings.Contains(logs.String(), fmt.Sprintf("msg=%q", c.fatal)) {
				t.Errorf("log, want the fatal line and no goroutine's stack:\n%s", logs.String())
			}
		})
	}
}
