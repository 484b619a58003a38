package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// weir runs the command line with stdin and returns the exit code, stdout
// and stderr.
func weir(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// example builds a Go example operator into a temp file.
func example(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/"+name), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecUppercase(t *testing.T) {
	mod := example(t, "uppercase")
	code, out, errs := weir(t, "hello world\nk\tfoo bar\r\n", "exec", mod)
	if code != 0 || out != "HELLO WORLD\nk\tFOO BAR\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// The WAT passthrough, flags after the module, small batches.
	code, out, errs = weir(t, "a\nb\tc\n", "exec", "../../guests/wat/passthrough.wasm", "-batch", "1")
	if code != 0 || out != "a\nb\tc\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Flags on both sides of the module, as weir run takes them.
	code, out, errs = weir(t, "hello\n", "exec", "-batch", "1", mod, "-name", "up")
	if code != 0 || out != "HELLO\n" {
		t.Fatalf("flags before and after the module: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// weir exec builds an operator given as a source file (guests/sourcebuild)
// and runs it.
func TestExecBuildsSourceFiles(t *testing.T) {
	for _, src := range []string{"../../guests/c/examples/uppercase.c", "../../guests/sourcebuild/testdata/shout.rs"} {
		code, out, errs := weir(t, "hello world\n", "exec", src)
		if code != 0 || out != "HELLO WORLD\n" || !saidBuild(errs, src) {
			t.Errorf("weir exec %s: exit %d, stdout %q, stderr %q", src, code, out, errs)
		}
	}
	code, _, errs := weir(t, "", "exec", "nothere.rs")
	if code != 1 || errs != "weir: exec: build nothere.rs: no such file\n" {
		t.Errorf("weir exec nothere.rs: exit %d, stderr %q", code, errs)
	}
	code, _, errs = weir(t, "", "exec", "../../guests/go/examples/uppercase/main.go")
	if code != 1 || errs != "weir: exec: build ../../guests/go/examples/uppercase/main.go: a Go operator is built from its package: give the directory ../../guests/go/examples/uppercase, not a file of it\n" {
		t.Errorf("weir exec main.go: exit %d, stderr %q", code, errs)
	}
}

func TestExecWordcountSnapshotRestore(t *testing.T) {
	mod := example(t, "wordcount")
	input := "a b a\nc a\nb b\nd\na\n"
	code, want, errs := weir(t, input, "exec", "-batch", "2", mod)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.SplitAfter(input, "\n")
	for _, after := range []int{1, 2, 3, 4} {
		snap := filepath.Join(t.TempDir(), "snap")
		code, first, errs := weir(t, input, "exec", mod, "-batch", "2", "-snapshot-after", strconv.Itoa(after), "-snapshot", snap)
		if code != 0 || first != want {
			t.Fatalf("snapshot run: exit %d %q %s", code, first, errs)
		}
		rest := strings.Join(lines[after:], "")
		code, second, errs := weir(t, rest, "exec", mod, "-restore", snap)
		if code != 0 {
			t.Fatalf("restore run: exit %d %s", code, errs)
		}
		// The restored run prints exactly the tail of the uninterrupted one.
		if !strings.HasSuffix(want, second) || strings.Count(second, "\n") != strings.Count(want, "\n")-countWords(lines[:after]) {
			t.Fatalf("after %d: restored output %q is not the tail of %q", after, second, want)
		}
	}
}

func countWords(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(strings.Fields(l))
	}
	return n
}

func TestExecJoinTwoInputs(t *testing.T) {
	mod := example(t, "join")
	dir := t.TempDir()
	left, right := filepath.Join(dir, "l"), filepath.Join(dir, "r")
	os.WriteFile(left, []byte("k\tL1\nq\tLq\n"), 0o644)
	os.WriteFile(right, []byte("k\tR1\nk\tR2\n"), 0o644)
	code, out, errs := weir(t, "", "exec", mod, "-in", "0="+left, "-in", "1="+right)
	if code != 0 || out != "k\tL1|R1\nk\tL1|R2\n" {
		t.Fatalf("exit %d %q %s", code, out, errs)
	}
}

func TestExecErrors(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "x.wasm")
	os.WriteFile(notWasm, []byte("nope"), 0o644)
	mis := "../../host/wasm/testdata/misbehave.wasm"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"exec", notWasm}, 1, "weir: module x: not a WebAssembly module"},
		{[]string{"exec", "../../host/wasm/testdata/bad/missing_export.wasm"}, 1, "weir: module missing_export: missing export weir_process"},
		{[]string{"exec", mis, "-config", "t"}, 1, "weir: operator misbehave: weir_process: trap at record 3 of the batch (value \"c\"): wasm error: unreachable (stdin line 3)"},
		{[]string{"exec", mis, "-config", "t", "-batch", "2"}, 1, "weir: operator misbehave: weir_process: trap at record 3 of the batch (past the batch's 2 records: the SDK's record cursor was overwritten, most likely by a write through a NULL or stray pointer in the operator): wasm error: unreachable"},
		{[]string{"exec", mis, "-config", "l", "-timeout", "100ms"}, 1, "weir: operator misbehave: weir_process: exceeded the 100ms call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise -timeout)"},
		// "Gt" asks for 1 GiB, which the 8 MiB limit refuses, then traps.
		{[]string{"exec", mis, "-config", "Gt", "-memory", "8MiB"}, 1, "weir: operator misbehave: weir_process: trap at record 3 of the batch (value \"c\"): wasm error: unreachable (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (-memory) is 8 MiB and it had 128 KiB) (stdin line 3)"},
		// -memory takes sizes as the job spec does: MB is MiB.
		{[]string{"exec", mis, "-config", "Gt", "-memory", "8MB"}, 1, "weir: operator misbehave: weir_process: trap at record 3 of the batch (value \"c\"): wasm error: unreachable (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (-memory) is 8 MiB"},
		{[]string{"exec", mis, "-memory", "8XB"}, 2, "weir: exec: invalid value \"8XB\" for flag -memory: bad size \"8XB\" (want e.g. 65536, 512KiB, 64MiB, 1GiB)"},
		{[]string{"exec", mis, "-config", "i"}, 1, "weir: operator misbehave: weir_init: bad config"},
		{[]string{"exec", example(t, "filter")}, 1, "weir: operator filter: weir_init: filter: config must be the substring to keep"},
		{[]string{"exec"}, 2, "weir: exec: missing MODULE.wasm"},
		{[]string{"exec", mis, "-batch", "2", "other.wasm"}, 2, "weir: exec: one module, not 2: " + mis + " other.wasm"},
		{[]string{"nope"}, 2, `weir: unknown command "nope"`},
		{[]string{"exec", mis, "-snapshot-after", "3"}, 2, "weir: exec: -snapshot-after and -snapshot go together"},
		{[]string{"exec", mis, "-memory", "8GiB"}, 2, "weir: exec: -memory: 8GiB is more than a wasm32 module can address (4GiB)"},
		{[]string{"exec", mis, "-memory", "1000B"}, 2, "weir: exec: -memory: 1000 bytes is less than one wasm page (64KiB)"},
		{[]string{"exec", mis, "-timeout", "1ms"}, 2, "weir: exec: -timeout: 1ms is below the 10ms"},
	} {
		code, _, errs := weir(t, "a\nb\nc\n", c.args...)
		if code != c.code || !strings.HasPrefix(errs, c.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line starting %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// -stack prints a trap's wasm stack trace before the one-line error, Rust
// and C++ names demangled; a line longer than a record may be is named by
// its number.
func TestExecStackAndLongLine(t *testing.T) {
	code, _, errs := weir(t, "a\nb\nc\n", "exec", "../../host/wasm/testdata/misbehave.wasm", "-config", "t", "-stack")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != 1 || len(lines) < 3 || lines[0] != "wasm stack trace:" || !strings.Contains(errs, "\n\tprocess(i32,i32,i32)") ||
		!strings.HasPrefix(lines[len(lines)-1], "weir: operator misbehave: weir_process: trap at record 3 of the batch") {
		t.Errorf("exit %d, stderr:\n%s", code, errs)
	}
	// A Rust operator's functions are named as Rust writes them.
	code, _, errs = weir(t, "a\npanic\n", "exec", "../../host/wasm/testdata/rustpanic.wasm", "-stack")
	if code != 1 || !strings.Contains(errs, "\t<rustpanic::Checked<F> as weir::Operator>::process(i32,i32,i32,i32,i32)\n") ||
		strings.Contains(errs, "_ZN") || !strings.Contains(errs, "panicked at 'rustpanic: panic'") {
		t.Errorf("Rust panic: exit %d, stderr:\n%s", code, errs)
	}
	// So are a C++ operator's, which its name section has mangled.
	code, _, errs = weir(t, "a\ntrap\n", "exec", "../../host/wasm/testdata/cpptrap.wasm", "-stack")
	if code != 1 || !strings.Contains(errs, "\tprocess(unsigned char const*, unsigned long)(i32,i32)\n") ||
		strings.Contains(errs, "_Z") || !strings.Contains(errs, "trap at record 2 of the batch (value \"trap\"): cpptrap: trap") {
		t.Errorf("C++ abort: exit %d, stderr:\n%s", code, errs)
	}
	long := "short\n" + strings.Repeat("x", 5<<20) + "\n"
	code, _, errs = weir(t, long, "exec", "../../guests/wat/passthrough.wasm")
	want := "weir: exec: reading -: line 2 is longer than a record may be (4194284 bytes: the 4194304-byte maximum batch)\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errs, want)
	}
}

// A Go operator's runtime error prints the stack of the goroutine that
// failed before the one-line error, and no other goroutine's: the log of
// the guest's stderr leaves the traceback to the failure.
func TestExecGoTraceback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	// -timeout: growing the memory to its limit takes seconds under -race
	// on a loaded machine, past the default per-call deadline.
	code, _, errs := weir(t, "k\tv\n", "exec", p, "-config", "oom", "-memory", "48MiB", "-timeout", "2m")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != 1 || strings.Count(errs, "goroutine ") != 1 || !strings.Contains(errs, "\ngoroutine 1 ") ||
		!strings.Contains(errs, "main.(*op).Process(") || !strings.HasSuffix(lines[len(lines)-2], "other goroutines left out)") ||
		!strings.Contains(lines[len(lines)-1], "fatal error: out of memory") {
		t.Errorf("exit %d, stderr:\n%s", code, errs)
	}
}

