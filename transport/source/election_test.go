package source

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// publishInOrder publishes the values from..to-1 on subject to a stream
// on a cluster, one at a time, each again while the stream has no leader
// (a message id keeps a try that was stored after all from being stored
// twice). publishN's async publishes are not for a stream just created
// on a cluster: one that finds no responders (the stream's leader not
// elected yet, or its interest not yet known to the server the client is
// on) is sent again by nats.go after those behind it, and the stream
// stores it out of order; a test then read the last value 26 of 100.
func publishInOrder(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m := nats.NewMsg(subject)
		m.Data = []byte(strconv.Itoa(i))
		m.Header.Set(KeyHeader, "k")
		m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
		err := natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, func(ctx context.Context) error {
			_, err := js.PublishMsg(ctx, m)
			return err
		})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// A source started while its stream has no leader (its leader's server
// gone, and a second one, so that the one left cannot elect one) waits
// for one and reads on from its offset. Its start asked once: the
// stream's info, or its consumer's creation, went unanswered or was
// answered that JetStream is not available, and a new attempt deployed
// while a stream elected a leader failed at once ("jetstream source
// LINES: ordered consumer at 40686: context deadline exceeded", on three
// nats-server processes), failing the job over a second time. Here the
// start's requests are seen going out twice before the second server
// comes back.
func TestJetStreamStartsThroughALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, Replicas: 3})
	publishInOrder(t, ctx, js, "in.a", 0, 100)

	// A stream that does not exist is no election: the start fails at
	// once, naming it, after one request.
	missing := make(chan *nats.Msg, 64)
	wnc, _ := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	_, err := wnc.ChanSubscribe(jetstream.DefaultAPIPrefix+"STREAM.INFO.MISSING", missing)
	must(t, err)
	must(t, wnc.Flush())
	gone, err := NewJetStream(js, JetStreamConfig{Stream: "MISSING"})
	must(t, err)
	defer gone.Close()
	_, _, err = gone.Poll(ctx)
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("start on a stream that does not exist: %v; want stream not found, naming MISSING", err)
	}
	embeddedtest.Delivered(t, js.Conn(), wnc)
	if n := len(missing); n != 1 {
		t.Errorf("%d requests for the missing stream's info; want 1", n)
	}

	stay, restart := embeddedtest.NoQuorum(t, ctx, js, "IN", servers)
	_, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	watch, _ := embeddedtest.ConnectTo(t, stay.ClientURL())
	reqs := make(chan *nats.Msg, 64)
	_, err = watch.ChanSubscribe(jetstream.DefaultAPIPrefix+"*.*.IN.>", reqs)
	must(t, err)
	_, err = watch.ChanSubscribe(jetstream.DefaultAPIPrefix+"*.*.IN", reqs)
	must(t, err)
	must(t, watch.Flush())

	src, err := NewJetStream(sjs, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer src.Close()
	// Resumed after sequence 40: the start reads the stream's info too.
	must(t, src.Seek(ctx, EncodeOffset(40)))
	type polled struct {
		batch, off []byte
		err        error
	}
	first := make(chan polled, 1)
	go func() {
		b, off, err := src.Poll(ctx)
		first <- polled{b, off, err}
	}()
	for n := 0; n < 2; n++ {
		select {
		case <-reqs:
		case p := <-first:
			t.Fatalf("the source started without a leader: %v", p.err)
		case <-ctx.Done():
			p := <-first
			t.Fatalf("%d of the start's requests went out; the start: %v", n, p.err)
		}
	}
	restart()
	p := <-first
	if p.err != nil {
		t.Fatalf("start through a leader election: %v", p.err)
	}
	recs, err := abi.DecodeBatch(p.batch)
	must(t, err)
	off := p.off
	if len(recs) < 60 {
		var more []abi.Record
		more, off = pollRecords(t, ctx, src, 60-len(recs))
		recs = append(recs, more...)
	}
	for i, v := range values(recs) {
		if v != 40+i {
			t.Fatalf("record %d = %d, want %d", i, v, 40+i)
		}
	}
	if seq, _ := DecodeOffset(off); seq != 100 {
		t.Fatalf("offset %d after the last record, want 100", seq)
	}
}

// The check that a recreated consumer still reads the stream it started
// on (sameStream, made before the first message after the consumer's
// reset) waits out the stream's election of a leader: an ordered consumer
// that recreated itself after its server went can deliver while its
// stream has no leader yet, and the check's one request of 10 s went
// unanswered and failed the task. Here the check runs, as a reset's first
// message runs it, while the stream has no leader (its leader's server
// gone, and a second one, so that the one left cannot elect one): its
// request is seen going out twice before the second server comes back
// (or answered by the replica left, once it noticed the leader gone),
// and the check then passes. (A reset on demand in that window cannot be
// made: the consumer is recreated only once JetStream's meta layer has a
// leader again.)
func TestJetStreamStreamCheckWaitsOutAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, Replicas: 3})
	publishInOrder(t, ctx, js, "in.a", 0, 100)

	// The leader's server goes last, so that the one left is never
	// elected meanwhile: until it notices the leader gone, nobody
	// answers a request about the stream.
	leader, _, _ := embeddedtest.StreamLeader(t, ctx, js, "IN", servers)
	var lead, stay, other *server.Server
	for _, s := range servers {
		switch {
		case s.Name() == leader:
			lead = s
		case stay == nil:
			stay = s
		default:
			other = s
		}
	}
	_, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	src, err := NewJetStream(sjs, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer src.Close()
	pollRecords(t, ctx, src, 100)

	restart := embeddedtest.Stop(t, other, servers)
	embeddedtest.Stop(t, lead, servers)
	watch, _ := embeddedtest.ConnectTo(t, stay.ClientURL())
	infos := make(chan *nats.Msg, 64)
	_, err = watch.ChanSubscribe(jetstream.DefaultAPIPrefix+"STREAM.INFO.IN", infos)
	must(t, err)
	must(t, watch.Flush())
	checked := make(chan error, 1)
	go func() { checked <- src.sameStream(101) }()
	for n := 0; n < 2; n++ {
		select {
		case <-infos:
		case err := <-checked:
			// Once the source's connection, then watch, are flushed,
			// infos holds a copy of each request (Delivered).
			embeddedtest.Delivered(t, sjs.Conn(), watch)
			n += len(infos)
			if err != nil {
				t.Fatalf("the stream check failed without a leader, after %d requests: %v", n, err)
			}
			if n < 2 {
				// A replica answered the first request: it knew at
				// once that the stream had no leader, and nothing
				// went unanswered.
				t.Skipf("the stream check was answered at its first request by a replica; no election to wait out")
			}
			t.Logf("the stream check passed with a replica's answer to its request %d", n)
			return
		case <-ctx.Done():
			t.Fatalf("%d of the stream check's requests went out: %v", n, ctx.Err())
		}
	}
	restart()
	select {
	case err := <-checked:
		if err != nil {
			t.Fatalf("the stream check through a leader election: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the stream check did not end once the stream had a leader: %v", ctx.Err())
	}
}
