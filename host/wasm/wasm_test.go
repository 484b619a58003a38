package wasm

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPassthroughWAT(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "pt", watPassthrough(t), Limits{}, InstanceConfig{})
	in := []kv{{"a", "hi", 5}, {"", "x", 0}, {"key", "", -1}}
	o := newOut()
	if err := inst.Process(context.Background(), 0, batchOf(in...), o.emit); err != nil {
		t.Fatal(err)
	}
	if got := o.port(0); !reflect.DeepEqual(got, in) {
		t.Fatalf("got %v, want %v", got, in)
	}
	// An empty batch passes too.
	if err := inst.Process(context.Background(), 0, batchOf(), o.emit); err != nil {
		t.Fatal(err)
	}
}

func TestBadModules(t *testing.T) {
	e := newEngine(t)
	pt := watPassthrough(t)
	cases := []struct {
		name   string
		wasm   []byte
		kind   Kind
		target error
		detail string
	}{
		{"empty", nil, KindNotWasm, ErrNotWasm, "not a WebAssembly module (no \\0asm magic number): the file is empty (a build that failed, or a copy cut short?)"},
		{"not wasm", []byte("\x01\x02hello, world"), KindNotWasm, ErrNotWasm, "not a WebAssembly module (no \\0asm magic number)"},
		{"C source", []byte("/* avg: a running average — per key */\n#include \"weir.h\"\n"), KindNotWasm, ErrNotWasm, "not a WebAssembly module (no \\0asm magic number): the file is text, a source file perhaps; give the .wasm, or a source weir builds (a Go package directory, a .rs, .c, .cpp, .ts or .wat file: guests/README.md)"},
		{"empty", nil, KindNotWasm, ErrNotWasm, "not a WebAssembly module"},
		{"ELF", []byte("\x7fELF\x02\x01\x01\x00"), KindNotWasm, ErrNotWasm, "not a WebAssembly module (no \\0asm magic number): an ELF file, a native executable or library; build the operator for wasm: Go GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, C clang --target=wasm32-wasi or --target=wasm32, Rust --target wasm32-unknown-unknown"},
		{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, KindNotWasm, ErrNotWasm, ": a Mach-O file, a native executable or library; build the operator for wasm"},
		{"PE", []byte("MZ\x90\x00\x03\x00\x00\x00"), KindNotWasm, ErrNotWasm, ": a Windows executable or DLL; build the operator for wasm"},
		{"WAT", []byte(";; upper\n\n  (module\n  (memory 1))\n"), KindNotWasm, ErrNotWasm, "not a WebAssembly module (no \\0asm magic number): WebAssembly text (WAT); assemble it into a module with wat2wasm"},
		{"component", []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, KindNotWasm, ErrNotWasm, "binary version"},
		{"header only", pt[:6], KindMalformed, ErrMalformed, "truncated"},
		{"truncated", pt[:len(pt)/2], KindMalformed, ErrMalformed, "truncated"},
		{"truncated code", pt[:len(pt)-3], KindMalformed, ErrMalformed, ""},
		{"missing export", bad(t, "missing_export"), KindMissingExport, ErrMissingExport, "missing export weir_process"},
		{"no weir exports", bad(t, "no_weir_exports"), KindMissingExport, ErrMissingExport, "missing export weir_abi_v1: the module exports no weir_* function, so it is no weir operator (the SDKs define the exports: Rust weir::operator!(…), C WEIR_OPERATOR(…), AssemblyScript export * from \"weir/exports\" in the entry file, Go weir.Register from init)"},
		{"no callbacks", bad(t, "no_callbacks"), KindMissingExport, ErrMissingExport, "missing export weir_init: the module exports none of an operator's callbacks (weir_init, weir_process, weir_snapshot, weir_restore), only what an SDK defines for them (C: name your callbacks with WEIR_OPERATOR(init, process, snapshot, restore) after including weir.h)"},
		{"no marker", bad(t, "no_marker"), KindMissingExport, ErrMissingExport, "missing export weir_abi_v1, the ABI version marker: the module exports weir_* functions without it; it exports weir_proces, which the ABI does not define (not built with a weir SDK's exports, or for another ABI; the SDKs define the exports: Rust weir::operator!(…), C WEIR_OPERATOR(…), AssemblyScript export * from \"weir/exports\" in the entry file, Go weir.Register from init)"},
		{"misspelled export", bad(t, "misspelled_export"), KindMissingExport, ErrMissingExport, "missing export weir_process (the module exports weir_proces, which the ABI does not define)"},
		// Export names are anyone's to write: few of them, quoted where
		// not plain, and the error stays one line.
		{"hostile exports", bad(t, "hostile_exports"), KindMissingExport, ErrMissingExport, `missing export weir_process (the module exports "weir_proces\nINJECTED line", weir_x00, weir_x01, weir_x02, weir_x03 and 36 more, which the ABI does not define)`},
		{"bad signature", bad(t, "bad_signature"), KindExportSignature, ErrExportSignature, "export weir_process has type (i32, i32) -> (i32), want (i32, i32, i32) -> (i32)"},
		{"abi v2", bad(t, "abi_v2"), KindABIVersion, ErrABIVersion, "unknown ABI version 2 (this host speaks 1)"},
		{"command", bad(t, "command"), KindCommandModule, ErrCommandModule, "exports _start: a WASI command module; build a reactor, with no main (Go -buildmode=c-shared, C -mexec-model=reactor or --no-entry, Rust --crate-type cdylib)"},
		{"import env", bad(t, "import_env"), KindImport, ErrImport, "import env.foo not allowed"},
		{"import env.abort", bad(t, "import_env_abort"), KindImport, ErrImport, "import env.abort not allowed: operators may import only from weir and wasi_snapshot_preview1 (AssemblyScript: build with --use abort="},
		{"import env.console.log", bad(t, "import_env_console"), KindImport, ErrImport, "import env.console.log not allowed: operators may import only from weir and wasi_snapshot_preview1 (AssemblyScript's console and trace: log with the SDK's log(LOG_INFO, message), see guests/README.md)"},
		{"import env.Date.now", bad(t, "import_env_date"), KindImport, ErrImport, "import env.Date.now not allowed: operators may import only from weir and wasi_snapshot_preview1 (AssemblyScript's Date.now and Math.random: take the time from the records' timestamps and seed a generator from the config, see guests/README.md)"},
		{"import hostile", bad(t, "import_hostile"), KindImport, ErrImport, `import env."foo\nbar" not allowed: operators may import only from weir and wasi_snapshot_preview1`},
		{"GOOS=js", bad(t, "gojs"), KindImport, ErrImport, "import gojs.runtime.wasmExit not allowed: the module was built with GOOS=js, for JavaScript; build operators with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared"},
		{"import sock", bad(t, "import_sock"), KindImport, ErrImport, "import wasi_snapshot_preview1.sock_accept not allowed"},
		{"import weir signature", bad(t, "import_weir_signature"), KindImport, ErrImport, "import weir.emit not allowed: has type"},
		{"memory over", bad(t, "memory_over"), KindMemoryLimit, ErrMemoryLimit, "minimum memory of 125 MiB (2000 pages), over its memory limit of 64 MiB: give the operator limits: {memory: 125MiB} or more"},
		{"bad body", bad(t, "bad_body"), KindMalformed, ErrMalformed, "invalid module"},
		// A memory section of one 64-bit memory of 1 page: wazero's own
		// refusal said "invalid byte for limits: 0x4".
		{"memory64", []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, 3, 1, 0x04, 1}, KindMalformed, ErrMalformed,
			"uses 64-bit memory (memory64), which weir does not support: build the operator for wasm32"},
		{"table over", bad(t, "table_over"), KindMemoryLimit, ErrMemoryLimit, "declares tables of 2000000 entries, over the limit of 1048576"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, check := range []struct {
				how string
				err error
			}{
				{"Load", func() error { _, err := e.Load(context.Background(), "m", c.wasm, Limits{}); return err }()},
				{"Validate", e.Validate(context.Background(), "m", c.wasm, Limits{})},
			} {
				var ve *ValidationError
				if !errors.As(check.err, &ve) {
					t.Fatalf("%s: got %v, want a *ValidationError", check.how, check.err)
				}
				if ve.Kind != c.kind || !errors.Is(check.err, c.target) || ve.Module != "m" {
					t.Fatalf("%s: got kind %v (%v), want %v", check.how, ve.Kind, check.err, c.kind)
				}
				msg := check.err.Error()
				if !strings.HasPrefix(msg, "module m: ") || !strings.Contains(msg, c.detail) || strings.Contains(msg, "\n") {
					t.Fatalf("%s: message %q, want one line containing %q", check.how, msg, c.detail)
				}
			}
		})
	}
}

