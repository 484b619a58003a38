package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRunWordcountExample runs the README's first command: the wordcount
// example on the embedded default, and checks the counts it prints.
func TestRunWordcountExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two Go guests and runs a job: skipped in -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "-idle", "1s", "-show", "-1",
		"examples/wordcount/job.yaml", "-input", "examples/wordcount/input.txt"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("weir run exited %d: %s\n%s", code, errb.String(), out.String())
	}
	got := out.String()
	for _, want := range []string{
		"created stream LINES", "published 6 input records",
		"[counts] weir\t5\n", // "weir" occurs five times in input.txt
		"[counts] the\t9\n", "latest value per key:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !regexp.MustCompile(`checkpoint \d+ completed in`).MatchString(got) {
		t.Errorf("no completed checkpoint in the output:\n%s", got)
	}
	// Exactly-once: every count of every word appears once.
	seen := map[string]bool{}
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "[counts] ") {
			if seen[line] {
				t.Errorf("output repeated: %q", line)
			}
			seen[line] = true
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".weir")); err == nil {
		t.Log("note: a .weir directory exists in the repo root (from weir up), untouched")
	}
}
