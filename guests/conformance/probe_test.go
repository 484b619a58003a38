package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host/wasm"
)

// probes are each SDK's probe operator (guests/*/sdktest/probe.*): record
// i of a batch goes to output port (i+1)%2 unchanged; the value "trap"
// traps, "panic" panics (aborts) with "probe: panic", "fail" fails the call
// with "probe: fail", "log" is also logged at warn level as "probe: log",
// "badport" is emitted to output port 2000 (past every SDK's limit),
// "alloc" (Rust, AssemblyScript) asks for more than the memory limit,
// "abort" (AssemblyScript) calls abort("probe: abort"); end
// of input on port p emits eoi=p on port 0; checkpoint completion fails with
// "probe: negative checkpoint" for id < 0; snapshot writes u8 1, bytes
// "probe", i64 -2, which restore checks.
var probes = map[string]string{
	"c":              filepath.Join("..", "c", "sdktest", "probe.wasm"),
	"c-freestanding": filepath.Join("..", "c", "sdktest", "probe.freestanding.wasm"),
	"rust":           filepath.Join("..", "rust", "sdktest", "probe.wasm"),
	"assemblyscript": filepath.Join("..", "assemblyscript", "sdktest", "probe.wasm"),
}

func records(values ...string) []byte {
	rs := make([]abi.Record, len(values))
	for i, v := range values {
		rs[i] = abi.Record{Key: []byte{'k', byte('0' + i)}, Value: []byte(v), Timestamp: int64(i)}
	}
	return abi.EncodeBatch(rs...)
}

