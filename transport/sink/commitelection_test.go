package sink

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// inMsgs is how many messages server srv has received from nc.
func inMsgs(t *testing.T, srv *server.Server, nc *nats.Conn) uint64 {
	t.Helper()
	cid, err := nc.GetClientID()
	must(t, err)
	cz, err := srv.Connz(&server.ConnzOptions{CID: cid})
	must(t, err)
	if len(cz.Conns) != 1 {
		t.Fatalf("server %s has %d connections with id %d; want 1", srv.Name(), len(cz.Conns), cid)
	}
	return uint64(cz.Conns[0].InMsgs)
}

// awaitTries waits until server srv has received at least n more messages
// from nc than it had (base): the tries of a publish, made while its stream
// has no leader. It fails t when done reports first (the publish ended).
func awaitTries(t *testing.T, ctx context.Context, what string, srv *server.Server, nc *nats.Conn, base, n uint64, done <-chan error) {
	t.Helper()
	for {
		got := inMsgs(t, srv, nc) - base
		if got >= n {
			t.Logf("%s: %d messages went out while the stream had no leader", what, got)
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s ended while its stream had no leader, %d messages out: %v", what, got, err)
		case <-ctx.Done():
			t.Fatalf("%s: %d messages went out of %d: %v", what, got, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Exactly-once commits, a recovery's re-commit and at-least-once
// checkpoints that start while their stream has no leader (its leader's
// server stopped, and a second one, so that the one left cannot elect
// one) are made again until a leader is elected (the second server back),
// in each publish mode: each stream then holds every record, in order —
// exactly once for the exactly-once sink; at least once for the other,
// whose first copies are in order when it publishes fast or atomic
// batches (async publishes that failed go out again in the order they
// failed). They failed the task at the first try
// ("batch message 1 ack timeout", "timeout waiting for ack", no
// responders), failing the job over; the re-commit in Recover after such
// a failover failed it again. Here each publish's tries are seen going
// out (two or more: the server counts the messages the sink's connection
// sent) before the second server comes back.
func TestSinksPublishThroughALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	const n = 250
	type publish struct {
		name, stream string
		mode         PublishMode
		// tries is how many messages two tries send at least while the
		// stream has no leader: a fast batch waits for the answer to its
		// first message; an atomic batch (of 100) and async publish send
		// them all.
		tries   uint64
		recover bool // Recover re-commits the state another sink staged
		alo     bool // an at-least-once sink writes and checkpoints
		watch   bool // a subscriber on the subjects: no answer, rather than no responders
		nc      *nats.Conn
		run     func() error
		base    uint64
		done    chan error
	}
	pubs := []*publish{
		{name: "fast commit", stream: "FAST", mode: PublishFast, tries: 2},
		{name: "atomic commit", stream: "ATOMIC", mode: PublishAtomic, tries: 200},
		{name: "async commit", stream: "ASYNC", mode: PublishAsync, tries: 2 * n, watch: true},
		{name: "recovery's re-commit", stream: "RECOVER", mode: PublishAuto, tries: 2, recover: true},
		{name: "at-least-once fast checkpoint", stream: "ALOFAST", mode: PublishFast, tries: 2, alo: true},
		{name: "at-least-once async checkpoint", stream: "ALOASYNC", mode: PublishAsync, tries: 2 * n, alo: true},
		{name: "at-least-once atomic checkpoint", stream: "ALOATOMIC", mode: PublishAtomic, tries: 2 * n, alo: true},
	}
	for _, p := range pubs {
		subj := strings.ToLower(p.stream)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: p.stream, Subjects: []string{subj + ".>"},
			Replicas: 3, Duplicates: 2 * time.Minute, AllowBatchPublish: true, AllowAtomicPublish: true})
		must(t, err)
	}
	stay, stopQuorum := embeddedtest.QuorumLoss(t, ctx, js, "FAST", servers)
	for _, p := range pubs {
		p.nc, _ = embeddedtest.ConnectTo(t, stay.ClientURL())
		subj := strings.ToLower(p.stream) + ".out"
		if p.alo {
			s, err := NewAtLeastOnce(ctx, p.nc, AtLeastOnceConfig{Stream: p.stream, Subject: subj, Publish: p.mode,
				Timeout: 2 * time.Second, IdleCommit: time.Hour})
			must(t, err)
			defer s.Close()
			p.run = func() error {
				if err := s.Write(ctx, batchOf(0, n)); err != nil {
					return err
				}
				_, err := s.PreCommit(ctx, 1)
				return err
			}
		} else {
			cfg := ExactlyOnceConfig{Stream: p.stream, Subject: subj, Job: "j", Task: "t",
				Publish: p.mode, BatchSize: 100, Timeout: 2 * time.Second}
			s, err := NewExactlyOnce(ctx, p.nc, cfg)
			must(t, err)
			defer s.Close()
			w := s
			if p.recover {
				// The state of a sink whose commit never went out.
				w, err = NewExactlyOnce(ctx, p.nc, cfg)
				must(t, err)
				defer w.Close()
			}
			must(t, w.Write(ctx, batchOf(0, n)))
			state, err := w.PreCommit(ctx, 1)
			must(t, err)
			p.run = func() error {
				if p.recover {
					return s.Recover(ctx, 1, state)
				}
				if err := s.Commit(ctx, 1); err != nil {
					return err
				}
				return s.Wait(ctx)
			}
		}
		if p.watch {
			wnc, _ := embeddedtest.ConnectTo(t, stay.ClientURL())
			_, err := wnc.SubscribeSync(strings.ToLower(p.stream) + ".>")
			must(t, err)
			must(t, wnc.Flush())
		}
		p.base = inMsgs(t, stay, p.nc)
	}

	restart := stopQuorum()
	for _, p := range pubs {
		p.done = make(chan error, 1)
		go func() { p.done <- p.run() }()
	}
	for _, p := range pubs {
		awaitTries(t, ctx, p.name, stay, p.nc, p.base, p.tries, p.done)
	}
	restart()
	for _, p := range pubs {
		if err := <-p.done; err != nil {
			t.Errorf("%s through a leader election: %v", p.name, err)
		}
	}
	if t.Failed() {
		return
	}
	_, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	for _, p := range pubs {
		got := valuesAfterElection(t, ctx, sjs, p.stream, n)
		first := got
		if p.alo {
			first = firstCopies(got)
			t.Logf("%s: %d records stored twice", p.name, len(got)-len(first))
			if p.mode == PublishAsync {
				slices.SortFunc(first, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
			}
		}
		if want := wantValues(0, n); !slices.Equal(first, want) {
			t.Errorf("%s: stream %s holds %d records %v; want %d, in order", p.name, p.stream, len(got), got, n)
		}
	}
}

// valuesAfterElection is streamValues of a stream that has just elected a
// leader, and whose servers may still be moving it (the one that came back
// catching up): each request is made again while the stream has none. It
// first waits for the stream to hold at least n messages (awaitStored):
// a leader just elected may not have applied all that a quorum stored.
func valuesAfterElection(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, n uint64) []string {
	t.Helper()
	embeddedtest.AwaitStreamLeader(t, ctx, js, stream)
	awaitStored(t, ctx, js, stream, n)
	var info *jetstream.StreamInfo
	err := natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			info, err = st.Info(ctx)
		}
		if err == nil && info.Cluster != nil && info.Cluster.Leader == "" {
			err = natsconn.ErrNoLeader
		}
		return err
	})
	must(t, err)
	var out []string
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		var m *jetstream.RawStreamMsg
		err := natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, func(ctx context.Context) (err error) {
			st, err := js.Stream(ctx, stream)
			if err == nil {
				m, err = st.GetMsg(ctx, seq)
			}
			return err
		})
		must(t, err)
		if m.Header.Get(KeyHeader) == "" {
			t.Fatalf("stream %s message %d %q without key", stream, seq, m.Data)
		}
		out = append(out, string(m.Data))
	}
	return out
}

