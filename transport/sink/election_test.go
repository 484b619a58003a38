package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// Sinks built while their stream has no leader (its leader's server gone,
// and a second one, so that the one left cannot elect one) wait for one,
// then commit their output. The exactly-once sink's stream lookup was
// made once and failed a new attempt deployed while a stream elected a
// leader ("exactly-once sink: stream COUNTS: context deadline exceeded",
// on three nats-server processes), failing the job over a second time;
// the at-least-once sink's lookup of the stream that captures its subject
// likewise. Here each sink's requests are seen going out twice (or the
// sink built from a replica's answer, which the server gives once it
// knows the stream has no leader) before the second server comes back. A
// stream that does not exist still fails a sink at once, naming it.
func TestSinksStartThroughALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	nc, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"},
		Replicas: 3, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}

	// A stream that does not exist is no election.
	missing := make(chan *nats.Msg, 64)
	wnc, _ := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	_, err := wnc.ChanSubscribe(jetstream.DefaultAPIPrefix+"STREAM.INFO.MISSING", missing)
	must(t, err)
	must(t, wnc.Flush())
	_, err = NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "MISSING", Subject: "missing.out", Job: "j", Task: "t"})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("exactly-once sink on a stream that does not exist: %v; want stream not found, naming MISSING", err)
	}
	_, err = NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "MISSING", Subject: "missing.out.{key}"})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("at-least-once sink on a stream that does not exist: %v; want stream not found, naming MISSING", err)
	}
	// Both requests were answered; their copies have reached the watcher
	// once nc's flush, then the watcher's, are (a watcher's flush alone
	// came before one of them once, in a loaded run).
	embeddedtest.Delivered(t, nc, wnc)
	if n := len(missing); n != 2 {
		t.Errorf("%d requests for the missing stream's info; want 1 a sink", n)
	}

	stay, restart := embeddedtest.NoQuorum(t, ctx, js, "OUT", servers)
	snc, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	watch, _ := embeddedtest.ConnectTo(t, stay.ClientURL())
	infos, names := make(chan *nats.Msg, 64), make(chan *nats.Msg, 64)
	_, err = watch.ChanSubscribe(jetstream.DefaultAPIPrefix+"STREAM.INFO.OUT", infos)
	must(t, err)
	_, err = watch.ChanSubscribe(jetstream.DefaultAPIPrefix+"STREAM.NAMES", names)
	must(t, err)
	must(t, watch.Flush())

	var (
		eo          *ExactlyOnce
		alo         *AtLeastOnce
		eoErr       = make(chan error, 1)
		aloErr      = make(chan error, 1)
		eoIn, aloIn bool // built before the restart
	)
	// awaitTries waits for two requests on reqs, or for the sink to be
	// built first (a replica's answer), or to fail.
	awaitTries := func(what string, reqs chan *nats.Msg, errc chan error) bool {
		t.Helper()
		for n := 0; n < 2; n++ {
			select {
			case <-reqs:
			case err := <-errc:
				if err != nil {
					t.Fatalf("%s without a leader: %v", what, err)
				}
				t.Logf("%s built before the restart, from the answers of the server left, after %d requests seen", what, n)
				return true
			case <-ctx.Done():
				t.Fatalf("%s: %d requests went out: %v", what, n, ctx.Err())
			}
		}
		return false
	}
	go func() {
		var err error
		eo, err = NewExactlyOnce(ctx, snc, ExactlyOnceConfig{Stream: "OUT", Subject: "out.eo", Job: "j", Task: "t"})
		eoErr <- err
	}()
	eoIn = awaitTries("exactly-once sink", infos, eoErr)
	go func() {
		var err error
		alo, err = NewAtLeastOnce(ctx, snc, AtLeastOnceConfig{Subject: "out.alo"})
		aloErr <- err
	}()
	aloIn = awaitTries("at-least-once sink", names, aloErr)
	watch.Close() // the requests from here on are of no interest
	restart()
	if !eoIn {
		if err := <-eoErr; err != nil {
			t.Fatalf("exactly-once sink through a leader election: %v", err)
		}
	}
	if !aloIn {
		if err := <-aloErr; err != nil {
			t.Fatalf("at-least-once sink through a leader election: %v", err)
		}
	}
	defer eo.Close()
	defer alo.Close()
	// The sinks were built, maybe from a replica's answer; a commit is
	// stored once the stream has a leader again.
	embeddedtest.AwaitStreamLeader(t, ctx, sjs, "OUT")

	must(t, eo.Write(ctx, batchOf(0, 10)))
	if _, err := eo.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	must(t, eo.Commit(ctx, 1))
	must(t, eo.Wait(ctx))
	must(t, alo.Write(ctx, batchOf(10, 20)))
	if _, err := alo.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Stored by a quorum; the server that answers next may still be
	// applying the last of them.
	awaitStored(t, ctx, sjs, "OUT", 20)
	if got, want := streamValues(t, ctx, sjs, "OUT"), wantValues(0, 20); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v; want %v", got, want)
	}
}

// A stream is full when the server refused a message with its code for a
// message it failed to store and its description is that of a limit: an
// error whose words only say so (of no server's refusal, or with another
// code) is not taken for one, nor a store failure for another reason.
func TestStreamFullByTheServersCode(t *testing.T) {
	refused := func(code jetstream.ErrorCode, description string) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: 503, ErrorCode: code, Description: description})
	}
	for _, c := range []struct {
		name  string
		err   error
		limit string // "": not full
	}{
		{"max_msgs", refused(10077, "maximum messages exceeded"), "max_msgs"},
		{"max_bytes", refused(10077, "maximum bytes exceeded"), "max_bytes"},
		{"max_msgs_per_subject", refused(10077, "maximum messages per subject exceeded"), "max_msgs_per_subject"},
		{"a message too large", refused(10077, "message size exceeds maximum allowed"), ""},
		{"another code", refused(10054, "maximum messages exceeded"), ""},
		{"words only", errors.New("operator said: maximum messages exceeded"), ""},
	} {
		err := streamFull("OUT", c.err)
		full := (*StreamFullError)(nil)
		switch isFull := errors.As(err, &full); {
		case isFull != (c.limit != ""):
			t.Errorf("%s: %v taken for a full stream: %v", c.name, err, isFull)
		case isFull && (full.Stream != "OUT" || full.Limit != c.limit || !errors.Is(err, c.err)):
			t.Errorf("%s: %+v, want stream OUT's %s wrapping the refusal", c.name, full, c.limit)
		}
	}
}
