package sink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A core sink whose checkpoint flush the loss of its connection cuts
// short does not fail: nats.go reconnects, and the sink flushes again.
// It failed its task ("core sink out: checkpoint 3: flush: nats:
// connection closed"), which restarted the job at every drop of the
// connection — for an at-most-once sink, whose subscribers miss what was
// on its way either way. Here the server falls silent while the sink's
// flush waits for its answer; the connection leaves it after a few
// unanswered pings and reconnects, and what the sink publishes from then
// on arrives.
func TestCoreSinkFlushOutlivesALostConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{NoJetStream: true})
	proxy := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.PingInterval(50*time.Millisecond), nats.MaxPingsOutstanding(2))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	watch, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	out, err := watch.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	must(t, watch.Flush())
	s, err := NewCore(nc, "out")
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Write(ctx, batchOf(0, 3)))
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}

	proxy.Silence()
	proxy.Resume() // for the connections to come: the one silenced stays so
	if _, err := s.PreCommit(ctx, 2); err != nil {
		t.Fatalf("checkpoint 2, its flush cut short by the connection's loss: %v", err)
	}
	if r := nc.Stats().Reconnects; r == 0 {
		t.Fatalf("the connection did not reconnect")
	}
	must(t, s.Write(ctx, batchOf(3, 6)))
	must(t, s.EndOfInput(ctx))
	var got []string
	for len(got) < 6 {
		m, err := out.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, string(m.Data))
		if string(m.Data) == "v5" {
			break
		}
	}
	if got[len(got)-1] != "v5" {
		t.Fatalf("the subscriber got %v, want v3 to v5 last", got)
	}

	// A connection closed for good fails the flush.
	nc.Close()
	_, err = s.PreCommit(ctx, 3)
	if !errors.Is(err, nats.ErrConnectionClosed) || !strings.Contains(err.Error(), "core sink out: checkpoint 3: flush") {
		t.Fatalf("checkpoint 3 on a closed connection: %v", err)
	}
}
