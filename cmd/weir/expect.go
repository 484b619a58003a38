package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/weirhq/weir/host/wasm"
)

// This file is weir exec's operator test harness: -expect compares the
// output with a golden file (-update writes it), -check-restore runs the
// input a second time, in step, on an instance snapshotted and replaced by
// a restored one after every batch.

// expectOutput compares got, weir exec's whole output, with the golden
// file o.expect, line by line: a missing newline at the end of either and
// a CR before a newline (a checkout on Windows) do not count. On a
// difference it prints a unified diff to w (stderr) and returns an error
// that names the file and the first differing line. With o.update it
// writes got to the file instead, saying so on w.
func expectOutput(w io.Writer, o *execOptions, got []byte) error {
	old, err := os.ReadFile(o.expect)
	if err != nil && !(o.update && errors.Is(err, fs.ErrNotExist)) {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("exec: -expect %s: no such file: write it with -update (then check what it holds)", o.expect)
		}
		return fmt.Errorf("exec: -expect %s: %w", o.expect, withoutPath(err))
	}
	isNew := err != nil
	want, have := outputLines(old), outputLines(got)
	ops := diffLines(want, have)
	missing, extra := diffCounts(ops)
	if o.update {
		if missing == 0 && extra == 0 && !isNew {
			fmt.Fprintf(w, "%s: unchanged (%s)\n", o.expect, plural(len(have), "line"))
			return nil
		}
		if err := writeFileAtomic(o.expect, got); err != nil {
			return fmt.Errorf("exec: -update %s: %w", o.expect, err)
		}
		if isNew {
			fmt.Fprintf(w, "%s: wrote %s, a new file\n", o.expect, plural(len(have), "line"))
		} else {
			fmt.Fprintf(w, "%s: wrote %s (%d removed, %d added)\n", o.expect, plural(len(have), "line"), missing, extra)
		}
		return nil
	}
	if missing == 0 && extra == 0 {
		return nil
	}
	fmt.Fprint(w, formatDiff(o.expect, "output", want, have, ops, 0))
	return fmt.Errorf("exec: the output differs from %s from line %d on (%s, %s): fix the operator, or rerun with -update if the new output is right",
		o.expect, firstDiff(ops), plural(missing, "expected line")+" not emitted", plural(extra, "line")+" emitted but not expected")
}

// outputLines splits output into lines, without their newlines and a CR
// before one.
func outputLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(b), "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// writeFileAtomic replaces the file at path with b, or leaves it as it was.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp)
		return withoutPath(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// diffOp is one line of a line diff: ' ' a line in both, '-' one only in
// the first (the expected), '+' one only in the second (the output). a and
// b are the line's index in the first and the second.
type diffOp struct {
	kind byte
	a, b int
}

// maxDiffEdits bounds the edits diffLines looks for between the common
// head and tail: past it, the lines between are shown as all replaced,
// which is still right, only not minimal.
const maxDiffEdits = 1000

// diffLines returns a shortest edit script from a to b (Myers' algorithm,
// on what lies between their common head and tail), or past maxDiffEdits
// edits one that replaces all of that.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		ops = append(ops, diffOp{' ', head, head})
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ops = append(ops, myers(a[head:len(a)-tail], b[head:len(b)-tail], head)...)
	for i := tail; i > 0; i-- {
		ops = append(ops, diffOp{' ', len(a) - i, len(b) - i})
	}
	return ops
}

// myers diffs a and b, whose lines are numbered from off.
func myers(a, b []string, off int) []diffOp {
	n, m := len(a), len(b)
	replaceAll := func() []diffOp {
		ops := make([]diffOp, 0, n+m)
		for i := range n {
			ops = append(ops, diffOp{'-', off + i, off})
		}
		for j := range m {
			ops = append(ops, diffOp{'+', off + n, off + j})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replaceAll()
	}
	// v[k+max] is the furthest x on diagonal k (y = x-k); trace keeps a
	// copy of v's live part for each d, to walk back from the end.
	maxD := min(n+m, maxDiffEdits)
	v := make([]int, 2*maxD+2)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[k-1+maxD] < v[k+1+maxD]) {
				x = v[k+1+maxD] // down: a line of b
			} else {
				x = v[k-1+maxD] + 1 // right: a line of a
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[k+maxD] = x
			if x >= n && y >= m {
				trace = append(trace, append([]int(nil), v[maxD-d:maxD+d+1]...))
				return backtrack(trace, n, m, off)
			}
		}
		trace = append(trace, append([]int(nil), v[maxD-d:maxD+d+1]...))
	}
	return replaceAll()
}

