package job

import (
	"context"
	"errors"
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
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}}); err != nil {
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
	const want = "submit shared: source b: filter orders.b matches none of stream ORDERS's subjects (orders.a); " +
		"sink out: stream OUT does not store subject elsewhere (its subjects: out) " +
		"(fix the spec, or create or change the stream, before submitting the job)"
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
