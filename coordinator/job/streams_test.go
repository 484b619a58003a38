package job

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// TestCheckStreamsWithStreamsToCreate: a stream the caller will create
// (weir run -create-streams) is no missing stream, and is checked with the
// configuration it will have — a second source of the stream whose filter
// the first one's stream does not store is refused, in the words the
// submit uses once the stream is there. A stream that is there is checked
// as it is, whatever the caller would have created.
func TestCheckStreamsWithStreamsToCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := embeddedtest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("shared.yaml", []byte(`name: shared
sources:
  - {name: a, kind: jetstream, stream: ORDERS, filter: orders.a}
  - {name: b, kind: jetstream, stream: ORDERS, filter: orders.b}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: elsewhere, input: {from: a}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	creating := map[string]jetstream.StreamConfig{
		"ORDERS": {Name: "ORDERS", Subjects: []string{"orders.a"}},
		"OUT":    {Name: "OUT", Subjects: []string{"elsewhere"}}, // there already: not created
	}
	const want = "submit shared: 2 problems with the job's streams (fix the spec, or create or change the streams, before submitting the job):\n" +
		"source b: filter orders.b matches none of stream ORDERS's subjects (orders.a)\n" +
		"sink out: stream OUT does not store subject elsewhere (its subjects: out)"
	err = CheckStreams(ctx, js, spec, 5*time.Second, creating)
	if !errors.Is(err, control.ErrInvalid) || err.Error() != want {
		t.Fatalf("check with ORDERS to create: %v; want ErrInvalid, %q", err, want)
	}
	if _, err := js.Stream(ctx, "ORDERS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream ORDERS after the check: %v; want none (the check creates nothing)", err)
	}

	// The submit's own check, with nothing to create, once the stream
	// is there as it would have been created: the same words.
	if _, err := js.CreateStream(ctx, creating["ORDERS"]); err != nil {
		t.Fatal(err)
	}
	if err := CheckStreams(ctx, js, spec, 5*time.Second, nil); err == nil || err.Error() != want {
		t.Fatalf("check once ORDERS is there: %v; want %q", err, want)
	}
}

// An exactly-once sink's stream whose duplicate window is shorter than the
// job's checkpointing needs is refused at the submit (every deploy would
// fail on it), naming the window it needs; an at-least-once sink's, which
// needs none, is not. A restore under a spec that checkpoints less often
// meets the same check.
func TestCheckStreamsRefusesAShortDuplicateWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := embeddedtest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COUNTS", Subjects: []string{"counts"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	parse := func(interval, guarantee string) *jobspec.Spec {
		t.Helper()
		spec, err := jobspec.Parse("wc.yaml", []byte(`name: wc
checkpointing: {interval: `+interval+`, timeout: 10s}
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: jetstream, stream: COUNTS, subject: counts, guarantee: `+guarantee+`, input: {from: in}}]
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if err := CheckStreams(ctx, js, parse("10s", "exactly-once"), 5*time.Second, nil); err != nil {
		t.Errorf("a window long enough: %v", err)
	}
	const want = "submit wc: sink out: stream COUNTS deduplicates message ids for 2m0s, but exactly-once with checkpoints every 1m0s (timeout 10s) needs 2m10s: " +
		"raise the stream's duplicate window to 2m10s (weir stream edit COUNTS -dupe-window 2m10s), or give checkpointing.interval and checkpointing.timeout that sum to 1m0s at most (now 1m0s + 10s) " +
		"(fix the spec, or create or change the stream, before submitting the job)"
	if err := CheckStreams(ctx, js, parse("1m", "exactly-once"), 5*time.Second, nil); !errors.Is(err, control.ErrInvalid) || err.Error() != want {
		t.Errorf("a window too short: %v; want ErrInvalid, %q", err, want)
	}
	if err := CheckStreams(ctx, js, parse("1m", "at-least-once"), 5*time.Second, nil); err != nil {
		t.Errorf("an at-least-once sink: %v", err)
	}
}

// The edit a too-short duplicate window's refusal advises raises the
// stream's max age too where it is shorter than the window needed, which
// JetStream refuses otherwise ("duplicates window can not be larger then
// max age").
func TestShortDuplicateWindowAdviceRaisesAShorterMaxAge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := embeddedtest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COUNTS", Subjects: []string{"counts"}, Duplicates: 2 * time.Minute, MaxAge: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("wc.yaml", []byte(`name: wc
checkpointing: {interval: 1m, timeout: 10s}
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: jetstream, stream: COUNTS, subject: counts, guarantee: exactly-once, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = CheckStreams(ctx, js, spec, 5*time.Second, nil)
	if want := "(weir stream edit COUNTS -dupe-window 2m10s -max-age 2m10s)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a window too short, the max age as short: %v; want the advice %q", err, want)
	}
}

// TestCheckStreamsSaysWhichStreamWasMeant: a stream the spec names that
// is not there, one letter off a stream that is, is refused with that
// stream as the one most likely meant (as weir stream rm EVENT says of
// EVENTS); a name near none says nothing more.
func TestCheckStreamsSaysWhichStreamWasMeant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := embeddedtest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}}); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]string{
		"EVENT":    "submit typo: source in: stream EVENT does not exist (did you mean EVENTS?) (fix the spec, or create or change the stream, before submitting the job)",
		"ARTICLES": "submit typo: source in: stream ARTICLES does not exist (fix the spec, or create or change the stream, before submitting the job)",
	} {
		spec, err := jobspec.Parse("typo.yaml", []byte(`name: typo
sources: [{name: in, kind: jetstream, stream: `+stream+`}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckStreams(ctx, js, spec, 5*time.Second, nil); !errors.Is(err, control.ErrInvalid) || err.Error() != want {
			t.Errorf("stream %s: %v; want %q", stream, err, want)
		}
	}
}