func bad(t *testing.T, name string) []byte {
	return readFile(t, filepath.Join("testdata", "bad", name+".wasm"))
}

func TestMemoryLimitIsConfigurable(t *testing.T) {
	e := newEngine(t)
	// 2000 pages fit under a 200 MiB limit.
	if _, err := e.Load(context.Background(), "m", bad(t, "memory_over"), Limits{MemoryBytes: 200 << 20}); err != nil {
		t.Fatal(err)
	}
	// The 2-page passthrough does not fit in 64 KiB.
	_, err := e.Load(context.Background(), "m", watPassthrough(t), Limits{MemoryBytes: 64 << 10})
	if !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("got %v", err)
	}
}

// TestContained runs each misbehaviour in its own instance, checks its
// error, and checks that a healthy instance of another module keeps working
// after each.
func TestContained(t *testing.T) {
	e := newEngine(t)
	healthy := instantiate(t, e, "healthy", watPassthrough(t), Limits{}, InstanceConfig{})
	mis := misbehave(t)
	in := batchOf(kv{"a", "1", 1}, kv{"b", "2", 2}, kv{"c", "3", 3})
	cases := []struct {
		mode  string
		check func(t *testing.T, err error)
	}{ // every case but the loops (l, L, T: 200ms on the test's ticks; M: 1s) runs far inside its 10s deadline
		{"t", func(t *testing.T, err error) {
			var te *TrapError
			if !errors.As(err, &te) || te.RecordIndex != 2 || te.Export != "weir_process" || te.Operator != "bad" || te.MemoryLimit != 0 {
				t.Fatalf("got %#v", err)
			}
			if !strings.Contains(te.Stack, "\n\tprocess(i32,i32,i32)") || !strings.Contains(err.Error(), "trap at record 3 of the batch (key \"c\", value \"3\"): wasm error: unreachable") {
				t.Fatalf("error %q, stack %q", err, te.Stack)
			}
		}},
		{"c", func(t *testing.T, err error) {
			// A cursor no record of the batch has: something overwrote
			// the guest's state (a C write through NULL did).
			var te *TrapError
			if !errors.As(err, &te) || te.RecordIndex != 16843009 ||
				!strings.Contains(err.Error(), "trap at record 16843010 of the batch (past the batch's 3 records: the SDK's record cursor was overwritten, most likely by a write through a NULL or stray pointer in the operator): wasm error: unreachable") {
				t.Fatalf("got %v", err)
			}
		}},
		{"l", func(t *testing.T, err error) {
			var de *DeadlineError
			if !errors.As(err, &de) || err.Error() != "operator bad: weir_process: exceeded the 200ms call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise limits.timeout)" {
				t.Fatalf("got %v", err)
			}
		}},
		{"L", deadline},
		{"T", deadline},
		{"m", func(t *testing.T, err error) {
			// The trap of a guest that ran out of memory says so: its
			// last grow, of one page, was refused at the limit.
			var te *TrapError
			if !errors.As(err, &te) || te.MemoryLimit != 4<<20 || te.MemorySize != 4<<20 || te.GrowRefused != PageSize ||
				!strings.HasSuffix(err.Error(), "wasm error: unreachable (memory.grow of 1 page (64 KiB) refused: the operator's memory limit (limits.memory) is 4 MiB and it had 4 MiB)") {
				t.Fatalf("got %v", err)
			}
		}},
		{"M", func(t *testing.T, err error) {
			// A guest that spins once its memory is used up (an unchecked
			// malloc) hits the deadline, and the message says where its
			// memory stood. Its limit is two pages above its initial
			// memory, so that it is used up at once: filling 4 MiB a page
			// at a time could outlast the deadline on a loaded machine.
			var de *DeadlineError
			if !errors.As(err, &de) || de.MemoryLimit != 4*PageSize || de.GrowRefused != PageSize ||
				!strings.HasSuffix(err.Error(), "raise limits.timeout) (memory.grow of 1 page (64 KiB) refused: the operator's memory limit (limits.memory) is 256 KiB and it had 256 KiB)") {
				t.Fatalf("got %v", err)
			}
		}},
		{"b", faultContaining("emit to port 0: malformed record batch")},
		{"o", faultContaining("passes the end of memory")},
		{"O", faultContaining("passes the end of memory")},
		{"2", faultContaining("emit to output port 2: the task has 1 output port(s), one per input in the job spec that reads from the operator, " +
			"numbered from 0 in spec order, operators' inputs before sinks' (weir exec: -outputs N)")},
		{"x", func(t *testing.T, err error) {
			var xe *ExitError
			if !errors.As(err, &xe) || xe.Code != 3 {
				t.Fatalf("got %v", err)
			}
		}},
		{"e", func(t *testing.T, err error) {
			var oe *OperatorError
			if !errors.As(err, &oe) || err.Error() != "operator bad: weir_process: boom" {
				t.Fatalf("got %v", err)
			}
		}},
		{"E", func(t *testing.T, err error) {
			if err == nil || err.Error() != "operator bad: weir_process: returned status 7 and set no error message (C: return weir_fail(\"why\") rather than a bare status)" {
				t.Fatalf("got %v", err)
			}
		}},
		{"z", faultContaining("operator could not allocate 58 bytes")},
		{"g", func(t *testing.T, err error) { // table.grow was refused: the table has a maximum
			if err == nil || err.Error() != "operator bad: weir_process: returned status 9 and set no error message (C: return weir_fail(\"why\") rather than a bare status)" {
				t.Fatalf("got %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			lim := Limits{CallTimeout: 10 * time.Second, MemoryBytes: 4 << 20}
			o := newOut()
			process := func(inst *Instance) error { return inst.Process(context.Background(), 0, in, o.emit) }
			ie := e
			if c.mode == "l" || c.mode == "L" || c.mode == "T" {
				// The deadline is the watchdog's, on ticks of the test
				// once weir_process loops: a loaded machine cannot
				// charge weir_input for it.
				lim.CallTimeout = 200 * time.Millisecond
				var ticks chan<- time.Time
				ie, ticks = tickedEngine(t)
				process = func(inst *Instance) error { return processPastDeadline(t, inst, ticks, in) }
			}
			if c.mode == "M" {
				// The deadline must find the memory used up: seconds.
				lim.CallTimeout, lim.MemoryBytes = time.Second, 4*PageSize
			}
			inst := instantiate(t, ie, "bad", mis, lim, InstanceConfig{Config: []byte(c.mode)})
			err := process(inst)
			c.check(t, err)
			if len(o.recs) != 0 {
				t.Fatalf("a failed call forwarded output: %v", o.recs)
			}
			// The instance is poisoned.
			err2 := inst.Process(context.Background(), 0, in, o.emit)
			if !errors.Is(err2, ErrInstanceFailed) {
				t.Fatalf("second call: got %v, want ErrInstanceFailed", err2)
			}
			// Another module's instance is unaffected.
			ho := newOut()
			if err := healthy.Process(context.Background(), 0, in, ho.emit); err != nil || len(ho.port(0)) != 3 {
				t.Fatalf("healthy instance: %v %v", err, ho.port(0))
			}
		})
	}
}

func deadline(t *testing.T, err error) {
	t.Helper()
	var de *DeadlineError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a *DeadlineError", err)
	}
}

func faultContaining(s string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var fe *FaultError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), s) || strings.Contains(err.Error(), "(status ") {
			t.Fatalf("got %v, want a *FaultError containing %q, its status left out of the message", err, s)
		}
	}
}