// firstCopies is values without those that came before in it.
func firstCopies(values []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// A commit whose stream is gone is no election: nobody takes its messages,
// as while a stream elects a leader, but the stream's lookup says it does
// not exist, and the commit fails at once in every publish mode, naming
// the stream, rather than after natsconn.ElectionWait.
func TestExactlyOnceCommitToAStreamGoneFailsAtOnce(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, mode := range []PublishMode{PublishFast, PublishAtomic, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone.>"},
				Duplicates: time.Minute, AllowBatchPublish: true, AllowAtomicPublish: true})
			must(t, err)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "GONE", Subject: "gone.out", Job: "j", Task: "t",
				Publish: mode, Timeout: time.Second})
			must(t, err)
			defer s.Close()
			must(t, s.Write(ctx, batchOf(0, 10)))
			_, err = s.PreCommit(ctx, 1)
			must(t, err)
			must(t, js.DeleteStream(ctx, "GONE"))
			// Well within natsconn.ElectionWait, which a wait would take.
			wctx, cancel := context.WithTimeout(ctx, natsconn.ElectionWait/2)
			defer cancel()
			err = s.Commit(wctx, 1)
			if err == nil {
				err = s.Wait(wctx)
			}
			if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, natsconn.ErrNoLeader) || !strings.Contains(err.Error(), "stream GONE") {
				t.Fatalf("commit to a stream that is gone: %v; want stream not found, naming GONE", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q on more than one line", err)
			}
			t.Log(err)
		})
	}
}

// The at-least-once sink's copies of messages not acknowledged keep their
// order and contents as acknowledgements drop the oldest, also when the
// buffer is compacted (more than 1024 dropped, fewer left) and emptied.
func TestPendingKeepsWhatIsNotAcknowledged(t *testing.T) {
	var p pending
	next, first := 0, 0 // the next message added; the oldest pending
	add := func(n int) {
		for range n {
			k := []byte(nil)
			if next%2 == 0 {
				k = []byte("k" + strconv.Itoa(next))
			}
			p.add(k, []byte("v"+strconv.Itoa(next)), int64(next+1))
			next++
		}
	}
	check := func() {
		t.Helper()
		if p.len() != next-first {
			t.Fatalf("%d pending; want %d", p.len(), next-first)
		}
		for i := range p.len() {
			k, v, ts := p.record(i)
			n := first + i
			wantK := ""
			if n%2 == 0 {
				wantK = "k" + strconv.Itoa(n)
			}
			if string(k) != wantK || string(v) != "v"+strconv.Itoa(n) || ts != int64(n+1) {
				t.Fatalf("pending %d: key %q value %q time %d; want %q, v%d, %d", i, k, v, ts, wantK, n, n+1)
			}
		}
	}
	add(3000)
	p.drop(1000)
	first += 1000
	check()
	p.drop(1100) // compacted: 2100 of 3000 dropped, 900 left
	first += 1100
	if p.first != 0 {
		t.Fatalf("not compacted: %d dropped entries kept", p.first)
	}
	check()
	add(10)
	check()
	p.drop(p.len())
	first = next
	if len(p.buf) != 0 || len(p.ends) != 0 {
		t.Fatalf("emptied, %d bytes and %d entries kept", len(p.buf), len(p.ends))
	}
	add(5)
	check()
}