// TestSDKProbe checks, per SDK, what the examples do not show: one batch
// per output port in first-use order, the record cursor reported on a
// trap, an error message with nothing emitted, and emitting at end of input.
func TestSDKProbe(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for name, path := range probes {
		t.Run(name, func(t *testing.T) {
			code, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run guests/build.sh)", err)
			}
			m, err := e.Load(ctx, name+"-probe", code, wasm.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			newInst := func() *wasm.Instance {
				inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, Logger: logger, WholeBatches: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { inst.Close(ctx) })
				return inst
			}
			var got []emission
			collect := func(port int, b []byte) error {
				got = append(got, emission{port: port, batch: b})
				return nil
			}

			inst := newInst()
			if err := inst.Process(ctx, 0, records("log", "b", "c", "d", "e"), collect); err != nil {
				t.Fatal(err)
			}
			if want := `level=WARN msg="probe: log" operator=` + name + `-probe`; !strings.Contains(logs.String(), want) {
				t.Errorf("log: got %q, want a line with %q", logs.String(), want)
			}
			want := []emission{
				{port: 1, batch: abi.EncodeBatch(
					abi.Record{Key: []byte("k0"), Value: []byte("log"), Timestamp: 0},
					abi.Record{Key: []byte("k2"), Value: []byte("c"), Timestamp: 2},
					abi.Record{Key: []byte("k4"), Value: []byte("e"), Timestamp: 4})},
				{port: 0, batch: abi.EncodeBatch(
					abi.Record{Key: []byte("k1"), Value: []byte("b"), Timestamp: 1},
					abi.Record{Key: []byte("k3"), Value: []byte("d"), Timestamp: 3})},
			}
			sameEmissions(t, "two ports", got, want)

			var oe *wasm.OperatorError
			got = nil
			if err := inst.EndOfInput(ctx, 1, collect); err != nil {
				t.Fatal(err)
			}
			sameEmissions(t, "end of input", got, []emission{{port: 0, batch: abi.EncodeBatch(
				abi.Record{Key: []byte("eoi"), Value: []byte("1")})}})

			if err := inst.CheckpointComplete(ctx, 7); err != nil {
				t.Errorf("checkpoint complete 7: %v", err)
			}
			err = inst.CheckpointComplete(ctx, -1)
			if !errors.As(err, &oe) || oe.Message != "probe: negative checkpoint" {
				t.Errorf("checkpoint complete -1: %v, want an operator error with message %q", err, "probe: negative checkpoint")
			}

			got = nil
			err = newInst().Process(ctx, 0, records("a", "fail"), collect)
			if !errors.As(err, &oe) || oe.Message != "probe: fail" {
				t.Errorf("failing call: %v, want an operator error with message %q", err, "probe: fail")
			}
			if len(got) != 0 {
				t.Errorf("a failed call emitted %d batches", len(got))
			}

			if !errors.As(err, &oe) || oe.RecordIndex != 1 {
				t.Errorf("failing call: %v, want the error at record 2 of the batch", err)
			}

			// An emit the SDK refuses (a port past its limit) fails the call
			// with the SDK's message, however the operator passes the
			// failure on (C: `if (weir_emit(...)) return WEIR_ERR;`).
			got = nil
			err = newInst().Process(ctx, 0, records("a", "badport"), collect)
			if !errors.As(err, &oe) || !strings.HasPrefix(oe.Message, "weir: emit to output port 2000") {
				t.Errorf("emit to port 2000: %v, want an operator error with a message starting %q", err, "weir: emit to output port 2000")
			}
			if len(got) != 0 {
				t.Errorf("a call with a refused emit emitted %d batches", len(got))
			}

			err = newInst().Process(ctx, 0, records("a", "b", "trap"), collect)
			var te *wasm.TrapError
			if !errors.As(err, &te) || te.RecordIndex != 2 {
				t.Errorf("trapping call: %v, want a trap at record 3 of the batch", err)
			}

			// A panic (Rust panic!, AssemblyScript throw, C weir_abort):
			// its message reaches the host with the trap.
			err = newInst().Process(ctx, 0, records("a", "panic"), collect)
			if !errors.As(err, &te) || te.RecordIndex != 1 || !strings.Contains(te.Message, "probe: panic") ||
				!strings.Contains(err.Error(), `trap at record 2 of the batch (key "k1", value "panic"): `) {
				t.Errorf("panicking call: %v, want a trap at record 2 of the batch with the message %q", err, "probe: panic")
			}

			// State helpers: u8, length-prefixed bytes, i64, the same bytes
			// in every SDK; a stream that ends early says so.
			var snap bytes.Buffer
			if err := newInst().Snapshot(ctx, &snap); err != nil {
				t.Fatal(err)
			}
			wantState := []byte{1, 5, 0, 0, 0, 'p', 'r', 'o', 'b', 'e', 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			if !bytes.Equal(snap.Bytes(), wantState) {
				t.Errorf("snapshot: got % x, want % x", snap.Bytes(), wantState)
			}
			if err := newInst().Restore(ctx, bytes.NewReader(wantState)); err != nil {
				t.Errorf("restore: %v", err)
			}
			err = newInst().Restore(ctx, bytes.NewReader(wantState[:len(wantState)-1]))
			if !errors.As(err, &oe) || oe.Message != "weir: state ended early" {
				t.Errorf("restore of truncated state: %v, want an operator error with message %q", err, "weir: state ended early")
			}
		})
	}
}

// TestAllocationFailure: an allocation past the 64 MiB limit made while
// the memory is far below it (the Rust and AssemblyScript probes' "alloc":
// 1 GiB, 512 MiB) fails. The Rust SDK's allocator names the size in the
// call's message before Rust aborts; AssemblyScript's runtime traps with a
// bare "unreachable". Either way the host's note names the memory.grow the
// limit refused, which is all an AssemblyScript operator gets.
func TestAllocationFailure(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for _, c := range []struct {
		lang, reason string
		pages        uint64
	}{
		{"rust", "weir: memory allocation of 1073741824 bytes failed (wasm error: unreachable)", 16385},
		{"assemblyscript", "wasm error: unreachable", 8193},
	} {
		t.Run(c.lang, func(t *testing.T) {
			m := loadProbe(t, e, c.lang)
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, WholeBatches: true})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close(ctx)
			err = inst.Process(ctx, 0, records("a", "alloc"), func(int, []byte) error { return nil })
			want := fmt.Sprintf(`trap at record 2 of the batch (key "k1", value "alloc"): %s (memory.grow of %d pages (`, c.reason, c.pages)
			var te *wasm.TrapError
			if !errors.As(err, &te) || te.RecordIndex != 1 || te.GrowRefused != c.pages*wasm.PageSize ||
				te.MemoryLimit != wasm.DefaultMemoryBytes || te.MemorySize >= 4<<20 ||
				!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "refused: the operator's memory limit (limits.memory) is 64 MiB and it had ") {
				t.Errorf("got %v, want a trap at record 2 of the batch containing %q and naming the refused grow", err, want)
			}
		})
	}
}