// backtrack walks myers' trace back from (n, m) to (0, 0).
func backtrack(trace [][]int, n, m, off int) []diffOp {
	var rev []diffOp
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		at := func(k int) int { return trace[d-1][k+d-1] } // v of step d-1 at diagonal k
		k := x - y
		var pk int
		if d == 0 {
			pk = 0
		} else if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := 0
		if d > 0 {
			px = at(pk)
		}
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, diffOp{' ', off + x, off + y})
		}
		if d > 0 {
			if x == px {
				y--
				rev = append(rev, diffOp{'+', off + x, off + y})
			} else {
				x--
				rev = append(rev, diffOp{'-', off + x, off + y})
			}
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// diffCounts returns the lines only in the first and only in the second.
func diffCounts(ops []diffOp) (minus, plus int) {
	for _, op := range ops {
		switch op.kind {
		case '-':
			minus++
		case '+':
			plus++
		}
	}
	return minus, plus
}

// firstDiff returns the 1-based line of the first difference, in the
// second (the output).
func firstDiff(ops []diffOp) int {
	for _, op := range ops {
		if op.kind != ' ' {
			return op.b + 1
		}
	}
	return 0
}

const (
	diffContext  = 2  // unchanged lines around a change
	maxDiffLines = 40 // the diff's lines shown, past which it is cut
)

// formatDiff writes ops as a unified diff of a (named nameA) and b (nameB):
// hunks with diffContext lines around each change, line numbers from
// 1+off, cut after maxDiffLines lines with a count of the changed lines
// left out.
func formatDiff(nameA, nameB string, a, b []string, ops []diffOp, off int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", nameA, nameB)
	shown := 0
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from diffContext lines before this change to
		// diffContext lines after the last change that is no more than
		// 2*diffContext unchanged lines from the one before it.
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(len(ops), end+diffContext)
		na, nb := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				na++
			}
			if op.kind != '-' {
				nb++
			}
		}
		cut := func(from int) string {
			minus, plus := diffCounts(ops[from:])
			fmt.Fprintf(&sb, "… %s not shown\n", plural(minus+plus, "more changed line"))
			return sb.String()
		}
		if shown == maxDiffLines {
			return cut(i)
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(ops[start].a+off, na), hunkRange(ops[start].b+off, nb))
		for j, op := range ops[start:end] {
			if shown == maxDiffLines {
				return cut(start + j)
			}
			var line string
			if op.kind == '-' {
				line = a[op.a]
			} else {
				line = b[op.b]
			}
			sb.WriteByte(op.kind)
			sb.WriteString(line)
			sb.WriteByte('\n')
			shown++
		}
		i = end
	}
	return sb.String()
}

// hunkRange is a hunk header's "start,count" for count lines from the
// 0-based line start, as diff -u writes it.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}

// restoreCheck is -check-restore: it feeds every batch a second time, to a
// shadow instance that is snapshotted after each batch and replaced by a
// fresh one restored from that snapshot, as a worker's task is after a
// failure; the output for each batch must be the uninterrupted run's.
type restoreCheck struct {
	mod    *wasm.Module
	cfg    wasm.InstanceConfig
	shadow execRun      // the restored run's instance and printer
	plain  bytes.Buffer // the uninterrupted run's output of this batch
	// restored is the shadow's output of this batch, printed by shadow.
	restored bytes.Buffer
	dst      *bufio.Writer // where the checked output goes on
	lines    int           // output lines checked so far
	// after names the input line the last snapshot was taken after
	// ("stdin line 3"), "" before the first.
	after    string
	restores int
}

// newRestoreCheck starts the shadow instance, restored from o.restore as
// the run's is, and has r print into the check, which passes what it
// checked to r's writer.
func newRestoreCheck(ctx context.Context, r *execRun, mod *wasm.Module, cfg wasm.InstanceConfig) (*restoreCheck, error) {
	// The shadow's logs would repeat the run's.
	cfg.Logger = slog.New(slog.DiscardHandler)
	c := &restoreCheck{mod: mod, cfg: cfg, dst: r.out}
	inst, err := mod.Instantiate(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("exec: -check-restore: %w", err)
	}
	if r.opts.restore != "" {
		if err := restoreFrom(ctx, inst, r.opts.restore); err != nil {
			inst.Close(context.Background())
			return nil, err
		}
	}
	c.shadow = execRun{inst: inst, opts: r.opts, out: bufio.NewWriter(&c.restored), maxBatch: r.maxBatch}
	r.out = bufio.NewWriter(&c.plain)
	return c, nil
}

