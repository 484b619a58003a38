package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// A stream watch whose ordered consumer stalls (a consumer lost with its
// server, which the client asks for again and again; here one paused)
// while the stream holds more is made again from the first message it
// did not show, saying so; nothing is shown twice or left out.
func TestOutputWatchUnstalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startUp(t, ctx)
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}}); err != nil {
		t.Fatal(err)
	}
	publishKeyed(t, ctx, n.JS, "out.a", "a", "1")
	var stdout, stderr bytes.Buffer
	s := jobspec.Sink{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.{key}", Guarantee: jobspec.ExactlyOnce}
	o := &output{std: Stdio{Out: &stdout, Err: &stderr}, show: -1, bySink: map[string]int{}, js: n.JS, sinks: []jobspec.Sink{s}}
	stop, err := o.watchStream(ctx, s, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	shown := func(want int) {
		t.Helper()
		for {
			if got, _ := o.state(); got == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("never showed %d records:\n%s\n%s", want, stdout.String(), stderr.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	shown(1)
	cons, _ := o.streams[0].consumer()
	if _, err := n.JS.PauseConsumer(ctx, "OUT", cons.CachedInfo().Name, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	publishKeyed(t, ctx, n.JS, "out.b", "b", "2")
	now := time.Now()
	o.unstall(ctx, now, time.Second, &stderr) // a first look
	if stderr.Len() != 0 {
		t.Fatalf("a first look said %q", stderr.String())
	}
	o.unstall(ctx, now.Add(2*time.Second), time.Second, &stderr)
	shown(2)
	want := "sink out: its stream's consumer handed on nothing for 1s while stream OUT holds message 2 (lost with its server?): following again from sequence 2\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	time.Sleep(100 * time.Millisecond) // a late delivery of the old consumer would show now
	if got := stdout.String(); got != "[out] a\t1\n[out] b\t2\n" {
		t.Errorf("shown:\n%s", got)
	}
	// A watch that shows what comes is left alone.
	o.unstall(ctx, now.Add(10*time.Second), time.Second, &stderr)
	if stderr.String() != want {
		t.Errorf("an unstalled watch said more: %q", stderr.String())
	}
}
