package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A source configured to start at a sequence reads from there, also after
// a Seek to an offset that covers nothing (a checkpoint taken before the
// first batch); an offset that covers more wins.
func TestJetStreamStartSeq(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 100)
	open := func(offset []byte, seek bool) *JetStream {
		t.Helper()
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StartSeq: 61, MaxBatchRecords: 16})
		must(t, err)
		t.Cleanup(func() { src.Close() })
		if seek {
			must(t, src.Seek(ctx, offset))
		}
		return src
	}
	for _, c := range []struct {
		name   string
		offset []byte
		seek   bool
		first  int
	}{
		{"no seek", nil, false, 60},
		{"seek nil", nil, true, 60},
		{"seek 0", EncodeOffset(0), true, 60},
		{"seek past the start", EncodeOffset(80), true, 80},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs, off := pollRecords(t, ctx, open(c.offset, c.seek), 100-c.first)
			for i, v := range values(recs) {
				if v != c.first+i {
					t.Fatalf("record %d = %d, want %d", i, v, c.first+i)
				}
			}
			if seq, _ := DecodeOffset(off); seq != 100 {
				t.Fatalf("offset %d after the last record, want 100", seq)
			}
		})
	}

}

// Server-partitioned subtasks start at the sequence too, every partition.
func TestJetStreamPartitionedStartSeq(t *testing.T) {
	ctx, js := partitionedStream(t)
	// Where the server put each key, for each subtask's share of the 100
	// messages from 501 on: a subtask is polled until it read its share,
	// not until a poll comes back empty (on a loaded machine one did
	// within its second, and the test counted 93).
	partOf := partitions(t, ctx, js)
	seen := 0
	for idx := 0; idx < 2; idx++ {
		share := 0
		for v := 500; v < 600; v++ {
			if partOf[key(v)]%2 == idx {
				share++
			}
		}
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, Partitions: 6,
			PartitionFilter: "in.{p}.*", StartSeq: 501})
		must(t, err)
		must(t, src.Seek(ctx, nil))
		recs, _ := pollRecords(t, ctx, src, share)
		for _, v := range values(recs) {
			if v < 500 {
				t.Fatalf("subtask %d read message %d, before the start", idx, v)
			}
			if partOf[key(v)]%2 != idx {
				t.Fatalf("subtask %d read message %d, of another subtask's partition", idx, v)
			}
			seen++
		}
		src.Close()
	}
	if seen != 100 {
		t.Fatalf("subtasks read %d messages from the start on, want 100", seen)
	}
}
