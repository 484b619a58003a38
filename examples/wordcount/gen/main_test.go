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

// TestSlowAcks: gen publishes every line when the server is slow to ack
// (a busy 'weir up', where 'gen -n 100000' used to give up with "stalled
// with too many outstanding async published messages"). The acks come from
// a stand-in that waits before answering the first line; LINES exists but
// stores other subjects, so gen neither creates it nor gets JetStream's
// own acks.
func TestSlowAcks(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LINES", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	sub, err := nc.Subscribe("lines.>", func(m *nats.Msg) {
		if acked.Load() == 0 {
			time.Sleep(500 * time.Millisecond)
		}
		seq := acked.Add(1)
		m.Respond(fmt.Appendf(nil, `{"stream":"LINES","seq":%d}`, seq))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	if err := run(srv.ClientURL(), n, 8, 1); err != nil {
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
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LINES", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	sub, err := nc.Subscribe("lines.>", func(m *nats.Msg) {
		seq := n.Add(1)
		if seq%100 == 0 {
			m.Respond([]byte(`{"error":{"code":503,"err_code":10077,"description":"refused by the test"}}`))
			return
		}
		m.Respond(fmt.Appendf(nil, `{"stream":"LINES","seq":%d}`, seq))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	err = run(srv.ClientURL(), 3000, 8, 1)
	t.Logf("gen: %v", err)
	if err == nil || !strings.Contains(err.Error(), "30 of 3000 lines were not stored") ||
		!strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("gen with 30 lines refused: %v; want them counted", err)
	}
}
