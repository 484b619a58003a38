package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// weir job rm says, on one line, what the removal leaves — the streams
// the job read or wrote, the registry's versions of its modules — with
// the command that removes each, but for one another job uses (a user
// was left to find them). weir stream rm removes a stream, refusing,
// before any goes, one that a job that has not ended reads or writes.
func TestJobRmSaysWhatItLeavesAndStreamRm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	url := n.Server.ClientURL()
	hint := (&natsFlags{url: url}).hint()
	if code, out, errs := weir(t, "", "module", "push", "-nats", url, "pass", "../../guests/wat/passthrough.wasm"); code != 0 || !strings.HasPrefix(out, "pushed pass@1 ") {
		t.Fatalf("module push: %d %q %q", code, out, errs)
	}
	submit := func(yaml string) {
		t.Helper()
		spec, err := jobspec.Parse("job.yaml", []byte(yaml), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := createStreams(ctx, Stdio{Out: io.Discard, Err: io.Discard}, n.JS, spec, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		awaitState(t, ctx, n, spec.Name, control.JobRunning)
	}
	submit(`name: jo
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: pass, module: pass@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: "out.{key}", input: {from: pass}}]
`)
	submit(`name: other
sources: [{name: res, kind: jetstream, stream: OUT}]
sinks: [{name: tap, kind: nats, subject: tap, input: {from: res}}]
`)
	stream := func(args ...string) (int, string, string) {
		return weir(t, "", append([]string{"stream"}, append(args, "-nats", url)...)...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rm", "IN"}, "weir: stream rm: IN: job jo (running) reads it (source in): stop or cancel the job first (nothing removed), or give -force\n"},
		{[]string{"rm", "IN", "OUT"}, "weir: stream rm: IN: job jo (running) reads it (source in); OUT: job jo (running) writes it (sink out), job other (running) reads it (source res): stop or cancel the job first (nothing removed), or give -force\n"},
		{[]string{"rm", "NOPE"}, "weir: no stream \"NOPE\": weir stream ls lists them\n"},
	} {
		if code, out, errs := stream(c.args...); code != 1 || out != "" || errs != c.want {
			t.Errorf("stream %v: exit %d, stdout %q, stderr %q; want exit 1, %q", c.args, code, out, errs, c.want)
		}
	}
	// weir stream edit refuses, while jo runs, a duplicate window its
	// exactly-once sink's recovery cannot do with, and limits that would
	// delete its committed output (OUT discards old messages); -force
	// edits all the same. (A trial's edits went through silently, and one
	// deleted 19 900 committed messages.)
	for i := range 150 {
		if _, err := n.JS.Publish(ctx, "out.k", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"edit", "OUT", "-dupe-window", "10s"}, "weir: stream edit OUT: job jo (running) writes it exactly-once (sink out), whose recovery needs a duplicate window of 2m10s: " +
			"with 10s it could store output twice; nothing changed (stop or cancel the job first, or give -force)\n"},
		{[]string{"edit", "OUT", "-max-msgs", "100"}, "weir: stream edit OUT: job jo (running) writes it (sink out), and the stream discards old messages: " +
			"max-msgs 100 would delete 50 of its 150 messages, committed output, and the oldest again as the job writes more; nothing changed (give -force to all the same)\n"},
	} {
		if code, out, errs := stream(c.args...); code != 1 || out != "" || errs != c.want {
			t.Errorf("stream %v: exit %d, stdout %q, stderr %q; want exit 1, %q", c.args, code, out, errs, c.want)
		}
	}
	if code, out, errs := stream("edit", "OUT", "-dupe-window", "1h"); code != 0 || out != "stream OUT: duplicate window 2m10s → 1h0m0s\n" {
		t.Errorf("stream edit OUT -dupe-window 1h: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := stream("edit", "OUT", "-max-msgs", "1000", "-force"); code != 0 || out != "stream OUT: max messages none → 1000\n" {
		t.Errorf("stream edit OUT -max-msgs 1000 -force: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, args := range [][]string{{"rm"}, {"info", "IN", "-force"}} {
		if code, _, _ := stream(args...); code != 2 {
			t.Errorf("stream %v: exit %d, want 2 (usage)", args, code)
		}
	}
	if _, err := n.JS.Stream(ctx, "IN"); err != nil {
		t.Fatalf("IN after the refusals: %v", err)
	}

	if _, err := n.API.CancelJob(ctx, "jo"); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "jo", control.JobCanceled)
	code, out, errs := weir(t, "", "job", "rm", "-nats", url, "jo")
	want := "left: streams IN, OUT (job other uses it too): weir stream rm" + hint + " IN; module pass@1: weir module rm" + hint + " pass@1\n"
	if code != 0 || !strings.HasSuffix(out, want) {
		t.Errorf("job rm: exit %d, stdout %q, stderr %q; want it to end in %q", code, out, errs, want)
	}
	if code, out, errs := stream("rm", "IN"); code != 0 || out != "removed stream IN (0 messages, 0 B)\n" {
		t.Errorf("stream rm IN: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, err := n.JS.Stream(ctx, "IN"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("IN after stream rm: %v", err)
	}
	// -force: while other reads it.
	if code, out, errs := stream("rm", "-force", "OUT"); code != 0 || !strings.HasPrefix(out, "removed stream OUT (") {
		t.Errorf("stream rm -force OUT: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// What weir job rm leaves is removed by one pasteable command per kind:
// weir module rm takes several references, as weir stream rm does.
func TestLeftPartIsOneCommand(t *testing.T) {
	used := func(n string) string {
		if n == "split@2" {
			return "job b"
		}
		return ""
	}
	got := leftPart("module", []string{"split@1", "split@2", "wordcount@1"}, used, "weir module rm -nats nats://h:4222 %s")
	want := "modules split@1, split@2 (job b uses it too), wordcount@1: weir module rm -nats nats://h:4222 split@1 wordcount@1"
	if got != want {
		t.Errorf("leftPart:\n got %q\nwant %q", got, want)
	}
	// Two jobs use it: "use", not "uses".
	got = leftPart("stream", []string{"OUT"}, func(string) string { return "job bg, job j1" }, "weir stream rm %s")
	if want := "stream OUT (job bg, job j1 use it too)"; got != want {
		t.Errorf("leftPart:\n got %q\nwant %q", got, want)
	}
}