// TestAssemblyScriptAbort: an AssemblyScript operator's own
// abort("message"), built with --use abort=…/weirAbort as
// guests/README.md says, compiles (weirAbort's parameters after the
// message are optional, as in the abort it replaces) and its message
// reaches the host with the trap, at the record it happened on.
func TestAssemblyScriptAbort(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m := loadProbe(t, e, "assemblyscript")
	inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, WholeBatches: true})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	err = inst.Process(ctx, 0, records("a", "abort", "b"), func(int, []byte) error { return nil })
	var te *wasm.TrapError
	if !errors.As(err, &te) || te.RecordIndex != 1 || te.Message != "abort: probe: abort" ||
		!strings.Contains(err.Error(), `trap at record 2 of the batch (key "k1", value "abort"): abort: probe: abort (wasm error: unreachable)`) {
		t.Errorf("got %v, want a trap at record 2 of the batch with the message %q", err, "abort: probe: abort")
	}
}

// TestAssemblyScriptTrapStack: the AssemblyScript probe, built with --debug
// as guests/build.sh and guests/sourcebuild build AssemblyScript, keeps a
// name section, so its trap's stack names the operator's function where it
// said $47.
func TestAssemblyScriptTrapStack(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m := loadProbe(t, e, "assemblyscript")
	inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, WholeBatches: true})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	err = inst.Process(ctx, 0, records("a", "trap"), func(int, []byte) error { return nil })
	const frame = "\tguests/assemblyscript/sdktest/probe/Probe#process(i32,i32,i32) i32\n"
	var te *wasm.TrapError
	if !errors.As(err, &te) || te.RecordIndex != 1 || !strings.Contains(te.Stack+"\n", frame) {
		t.Errorf("got %v, want a trap at record 2 of the batch whose stack has the frame %q", err, strings.TrimSpace(frame))
		if te != nil {
			t.Logf("stack:\n%s", te.Stack)
		}
	}
}

// TestCStackOverflow: C's stack lives in linear memory; built with
// -Wl,--stack-first (guests/build.sh, as guests/README.md says) a recursion
// too deep for it traps at once, out of bounds, at the record it happened
// on, and the message names the recursion. Without the flag the stack grows into the globals, the SDK's cursor
// among them, and the host blamed a record that never existed.
func TestCStackOverflow(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for _, name := range []string{"c", "c-freestanding"} {
		m := loadProbe(t, e, name)
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, WholeBatches: true})
		if err != nil {
			t.Fatal(err)
		}
		err = inst.Process(ctx, 0, records("a", "recurse", "b"), func(int, []byte) error { return nil })
		var te *wasm.TrapError
		if !errors.As(err, &te) || te.RecordIndex != 1 || te.Recursion == "" ||
			!strings.Contains(err.Error(), `trap at record 2 of the batch (key "k1", value "recurse"): wasm error: out of bounds memory access (the stack trace is `) ||
			!strings.HasSuffix(err.Error(), `over and over: most likely a recursion too deep for the operator's stack, which C's -Wl,-z,stack-size=N or Rust's -C link-arg=-zstack-size=N enlarges)`) {
			t.Errorf("%s: got %v, want an out-of-bounds trap at record 2 of the batch that names the recursion", name, err)
		}
		inst.Close(ctx)
	}
}

