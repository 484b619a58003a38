package source

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pending counts what the stream holds that the source has not been
// delivered yet: unknown before the first delivery, most of the stream
// early on, none once the source read everything.
func TestJetStreamPending(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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

// ReadThrough reads the stream sequence every lane of a source covered
// from its offsets: a whole-stream source's offset, and a partitioned
// subtask's lowest partition — which reaches the stream's end once its
// quiet partition caught up.
func TestJetStreamReadThrough(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}})
	whole, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer whole.Close()
	if seq, ok := whole.ReadThrough(nil); !ok || seq != 0 {
		t.Fatalf("read through %d, %v before anything was read", seq, ok)
	}
	publishN(t, ctx, js, func(i int) string { return "in." + strconv.Itoa(i%2) + ".x" }, 0, 9) // seqs 1..9
	_, off := pollRecords(t, ctx, whole, 9)
	if seq, ok := whole.ReadThrough(off); !ok || seq != 9 {
		t.Fatalf("whole stream read through %d, %v; want 9", seq, ok)
	}

	// Subtask 0 of 2 reads partitions 0 and 2 of 4; partition 2 gets
	// nothing, partition 0 the even messages.
	part, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 0, Partitions: 4,
		PartitionFilter: "in.{p}.*", IdleCheck: 20 * time.Millisecond})
	must(t, err)
	defer part.Close()
	if _, ok := part.ReadThrough(EncodeOffset(3)); ok {
		t.Fatal("a partitioned source read a whole-stream offset")
	}
	_, off = pollRecords(t, ctx, part, 5)
	for {
		seq, ok := part.ReadThrough(off)
		if !ok || seq > 9 {
			t.Fatalf("partitions read through %d, %v; stream ends at 9", seq, ok)
		}
		if seq == 9 {
			break
		}
		_, off, err = part.Poll(ctx) // an empty batch as the quiet partition moves
		must(t, err)
	}
}
