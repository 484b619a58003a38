package wasm

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrapStackRustNames: a Rust operator built with its names kept
// (testdata/rustpanic.rs) panics; the trap's stack names its functions
// as Rust writes them, not as rustc mangles them, and keeps the names
// that are not Rust's as they are. The module's name section names no
// module, and no frame starts with the "." wazero puts between a module's
// name and its function's.
func TestTrapStackRustNames(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "rustpanic.wasm"))
	if !bytes.Contains(code, []byte("_ZN62_$LT$rustpanic..Checked")) {
		t.Fatal("testdata/rustpanic.wasm has no mangled names: build it without -C strip=symbols")
	}
	e := newEngine(t)
	inst := instantiate(t, e, "rustpanic", code, Limits{}, InstanceConfig{})
	err := inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}, kv{"b", "panic", 2}), newOut().emit)
	var te *TrapError
	if !errors.As(err, &te) || te.RecordIndex != 1 || !strings.Contains(te.Message, "rustpanic: panic") {
		t.Fatalf("got %v, want a trap at record 1 of the batch with the panic's message", err)
	}
	lines := strings.Split(te.Stack, "\n")
	for _, want := range []string{
		"\t<rustpanic::Checked<F> as weir::Operator>::process(i32,i32,i32,i32,i32)",
		"\trustpanic::each(i32,i32)",
		"\tstd::panicking::begin_panic_handler::{{closure}}(i32,i32,i32)",
		"\tweir::Runtime::process(i32,i32,i32,i32) i32",
		"\tweir_process(i32,i32,i32) i32",
		"\trust_begin_unwind(i32)",
	} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("no frame %q in the stack:\n%s", want, te.Stack)
		}
	}
	if strings.Contains(te.Stack, "_ZN") || strings.Contains(te.Stack, "\n\t.") || lines[0] != "wasm stack trace:" {
		t.Errorf("stack:\n%s", te.Stack)
	}
}

func TestDemangleStack(t *testing.T) {
	const (
		mangled = "_ZN47_$LT$probe..Probe$u20$as$u20$weir..Operator$GT$7process17h53750a72f7ed12e4E"
		plain   = "<probe::Probe as weir::Operator>::process"
	)
	for _, c := range []struct{ in, want string }{
		{"wasm stack trace:\n\t." + mangled + "(i32,i32,i32,i32,i32)\n\t.weir_process(i32,i32,i32) i32",
			"wasm stack trace:\n\t." + plain + "(i32,i32,i32,i32,i32)\n\t.weir_process(i32,i32,i32) i32"},
		// Results, none, one or several; a module name, with dots in it.
		{"\t." + mangled + "()", "\t." + plain + "()"},
		{"\t." + mangled + "(i32) i64", "\t." + plain + "(i32) i64"},
		{"\t." + mangled + "(i32) (i32,f64)", "\t." + plain + "(i32) (i32,f64)"},
		{"\tmy.mod." + mangled + "(v128,externref)", "\tmy.mod." + plain + "(v128,externref)"},
		// A module name that looks like a symbol comes before the name.
		{"\tx._ZN3fooE." + mangled + "(i32)", "\tx._ZN3fooE." + plain + "(i32)"},
		// Source positions and the omitted-frames note stay.
		{"\t." + mangled + "(i32)\n\t\t_ZN3fooE.rs:1:2\n\t... maybe followed by omitted frames",
			"\t." + plain + "(i32)\n\t\t_ZN3fooE.rs:1:2\n\t... maybe followed by omitted frames"},
		// Left alone: no signature after the name, a name that does not
		// demangle, v0 mangling, numbered functions.
		{"\t." + mangled, ""},
		{"\t." + mangled + "(i32", ""},
		{"\t." + mangled + "(i32) i32 i32", ""},
		{"\t." + mangled + "(i32)x", ""},
		{"\t." + mangled + "(i32) ", ""},
		{"\t." + mangled + "(i32) (i32", ""},
		{"\t." + mangled + "(i32) i32,i32", ""},
		{"\t._ZN3foo3barEv(i32)", ""},
		{"\t._ZN5$u0a$E(i32)", ""},
		{"\t._RNvCs1234_4weir7process(i32)", ""},
		{"\t.$145(i32) i32", ""},
		{"", ""},
	} {
		want := c.want
		if want == "" {
			want = c.in
		}
		if got := demangleStack(c.in); got != want {
			t.Errorf("demangleStack(%q)\n = %q\nwant %q", c.in, got, want)
		}
	}
}