// A panic the Go SDK recovers names the operator's line in the one-line
// error; -stack prints the goroutine's stack before it, as it does a
// trap's wasm stack.
func TestExecGoPanicNamesItsLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../guests/go/internal/sdktest/main.go")
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := strings.Cut(string(src), "one[len(in.Record().Value)]")
	want := fmt.Sprintf("weir: operator sdktest: weir_process: at record 1 of the batch (key \"k\", value \"v\"): panic in Process at main.go:%d "+
		"(main.(*op).Process): runtime error: index out of range [1] with length 1 (stdin line 1)\n", strings.Count(before, "\n")+1)
	for _, stack := range []bool{false, true} {
		args := []string{"exec", p, "-config", "index"}
		if stack {
			args = append(args, "-stack")
		}
		code, _, errs := weir(t, "k\tv\n", args...)
		hasStack := strings.Contains(errs, "\ngoroutine 1 [running]:\n") && strings.Contains(errs, "\nmain.(*op).Process(")
		if code != 1 || !strings.HasSuffix(errs, want) || hasStack != stack {
			t.Errorf("-stack=%v: exit %d, stderr:\n%s\nwant it to end %q, with the goroutine's stack only with -stack", stack, code, errs, want)
		}
	}
}

// An emit to an output port the task lacks names the record that emitted
// to it, as a trap does, and leaves the ABI's status number out.
func TestExecEmitToAMissingPortNamesTheRecord(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := weir(t, "k\tv\n", "exec", p, "-config", "ports")
	want := "weir: operator sdktest: weir_process: at record 1 of the batch (key \"k\", value \"v\"): emit to output port 1: the task has 1 output port(s), " +
		"one per input in the job spec that reads from the operator, numbered from 0 in spec order, operators' inputs before sinks' (weir exec: -outputs N) (stdin line 1)\n"
	if code != 1 || errs != want {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and\n%s", code, errs, want)
	}
}