func TestInitError(t *testing.T) {
	e := newEngine(t)
	m, err := e.Load(context.Background(), "mis", misbehave(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Instantiate(context.Background(), InstanceConfig{Name: "op", Config: []byte("i")})
	var oe *OperatorError
	if !errors.As(err, &oe) || err.Error() != "operator op: weir_init: bad config" {
		t.Fatalf("got %v", err)
	}
}

// TestStartFunctionMessage: a module whose start function (AssemblyScript's
// top-level code, built without --exportStart) logs, sets an error message
// and traps fails to instantiate with that message on one line; its log
// line reaches the logger. (Load hoists the start function into an export
// that Instantiate calls like any other, so the host functions have the
// instance's memory.)
func TestStartFunctionMessage(t *testing.T) {
	e := newEngine(t)
	m, err := e.Load(context.Background(), "startfail", readFile(t, filepath.Join("testdata", "startfail.wasm")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	inst, err := m.Instantiate(context.Background(), InstanceConfig{Name: "op", Logger: testLogger(&logs)})
	if err == nil {
		inst.Close(context.Background())
		t.Fatal("the module started")
	}
	if want := "operator op: start function: trap: start: failed (wasm error: unreachable)"; err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if want := `msg="start: hello" operator=op`; !strings.Contains(logs.String(), want) {
		t.Errorf("log %q lacks %q", logs.String(), want)
	}
}

func TestSnapshotRestoreAndMisuse(t *testing.T) {
	e := newEngine(t)
	mis := misbehave(t)
	ctx := context.Background()
	// 'w' writes "state"; restore reads it back in 3-byte chunks.
	a := instantiate(t, e, "a", mis, Limits{}, InstanceConfig{Config: []byte("w")})
	var buf bytes.Buffer
	if err := a.Snapshot(ctx, &buf); err != nil || buf.String() != "state" {
		t.Fatalf("snapshot: %v %q", err, buf.String())
	}
	b := instantiate(t, e, "b", mis, Limits{}, InstanceConfig{Config: []byte("w")})
	if err := b.Restore(ctx, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.mem.ReadUint32Le(196); n != 5 {
		t.Fatalf("restored %d bytes", n)
	}
	if got, _ := b.mem.Read(200, 5); string(got) != "state" {
		t.Fatalf("restored %q", got)
	}
	// A failing writer fails the snapshot with a *StateError.
	c := instantiate(t, e, "c", mis, Limits{}, InstanceConfig{Config: []byte("w")})
	err := c.Snapshot(ctx, failWriter{})
	var se *StateError
	if !errors.As(err, &se) {
		t.Fatalf("got %v", err)
	}
	// Emitting during a snapshot is refused.
	d := instantiate(t, e, "d", mis, Limits{}, InstanceConfig{Config: []byte("s")})
	if err := d.Snapshot(ctx, &buf); err == nil || !strings.Contains(err.Error(), "emit called during weir_snapshot") {
		t.Fatalf("got %v", err)
	}
	// snapshot_write out of bounds.
	f := instantiate(t, e, "f", mis, Limits{}, InstanceConfig{Config: []byte("S")})
	if err := f.Snapshot(ctx, &buf); err == nil || !strings.Contains(err.Error(), "passes the end of memory") {
		t.Fatalf("got %v", err)
	}
	// End of input and checkpoint completion.
	g := instantiate(t, e, "g", mis, Limits{}, InstanceConfig{})
	o := newOut()
	if err := g.EndOfInput(ctx, 0, o.emit); err != nil || len(o.port(0)) != 0 {
		t.Fatalf("end of input: %v %v", err, o.recs)
	}
	if err := g.CheckpointComplete(ctx, 7); err != nil {
		t.Fatal(err)
	}
	h := instantiate(t, e, "h", mis, Limits{}, InstanceConfig{Config: []byte("e")})
	if err := h.CheckpointComplete(ctx, 7); err == nil {
		t.Fatal("want an error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestCallerCancel(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "loop", misbehave(t), Limits{CallTimeout: time.Hour}, InstanceConfig{Config: []byte("l")})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	err := inst.Process(ctx, 0, batchOf(), newOut().emit)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// TestUninstrumentedFallback runs the deadline and a normal call on a module
// compiled without loop instrumentation, interrupted by wazero instead.
func TestUninstrumentedFallback(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	m, err := e.Load(ctx, "mis", misbehave(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.instrumented {
		t.Fatal("misbehave.wasm was not instrumented")
	}
	// Compile the original bytes in the terminating runtime, as compile does
	// for a module it cannot instrument.
	e.mu.Lock()
	rt, err := e.runtimeFor(ctx, runtimeKey{terminate: true})
	e.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cm, err := rt.r.CompileModule(ctx, misbehave(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"p", "l"} {
		timeout := time.Minute
		if mode == "l" {
			timeout = 200 * time.Millisecond
		}
		plain := &Module{name: "plain", limits: Limits{CallTimeout: timeout}.withDefaults(), engine: e, compiled: cm, rt: rt, use: &moduleUse{}}
		inst, err := plain.Instantiate(ctx, InstanceConfig{Config: []byte(mode)})
		if err != nil {
			t.Fatal(err)
		}
		err = inst.Process(ctx, 0, batchOf(kv{"a", "b", 1}), newOut().emit)
		switch mode {
		case "p":
			if err != nil {
				t.Fatal(err)
			}
		case "l":
			var de *DeadlineError
			if !errors.As(err, &de) {
				t.Fatalf("got %v", err)
			}
		}
		inst.Close(ctx)
	}
}

// slowWriter takes its time on the first write, like a slow checkpoint
// store.
type slowWriter struct {
	d      time.Duration
	writes int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	if w.writes++; w.writes == 1 {
		time.Sleep(w.d)
	}
	return len(p), nil
}

// TestDeadlineExcludesStateIO: a snapshot whose writer is slower than the
// call deadline still succeeds, because the host's I/O is not the guest's
// time.
func TestDeadlineExcludesStateIO(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "w", misbehave(t), Limits{CallTimeout: time.Second}, InstanceConfig{Config: []byte("w")})
	if err := inst.Snapshot(context.Background(), &slowWriter{d: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
}

func TestValidateAccepts(t *testing.T) {
	e := newEngine(t)
	for name, code := range map[string][]byte{"wat": watPassthrough(t), "misbehave": misbehave(t), "go": goGuest(t, "wordcount")} {
		if err := Check(name, code, Limits{}); err != nil {
			t.Errorf("Check %s: %v", name, err)
		}
		if err := e.Validate(context.Background(), name, code, Limits{}); err != nil {
			t.Errorf("Validate %s: %v", name, err)
		}
	}
}

func TestCapTables(t *testing.T) {
	code := misbehave(t)
	info, err := inspectModule("m", code, Limits{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.tables) != 1 || info.tables[0].hasMax {
		t.Fatalf("misbehave.wasm should declare one table without a maximum: %+v", info.tables)
	}
	capped, err := capTables(code, info)
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseModule(capped)
	if err != nil {
		t.Fatal(err)
	}
	if tb := after.tables[0]; !tb.hasMax || tb.max != maxTableEntries || tb.min != 1 {
		t.Fatalf("capped table: %+v", tb)
	}
}

// TestTrapStackWithDWARF: a module built with -g (testdata/dwarf.c) traps
// after a loop. The loop check the host inserts moves the code after it, so
// the module's DWARF line tables would cite a wrong line (weir.h:373 and
// dwarf.c:23 for the division on dwarf.c:22); the host drops them, and the
// stack names the function without citing any line.
func TestTrapStackWithDWARF(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "dwarf.wasm"))
	if !bytes.Contains(code, []byte(".debug_line")) {
		t.Fatal("testdata/dwarf.wasm has no .debug_line: build it with -g")
	}
	e := newEngine(t)
	inst := instantiate(t, e, "dwarf", code, Limits{}, InstanceConfig{})
	err := inst.Process(context.Background(), 0, batchOf(kv{"a", "12", 1}, kv{"b", "0", 2}), func(int, []byte) error { return nil })
	var te *TrapError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "integer divide by zero") {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(te.Stack, "\n\tweir_process(i32,i32,i32)") || strings.Contains(te.Stack, ".c:") || strings.Contains(te.Stack, ".h:") {
		t.Fatalf("stack %q: want the function named and no source line", te.Stack)
	}
}

// TestStackOverflowNamesTheRecursion: a C operator (testdata/overflow.c)
// that recurses past its 64 KiB stack traps as an out-of-bounds access
// below address 0; the message names the recursion and how to give the
// stack more room. A shallow one does not.
func TestStackOverflowNamesTheRecursion(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "overflow.wasm"))
	e := newEngine(t)
	inst := instantiate(t, e, "overflow", code, Limits{}, InstanceConfig{})
	o := newOut()
	if err := inst.Process(context.Background(), 0, batchOf(kv{"a", "3", 1}), o.emit); err != nil {
		t.Fatalf("3 levels: %v", err)
	}
	err := inst.Process(context.Background(), 0, batchOf(kv{"a", "3", 1}, kv{"b", "100000", 2}), o.emit)
	want := `operator overflow: weir_process: trap at record 2 of the batch (key "b", value "100000"): wasm error: out of bounds memory access ` +
		`(the stack trace is depth(i32) i32 over and over: most likely a recursion too deep for the operator's stack, ` +
		`which C's -Wl,-z,stack-size=N or Rust's -C link-arg=-zstack-size=N enlarges)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// TestFailedAssertIsTheReason: a C operator built with wasi-libc
// (testdata/assert.c) whose assert fails prints "Assertion failed: …" to
// stderr and traps; the trap's message gives that line.
func TestFailedAssertIsTheReason(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "assert.wasm"))
	e := newEngine(t)
	var logs bytes.Buffer
	inst := instantiate(t, e, "assert", code, Limits{}, InstanceConfig{Logger: testLogger(&logs)})
	err := inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}, kv{"b", "long", 2}), newOut().emit)
	want := `operator assert: weir_process: trap at record 2 of the batch (key "b", value "long"): ` +
		`Assertion failed: r.value.len < 3 (assert.c: process: 21) (wasm error: unreachable)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s\nlog:\n%s", err, want, logs.String())
	}
}

// TestLastStderrLineIsInTheTrap: an operator that writes a line of no
// known form to stderr and traps (C++'s libc++ without exceptions on
// std::stoll("abc"): "stoll: no conversion", then abort) gets that line in
// its trap's message, as what it wrote: a trial's reason said only "wasm
// error: unreachable", the line logged at a level weir up hides.
func TestLastStderrLineIsInTheTrap(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "stderr_abort.wasm"))
	e := newEngine(t)
	var logs bytes.Buffer
	inst := instantiate(t, e, "conv", code, Limits{}, InstanceConfig{Logger: testLogger(&logs)})
	err := inst.Process(context.Background(), 0, batchOf(kv{"c", "abc", 1}), newOut().emit)
	want := `operator conv: weir_process: trap: wasm error: unreachable (after the operator wrote to stderr: "stoll: no conversion")`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s\nlog:\n%s", err, want, logs.String())
	}
}
