package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// newStream starts a server with stream IN (subjects in.>) configured by
// cfg, and returns it with a connection for a Publisher.
func newStream(t *testing.T, cfg jetstream.StreamConfig) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	cfg.Name, cfg.Subjects = "IN", []string{"in.>"}
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	nc, _ := embeddedtest.Connect(t, srv, ConnOptions()...)
	return srv, nc
}

// publish publishes lines from to to (each "<line>" on in.x) with p.
func publish(t *testing.T, ctx context.Context, p *Publisher, from, to int) error {
	t.Helper()
	for i := from; i <= to; i++ {
		m := nats.NewMsg("in.x")
		m.Data = []byte(strconv.Itoa(i))
		if err := p.Publish(ctx, i, m); err != nil {
			return err
		}
	}
	return nil
}

// checkStored checks that stream IN holds the lines 1 to n, each once, in
// order, each with its message id.
func checkStored(t *testing.T, ctx context.Context, srv *embedded.Server, prefix string, n int) {
	t.Helper()
	_, js := embeddedtest.Connect(t, srv)
	cons, err := js.OrderedConsumer(ctx, "IN", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "IN")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(n) {
		t.Errorf("stream IN holds %d messages, want %d", got, n)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for i := 1; i <= n; i++ {
		m, err := it.Next()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got := string(m.Data()); got != strconv.Itoa(i) {
			t.Fatalf("message %d holds line %s, want %d (lines lost, repeated or out of order)", i, got, i)
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != prefix+strconv.Itoa(i) {
			t.Fatalf("message %d: id %q, want %q", i, id, prefix+strconv.Itoa(i))
		}
	}
}

// TestPublishThroughAServerRestart: the server goes down with records in
// flight and comes back while the Publisher waits for it; the stream holds
// every record once, in order.
func TestPublishThroughAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, nc := newStream(t, jetstream.StreamConfig{})
	retrying := make(chan int, 100)
	prefix := Nonce() + ".0."
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: prefix, Retrying: func(r Retry) {
		t.Log(r)
		retrying <- r.Line
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Enough records that the Publisher runs at its pace, DefaultInFlight
	// of them unacknowledged, when the server goes down: 40 000 took 23 s
	// under -race unloaded, and a loaded machine stretched that to most of
	// the context's two minutes.
	const half, n = 5_000, 10_000
	if err := publish(t, ctx, p, 1, half); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown() // with up to DefaultInFlight records of the first half unacknowledged
	restarted := make(chan error, 1)
	go func() {
		select {
		case <-retrying:
			restarted <- srv.Restart()
		case <-ctx.Done():
			restarted <- ctx.Err()
		}
	}()
	if err := publish(t, ctx, p, half+1, n); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if p.Retries() == 0 {
		t.Error("the Publisher never published again")
	}
	checkStored(t, ctx, srv, prefix, n)
}

// TestPublishThroughASilentServer: the server the Publisher's connection
// reaches falls silent without closing it (a frozen process, a
// partition: here a proxy that stops forwarding) with records in flight;
// the connection leaves it for the next server it knows after a few
// unanswered pings, and the stream holds every record once, in order.
// With nats.go's default pings the Publisher sent the records into the
// silent connection again and again until its duplicate window was over.
func TestPublishThroughASilentServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, _ := newStream(t, jetstream.StreamConfig{})
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	nc, err := nats.Connect(quiet.URL()+","+srv.ClientURL(), append(ConnOptions(), nats.DontRandomize())...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != quiet.URL() {
		t.Fatalf("connected to %s, want the path that falls silent %s first", got, quiet.URL())
	}
	prefix := Nonce() + ".0."
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: prefix, Retrying: func(r Retry) { t.Log(r) }})
	if err != nil {
		t.Fatal(err)
	}
	const half, n = 5_000, 10_000
	if err := publish(t, ctx, p, 1, half); err != nil {
		t.Fatal(err)
	}
	quiet.Silence() // with up to DefaultInFlight records of the first half unacknowledged
	if err := publish(t, ctx, p, half+1, n); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nc.ConnectedUrl(); got != srv.ClientURL() {
		t.Errorf("published through %s, want %s", got, srv.ClientURL())
	}
	if p.Retries() == 0 {
		t.Error("the Publisher never published again")
	}
	checkStored(t, ctx, srv, prefix, n)
}