func TestExecTwoOutputs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "k\tv\n", "exec", p, "-config", "ports", "-outputs", "2", "-end-of-input=false")
	if code != 0 || out != "[0] k\tv\n[1] k\tv\n" {
		t.Fatalf("exit %d %q %s", code, out, errs)
	}
}

// -snapshot alone snapshots after the last record; a keyed state restores.
func TestExecSnapshotAtEnd(t *testing.T) {
	mod := example(t, "keyedcount")
	snap := filepath.Join(t.TempDir(), "snap")
	code, out, errs := weir(t, "a\tx\nb\tx\na\tx\n", "exec", mod, "-snapshot", snap)
	if code != 0 || out != "a\t1\nb\t1\na\t2\n" {
		t.Fatalf("exit %d %q %s", code, out, errs)
	}
	code, out, errs = weir(t, "a\tx\n", "exec", mod, "-restore", snap)
	if code != 0 || out != "a\t3\n" {
		t.Fatalf("restore: exit %d %q %s", code, out, errs)
	}
}

// Every error about the -restore file names it, once, on one line:
// opening it, reading it, and the operator refusing what it read.
func TestExecRestoreErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.state")
	short := filepath.Join(dir, "short.state")
	big := filepath.Join(dir, "big.state")
	if err := os.WriteFile(short, []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	// misbehave's weir_restore reads the whole state into its 2-page memory.
	if err := os.WriteFile(big, make([]byte, 200<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		probe     = "../../guests/rust/sdktest/probe.wasm"
		misbehave = "../../host/wasm/testdata/misbehave.wasm"
	)
	for _, c := range []struct {
		module, path, cause string
	}{
		{probe, missing, "open: no such file or directory"},
		{probe, dir, "operator probe: weir_restore: state stream: read: is a directory"},
		{probe, short, "operator probe: weir_restore: weir: state ended early"},
		{misbehave, big, "operator misbehave: weir_restore: restore_read of 3 bytes at address 131070 passes the end of memory (131072 bytes)"},
	} {
		code, _, errs := weir(t, "", "exec", c.module, "-restore", c.path)
		want := "weir: exec: restore from " + c.path + ": " + c.cause + "\n"
		if code != 1 || errs != want {
			t.Errorf("exit %d, stderr %q, want %q", code, errs, want)
		}
	}
}

// An error inside a record names the input line it came from.
func TestExecErrorNamesInputLine(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("a\nb\nc\nd\n"), 0o644)
	// misbehave's "t" traps with the cursor at record 3 of the batch of the first batch.
	_, _, errs := weir(t, "", "exec", "../../host/wasm/testdata/misbehave.wasm", "-config", "t", "-in", in)
	if want := "trap at record 3 of the batch (value \"c\"): wasm error: unreachable (" + in + " line 3)\n"; !strings.HasSuffix(errs, want) {
		t.Errorf("stderr %q, want it to end %q", errs, want)
	}
}

