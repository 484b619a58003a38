package wasm

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLineWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stdout"}
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\n\nthree"))
	if got := strings.Count(buf.String(), "\n"); got != 3 {
		t.Fatalf("%d lines before flush:\n%s", got, buf.String())
	}
	w.flush()
	w.Write([]byte(strings.Repeat("x", 2*maxLogLine+10)))
	logs := buf.String()
	for _, want := range []string{"msg=one operator=op stream=stdout", "msg=two ", `msg="" `, "msg=three "} {
		if !strings.Contains(logs, want) {
			t.Fatalf("missing %q in:\n%s", want, logs)
		}
	}
	// An over-long line is cut into records of at most maxLogLine bytes.
	if n := strings.Count(logs, "\n"); n != 6 || strings.Contains(logs, strings.Repeat("x", maxLogLine+1)) {
		t.Fatalf("%d records:\n%s", n, logs)
	}
	// Also when its newline comes in the same write.
	buf.Reset()
	w.flush()
	w.Write([]byte(strings.Repeat("y", maxLogLine+1) + "\nz\n"))
	logs = buf.String()
	if n := strings.Count(logs, "\n"); n != 4 || strings.Contains(logs, strings.Repeat("y", maxLogLine+1)) || !strings.Contains(logs, "msg=y ") {
		t.Fatalf("%d records:\n%s", n, logs)
	}
}

func TestLineWriterKeepsFatalLine(t *testing.T) {
	var buf bytes.Buffer
	out := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stdout"}
	out.Write([]byte("panic: on stdout\n"))
	if got, _ := out.takeFatal(); got != "" {
		t.Fatalf("stdout kept %q", got)
	}
	w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stderr"}
	w.Write([]byte("runtime: out of memory: cannot allocate 1048576-byte block\nfatal error: out of memory\n\npanic: later\n"))
	if got, _ := w.takeFatal(); got != "fatal error: out of memory" {
		t.Fatalf("got %q, want the first fatal line", got)
	}
	w.endCall()
	if got, _ := w.takeFatal(); got != "" {
		t.Fatalf("after the call: %q", got)
	}
	w.Write([]byte("Assertion failed: n < 3 (op.c: process: 9)\n"))
	if got, _ := w.takeFatal(); got != "Assertion failed: n < 3 (op.c: process: 9)" {
		t.Fatalf("got %q, want the failed assert", got)
	}
	w.endCall()
	w.Write([]byte("panic: " + strings.Repeat("é", maxFatalLine) + "\n"))
	if got, _ := w.takeFatal(); len(got) > maxFatalLine+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("long line kept as %q", got)
	}
}

// goTraceback is how the Go runtime (wasip1) reports a throw: every
// goroutine's stack, the one that failed among them.
const goTraceback = `fatal error: out of memory

goroutine 1 gp=0x2021c0 m=0 mp=0x16dc00 [running]:
runtime.throw({0x305c7, 0xd})
	/usr/local/go/src/runtime/panic.go:1229 +0x3 fp=0x214558 sp=0x214530 pc=0x15330003
main.(*op).Process(0x23e070, 0x0, 0x168fe8, 0x169068)
	/src/op/main.go:86 +0xcd fp=0x215e58 sp=0x214670 pc=0x17be00cd

goroutine 2 gp=0x202380 m=nil [force gc (idle)]:
runtime.gopark(0x38bb0, 0x16c8d0, 0xb, 0xa, 0x1)
	/usr/local/go/src/runtime/proc.go:462 +0x21 fp=0x22efa0 sp=0x22ef68 pc=0x15350021
created by runtime.init.6 in goroutine 1
	/usr/local/go/src/runtime/proc.go:363 +0x2

goroutine 3 gp=0x202540 m=nil [GC sweep wait]:
runtime.bgsweep(0x232000)
	/usr/local/go/src/runtime/mgcsweep.go:279 +0xc fp=0x22f7d0 sp=0x22f790 pc=0x11fd000c
`

// The Go runtime's goroutine stacks after its fatal line are not logged
// line by line: the failure takes the stack of the goroutine that failed
// (the first one running, else the first one) and how many others it
// left out.
func TestLineWriterHoldsTheTraceback(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"running first", goTraceback, "goroutine 1 gp=0x2021c0 m=0 mp=0x16dc00 [running]:\n" +
			"runtime.throw({0x305c7, 0xd})\n" +
			"\t/usr/local/go/src/runtime/panic.go:1229 +0x3 fp=0x214558 sp=0x214530 pc=0x15330003\n" +
			"main.(*op).Process(0x23e070, 0x0, 0x168fe8, 0x169068)\n" +
			"\t/src/op/main.go:86 +0xcd fp=0x215e58 sp=0x214670 pc=0x17be00cd\n" +
			"(2 other goroutines left out)"},
		{"running later", "panic: kaboom\n\tpanic: again\n\ngoroutine 1 [chan receive]:\nmain.wait()\n\nruntime stack:\n\ngoroutine 7 [running]:\nmain.f()\n\t/src/f.go:3 +0x2\n\ngoroutine 8 [select]:\nmain.g()\n",
			"\tpanic: again\n\ngoroutine 7 [running]:\nmain.f()\n\t/src/f.go:3 +0x2\n(2 other goroutines left out)"},
		{"deadlock", "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.wait()\n\t/src/w.go:9 +0x54\n\ngoroutine 5 [select]:\nmain.g()\n",
			"goroutine 1 [chan receive]:\nmain.wait()\n\t/src/w.go:9 +0x54\n(1 other goroutine left out)"},
		{"one goroutine", "panic: kaboom\n\ngoroutine 7 [running]:\nmain.f()\n", "goroutine 7 [running]:\nmain.f()"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stderr"}
			w.Write([]byte("before\n" + c.in))
			fatal, trace := w.takeFatal()
			w.endCall()
			if first := strings.SplitN(c.in, "\n", 2)[0]; fatal != first || trace != c.want {
				t.Errorf("fatal %q, traceback:\n%s\nwant %q and\n%s", fatal, trace, first, c.want)
			}
			if logs := buf.String(); strings.Count(logs, "\n") != 2 || !strings.Contains(logs, "msg=before ") {
				t.Errorf("logged more than the line before and the fatal line:\n%s", logs)
			}
		})
	}
}