// TestOutageLongerThanTheWindow: a server that stays down longer than the
// stream's duplicate window allows ends the Publisher with
// ErrOutageTooLong, naming the first record it could not publish again.
func TestOutageLongerThanTheWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, nc := newStream(t, jetstream.StreamConfig{Duplicates: MinDuplicateWindow})
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x."})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t, ctx, p, 1, 100); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	err = publish(t, ctx, p, 101, 200)
	if err == nil {
		err = p.Flush(ctx)
	}
	t.Logf("publish with the server down: %v", err)
	if !errors.Is(err, ErrOutageTooLong) || !strings.HasPrefix(err.Error(), "line 101: ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("publish with the server gone for good: %v; want one line naming line 101, wrapping ErrOutageTooLong", err)
	}
	if again := p.Flush(ctx); again != err {
		t.Errorf("Flush after the error: %v, want the error again", again)
	}
}

// TestAcknowledgedAfterAnInterrupt: after an interrupt (Publish's
// context ended) Acknowledged waits for what is in flight and says from
// which line on the stream may lack records: none while the server
// answers, the first record the interrupt cut off once it is gone.
func TestAcknowledgedAfterAnInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, nc := newStream(t, jetstream.StreamConfig{})
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x."})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t, ctx, p, 1, 100); err != nil {
		t.Fatal(err)
	}
	// No Flush: the acknowledgements of the 100 are waited for here.
	if n, line := p.Acknowledged(ctx); n != 100 || line != 0 {
		t.Errorf("Acknowledged with the server up: %d, the first not from line %d; want 100, and none not", n, line)
	}
	checkStored(t, ctx, srv, "x.", 100)
	srv.Shutdown()
	interrupted, stop := context.WithCancel(ctx)
	stop()
	// Sent into a connection that has not noticed yet, or cut off by the
	// interrupt as it waits for it to come back: not acknowledged either way.
	if err := publish(t, interrupted, p, 101, 101); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("publish of line 101 interrupted with the server down: %v; want context.Canceled or none", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if n, line := p.Acknowledged(short); n != 100 || line != 101 {
		t.Errorf("Acknowledged after the interrupt: %d, the first not from line %d; want 100, and from line 101", n, line)
	}
}

// TestShortDuplicateWindowRefused: a stream that forgets message ids too
// soon to publish a record again safely is refused at once, saying so.
func TestShortDuplicateWindowRefused(t *testing.T) {
	_, nc := newStream(t, jetstream.StreamConfig{Duplicates: time.Second})
	_, err := New(context.Background(), nc, Config{Stream: "IN", IDPrefix: "x."})
	if !errors.Is(err, ErrDuplicateWindowTooShort) || !strings.HasPrefix(err.Error(), "stream IN: duplicate window too short: it remembers message ids for 1s, ") {
		t.Fatalf("New on a stream with a 1s duplicate window: %v", err)
	}
}

// TestRefusedRecord: a record the stream refuses (its message limit) is an
// error at once, naming its line and the stream's reason.
func TestRefusedRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, nc := newStream(t, jetstream.StreamConfig{MaxMsgs: 3, Discard: jetstream.DiscardNew})
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x."})
	if err != nil {
		t.Fatal(err)
	}
	err = publish(t, ctx, p, 1, 5)
	if err == nil {
		err = p.Flush(ctx)
	}
	var ns *NotStoredError
	if !errors.As(err, &ns) || ns.Line != 4 || ns.Stream != "IN" || !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Fatalf("publish of 5 records to a stream of at most 3: %v; want a NotStoredError for line 4", err)
	}
	if p.Retries() != 0 {
		t.Errorf("a refused record was published again %d times", p.Retries())
	}
}

// TestBufferingConnRefused: a connection that buffers publishes while it
// reconnects would store records out of order after a restart.
func TestBufferingConnRefused(t *testing.T) {
	srv, _ := newStream(t, jetstream.StreamConfig{})
	nc, _ := embeddedtest.Connect(t, srv)
	if _, err := New(context.Background(), nc, Config{Stream: "IN"}); !errors.Is(err, ErrBufferingConn) {
		t.Fatalf("New on a buffering connection: %v, want ErrBufferingConn", err)
	}
}