func TestCheckKeyedState(t *testing.T) {
	ok := abi.AppendKeyedEntry(abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("a"), []byte("1")), []byte("b"), []byte("2"))
	dup := abi.AppendKeyedEntry(append([]byte(nil), ok...), []byte("a"), []byte("3"))
	for _, c := range []struct {
		state []byte
		want  string
	}{
		{nil, ""},
		{[]byte("\x01opaque"), ""},
		{ok, ""},
		{ok[:len(ok)-1], `operator op: state starts with "WKS1" but is not in the keyed layout: keyed state: entry at byte 22: key of 1 and value of 1 bytes pass the end`},
		{dup, `operator op: state starts with "WKS1" but is not in the keyed layout: key "a" is put twice (put each key once)`},
	} {
		err := checkKeyedState("op", c.state)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && !strings.HasPrefix(got, c.want)) {
			t.Errorf("%q: %v, want %q", c.state, err, c.want)
		}
	}
}

// weir exec takes a Go package directory as weir run does: it builds it
// (saying so) and runs the module, named after the directory.
func TestExecBuildsAGoPackage(t *testing.T) {
	code, out, errs := weir(t, "k\tabc\ndef\n", "exec", "../../guests/go/examples/uppercase/")
	if code != 0 || out != "k\tABC\nDEF\n" || !saidBuild(errs, "../../guests/go/examples/uppercase/") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the records uppercased, and the build said", code, out, errs)
	}
	code, _, errs = weir(t, "", "exec", t.TempDir())
	if code != 1 || !strings.Contains(errs, "is a directory without Go files") || strings.Count(errs, "\n") != 1 {
		t.Errorf("a directory without Go files: exit %d, stderr %q", code, errs)
	}
}

