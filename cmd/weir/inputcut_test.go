package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stalledInput is standard input that gives lines, then nothing more
// until the interrupt (ctx ends): a feed cut short by Ctrl-C.
type stalledInput struct {
	ctx  context.Context
	rest []byte
}

func (s *stalledInput) Read(p []byte) (int, error) {
	if len(s.rest) > 0 {
		n := copy(p, s.rest)
		s.rest = s.rest[n:]
		return n, nil
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

// numbered returns the lines from to to, each its number.
func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// interruptedRun runs weir with args, its standard input the lines of
// stalled and then nothing, and interrupts it once stream holds them all:
// it returns the exit status, stdout and stderr.
func interruptedRun(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, stalled int, args ...string) (int, string, string) {
	t.Helper()
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	var out, errb bytes.Buffer
	var code atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		code.Store(int32(run(ictx, args, Stdio{In: &stalledInput{ctx: ictx, rest: []byte(numbered(1, stalled))}, Out: &out, Err: &errb})))
	}()
	for {
		if st, err := js.Stream(ctx, stream); err == nil && st.CachedInfo().State.Msgs >= uint64(stalled) {
			break
		}
		select {
		case <-done:
			t.Fatalf("weir %s ended before the interrupt: stdout %q, stderr %q", strings.Join(args, " "), out.String(), errb.String())
		case <-ctx.Done():
			t.Fatalf("stream %s never held the %d lines", stream, stalled)
		case <-time.After(10 * time.Millisecond):
		}
	}
	interrupt()
	<-done
	return int(code.Load()), out.String(), errb.String()
}

// pasted returns the arguments of the weir command that line gives after
// marker, up to its end: the command the user is told to paste.
func pasted(t *testing.T, line, marker string) []string {
	t.Helper()
	_, cmd, ok := strings.Cut(strings.TrimSpace(line), marker+"weir ")
	if !ok {
		t.Fatalf("%q gives no command after %q", line, marker)
	}
	return strings.Fields(cmd) // the test's arguments need no quoting
}

// TestInputInterruptedSaysWhatIsLeft: Ctrl-C while weir input publishes
// says, in one line, how many records the stream acknowledged and the
// command that publishes the rest (-from-line); that command, given the
// same input, leaves the stream holding each line once.
func TestInputInterruptedSaysWhatIsLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := inputNode(t, ctx, `name: cut
sources: [{name: in, kind: jetstream, stream: CUTIN}]
sinks: [{name: out, kind: nats, subject: cut-out, input: {from: in}}]
`)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "CUTIN", Subjects: []string{"cutin.>"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	url := n.Server.ClientURL()
	code, out, errs := interruptedRun(t, ctx, n.JS, "CUTIN", 500, "input", "-nats", url, "job.yaml", "-")
	want := "weir: input -: interrupted: 500 records published (acknowledged by stream CUTIN), those before line 501; " +
		"publish the rest with: weir input -nats " + url + " -from-line 501 job.yaml -\n"
	if code != 1 || errs != want || out != "" {
		t.Fatalf("weir input interrupted: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errs, want)
	}
	code, out, errs = weir(t, numbered(1, 1000), pasted(t, errs, "publish the rest with: ")...)
	if code != 0 || !strings.Contains(out, "published 500 input records from standard input to in") {
		t.Fatalf("the command that publishes the rest: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got, want := storedValues(t, ctx, n.JS, "CUTIN"), strings.Fields(numbered(1, 1000)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stream CUTIN holds %d lines, want 1 to 1000 once each, in order:\n%v", len(got), got)
	}
}