// close releases the shadow instance.
func (c *restoreCheck) close() {
	if c.shadow.inst != nil {
		c.shadow.inst.Close(context.Background())
	}
}

// follow makes the call the run r just made (Process of its batch, or
// EndOfInput) on the shadow instance, compares what the two emitted, and
// passes the run's output on. what names the call in errors: "stdin
// line 4" for a batch, "the end of input" for EndOfInput.
func (c *restoreCheck) follow(r *execRun, what string, call func(inst *wasm.Instance, emit func(int, []byte) error) error) error {
	err := call(c.shadow.inst, c.shadow.print)
	if err != nil {
		if c.after == "" {
			return fmt.Errorf("exec: -check-restore: a second instance of the operator failed where the first did not (at %s): %w", what, r.locate(err))
		}
		return fmt.Errorf("exec: -check-restore: restored from its snapshot after every batch (%s, the last after %s), the operator failed where the uninterrupted run did not: %w", plural(c.restores, "restore"), c.after, r.locate(err))
	}
	if err := errors.Join(r.out.Flush(), c.shadow.out.Flush()); err != nil {
		return fmt.Errorf("exec: -check-restore: %w", err)
	}
	if !bytes.Equal(c.plain.Bytes(), c.restored.Bytes()) {
		a, b := outputLines(c.plain.Bytes()), outputLines(c.restored.Bytes())
		ops := diffLines(a, b)
		nameB := "restored after " + c.after
		if c.after == "" {
			nameB = "a second instance"
		}
		diff := formatDiff("uninterrupted", nameB, a, b, ops, c.lines)
		if c.after == "" {
			return &diffError{diff: diff, err: fmt.Errorf("exec: -check-restore: two fresh instances of the operator emitted different output for the same input (at %s, output line %d): make the output depend only on the config, the state and the input (not on the time, randomness or map order)",
				what, c.lines+firstDiff(ops))}
		}
		return &diffError{diff: diff, err: fmt.Errorf("exec: -check-restore: restored from its snapshot after every batch (%s, the last after %s), the operator emitted other output than the uninterrupted run at %s (output line %d): snapshot all the state that affects later output, and restore it",
			plural(c.restores, "restore"), c.after, what, c.lines+firstDiff(ops))}
	}
	c.lines += bytes.Count(c.plain.Bytes(), []byte{'\n'})
	_, err = c.dst.Write(c.plain.Bytes())
	c.plain.Reset()
	c.restored.Reset()
	return err
}

// passOn passes on, unchecked, what the run r printed before it failed
// in a call the shadow did not make: the pieces of a batch before the one
// that failed, as weir exec prints them without the check.
func (c *restoreCheck) passOn(r *execRun) {
	r.out.Flush()
	c.dst.Write(c.plain.Bytes())
	c.plain.Reset()
}

// restore snapshots the shadow instance after the input line after and
// replaces it with a fresh instance restored from the snapshot.
func (c *restoreCheck) restore(ctx context.Context, after string) error {
	var state bytes.Buffer
	err := c.shadow.inst.Snapshot(ctx, &state)
	if err == nil {
		err = checkKeyedState(c.shadow.inst.Name(), state.Bytes())
	}
	if err != nil {
		return fmt.Errorf("exec: -check-restore: snapshot after %s: %w", after, err)
	}
	c.shadow.inst.Close(context.Background())
	c.shadow.inst = nil
	inst, err := c.mod.Instantiate(ctx, c.cfg)
	if err != nil {
		return fmt.Errorf("exec: -check-restore: %w", err)
	}
	c.shadow.inst = inst
	if err := inst.Restore(ctx, &state); err != nil {
		return fmt.Errorf("exec: -check-restore: restoring the snapshot taken after %s (%d bytes) into a fresh instance: %w", after, state.Len(), err)
	}
	c.after = after
	c.restores++
	return nil
}

// diffError is an error whose diff weir exec prints before it.
type diffError struct {
	diff string
	err  error
}

func (e *diffError) Error() string { return e.err.Error() }
func (e *diffError) Unwrap() error { return e.err }
