package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunInterruptedAndRunAgain is a trial's session with a bounded job:
// Ctrl-C while weir run -input publishes, before the submit, says how
// much the stream holds and how to publish the rest; that run's summary
// counts the records the stream held before among those in; the same
// run again is refused, the finished job's sink holding its output; and
// weir job output shows that output rather than nothing new.
func TestRunInterruptedAndRunAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := inputNode(t, ctx, boundedCopy)
	url := n.Server.ClientURL()
	code, out, errs := interruptedRun(t, ctx, n.JS, "IN", 300, "run", "-nats", url, "job.yaml", "-input", "-")
	want := "weir: -input -: interrupted: 300 records published (acknowledged by stream IN), those before line 301; " +
		"publish the rest with: weir run -nats " + url + " -from-line 301 job.yaml -input -\n"
	if code != 1 || !strings.HasSuffix(errs, want) || strings.Contains(out, "submitted") {
		t.Fatalf("weir run interrupted as -input publishes: exit %d, stdout %q, stderr %q; want 1, no submit and stderr ending %q", code, out, errs, want)
	}
	rest := pasted(t, errs, "publish the rest with: ")
	code, out, errs = weir(t, numbered(1, 1000), rest...)
	if wantSum := "1000 records in (700 published by -input, 300 stream IN held before for source in), 1000 records out\n"; code != 0 || !strings.Contains(out, wantSum) {
		t.Fatalf("the run that publishes the rest: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, wantSum)
	}
	if got := storedValues(t, ctx, n.JS, "OUT"); len(got) != 1000 || got[0] != "1" || got[999] != "1000" {
		t.Fatalf("stream OUT holds %d records (%.3v …), want 1 to 1000", len(got), got)
	}

	// The finished job's output would be stored again: refused, before
	// anything is published.
	code, out, errs = weir(t, numbered(1, 1000), rest...)
	wantRefusal := "weir: job copy finished, and its sinks' streams hold the output it committed (stream OUT: 1000 records on out): " +
		"a new run reads its streams from the start and would repeat that output; give the spec another name to run it again, " +
		"or remove the finished job first to run it under this name all the same with: weir job rm -nats " + url + " copy\n"
	if code != 1 || errs != wantRefusal || out != "" {
		t.Errorf("weir run of the finished job again: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errs, wantRefusal)
	}
	if st, err := n.JS.Stream(ctx, "IN"); err != nil || st.CachedInfo().State.Msgs != 1000 {
		t.Errorf("stream IN after the refused run: %v; want its 1000 records", err)
	}

	// What the finished job stored, not the nothing new that comes.
	code, out, errs = weir(t, "", "job", "output", "-nats", url, "copy")
	wantErr := "following sink out: stream OUT from sequence 1 (what job copy stored on out since its submit: 1000 records; -from-start shows all the stream holds)\n" +
		"job copy finished; 1000 records shown\n"
	if code != 0 || errs != wantErr || !strings.HasPrefix(out, "1\n2\n") || strings.Count(out, "\n") != 1000 {
		t.Errorf("weir job output of the finished job: exit %d, stderr %q, stdout of %d lines; want exit 0, %q and its 1000 records", code, errs, strings.Count(out, "\n"), wantErr)
	}

	// Removed, the job runs again under its name, as asked.
	if code, _, errs = weir(t, "", "job", "rm", "-nats", url, "copy"); code != 0 {
		t.Fatalf("weir job rm copy: exit %d, %s", code, errs)
	}
	code, out, errs = weir(t, "", "run", "-nats", url, "job.yaml")
	if code != 0 || !strings.Contains(out, "\n1000 records out\n") {
		t.Errorf("weir run of the removed job's spec: exit %d, stdout %q, stderr %q; want it to run and store the 1000 records again", code, out, errs)
	}
}
