package wasm

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLineWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &lineWriter{logger: testLogger(&buf), operator: "op", stream: "stdout"}
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
	out := &lineWriter{logger: testLogger(&buf), operator: "op", stream: "stdout"}
	out.Write([]byte("panic: on stdout\n"))
	if got := out.takeFatal(); got != "" {
		t.Fatalf("stdout kept %q", got)
	}
	w := &lineWriter{logger: testLogger(&buf), operator: "op", stream: "stderr"}
	w.Write([]byte("runtime: out of memory: cannot allocate 1048576-byte block\nfatal error: out of memory\n\npanic: later\n"))
	if got := w.takeFatal(); got != "fatal error: out of memory" {
		t.Fatalf("got %q, want the first fatal line", got)
	}
	w.resetFatal()
	if got := w.takeFatal(); got != "" {
		t.Fatalf("after reset: %q", got)
	}
	w.Write([]byte("Assertion failed: n < 3 (op.c: process: 9)\n"))
	if got := w.takeFatal(); got != "Assertion failed: n < 3 (op.c: process: 9)" {
		t.Fatalf("got %q, want the failed assert", got)
	}
	w.resetFatal()
	w.Write([]byte("panic: " + strings.Repeat("é", maxFatalLine) + "\n"))
	if got := w.takeFatal(); len(got) > maxFatalLine+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("long line kept as %q", got)
	}
}
