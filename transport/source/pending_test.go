package source

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
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

// Unread counts what a task has not processed: besides what the
// consumers have not delivered (Pending), the records the source fetched
// and gathered for the next Poll, and those it polled that the task has
// not processed (the task's offset names the last batch it did). Pending
// alone left out the batches the source held — here over a tenth of the
// stream — and read 0 while they waited.
func TestJetStreamUnread(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	const total = 300
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, total)
	const batch = 20
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: batch, PullMaxMessages: 50})
	must(t, err)
	defer src.Close()
	if _, ok := src.Unread(nil); ok {
		t.Fatal("unread known before the first delivery")
	}
	b1, o1, err := src.Poll(ctx) // the task processed it: its offset is o1
	must(t, err)
	b2, o2, err := src.Poll(ctx) // the task holds it
	must(t, err)
	n1, n2 := recordsIn(t, b1), recordsIn(t, b2)
	// The source goes on fetching until its next batch is full and the
	// message after it waits for room: that one is counted by neither.
	held := n1 + n2 + batch + 1
	for {
		if p, ok := src.Pending(); ok && p == uint64(total-held) {
			break
		}
		select {
		case <-ctx.Done():
			p, ok := src.Pending()
			t.Fatalf("pending %d, %v: the source did not fetch up to a full batch", p, ok)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, c := range []struct {
		name   string
		offset []byte
		want   int
	}{
		{"nothing processed", nil, total - 1},
		{"first batch processed", o1, total - n1 - 1},
		{"both batches processed", o2, total - n1 - n2 - 1},
	} {
		if n, ok := src.Unread(c.offset); !ok || n != uint64(c.want) {
			t.Errorf("%s: unread %d, %v; want %d (pending alone: %d)", c.name, n, ok, c.want, total-held)
		}
	}
	_, off := pollRecords(t, ctx, src, total-n1-n2)
	if n, ok := src.Unread(off); !ok || n != 0 {
		t.Errorf("unread %d, %v once the task processed everything", n, ok)
	}
}

// recordsIn counts the records of batch b.
func recordsIn(t *testing.T, b []byte) int {
	t.Helper()
	recs, err := abi.DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// A bounded source whose filtered lane ends past its last record (the
// stream's other subjects take it to the stop) has nothing unread once
// the task processed up to its final offset, which no batch carried:
// the batches it remembers were all processed before it.
func TestJetStreamUnreadEnded(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 30)  // seqs 1..30
	publishN(t, ctx, js, func(int) string { return "in.b" }, 30, 40) // seqs 31..40
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.a"}, StopSeq: 40,
		MaxBatchRecords: 10, IdleCheck: time.Hour})
	must(t, err)
	defer src.Close()
	got, off := pollToEnd(t, ctx, src)
	if len(got) != 30 {
		t.Fatalf("read %d records, want 30", len(got))
	}
	if seq, _ := DecodeOffset(off); seq != 40 {
		t.Fatalf("final offset %d, want 40", seq)
	}
	if n, ok := src.Unread(off); !ok || n != 0 {
		t.Errorf("unread %d, %v once the task processed up to the final offset; want 0", n, ok)
	}
}
