package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pending counts what the stream holds that the source has not been
// delivered yet: unknown before the first delivery, most of the stream
// early on, none once the source read everything.
func TestJetStreamPending(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 2000)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: 10, PullMaxMessages: 50})
	must(t, err)
	defer src.Close()
	if n, ok := src.Pending(); ok || n != 0 {
		t.Fatalf("pending before the first delivery: %d, %v", n, ok)
	}
	first, _ := pollRecords(t, ctx, src, 10) // 10 or more: batches come as they are
	if n, ok := src.Pending(); !ok || n < 1000 || n >= 2000 {
		t.Fatalf("pending after the first batch: %d, %v; want most of the 2000", n, ok)
	}
	pollRecords(t, ctx, src, 2000-len(first))
	if n, ok := src.Pending(); !ok || n != 0 {
		t.Fatalf("pending after reading everything: %d, %v", n, ok)
	}
}
