package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/ingest"
)

// standIn starts a server whose stream LINES (with duplicate window dup)
// stores other subjects, so gen neither creates it nor gets JetStream's
// own acks: answer, called with each message's number from 1 and its
// message id, answers gen's publish (nil: no answer).
func standIn(t *testing.T, dup time.Duration, answer func(seq int64, id string) []byte) *embedded.Server {
	t.Helper()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LINES", Subjects: []string{"elsewhere"}, Duplicates: dup}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	sub, err := nc.Subscribe("lines.>", func(m *nats.Msg) {
		if b := answer(n.Add(1), m.Header.Get(jetstream.MsgIDHeader)); b != nil {
			m.Respond(b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv
}

func ack(seq int64) []byte { return fmt.Appendf(nil, `{"stream":"LINES","seq":%d}`, seq) }

// TestSlowAcks: gen publishes every line when the server is slow to ack
// (a busy 'weir up', where 'gen -n 100000' used to give up with "stalled
// with too many outstanding async published messages"): the stand-in
// waits before answering the first line.
func TestSlowAcks(t *testing.T) {
	var acked atomic.Int64
	srv := standIn(t, 0, func(seq int64, _ string) []byte {
		if seq == 1 {
			time.Sleep(500 * time.Millisecond)
		}
		acked.Add(1)
		return ack(seq)
	})
	const n = 6000
	if err := run(context.Background(), io.Discard, srv.ClientURL(), n, 8, 1); err != nil {
		t.Fatalf("gen -n %d: %v", n, err)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("%d lines acked, want %d", got, n)
	}
}

// TestRefusedLineFailsGen: a line the stream refuses makes gen fail,
// naming it and the server's reason, instead of printing that it
// published them all.
func TestRefusedLineFailsGen(t *testing.T) {
	srv := standIn(t, 0, func(seq int64, _ string) []byte {
		if seq == 100 {
			return []byte(`{"error":{"code":503,"err_code":10077,"description":"refused by the test"}}`)
		}
		return ack(seq)
	})
	err := run(context.Background(), io.Discard, srv.ClientURL(), 3000, 8, 1)
	t.Logf("gen: %v", err)
	if err == nil || !strings.HasPrefix(err.Error(), "line 100: stream LINES did not acknowledge the record: ") ||
		!strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("gen with line 100 refused: %v; want it named", err)
	}
}

// TestLostConnectionPublishedAgain: the connection drops while gen waits
// for an acknowledgement that never came; gen publishes that line and
// those after it again once reconnected, each with the id it had, and
// every line ends up acknowledged.
func TestLostConnectionPublishedAgain(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		cut  bool
		srv  *embedded.Server
	)
	srv = standIn(t, 0, func(seq int64, id string) []byte {
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		_, line, _ := strings.Cut(id, ".")
		switch {
		case cut:
		case line == "1500":
			return nil // lost on the way
		case line == "1600": // gen waits for 1500 with 1600 in flight
			cut = true
			embeddedtest.Kick(t, srv, "weir gen")
			return nil
		}
		return ack(seq)
	})
	var log strings.Builder
	const n = 3000
	if err := run(context.Background(), &log, srv.ClientURL(), n, 8, 1); err != nil {
		t.Fatalf("gen with its connection cut: %v", err)
	}
	t.Log(strings.TrimSpace(log.String()))
	mu.Lock()
	defer mu.Unlock()
	var nonce string
	for id := range seen {
		nonce, _, _ = strings.Cut(id, ".")
		break
	}
	// Published again: 1500 (withheld) and 1600 (cut), and lines in flight
	// at the cut; nothing more than twice, and every line.
	first := 0
	for i := 1; i <= n; i++ {
		c := seen[fmt.Sprintf("%s.%d", nonce, i)]
		if c == 2 && first == 0 {
			first = i
		}
		if c < 1 || c > 2 || (i == 1500 || i == 1600) && c != 2 {
			t.Errorf("line %d published %d times", i, c)
		}
	}
	if want := fmt.Sprintf("gen: lines from %d on not acknowledged", first); !strings.HasPrefix(log.String(), want) {
		t.Errorf("gen did not say %q: %q", want, log.String())
	}
	if len(seen) != n {
		t.Errorf("%d ids published, want the %d lines' (nonce %s)", len(seen), n, nonce)
	}
}

// TestServerSilentLongerThanTheWindow: with nothing acknowledged (the
// server went quiet) gen publishes again until the stream's duplicate
// window would no longer drop a repeat, then fails, naming the first line
// the stream may lack.
func TestServerSilentLongerThanTheWindow(t *testing.T) {
	srv := standIn(t, ingest.MinDuplicateWindow, func(seq int64, _ string) []byte {
		if seq > 1500 {
			return nil
		}
		return ack(seq)
	})
	err := run(context.Background(), io.Discard, srv.ClientURL(), 3000, 8, 1)
	if !errors.Is(err, ingest.ErrOutageTooLong) || !strings.HasPrefix(err.Error(), "line 1501: ") {
		t.Fatalf("gen against a server that stopped answering: %v", err)
	}
}

// TestDefaultURLIsWeirNATS: gen publishes where weir's commands do: to
// $WEIR_NATS when it is set, else to weir up's default address; a server
// that is not there is said with what to check.
func TestDefaultURLIsWeirNATS(t *testing.T) {
	t.Setenv(natsEnv, "")
	if got := defaultURL(); got != nats.DefaultURL {
		t.Errorf("without $%s: %s, want %s", natsEnv, got, nats.DefaultURL)
	}
	srv := embeddedtest.Server(t, embedded.Config{})
	t.Setenv(natsEnv, srv.ClientURL())
	if got := defaultURL(); got != srv.ClientURL() {
		t.Errorf("with $%s=%s: %s", natsEnv, srv.ClientURL(), got)
	}
	if err := run(context.Background(), io.Discard, defaultURL(), 3, 2, 1); err != nil {
		t.Fatalf("gen on $%s: %v", natsEnv, err)
	}
	err := run(context.Background(), io.Discard, "nats://127.0.0.1:1", 3, 2, 1)
	if err == nil || !strings.HasPrefix(err.Error(), "connect nats://127.0.0.1:1 (is 'weir up' running? one elsewhere: -nats URL, or $WEIR_NATS): ") {
		t.Errorf("gen on no server: %v", err)
	}
}
