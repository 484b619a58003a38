package source

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// A consumer that delivers nothing while the stream holds messages for it
// fails the source with ErrStalled, naming the message it waits for. Such
// a consumer is one that lived on a server that went away while the
// client recreated it: the client's retries ask for it there, for
// minutes. Here the consumer is paused on the server, which stalls it the
// same way (it stays, and its heartbeats go on).
func TestJetStreamStalledConsumerFails(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 50)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StallTimeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	pollRecords(t, ctx, src, 50)
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	names := st.ConsumerNames(ctx)
	var paused int
	for name := range names.Name() {
		if _, err := js.PauseConsumer(ctx, "IN", name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if paused != 1 {
		t.Fatalf("paused %d consumers, want the source's one (%v)", paused, names.Err())
	}
	publishN(t, ctx, js, func(int) string { return "in.a" }, 50, 60)
	for {
		b, _, err := src.Poll(ctx)
		if err == nil {
			if n, _ := abi.BatchCount(b); n > 0 {
				t.Fatalf("a paused consumer delivered %d records", n)
			}
			continue
		}
		if !errors.Is(err, ErrStalled) || err.Error() != "jetstream source IN: consumer stalled: nothing delivered for 400ms while the stream holds message 51 after sequence 50 (the consumer lost with its server?)" {
			t.Fatalf("poll of a stalled consumer: %v", err)
		}
		t.Log(err)
		return
	}
}

// A consumer is not stalled while its stream holds nothing for it, nor
// while its reader is held up by a source that is not polled (the
// consumer waits for the reader then).
func TestJetStreamIdleOrHeldUpIsNotStalled(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	// A timeout of 300ms, not less: under -race on a loaded machine a
	// shorter one was passed by the scheduling delays alone (2 in 8 runs).
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StallTimeout: 300 * time.Millisecond, MaxBatchRecords: 10, PullMaxMessages: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// Idle: nothing to read for many times the timeout.
	if _, _, err := pollWithin(src, 3*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll of an empty stream: %v", err)
	}
	// Held up: 1000 messages, a full batch, and no poll for 3 s.
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 1000)
	time.Sleep(3 * time.Second)
	pollRecords(t, ctx, src, 1000)
}

// A stream deleted while the source reads it fails the source with
// ErrStreamGone, and so does one deleted and created again: a trial's job
// sat running on a deleted stream for minutes, reading nothing, its
// backlog at 0, until an unrelated failover.
func TestJetStreamDeletedStreamFails(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		srv := startServer(t)
		_, js := connect(t, srv)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
		publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 20)
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StallTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		pollRecords(t, ctx, src, 20)
		must(t, js.DeleteStream(ctx, "IN"))
		want := "jetstream source IN: stream deleted while the job read it: the job reads nothing more"
		if recreate {
			createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
			publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 5)
			want = "jetstream source IN: the stream was deleted and created again while the job read it"
		}
		for {
			_, _, err := src.Poll(ctx)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrStreamGone) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("recreated %v: poll: %v; want ErrStreamGone, %q…", recreate, err, want)
			}
			t.Log(err)
			break
		}
		src.Close()
		cancel()
	}
}
