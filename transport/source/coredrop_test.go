package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/abi"
)

// TestCoreDropsPastItsPendingLimit publishes more than a core source's
// pending limit while nothing polls it: the NATS client keeps up to the
// limit (plus the batch the source gathers), drops the rest, and the
// source counts every message it dropped — dropped = published −
// delivered once everything it kept is polled — and says what it holds
// meanwhile.
func TestCoreDropsPastItsPendingLimit(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit, batch, published = 100, 10, 1000
	src, err := NewCore(nc, CoreConfig{Subject: "in", MaxBatchRecords: batch, PendingMsgs: limit, Job: "j", Task: "in-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if c, ok := CoreOf(src.sub); !ok || c != src || c.Config().Job != "j" || c.Config().Task != "in-0" {
		t.Fatalf("CoreOf(its subscription) = %v, %v", c, ok)
	}
	data := make([]byte, 100)
	for range published {
		must(t, nc.Publish("in", data))
	}
	// The server sends a connection its messages before the pong to its
	// ping: once Flush returns, the client took (or dropped) them all.
	must(t, nc.Flush())
	st := src.Stats()
	if st.Dropped == 0 || st.Pending > limit+batch || st.Pending == 0 {
		t.Fatalf("after %d published past a limit of %d, nothing polled: %+v", published, limit, st)
	}
	if st.PendingMsgsLimit != limit || st.PendingBytesLimit != DefaultCorePendingBytes {
		t.Errorf("limits %d messages, %d bytes; want %d, %d", st.PendingMsgsLimit, st.PendingBytesLimit, limit, DefaultCorePendingBytes)
	}
	if n, ok := src.Pending(); !ok || n == 0 {
		t.Errorf("Pending() = %d, %v while it holds messages", n, ok)
	}
	delivered := 0
	for delivered+src.Dropped() < published {
		b, _, err := src.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d delivered, %d dropped of %d: %v", delivered, src.Dropped(), published, err)
		}
		recs, err := abi.DecodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		delivered += len(recs)
	}
	if d := src.Dropped(); d != published-delivered || delivered > limit+batch {
		t.Errorf("dropped %d, delivered %d of %d (limit %d, batch %d)", d, delivered, published, limit, batch)
	}
	if n, ok := src.Pending(); !ok || n != 0 {
		t.Errorf("Pending() = %d, %v with everything polled", n, ok)
	}
	must(t, src.Close())
	if _, ok := CoreOf(src.sub); ok {
		t.Error("a closed source is still found by its subscription")
	}
	if n, ok := src.Pending(); ok {
		t.Errorf("Pending() of a closed source = %d, ok", n)
	}
}

// TestCorePendingBytesLimit bounds a core source's buffer by bytes.
func TestCorePendingBytesLimit(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	const size, published = 1024, 500
	src, err := NewCore(nc, CoreConfig{Subject: "in", MaxBatchRecords: 1, PendingBytes: 64 * size})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for range published {
		must(t, nc.PublishMsg(&nats.Msg{Subject: "in", Data: make([]byte, size)}))
	}
	must(t, nc.Flush())
	st := src.Stats()
	if st.Dropped < published-65 || st.PendingBytes > 64*size || st.PendingMsgsLimit != DefaultCorePendingMsgs {
		t.Fatalf("%d messages of %d bytes past a limit of %d bytes: %+v", published, size, 64*size, st)
	}
}
