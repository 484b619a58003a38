package wasm

import (
	"fmt"
	"strings"
)

// traceback holds what a guest writes to stderr after its fatal line
// (lineWriter.fatal) during one call, instead of logging it line by line:
// the Go runtime follows "fatal error: …" or "panic: …" with the stack of
// every goroutine (on a runtime error such as running out of memory, a
// dozen of its own idle ones, about 100 lines), on every attempt of the
// task. What it keeps is the lines before the first goroutine's stack
// (the runtime's own stack, "runtime stack:", if it threw there) and the
// stack of the goroutine that failed: the first one "[running]", else,
// as in a deadlock where every goroutine is asleep, the first one. It
// counts the others, and leaves them out. A failure of the call
// (TrapError, ExitError) takes it as its Traceback, which a worker logs
// once per task as it does the wasm stack; a call that does not fail so
// has it logged as it would have been, but for the goroutines left out.
//
// It holds at most maxPreamble lines before the first goroutine's stack
// and maxTracebackBytes in all: a guest that writes a "panic: " line to
// stderr and goes on is no Go runtime about to stop, and past
// maxPreamble lines or maxTracebackBytes with no goroutine's stack the
// lines are logged again as they come (passed), as they are from the
// first line that does not fit a Go traceback: a goroutine's header
// after a line that is not blank, or after a goroutine's stack and a
// blank line, a line that starts no other. Of a goroutine's stack, what
// passes maxTracebackBytes is left out, and counted.
type traceback struct {
	lines      []string // the preamble, then the kept goroutine's stack
	size       int      // bytes in lines
	preamble   int      // how many of lines come before the first goroutine's stack
	goroutines int      // goroutine headers seen
	running    bool     // the kept goroutine is running
	keeping    bool     // the lines now are the kept goroutine's
	cut        int      // lines of the kept stack left out past maxTracebackBytes
	passed     bool     // gave up holding: the lines are logged as they come
	blank      bool     // the line before was blank
}

const (
	// maxPreamble is how many lines a traceback holds before the first
	// goroutine's stack ("goroutine 1 [running]:").
	maxPreamble = 64
	// maxTracebackBytes bounds the bytes a traceback holds. The Go
	// runtime prints at most 100 frames of a goroutine, two lines each.
	maxTracebackBytes = 32 << 10
)

// hold takes a line written after the fatal one and reports whether it
// holds it (or leaves it out); false means the line is to be logged, and
// so is everything held before it (passed is then set: release).
func (t *traceback) hold(line string) bool {
	if t.passed {
		return false
	}
	// The Go runtime writes a blank line before each goroutine's stack,
	// and nothing after the last one's. A goroutine's header after a
	// line that is not blank (debug.Stack's, printed by the guest) is
	// the guest's own line, and so is a line after a blank one that
	// starts no stack (it went on after printing one): a line no stack
	// holds, lest a call that succeeds leave it unlogged as a
	// goroutine's left out.
	afterBlank := t.blank
	t.blank = strings.TrimSpace(line) == ""
	if afterBlank && isGoroutineHeader(line) {
		t.goroutines++
		run := strings.Contains(line, "[running")
		switch {
		case t.goroutines == 1:
			t.keeping, t.running = true, run
		case run && !t.running:
			// The goroutine that failed, after one kept for want of it.
			for _, l := range t.lines[t.preamble:] {
				t.size -= len(l)
			}
			clear(t.lines[t.preamble:])
			t.lines = t.lines[:t.preamble]
			t.keeping, t.running = true, true
		default:
			t.keeping = false
		}
		if t.keeping {
			t.add(line)
		}
		return true
	}
	switch {
	case t.goroutines == 0:
		if t.preamble == maxPreamble || t.size+len(line) > maxTracebackBytes {
			t.passed = true
			return false
		}
		t.add(line)
		t.preamble++
	case afterBlank && !t.blank && line != "runtime stack:":
		t.passed = true
		return false
	case t.keeping:
		t.add(line)
	}
	return true
}

// add appends line to what t holds, if it has room for it, and reports
// whether it had.
func (t *traceback) add(line string) bool {
	if t.size+len(line) > maxTracebackBytes {
		t.cut++
		return false
	}
	t.lines = append(t.lines, line)
	t.size += len(line)
	return true
}

// isGoroutineHeader reports whether line starts a goroutine's stack in a
// Go traceback: "goroutine 7 [running]:", "goroutine 1 gp=0x2021c0 m=0
// mp=0x16dc00 [chan receive]:".
func isGoroutineHeader(line string) bool {
	rest, ok := strings.CutPrefix(line, "goroutine ")
	if !ok || rest == "" || rest[0] < '0' || rest[0] > '9' {
		return false
	}
	return strings.HasSuffix(line, "]:") && strings.Contains(rest, " [")
}

// text returns what t holds as one string, without the blank lines at its
// start and end, and with a line saying what it left out; "" if it holds
// nothing.
func (t *traceback) text() string {
	lines := t.lines
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	if note := t.note(); note != "" {
		lines = append(lines[:len(lines):len(lines)], note)
	}
	return strings.Join(lines, "\n")
}

// note says what t left out, "" if nothing: "(5 other goroutines left
// out)".
func (t *traceback) note() string {
	var parts []string
	if n := t.goroutines - 1; n > 0 {
		parts = append(parts, fmt.Sprintf("%d other %s left out", n, plural(n, "goroutine", "goroutines")))
	}
	if t.cut > 0 {
		parts = append(parts, fmt.Sprintf("%d more %s past %d KiB left out", t.cut, plural(t.cut, "line", "lines"), maxTracebackBytes>>10))
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