// TestLostAcknowledgementPublishedAgain: the connection drops while the
// Publisher waits for an acknowledgement that never came (a stand-in for
// JetStream withholds it, then the server cuts the connection); the
// Publisher publishes that record and those after it again, with the same
// ids, once reconnected, and goes on.
func TestLostAcknowledgementPublishedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	sc, js := embeddedtest.Connect(t, srv)
	// Stream IN stores other subjects: the stand-in below answers for it.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	nc, _ := embeddedtest.Connect(t, srv, append(ConnOptions(), nats.Name("publisher"), nats.ReconnectWait(10*time.Millisecond))...)
	var (
		mu   sync.Mutex
		seen = map[string]int{} // ids, by how often the stand-in got them
		seq  int
		cut  bool
	)
	sub, err := sc.Subscribe("in.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		id := m.Header.Get(jetstream.MsgIDHeader)
		seen[id]++
		if !cut && id == "x.5" {
			return // withheld: lost on the way
		}
		if !cut && id == "x.8" {
			// The publisher waits for 5 with 8 in flight: cut it off.
			cut = true
			embeddedtest.Kick(t, srv, "publisher")
			return
		}
		seq++
		m.Respond([]byte(`{"stream":"IN","seq":` + strconv.Itoa(seq) + `}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sc.Flush(); err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x.", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t, ctx, p, 1, 20); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i <= 20; i++ {
		id := "x." + strconv.Itoa(i)
		switch n := seen[id]; {
		case i == 5 || i == 8:
			if n != 2 {
				t.Errorf("%s published %d times, want twice: withheld or cut, then published again", id, n)
			}
		case i == 6 || i == 7: // acknowledged, unless the cut lost the acks
			if n != 1 && n != 2 {
				t.Errorf("%s published %d times, want once or twice", id, n)
			}
		case n != 1:
			t.Errorf("%s published %d times, want once", id, n)
		}
	}
	if p.Retries() != 1 {
		t.Errorf("%d retries, want 1", p.Retries())
	}
}

// TestSubjectTheStreamDoesNotStore: a record on a subject the stream does
// not store (no stream answers for it: no responders) is refused at once,
// naming its line, the subject and the stream's subjects, as any other
// record the stream refuses: publishing it again could never store it.
// (Treated as JetStream briefly unavailable, it was published again and
// again, a retry line each half second, for nine tenths of the duplicate
// window, and then reported as an outage.)
func TestSubjectTheStreamDoesNotStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, nc := newStream(t, jetstream.StreamConfig{Duplicates: MinDuplicateWindow})
	retries := 0
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x.", Retrying: func(r Retry) {
		t.Log(r)
		retries++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t, ctx, p, 1, 3); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("out.x")
	m.Data = []byte("4")
	err = p.Publish(ctx, 4, m)
	if err == nil {
		err = p.Flush(ctx)
	}
	t.Logf("publish on a subject the stream does not store: %v", err)
	var ns *NotStoredError
	if !errors.As(err, &ns) || ns.Line != 4 || ns.Stream != "IN" ||
		!strings.Contains(err.Error(), "out.x") || !strings.Contains(err.Error(), "in.>") {
		t.Fatalf("publish on subject out.x to stream IN (in.>): %v; want a NotStoredError for line 4 naming out.x and in.>", err)
	}
	if retries != 0 || p.Retries() != 0 {
		t.Errorf("the record was published again (%d retry notes, %d retries)", retries, p.Retries())
	}
}

// TestStreamDeletedWhilePublishing: once the stream is gone, a record is
// refused at once, saying so, rather than waited for as an outage.
func TestStreamDeletedWhilePublishing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, nc := newStream(t, jetstream.StreamConfig{Duplicates: MinDuplicateWindow})
	p, err := New(ctx, nc, Config{Stream: "IN", IDPrefix: "x.", Retrying: func(r Retry) { t.Error("published again:", r) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t, ctx, p, 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, js := embeddedtest.Connect(t, srv)
	if err := js.DeleteStream(ctx, "IN"); err != nil {
		t.Fatal(err)
	}
	err = publish(t, ctx, p, 4, 6)
	if err == nil {
		err = p.Flush(ctx)
	}
	var ns *NotStoredError
	if !errors.As(err, &ns) || ns.Line != 4 || !strings.Contains(err.Error(), "the stream does not exist") {
		t.Fatalf("publish after stream IN was deleted: %v; want a NotStoredError for line 4 saying the stream does not exist", err)
	}
}

// TestTransient: what a publish or acknowledgement may fail with and the
// record still be published again, and what ends the Publisher. A write
// to a connection the server reset as it went down failed `weir run
// -input` once ("write tcp …: connection reset by peer") where a publish
// again was safe: the record's id drops a second copy.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("publish: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{fmt.Errorf("publish: %w", io.EOF), true},
		{nats.ErrDisconnected, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrAsyncPublishTimeout, true},
		{&jetstream.APIError{ErrorCode: errCodeClusterNotAvailable}, true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{errors.New("maximum messages exceeded"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