// A goroutine's stack past maxTracebackBytes is cut, and says so.
func TestLineWriterCutsALongStack(t *testing.T) {
	var buf bytes.Buffer
	w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stderr"}
	frame := "main.f(" + strings.Repeat("x", 1000) + ")"
	w.Write([]byte("panic: deep\n\ngoroutine 7 [running]:\n" + strings.Repeat(frame+"\n", 40) + "\ngoroutine 8 [select]:\nmain.g()\n"))
	_, trace := w.takeFatal()
	w.endCall()
	kept := strings.Count(trace, frame)
	if len(trace) > maxTracebackBytes+200 || kept == 0 || kept == 40 ||
		!strings.HasSuffix(trace, fmt.Sprintf("\n(1 other goroutine left out; %d more lines past 32 KiB left out)", 40-kept)) {
		t.Errorf("traceback of %d bytes, %d frames, ends %q", len(trace), kept, trace[max(0, len(trace)-100):])
	}
}

// A call that does not fail leaves the lines after a fatal-looking one
// logged: the guest only wrote "panic: " and went on. A long run of them
// with no goroutine's stack is logged as it comes, not held to the
// call's end.
func TestLineWriterReleasesTheLinesOfACallThatWentOn(t *testing.T) {
	var buf bytes.Buffer
	w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stderr"}
	w.Write([]byte("panic: not really\none\n\ngoroutine 7 [running]:\nmain.f()\n\ngoroutine 8 [select]:\nmain.g()\n"))
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines logged before the call ended:\n%s", n, buf.String())
	}
	w.endCall()
	logs := buf.String()
	for _, want := range []string{`msg="panic: not really"`, "msg=one ", `msg="goroutine 7 [running]:"`, `msg=main.f()`, `msg="(1 other goroutine left out)"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "main.g") {
		t.Errorf("logged the goroutine left out:\n%s", logs)
	}

	buf.Reset()
	w.Write([]byte("panic: chatty\n" + strings.Repeat("line\n", maxPreamble+10)))
	if n := strings.Count(buf.String(), "\n"); n != maxPreamble+11 {
		t.Fatalf("%d lines logged of %d before the call ended", n, maxPreamble+11)
	}
	if fatal, trace := w.takeFatal(); fatal != "panic: chatty" || trace != "" {
		t.Errorf("fatal %q, traceback %q", fatal, trace)
	}
	w.endCall()

	// So are long lines past maxTracebackBytes, none left out.
	buf.Reset()
	long := strings.Repeat("x", maxLogLine-1)
	n := maxTracebackBytes/len(long) + 2
	w.Write([]byte("panic: long-winded\n" + strings.Repeat(long+"\n", n)))
	w.endCall()
	if got := strings.Count(buf.String(), long); got != n {
		t.Errorf("%d long lines logged of %d", got, n)
	}
}

// A call that does not fail logs every line the guest wrote after a
// "panic: " line that a goroutine's stack follows, when it was the guest
// that wrote them: a Go guest that recovers a panic and prints it with
// debug.Stack, once per record, and goes on. The Go runtime puts a blank
// line before each goroutine's stack and writes nothing after the last;
// lines that do not fit that are the guest's own, not a traceback to
// cut. Held as one, the second stack and everything after it went
// unlogged, as a goroutine "left out".
func TestLineWriterLogsAGuestsOwnStacks(t *testing.T) {
	for _, c := range []struct{ name, in string }{
		{"debug.Stack", "panic: recovered a\ngoroutine 1 [running]:\nmain.f()\n\t/src/f.go:1 +0x1\nlater a\n" +
			"panic: recovered b\ngoroutine 1 [running]:\nmain.g()\n\t/src/g.go:2 +0x2\nlater b\n"},
		{"blank lines", "panic: recovered a\n\ngoroutine 1 [running]:\nmain.f()\n\t/src/f.go:1 +0x1\n\nlater a\n" +
			"panic: recovered b\n\ngoroutine 1 [running]:\nmain.g()\n\t/src/g.go:2 +0x2\n\nlater b\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := &lineWriter{logs: newLogLimiter(testLogger(&buf), "op", -1), operator: "op", stream: "stderr"}
			w.Write([]byte(c.in))
			w.endCall()
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
				_, msg, _ := strings.Cut(l, " msg=")
				msg, _, _ = strings.Cut(msg, " operator=")
				if s, err := strconv.Unquote(msg); err == nil {
					msg = s
				}
				got = append(got, msg)
			}
			want := strings.Split(strings.TrimSuffix(c.in, "\n"), "\n")
			if !slices.Equal(got, want) {
				t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
