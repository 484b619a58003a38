package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// standIn starts a server whose stream LINES stores other subjects, so
// gen neither creates it nor gets JetStream's own acks: answer, called
// with each line's number from 1, answers gen's publish (nil: no answer).
func standIn(t *testing.T, answer func(seq int64) []byte) (url string) {
	t.Helper()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LINES", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	sub, err := nc.Subscribe("lines.>", func(m *nats.Msg) {
		if b := answer(n.Add(1)); b != nil {
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
	return srv.ClientURL()
}

func ack(seq int64) []byte { return fmt.Appendf(nil, `{"stream":"LINES","seq":%d}`, seq) }

// TestSlowAcks: gen publishes every line when the server is slow to ack
// (a busy 'weir up', where 'gen -n 100000' used to give up with "stalled
// with too many outstanding async published messages"): the stand-in
// waits before answering the first line.
func TestSlowAcks(t *testing.T) {
	var acked atomic.Int64
	url := standIn(t, func(seq int64) []byte {
		if seq == 1 {
			time.Sleep(500 * time.Millisecond)
		}
		acked.Add(1)
		return ack(seq)
	})
	const n = 6000
	if err := run(url, n, 8, 1, ackWait); err != nil {
		t.Fatalf("gen -n %d: %v", n, err)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("%d lines acked, want %d", got, n)
	}
}

// TestUnstoredLinesReported: lines the server did not store (here a
// stand-in refuses every 100th) make gen fail, saying how many, instead
// of printing that it published them all.
func TestUnstoredLinesReported(t *testing.T) {
	url := standIn(t, func(seq int64) []byte {
		if seq%100 == 0 {
			return []byte(`{"error":{"code":503,"err_code":10077,"description":"refused by the test"}}`)
		}
		return ack(seq)
	})
	err := run(url, 3000, 8, 1, ackWait)
	t.Logf("gen: %v", err)
	if err == nil || !strings.Contains(err.Error(), "30 of 3000 lines were not acknowledged as stored") ||
		!strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("gen with 30 lines refused: %v; want them counted", err)
	}
}

// TestSteadyAcksOutlastTheWait: a server that acknowledges slowly but
// steadily (3 ms a line, so the first 1024 lines take over 3 s) is waited
// for: the ack wait (2 s) bounds a silence, not the time a thousand acks
// take.
func TestSteadyAcksOutlastTheWait(t *testing.T) {
	url := standIn(t, func(seq int64) []byte {
		time.Sleep(3 * time.Millisecond)
		return ack(seq)
	})
	if err := run(url, 1030, 8, 1, 2*time.Second); err != nil {
		t.Fatalf("gen against a slow but steady server: %v", err)
	}
}

// TestServerGoneSaysSo: with nothing acknowledged (the server went away),
// gen fails once the ack wait passes, saying how many lines it had sent,
// not at its overall deadline. The wait is seconds, so that a loaded
// machine does not stall the stand-in's acks of the first lines that long.
func TestServerGoneSaysSo(t *testing.T) {
	url := standIn(t, func(seq int64) []byte {
		if seq > 1500 {
			return nil
		}
		return ack(seq)
	})
	err := run(url, 3000, 8, 1, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "no acknowledgement for 5s after 2048 lines sent") {
		t.Fatalf("gen against a server that stopped answering: %v", err)
	}
}
