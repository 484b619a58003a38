package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// -expect compares the output with a golden file: silent and exit 0 when
// they are equal (a CRLF checkout of it too), exit 1 with a diff naming
// the first differing line when not; -update writes the file, and a
// missing file says to.
func TestExecExpect(t *testing.T) {
	mod := example(t, "uppercase")
	dir := t.TempDir()
	in, golden := filepath.Join(dir, "in.txt"), filepath.Join(dir, "want.txt")
	if err := os.WriteFile(in, []byte("a\nk\tb\nc\nd\ne\nf\ng\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "", "exec", mod, "-in", in, "-expect", golden)
	if want := "weir: exec: -expect " + golden + ": no such file: write it with -update (then check what it holds)\n"; code != 1 || out != "" || errs != want {
		t.Fatalf("no golden file: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errs, want)
	}
	code, out, errs = weir(t, "", "exec", mod, "-in", in, "-expect", golden, "-update")
	if code != 0 || out != "" || errs != golden+": wrote 7 lines, a new file\n" {
		t.Fatalf("-update: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if b, _ := os.ReadFile(golden); string(b) != "A\nk\tB\nC\nD\nE\nF\nG\n" {
		t.Fatalf("-update wrote %q", b)
	}
	code, out, errs = weir(t, "", "exec", mod, "-in", in, "-expect", golden)
	if code != 0 || out != "" || errs != "" {
		t.Fatalf("as expected: exit %d, stdout %q, stderr %q; want 0 and nothing printed", code, out, errs)
	}
	// A checkout with CRLF line ends and no newline at the end is the same.
	if err := os.WriteFile(golden, []byte("A\r\nk\tB\r\nC\r\nD\r\nE\r\nF\r\nG"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = weir(t, "", "exec", mod, "-in", in, "-expect", golden, "-update")
	if code != 0 || errs != golden+": unchanged (7 lines)\n" {
		t.Fatalf("CRLF: exit %d, stderr %q", code, errs)
	}
	// A failing expectation: one line changed, one missing, one extra.
	if err := os.WriteFile(golden, []byte("A\nk\tB\nC\nX\nE\nF\nG\nH\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = weir(t, "", "exec", mod, "-in", in, "-expect", golden)
	want := "--- " + golden + "\n+++ output\n" +
		"@@ -2,7 +2,6 @@\n k\tB\n C\n-X\n+D\n E\n F\n G\n-H\n" +
		"weir: exec: the output differs from " + golden + " from line 4 on (2 expected lines not emitted, 1 line emitted but not expected): " +
		"fix the operator, or rerun with -update if the new output is right\n"
	if code != 1 || out != "" || errs != want {
		t.Fatalf("a failing expectation: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errs, want)
	}
	code, _, errs = weir(t, "", "exec", mod, "-in", in, "-expect", golden, "-update")
	if code != 0 || errs != golden+": wrote 7 lines (2 removed, 1 added)\n" {
		t.Fatalf("-update over a different file: exit %d, stderr %q", code, errs)
	}
	code, _, errs = weir(t, "", "exec", mod, "-update")
	if code != 2 || errs != "weir: exec: -update writes the -expect FILE: give -expect FILE too\n" {
		t.Errorf("-update alone: exit %d, stderr %q", code, errs)
	}
}

// The golden file holds the output as weir exec prints it: timestamps
// with -time, the port with -outputs 2.
func TestExecExpectTimestampsAndPorts(t *testing.T) {
	golden := filepath.Join(t.TempDir(), "want.txt")
	if err := os.WriteFile(golden, []byte("[0] 5\tk\tV\n[0] 6\tW\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := weir(t, "5\tk\tv\n6\tw\n", "exec", example(t, "uppercase"), "-time", "-outputs", "2", "-expect", golden)
	if code != 0 || out != "" || errs != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// -check-restore passes an operator that snapshots its state — the Go
// word count, its totals at the end of input too, and the WAT one, built
// from its source — and catches one that leaves its state out of the
// snapshot, naming the input line whose output differs.
func TestExecCheckRestore(t *testing.T) {
	input := "a b a\nc a\nb b\nd\na\n"
	wc := example(t, "wordcount")
	for _, c := range []struct {
		module string
		args   []string
	}{
		{wc, nil},
		{wc, []string{"-batch", "2"}},
		{wc, []string{"-config", `{"emit": "final"}`}},
		{"../../guests/wat/wordcount.wat", nil},
	} {
		code, want, errs := weir(t, input, append([]string{"exec", c.module, "-batch", "1"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%s %v: exit %d: %s", c.module, c.args, code, errs)
		}
		code, out, errs := weir(t, input, append([]string{"exec", c.module, "-batch", "1", "-check-restore"}, c.args...)...)
		if code != 0 || out != want {
			t.Errorf("%s %v -check-restore: exit %d, stdout %q, stderr %q; want 0 and %q", c.module, c.args, code, out, errs, want)
		}
	}
	// With -expect, the restored run checks the golden file too.
	golden := filepath.Join(t.TempDir(), "want.txt")
	if code, _, errs := weir(t, input, "exec", wc, "-check-restore", "-expect", golden, "-update"); code != 0 {
		t.Fatalf("-check-restore -update: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := weir(t, input, "exec", wc, "-check-restore", "-batch", "1", "-expect", golden); code != 0 || errs != "" {
		t.Fatalf("-check-restore -expect: exit %d, stderr %q", code, errs)
	}

	// forgetful counts per key and snapshots nothing: restored after
	// each record, it counts a's third record as its first.
	code, out, errs := weir(t, "a\tx\nb\tx\na\tx\na\tx\n", "exec", "testdata/forgetful", "-batch", "1", "-check-restore")
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	want := []string{
		"--- uninterrupted",
		"+++ restored after stdin line 2",
		"@@ -3 +3 @@",
		"-a\t2",
		"+a\t1",
		"weir: exec: -check-restore: restored from its snapshot after every batch (2 restores, the last after stdin line 2), " +
			"the operator emitted other output than the uninterrupted run at stdin line 3 (output line 3): snapshot all the state that affects later output, and restore it",
	}
	if code != 1 || out != "a\t1\nb\t1\n" || len(lines) < len(want) || !slices.Equal(lines[len(lines)-len(want):], want) {
		t.Errorf("forgetful: exit %d, stdout %q, stderr:\n%s\nwant exit 1, the output before the difference, and stderr ending:\n%s", code, out, errs, strings.Join(want, "\n"))
	}
	// In batches of 2 the difference is in the second batch.
	_, _, errs = weir(t, "a\tx\nb\tx\na\tx\na\tx\n", "exec", "testdata/forgetful", "-batch", "2", "-check-restore")
	if want := "restored from its snapshot after every batch (1 restore, the last after stdin line 2), the operator emitted other output than the uninterrupted run at stdin lines 3-4 (output line 3)"; !strings.Contains(errs, want) {
		t.Errorf("forgetful in batches of 2: stderr %q, want it to say %q", errs, want)
	}
	// An operator that fails in a batch prints what it emitted before, as
	// without the check: misbehave's "d" traps on "!c", in the second of
	// the pieces the instance hands the batch over in (its first is one
	// record).
	for _, args := range [][]string{nil, {"-check-restore"}} {
		code, out, errs := weir(t, "a\nb\n!c\n", append([]string{"exec", "../../host/wasm/testdata/misbehave.wasm", "-config", "d"}, args...)...)
		if code != 1 || out != "a\n" || !strings.HasSuffix(errs, "(value \"!c\"): wasm error: unreachable (stdin line 3)\n") {
			t.Errorf("a trap, %v: exit %d, stdout %q, stderr %q; want 1, a's output, and the trap", args, code, out, errs)
		}
	}
	// A snapshot that fails fails the check, naming where it was taken.
	code, _, errs = weir(t, "a\nb\n", "exec", "../../host/wasm/testdata/misbehave.wasm", "-config", "s", "-check-restore")
	if want := "weir: exec: -check-restore: snapshot after stdin line 2: operator misbehave: weir_snapshot: emit called during weir_snapshot"; code != 1 || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("a failing snapshot: exit %d, stderr %q, want one line starting %q", code, errs, want)
	}
}

// diffLines finds a shortest edit script, and formatDiff shows it in
// hunks, cut after maxDiffLines lines with a count of the rest.
func TestDiffLines(t *testing.T) {
	for _, c := range []struct {
		a, b        string
		minus, plus int
		wantUnified string
	}{
		{"", "", 0, 0, ""},
		{"a b c", "a b c", 0, 0, ""},
		{"", "a b", 0, 2, "@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"a b", "", 2, 0, "@@ -1,2 +0,0 @@\n-a\n-b\n"},
		{"a b c d e f g h i j", "a b c d x f g h i j", 1, 1, "@@ -3,5 +3,5 @@\n c\n d\n-e\n+x\n f\n g\n"},
		// Two changes more than twice the context apart: two hunks.
		{"1 2 3 4 5 6 7 8 9", "x 2 3 4 5 6 7 8 y", 2, 2, "@@ -1,3 +1,3 @@\n-1\n+x\n 2\n 3\n@@ -7,3 +7,3 @@\n 7\n 8\n-9\n+y\n"},
		{"a b c a b b a", "c b a b a c", 3, 2, ""},
	} {
		a, b := strings.Fields(c.a), strings.Fields(c.b)
		ops := diffLines(a, b)
		minus, plus := diffCounts(ops)
		if minus != c.minus || plus != c.plus || !applies(ops, a, b) {
			t.Errorf("%q → %q: %d removed, %d added (want %d, %d), script %v", c.a, c.b, minus, plus, c.minus, c.plus, ops)
		}
		if got := strings.TrimPrefix(formatDiff("a", "b", a, b, ops, 0), "--- a\n+++ b\n"); c.wantUnified != "" && got != c.wantUnified {
			t.Errorf("%q → %q: diff\n%s\nwant\n%s", c.a, c.b, got, c.wantUnified)
		}
	}
	// Random short scripts are valid and as short as the longest common
	// subsequence allows.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, b := randomLines(rng), randomLines(rng)
		ops := diffLines(a, b)
		minus, plus := diffCounts(ops)
		if !applies(ops, a, b) || minus+plus != len(a)+len(b)-2*lcs(a, b) {
			t.Fatalf("%q → %q: %d removed, %d added, script %v; the LCS is %d lines", a, b, minus, plus, ops, lcs(a, b))
		}
	}
	// A long diff is cut; past maxDiffEdits edits it is all replaced.
	var a, b []string
	for i := range 3000 {
		a = append(a, "a"+strings.Repeat("x", i%7))
		b = append(b, "b"+strings.Repeat("x", i%7))
	}
	ops := diffLines(a, b)
	if minus, plus := diffCounts(ops); minus != 3000 || plus != 3000 || !applies(ops, a, b) {
		t.Errorf("3000 lines, all different: %d removed, %d added", minus, plus)
	}
	d := formatDiff("a", "b", a, b, ops, 0)
	if n := strings.Count(d, "\n"); n != 4+maxDiffLines || !strings.HasSuffix(d, "\n… 5960 more changed lines not shown\n") {
		t.Errorf("a long diff: %d lines, ending %q", n, d[max(0, len(d)-60):])
	}
}

func randomLines(rng *rand.Rand) []string {
	l := make([]string, rng.IntN(12))
	for i := range l {
		l[i] = string(rune('x' + rng.IntN(3)))
	}
	return l
}

// lcs is the length of the longest common subsequence of a and b.
func lcs(a, b []string) int {
	t := make([][]int, len(a)+1)
	for i := range t {
		t[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	return t[0][0]
}

// applies says whether ops turns a into b, numbering each line right.
func applies(ops []diffOp, a, b []string) bool {
	var got []string
	ia, ib := 0, 0
	for _, op := range ops {
		switch op.kind {
		case ' ':
			if op.a != ia || op.b != ib || a[ia] != b[ib] {
				return false
			}
			got = append(got, a[ia])
			ia, ib = ia+1, ib+1
		case '-':
			if op.a != ia {
				return false
			}
			ia++
		case '+':
			if op.b != ib {
				return false
			}
			got = append(got, b[ib])
			ib++
		}
	}
	return ia == len(a) && ib == len(b) && slices.Equal(got, b)
}
