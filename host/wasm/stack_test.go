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
		t.Fatalf("got %v, want a trap at record 2 of the batch with the panic's message", err)
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

// TestTrapStackCppNames: a C++ operator built with its names kept and
// mangled (testdata/cpptrap.cpp, linked with -no-demangle) aborts; the
// trap's stack names its functions as C++ writes them, as c++filt, and
// wasm-ld when it demangles the names it writes, do: "_Z7processPKhm" is
// "process(unsigned char const*, unsigned long)".
func TestTrapStackCppNames(t *testing.T) {
	code := readFile(t, filepath.Join("testdata", "cpptrap.wasm"))
	if !bytes.Contains(code, []byte("_Z7processPKhm")) {
		t.Fatal("testdata/cpptrap.wasm has no mangled names: link it with -Wl,-no-demangle and without -Wl,--strip-all")
	}
	e := newEngine(t)
	inst := instantiate(t, e, "cpptrap", code, Limits{}, InstanceConfig{})
	err := inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}, kv{"b", "trap", 2}), newOut().emit)
	var te *TrapError
	if !errors.As(err, &te) || te.RecordIndex != 1 || te.Message != "cpptrap: trap" {
		t.Fatalf("got %v, want a trap at record 2 of the batch with the abort's message", err)
	}
	want := "wasm stack trace:\n" +
		"\tweir_abort(char const*)(i32)\n" +
		"\tcpptrap::Checked<unsigned long>::check(std::__2::basic_string_view<char, std::__2::char_traits<char> >) const(i32,i32)\n" +
		"\tprocess(unsigned char const*, unsigned long)(i32,i32)\n" +
		"\tweir_process(unsigned int, unsigned char const*, unsigned int)(i32,i32,i32) i32"
	if te.Stack != want {
		t.Errorf("stack:\n%s\nwant\n%s", te.Stack, want)
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
		// C++ (Itanium) names, after a module name too, cloned, a thunk;
		// "_ZN…E" with parameter types after it is C++'s, not Rust's.
		{"\t._Z7processPKhm(i32,i32)", "\t.process(unsigned char const*, unsigned long)(i32,i32)"},
		{"\tmy.mod._ZNK3ops5Upper7processEjP10weir_batch(i32,i32,i32) i32",
			"\tmy.mod.ops::Upper::process(unsigned int, weir_batch*) const(i32,i32,i32) i32"},
		{"\tx._ZN3fooE._Z3maxIiET_S0_S0_(i32,i32) i32", "\tx._ZN3fooE.int max<int>(int, int)(i32,i32) i32"},
		{"\t._Z3foov.cold()", "\t.foo() [clone .cold]()"},
		{"\t._ZThn8_N3Foo3barEv(i32)", "\t.non-virtual thunk to Foo::bar()(i32)"},
		{"\t._ZN3foo3barEv(i32)", "\t.foo::bar()(i32)"},
		{"\t._ZN12_GLOBAL__N_13fooEv(i32)", "\t.(anonymous namespace)::foo()(i32)"},
		// Left alone: no signature after the name, a name that does not
		// demangle, v0 mangling, numbered functions; C++ names that are no
		// function's (a variable's, a vtable), are malformed, or are
		// longer than maxCxxName.
		{"\t." + mangled, ""},
		{"\t." + mangled + "(i32", ""},
		{"\t." + mangled + "(i32) i32 i32", ""},
		{"\t." + mangled + "(i32)x", ""},
		{"\t." + mangled + "(i32) ", ""},
		{"\t." + mangled + "(i32) (i32", ""},
		{"\t." + mangled + "(i32) i32,i32", ""},
		{"\t._ZN5$u0a$E(i32)", ""},
		{"\t._ZN5$u0a$17h0123456789abcdefE(i32)", ""},
		{"\t._Z1x(i32)", ""},
		{"\t._ZTV3Foo(i32)", ""},
		{"\t._Z7process(i32)", ""},
		{"\t._Z7processPKhmX(i32)", ""},
		{"\t._Z7processPKhm", ""},
		{"\t._Z1f" + strings.Repeat("i", maxCxxName) + "(i32)", ""},
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

// The C++ demangler takes time in the square of the length of some names
// ("_Z1fKKK…Kv", f(void const const …)): a stack of wazero's most frames
// (30), each such a name of maxCxxName bytes, is read in time bounded by
// maxCxxCost: a name that costs more than the stack's names before it
// left of it stays mangled, and so does a name too long to read at all.
func TestDemangleStackHostileCppNames(t *testing.T) {
	const first = "_Z7processPKhm"
	n := maxCxxName - len("_Z1fv")
	slow := "\t._Z1f" + strings.Repeat("K", n) + "v(i32)"
	var b strings.Builder
	b.WriteString("wasm stack trace:\n\t." + first + "(i32,i32)\n")
	for range 30 {
		b.WriteString(slow + "\n")
	}
	b.WriteString("\t." + first + "(i32,i32)\n\t._Z1f" + strings.Repeat("K", 1<<20) + "v(i32)")
	stack := b.String()
	start := time.Now()
	done := make(chan string, 1)
	go func() { done <- demangleStack(stack) }()
	select {
	case got := <-done:
		t.Logf("%d bytes of C++ names read in %v", len(stack), time.Since(start))
		lines := strings.Split(got, "\n")
		want := strings.Split(stack, "\n")
		want[1] = "\t.process(unsigned char const*, unsigned long)(i32,i32)"
		// The long names that fit in what the first left of maxCxxCost,
		// and the short one after them, which still does.
		fit := (maxCxxCost - len(first)*len(first)) / (maxCxxName * maxCxxName)
		if fit < 1 || fit >= 30 {
			t.Fatalf("%d of the 30 long names fit in maxCxxCost: make the test tell", fit)
		}
		for i := range fit {
			want[2+i] = "\t.f(void" + strings.Repeat(" const", n) + ")(i32)"
		}
		want[len(want)-2] = want[1]
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d", len(lines), len(want))
		}
		for i := range want {
			if lines[i] != want[i] {
				t.Errorf("line %d: %.60q…, want %.60q…", i, lines[i], want[i])
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("demangleStack still reading a stack of C++ names after a minute")
	}
}

// FuzzDemangleStack: demangleStack never panics, keeps the trace's line
// count, and changes no line without a "._Z" in it.
func FuzzDemangleStack(f *testing.F) {
	f.Add("wasm stack trace:\n\t._ZN9rustpanic4each17h30710abc54afbcb9E(i32,i32)\n\t\tx.rs:1:1")
	f.Add("\tx._ZN3fooE._ZN3barE(i32) (i32,i64)")
	f.Add("\t._ZN3foo(._ZN3barE()")
	// C++: testdata/cpptrap.wasm's names, clones, thunks, templates and
	// substitutions, a Rust symbol's shape the Rust demangler refuses.
	f.Add("wasm stack trace:\n\t._ZL10weir_abortPKc(i32)\n" +
		"\t._ZNK7cpptrap7CheckedImE5checkENSt3__217basic_string_viewIcNS2_11char_traitsIcEEEE(i32,i32)\n" +
		"\t._Z7processPKhm(i32,i32)\n\t._Z12weir_processjPKhj(i32,i32,i32) i32\n\t\t./op.cpp:3:1")
	f.Add("\tm._Z3foov.cold._ZThn8_N3Foo3barEv(i32) (i32,i64)")
	f.Add("\t._Z3maxIiET_S0_S0_(i32,i32) i32\n\t._Z1fPFvPFvvEE(i32)")
	f.Add("\t._ZN5$u0a$17h0123456789abcdefE()\n\t._ZTV3Foo()")
	f.Add("\t._Z1f" + strings.Repeat("P", 300) + "v(i32)")
	f.Fuzz(func(t *testing.T, in string) {
		got := demangleStack(in)
		inLines, gotLines := strings.Split(in, "\n"), strings.Split(got, "\n")
		if len(inLines) != len(gotLines) {
			t.Fatalf("demangleStack(%q) = %q: %d lines, not %d", in, got, len(gotLines), len(inLines))
		}
		for i, l := range inLines {
			if !strings.Contains(l, "._Z") && gotLines[i] != l {
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