// A module's name section is anyone's to write, and demangleStack reads
// its names after every trap, on the worker, outside the guest's
// deadline: a name of many "._ZN" made each frame take time in the
// square of its length (a 1.6 MB name, minutes), each candidate scanned
// to the end of the line. A trap's stack with such names is read in time
// in proportion to its length (the deadline is only a hang guard).
func TestDemangleStackHostileNames(t *testing.T) {
	const mangled = "_ZN47_$LT$probe..Probe$u20$as$u20$weir..Operator$GT$7process17h53750a72f7ed12e4E"
	hostile := strings.Repeat("._ZN", 400_000)
	stack := "wasm stack trace:\n\t" + hostile + "(i32)\n\t" + hostile + "." + mangled + "(i32) i32\n\t" +
		strings.Repeat("(", 400_000) + "._ZN3fooE(i32)"
	done := make(chan string, 1)
	go func() { done <- demangleStack(stack) }()
	select {
	case got := <-done:
		lines := strings.Split(got, "\n")
		if len(lines) != 4 || lines[1] != "\t"+hostile+"(i32)" ||
			lines[2] != "\t"+hostile+".<probe::Probe as weir::Operator>::process(i32) i32" || !strings.HasSuffix(lines[3], "(.foo(i32)") {
			t.Errorf("the stack changed otherwise than its Rust name demangled")
		}
	case <-time.After(time.Minute):
		t.Fatal("demangleStack still reading a stack of 3 MB after a minute")
	}
}

// FuzzDemangleStack: demangleStack never panics, keeps the trace's line
// count, and changes no line without a "._ZN" in it.
func FuzzDemangleStack(f *testing.F) {
	f.Add("wasm stack trace:\n\t._ZN9rustpanic4each17h30710abc54afbcb9E(i32,i32)\n\t\tx.rs:1:1")
	f.Add("\tx._ZN3fooE._ZN3barE(i32) (i32,i64)")
	f.Add("\t._ZN3foo(._ZN3barE()")
	f.Fuzz(func(t *testing.T, in string) {
		got := demangleStack(in)
		inLines, gotLines := strings.Split(in, "\n"), strings.Split(got, "\n")
		if len(inLines) != len(gotLines) {
			t.Fatalf("demangleStack(%q) = %q: %d lines, not %d", in, got, len(gotLines), len(inLines))
		}
		for i, l := range inLines {
			if !strings.Contains(l, "._ZN") && gotLines[i] != l {
				t.Fatalf("demangleStack(%q) = %q: line %d changed", in, got, i)
			}
		}
	})
}

// A frame of a module with no name in its name section (most modules)
// names its function alone; what names a module, a source position and
// the omitted-frames note stay as they are.
func TestDropEmptyModuleName(t *testing.T) {
	in := "wasm stack trace:\n" +
		"\t.weir_process(i32,i32,i32) i32\n" +
		"\t\t./op.c:12:3\n" +
		"\t..dotted(i32)\n" +
		"\t.$12(i32) i32\n" +
		"\tops.process(i32) i32\n" +
		"\twasi_snapshot_preview1.fd_write(i32,i32,i32,i32) i32\n" +
		"\t... maybe followed by omitted frames"
	want := "wasm stack trace:\n" +
		"\tweir_process(i32,i32,i32) i32\n" +
		"\t\t./op.c:12:3\n" +
		"\t.dotted(i32)\n" +
		"\t$12(i32) i32\n" +
		"\tops.process(i32) i32\n" +
		"\twasi_snapshot_preview1.fd_write(i32,i32,i32,i32) i32\n" +
		"\t... maybe followed by omitted frames"
	if got := dropEmptyModuleName(in); got != want {
		t.Errorf("dropEmptyModuleName:\n%s\nwant\n%s", got, want)
	}
}

func TestRecursion(t *testing.T) {
	rep := func(frame string, n int) string { return strings.Repeat("\t"+frame+"\n", n) }
	for _, c := range []struct {
		name, stack, want string
	}{
		{"deep", "wasm stack trace:\n" + rep("depth(i32) i32", 29) + "\t... maybe followed by omitted frames", "depth(i32) i32"},
		{"under a leaf", "wasm stack trace:\n\tmemset(i32,i32,i32) i32\n" + rep("$10(i32) i32", 20), "$10(i32) i32"},
		{"mutual", "wasm stack trace:\n" + strings.Repeat("\ta(i32) i32\n\tb(i32) i32\n", 12), "a(i32) i32"},
		{"shallow", "wasm stack trace:\n" + rep("f() i32", 3) + "\tweir_process(i32,i32,i32) i32", ""},
		{"a few among many", "wasm stack trace:\n" + rep("f() i32", 8) + rep("g() i32", 5) + rep("h() i32", 5), ""},
		{"none", "", ""},
	} {
		if got := recursion(c.stack); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