// TestCNullWrite: WebAssembly has no page to fault on at address 0, so a C
// operator writing through a NULL pointer (the probe's "null": 4 KiB of 1s)
// does not trap. Built with -Wl,--stack-first the bytes land in the far end
// of the stack, unused, and the SDK's state is whole: the records are
// emitted, and a later trap is reported at its record. Without the flag
// they land on the globals: the emit buffers' pointers and the cursor
// read 0x01010101, and the host blamed record 16843009.
func TestCNullWrite(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for _, name := range []string{"c", "c-freestanding"} {
		m := loadProbe(t, e, name)
		newInst := func() *wasm.Instance {
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Outputs: 2, WholeBatches: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { inst.Close(ctx) })
			return inst
		}
		var got []emission
		err := newInst().Process(ctx, 0, records("a", "null", "b"), func(port int, b []byte) error {
			got = append(got, emission{port: port, batch: b})
			return nil
		})
		if err != nil {
			t.Errorf("%s: a write through NULL: %v", name, err)
		} else {
			sameEmissions(t, name+" after a write through NULL", got, []emission{
				{port: 1, batch: abi.EncodeBatch(
					abi.Record{Key: []byte("k0"), Value: []byte("a"), Timestamp: 0},
					abi.Record{Key: []byte("k2"), Value: []byte("b"), Timestamp: 2})},
				{port: 0, batch: abi.EncodeBatch(
					abi.Record{Key: []byte("k1"), Value: []byte("null"), Timestamp: 1})},
			})
		}
		err = newInst().Process(ctx, 0, records("a", "null", "b", "trap"), func(int, []byte) error { return nil })
		var te *wasm.TrapError
		if !errors.As(err, &te) || te.RecordIndex != 3 ||
			!strings.Contains(err.Error(), `trap at record 4 of the batch (key "k3", value "trap"): wasm error: unreachable`) {
			t.Errorf("%s: got %v, want the trap at record 3, after a write through NULL at record 2 of the batch", name, err)
		}
	}
}

// TestKeyedStateMisuse: a keyed state begun after other state (a version
// byte, as abi/ABI.md §8 advises for other layouts), or in C put without
// weir_keyed_state_begin, would be a state not in the keyed layout, which
// the SDKs' keyed state readers refuse only at the restore after a
// failure, and a rescale refuses too; every SDK fails the snapshot
// instead, saying what to do, also when the operator ignores the error
// and its snapshot returns success: C's and Rust's configs ending in
// "-ignored" (Rust's drops KeyedStateWriter::new's Err with .ok(), which
// once took a snapshot of the version byte alone), AssemblyScript's probe
// always.
func TestKeyedStateMisuse(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	const (
		cLate  = "weir: weir_keyed_state_begin after other state: the keyed layout is the whole snapshot (begin it first, with no version byte before it)"
		cNoBeg = "weir: weir_keyed_state_put without weir_keyed_state_begin (call it first in the snapshot callback)"
		late   = "weir: KeyedStateWriter after other state: the keyed layout is the whole snapshot (create it first, with no version byte before it)"
	)
	for name, cases := range map[string]map[string]string{
		"c": {"keyed-put-without-begin": cNoBeg, "keyed-begin-after-state": cLate,
			"keyed-put-without-begin-ignored": cNoBeg, "keyed-begin-after-state-ignored": cLate},
		"c-freestanding": {"keyed-put-without-begin": cNoBeg, "keyed-begin-after-state": cLate,
			"keyed-put-without-begin-ignored": cNoBeg, "keyed-begin-after-state-ignored": cLate},
		"rust":           {"keyed-begin-after-state": late, "keyed-begin-after-state-ignored": late},
		"assemblyscript": {"keyed-begin-after-state": late},
	} {
		m := loadProbe(t, e, name)
		for config, want := range cases {
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Config: []byte(config), Outputs: 2})
			if err != nil {
				t.Fatal(err)
			}
			err = inst.Snapshot(ctx, io.Discard)
			var oe *wasm.OperatorError
			if !errors.As(err, &oe) || oe.Export != abi.ExportSnapshot || oe.Message != want {
				t.Errorf("%s %s: snapshot error %v, want an operator error from %s with message %q", name, config, err, abi.ExportSnapshot, want)
			}
			inst.Close(ctx)
		}
	}
}

