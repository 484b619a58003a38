package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
)

// TestInputToAJobThatRuns: weir input gives a job that runs more input,
// from files and standard input, as weir run -input would: keyed lines on
// their key's subject of a JetStream source's stream, once each, and on a
// core NATS source's subject. It refuses a source that stops at the end
// (the job reads it no further) and a core source of a job that does not
// run (the subject keeps nothing), before it publishes anything.
func TestInputToAJobThatRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(`name: feed
sources:
  - {name: in, kind: jetstream, stream: FEEDIN}
  - {name: core, kind: nats, subject: feed-core}
  - {name: ended, kind: jetstream, stream: FEEDOLD, stop: end}
sinks:
  - {name: out, kind: nats, subject: feed-out, input: {from: in}}
  - {name: coreout, kind: nats, subject: feed-coreout, input: {from: core}}
  - {name: oldout, kind: nats, subject: feed-oldout, input: {from: ended}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("more.txt", []byte("a\t1\nb\t2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []jetstream.StreamConfig{{Name: "FEEDIN", Subjects: []string{"feedin.>"}}, {Name: "FEEDOLD", Subjects: []string{"feedold.>"}}} {
		if _, err := n.JS.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	weir := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, args, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}

	// No job yet: its core source would hear nothing.
	code, out, errb := weir("", "input", "-nats", url, "job.yaml", "core=more.txt")
	if want := "weir: input: no job feed on this NATS: a core NATS source keeps nothing for a job that does not read it (weir run -nats " + url + " job.yaml -input … submits it with its input)\n"; code != 1 || errb != want || out != "" {
		t.Errorf("weir input to a core source of no job: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errb, want)
	}
	// A source that stops at the end: refused, whether the job runs or not.
	code, out, errb = weir("", "input", "-nats", url, "job.yaml", "in=more.txt", "ended=more.txt")
	if want := "weir: input ended=more.txt: source ended stops at the end (stop: end): job feed reads its stream only up to where it ended when the job started; " +
		"give such a source its input with weir run -input, which publishes it before the submit\n"; code != 1 || errb != want || out != "" {
		t.Errorf("weir input to a source that stops at the end: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errb, want)
	}
	// A stream that is not there is named.
	if err := os.WriteFile("nostream.yaml", []byte(`name: nostream
sources: [{name: in, kind: jetstream, stream: NOSTREAM}]
sinks: [{name: out, kind: nats, subject: nostream-out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errb = weir("", "input", "-nats", url, "nostream.yaml", "more.txt")
	if want := "weir: input more.txt: stream NOSTREAM does not exist (weir run creates the streams a job names): "; code != 1 || !strings.HasPrefix(errb, want) || out != "" {
		t.Errorf("weir input to a stream that is not there: exit %d, stdout %q, stderr %q; want 1 and a line starting %q", code, out, errb, want)
	}
	// Nothing went out.
	for _, name := range []string{"FEEDIN", "FEEDOLD"} {
		s, err := n.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().State.Msgs; got != 0 {
			t.Errorf("stream %s holds %d messages after the refusals; want none", name, got)
		}
	}

	// Input to a stream of a job not submitted yet is kept for it, and
	// weir input says there is no such job.
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LATER", Subjects: []string{"later.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("later.yaml", []byte(`name: later
sources: [{name: in, kind: jetstream, stream: LATER}]
sinks: [{name: out, kind: nats, subject: later-out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errb = weir("", "input", "-nats", url, "later.yaml", "more.txt")
	if want := "no job later on this NATS yet: its source's stream keeps the input for it (weir run -nats " + url + " later.yaml submits it)\n"; code != 0 || errb != want ||
		out != "published 2 input records from more.txt to in\n" {
		t.Errorf("weir input to the stream of no job: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errb, want)
	}

	// The source that stops at the end reads what the stream holds when
	// the job starts.
	if _, err := n.JS.Publish(ctx, "feedold.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.ParseFile("job.yaml", jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "feed", control.JobRunning)
	outs := map[string]chan string{}
	for _, subj := range []string{"feed-out", "feed-coreout"} {
		ch := make(chan string, 10)
		sub, err := n.Conn.Subscribe(subj, func(m *nats.Msg) { ch <- m.Header.Get(sink.KeyHeader) + "=" + string(m.Data) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		outs[subj] = ch
	}
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	code, out, errb = weir("c\t3\n", "input", "-nats", url, "job.yaml", "more.txt", "core=-")
	if want := "published 2 input records from more.txt to in\npublished 1 input records from standard input to core\n"; code != 0 || out != want || errb != "" {
		t.Fatalf("weir input to the job that runs: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errb, want)
	}
	st, err := n.JS.Stream(ctx, "FEEDIN")
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]string{1: "feedin.a a=1", 2: "feedin.b b=2"} {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Subject + " " + m.Header.Get(sink.KeyHeader) + "=" + string(m.Data); got != want {
			t.Errorf("FEEDIN message %d: %q; want %q", seq, got, want)
		}
	}
	for subj, want := range map[string][]string{"feed-out": {"a=1", "b=2"}, "feed-coreout": {"c=3"}} {
		for _, w := range want {
			select {
			case got := <-outs[subj]:
				if got != w {
					t.Errorf("the job's output on %s: %q; want %q", subj, got, w)
				}
			case <-ctx.Done():
				t.Fatalf("the job's output on %s: nothing; want %q", subj, w)
			}
		}
	}

	// -time: each line's leading timestamp goes in the message's
	// Weir-Time header, which the source makes the record's; a line
	// without one is refused, naming it, and nothing after it goes out;
	// what came before it did, and weir input says so.
	code, out, errb = weir("2026-12-03T10:00:00Z\td\t4\nd\t5\n", "input", "-nats", url, "-time", "job.yaml", "in=-")
	if want := "weir: input -: line 2: -time: timestamp \"d\" is neither milliseconds since the epoch nor RFC 3339 (2026-12-03T10:00:00Z)" +
		" (the 1 records before it were published from standard input to in)\n"; code != 1 || errb != want {
		t.Errorf("weir input -time with a line without a timestamp: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errb, want)
	}
	code, out, errb = weir("1796292001000\te\t6\n", "input", "-time", "-nats", url, "job.yaml", "in=-")
	if want := "published 1 input records from standard input to in\n"; code != 0 || out != want || errb != "" {
		t.Fatalf("weir input -time: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errb, want)
	}
	for seq, want := range map[uint64]string{3: "feedin.d d=4 @1796292000000", 4: "feedin.e e=6 @1796292001000"} {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Subject + " " + m.Header.Get(sink.KeyHeader) + "=" + string(m.Data) + " @" + m.Header.Get(source.TimeHeader); got != want {
			t.Errorf("FEEDIN message %d: %q; want %q", seq, got, want)
		}
	}
	for _, w := range []string{"d=4", "e=6"} {
		select {
		case got := <-outs["feed-out"]:
			if got != w {
				t.Errorf("the job's output of -time input: %q; want %q", got, w)
			}
		case <-ctx.Done():
			t.Fatalf("the job's output of -time input: nothing; want %q", w)
		}
	}
}