// -time: each line's timestamp reaches the operator (in milliseconds, from
// milliseconds or RFC 3339) and leads its output line; a line without one
// is refused naming its line.
func TestExecTimestamps(t *testing.T) {
	in := "1796292000000\tk\tv\n2026-12-03T10:00:01.5Z\tvalue only\n7\t\n"
	code, out, errs := weir(t, in, "exec", "../../guests/wat/passthrough.wasm", "-time")
	if want := "1796292000000\tk\tv\n1796292001500\tvalue only\n7\t\n"; code != 0 || out != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errs, want)
	}
	// The Go SDK's uppercase keeps each record's timestamp; two outputs
	// put the port first.
	code, out, errs = weir(t, "5\ta\tb\n", "exec", example(t, "uppercase"), "-time", "-outputs", "2")
	if want := "[0] 5\ta\tB\n"; code != 0 || out != want {
		t.Errorf("uppercase: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errs, want)
	}
	for _, c := range []struct{ in, want string }{
		{"1\ta\nno timestamp\n", "weir: exec: stdin line 2: -time: want TIMESTAMP<TAB>[KEY<TAB>]VALUE, got no TAB after \"no timestamp\"\n"},
		{"99999999999999999999\tv\n", "weir: exec: stdin line 1: -time: timestamp \"99999999999999999999\" is too large for milliseconds since the epoch (a 64-bit number)\n"},
		{"yesterday\tv\n", "weir: exec: stdin line 1: -time: timestamp \"yesterday\" is neither milliseconds since the epoch nor RFC 3339 (2026-12-03T10:00:00Z)\n"},
		// 0 is no timestamp: a job would give the record its store time.
		{"1\ta\n0\tb\n", "weir: exec: stdin line 2: -time: timestamp 0 means no timestamp to weir (a job's source gives such a record the time its stream stores it): start the event times at 1\n"},
		{"1970-01-01T00:00:00Z\tb\n", "weir: exec: stdin line 1: -time: timestamp 0 means no timestamp to weir (a job's source gives such a record the time its stream stores it): start the event times at 1\n"},
	} {
		code, _, errs := weir(t, c.in, "exec", "../../guests/wat/passthrough.wasm", "-time")
		if code != 1 || errs != c.want {
			t.Errorf("input %q: exit %d, stderr %q; want 1 and %q", c.in, code, errs, c.want)
		}
	}
}

// truncate cuts a message's quote at a UTF-8 boundary.
func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"abc", 3, "abc"}, {"abcd", 3, "abc…"}, {"ééé", 3, "é…"}, {"ééé", 4, "éé…"}} {
		if got := truncate([]byte(c.in), c.n); got != c.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// weir exec -h shows the memory limit's default as a size, not in bytes.
func TestExecHelpShowsMemoryAsASize(t *testing.T) {
	_, _, errs := weir(t, "", "exec", "-h")
	if !strings.Contains(errs, "(default 64MiB)") || strings.Contains(errs, "67108864") {
		t.Errorf("weir exec -h:\n%s\nwant the -memory default as 64MiB", errs)
	}
}

// Without -name, weir exec names the operator as the registry would name
// its module: "." and "dir/" by the directory, a file without .wasm or a
// source's extension.
func TestExecNameOfAModule(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ksum")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, c := range []struct{ module, want string }{
		{".", "ksum"},
		{"./", "ksum"},
		{"../ksum/", "ksum"},
		{"ksum.rs", "ksum"},
		{"build/ksum.wasm", "ksum"},
		{"/tmp/op", "op"},
	} {
		if got := execName(c.module); got != c.want {
			t.Errorf("execName(%q) = %q, want %q", c.module, got, c.want)
		}
	}
}

// A record over an operator's input batch limit (4 MiB) that an operator
// emits fails weir exec with the words a job's task fails with: no
// operator it went to could take it, though a job's sink could, so exec
// would have printed what no job runs.
func TestExecRefusesARecordOverTheBatchLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "k\tv\n", "exec", p, "-config", "big", "-memory", "256MiB")
	want := `weir: operator sdktest: forwarding output to port 0: record 1 of an emitted batch (key "k"): record too large for an operator's input: ` +
		`a record of 10485761 bytes (key 1, value 10485760) makes a batch of 10485781 bytes, over the 4194304-byte (4 MiB) limit of an operator's input batch; ` +
		`emit smaller records (split a large value across several)`
	if code != 1 || out != "" || !strings.HasPrefix(errs, want) {
		t.Errorf("exit %d, %d bytes out, stderr:\n%s\nwant it to start %q", code, len(out), errs, want)
	}
}