// TestStateAfterKeyedState: bytes written to the state writer itself after
// a keyed state began, after an entry or between two, make a state in
// neither the keyed layout nor one of the operator's own: a restore into
// the same build fails on it, and a rescale would split it wrong. Every
// SDK fails the snapshot instead, saying what to do, also when the
// operator ignores the errors and its snapshot returns success, as the
// probes' and Go's sdktest's "state-after-keyed" (k=v, then a byte) and
// "keyed-put-after-state" (k=v, a byte, k2=v2) do. So does a second keyed
// state writer in one snapshot ("two-keyed-writers": k=v with one, k2=v2
// with another, as a loop making a writer per key does), with a message of
// its own: it once got the message for a keyed state after other state,
// which pointed at a version byte the operator never wrote. The
// operator's name leads the error, as the host puts it.
func TestStateAfterKeyedState(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	const (
		sdkAfter = "weir: other state after KeyedStateWriter: the keyed layout is the whole snapshot (write every entry with the KeyedStateWriter, nothing with the StateWriter itself)"
		cAfter   = "weir: weir_state_write after weir_keyed_state_begin: the keyed layout is the whole snapshot (write every entry with weir_keyed_state_put, nothing with weir_state_write)"
		sdkTwice = "weir: a second KeyedStateWriter in one snapshot: the keyed layout is the whole snapshot (make one and put every entry with it)"
		cTwice   = "weir: a second weir_keyed_state_begin in one snapshot: the keyed layout is the whole snapshot (begin it once and put every entry after it)"
	)
	// configs: each config of the operators, and the message the snapshot
	// fails with in C and in the other SDKs.
	configs := []struct{ config, sdk, c string }{
		{"state-after-keyed", sdkAfter, cAfter},
		{"keyed-put-after-state", sdkAfter, cAfter},
		{"two-keyed-writers", sdkTwice, cTwice},
	}
	for _, name := range []string{"go", "rust", "assemblyscript", "c", "c-freestanding"} {
		m := loadProbe(t, e, name)
		for _, c := range configs {
			want := c.sdk
			if name == "c" || name == "c-freestanding" {
				want = c.c
			}
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Config: []byte(c.config), Outputs: 2})
			if err != nil {
				t.Fatal(err)
			}
			err = inst.Snapshot(ctx, io.Discard)
			var oe *wasm.OperatorError
			if !errors.As(err, &oe) || oe.Export != abi.ExportSnapshot || oe.Message != want ||
				!strings.HasPrefix(err.Error(), "operator "+name+"-probe: "+abi.ExportSnapshot+": ") {
				t.Errorf("%s %s: snapshot error %v, want an operator error from %s of %s-probe with message %q", name, c.config, err, abi.ExportSnapshot, name, want)
			}
			inst.Close(ctx)
		}
	}
}

// loadProbe compiles the SDK probe of language name: Go's built from its
// package, the others' committed .wasm (probes).
func loadProbe(t *testing.T, e *wasm.Engine, name string) *wasm.Module {
	t.Helper()
	var code []byte
	if name == "go" {
		code = guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest")
	} else {
		var err error
		if code, err = os.ReadFile(probes[name]); err != nil {
			t.Fatalf("%v (run guests/build.sh)", err)
		}
	}
	m, err := e.Load(context.Background(), name+"-probe", code, wasm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEmptyWritesAroundKeyedState: writing no bytes to the state writer
// before or after a keyed state is no other state, in every SDK: the
// snapshot is the keyed state alone. C counted a weir_state_write of 0
// bytes before weir_keyed_state_begin as state written, and refused the
// begin, where the other SDKs take it.
func TestEmptyWritesAroundKeyedState(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	want := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("k"), []byte("v"))
	for _, name := range []string{"go", "rust", "assemblyscript", "c", "c-freestanding"} {
		m := loadProbe(t, e, name)
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Config: []byte("empty-writes-around-keyed"), Outputs: 2})
		if err != nil {
			t.Fatal(err)
		}
		var snap bytes.Buffer
		if err := inst.Snapshot(ctx, &snap); err != nil {
			t.Errorf("%s: snapshot: %v", name, err)
		} else if !bytes.Equal(snap.Bytes(), want) {
			t.Errorf("%s: snapshot %q, want %q", name, snap.Bytes(), want)
		}
		inst.Close(ctx)
	}
}

