package main

import (
	"os"
	"strings"
	"testing"
)

// weir run refuses, at its parse of the spec and before it builds or
// starts anything, a sink on weir's control subjects and a source on
// every subject: in one line each, at the spec's line, naming what they
// overlap.
func TestRunRefusesReservedSubjects(t *testing.T) {
	t.Chdir(t.TempDir())
	spec := "name: j\nsources: [{name: in, kind: nats, subject: \">\"}]\noperators: [{name: op, module: ./op, inputs: [{from: in}]}]\n" +
		"sinks: [{name: out, kind: nats, subject: weir.ctl.api.cancel, input: {from: op}}]\n"
	if err := os.WriteFile("job.yaml", []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := weir(t, "", "run", "job.yaml")
	for _, want := range []string{
		`job.yaml:2: sources[0].subject: source "in" reads ">", which overlaps weir.ctl.> (weir's control subjects: a job could cancel or deploy other jobs and read their specs), and 15 more of weir's and NATS's own subjects; subscribe to your own subjects` + "\n",
		`job.yaml:4: sinks[0].subject: sink "out" publishes to "weir.ctl.api.cancel", which overlaps weir.ctl.> (weir's control subjects: a job could cancel or deploy other jobs and read their specs); publish to your own subjects` + "\n",
	} {
		if code != 1 || !strings.Contains(errs, want) || strings.Contains(errs, "embedded NATS") {
			t.Errorf("weir run: exit %d, stderr %q; want 1 and %q", code, errs, want)
		}
	}
}