// TestAssemblyScriptPutString: KeyedStateWriter.putString writes a key
// and value given as strings in UTF-8, the bytes the other SDKs write for
// the same strings (Go's Put([]byte(s), ...), Rust's put(s.as_bytes(),
// ...), C's weir_keyed_state_put(weir_bytes_of(s), ...)), and utf8String
// reads them back in a restore: AssemblyScript's strings are UTF-16, so
// without them an operator had to encode each one and wrap it itself.
func TestAssemblyScriptPutString(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m := loadProbe(t, e, "assemblyscript")
	newInst := func() *wasm.Instance {
		inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Config: []byte("keyed-strings"), Outputs: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close(ctx) })
		return inst
	}
	want := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("ключ"), []byte("värde €"))
	want = abi.AppendKeyedEntry(want, []byte("plain"), nil)
	var snap bytes.Buffer
	if err := newInst().Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap.Bytes(), want) {
		t.Errorf("snapshot: got % x, want % x", snap.Bytes(), want)
	}
	if err := newInst().Restore(ctx, bytes.NewReader(want)); err != nil {
		t.Errorf("restore: %v", err)
	}
	other := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("ключ"), []byte("värde $"))
	other = abi.AppendKeyedEntry(other, []byte("plain"), nil)
	var oe *wasm.OperatorError
	if err := newInst().Restore(ctx, bytes.NewReader(other)); !errors.As(err, &oe) || oe.Message != "probe: bad state" {
		t.Errorf("restore of other strings: %v, want an operator error with message %q", err, "probe: bad state")
	}
}

// TestSDKConstructorFailure: an operator whose constructor fails (a Rust
// panic in the expression handed to weir::operator!, an AssemblyScript
// throw in the entry file's top-level code, which runs as the module's
// start function) fails the instance with its message.
func TestSDKConstructorFailure(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for name, path := range map[string]string{
		"rust":           filepath.Join("..", "rust", "sdktest", "badctor.wasm"),
		"assemblyscript": filepath.Join("..", "assemblyscript", "sdktest", "badctor.wasm"),
	} {
		t.Run(name, func(t *testing.T) {
			code, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run guests/build.sh)", err)
			}
			m, err := e.Load(ctx, name+"-badctor", code, wasm.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{})
			if err == nil {
				inst.Close(ctx)
				t.Fatal("the operator started")
			}
			if want := "badctor: constructor failed"; !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want an error with %q", err, want)
			}
		})
	}
}

// TestAssemblyScriptNoStartFunction: asc runs an entry file's top-level
// code (register(new Op()), the operator's constructor) as the module's
// wasm start function unless told to export it. A start function runs
// inside instantiation, where no call deadline reaches it: a constructor
// that never returns hangs the worker. Built with --exportStart
// _initialize, the code runs as the reactor initializer the host calls
// under the deadline.
func TestAssemblyScriptNoStartFunction(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "assemblyscript", "*", "*.wasm"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no AssemblyScript builds: %v", err)
	}
	ctx := context.Background()
	for _, path := range paths {
		code, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if hasStartSection(t, code) {
			t.Errorf("%s has a start function (build with asc --exportStart _initialize)", path)
		}
		m, err := wazero.NewRuntime(ctx).CompileModule(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.ExportedFunctions()[abi.ExportInitialize]; !ok {
			t.Errorf("%s does not export %s", path, abi.ExportInitialize)
		}
	}
}

// hasStartSection reports whether a wasm binary has a start section (id 8).
func hasStartSection(t *testing.T, code []byte) bool {
	t.Helper()
	b := code[8:] // magic and version
	for len(b) > 0 {
		id := b[0]
		size, n := binary.Uvarint(b[1:])
		if n <= 0 || uint64(len(b)-1-n) < size {
			t.Fatal("malformed module")
		}
		if id == 8 {
			return true
		}
		b = b[1+n+int(size):]
	}
	return false
}
