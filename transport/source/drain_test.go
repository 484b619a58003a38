package source

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// A drain of two whole-stream subtasks at different places: held, each
// says how far it covered; given the higher of the two, both read on to
// it and end there, together reading every message up to it once — the
// messages published after the hold included, none past it.
func TestJetStreamDrainToCommonSequence(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	subj := func(i int) string { return "in." + key(i) }
	publishN(t, ctx, js, subj, 0, 300)
	var srcs []*JetStream
	read := map[int]bool{}
	take := func(idx int, b []byte) {
		recs, err := abi.DecodeBatch(b)
		must(t, err)
		for _, v := range values(recs) {
			if read[v] || PartitionOf(subj(v), 2) != idx {
				t.Fatalf("subtask %d read message %d (twice, or another's)", idx, v)
			}
			read[v] = true
		}
	}
	for idx := range 2 {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, MaxBatchRecords: 16})
		must(t, err)
		defer src.Close()
		srcs = append(srcs, src)
	}
	// Subtask 0 reads three batches, subtask 1 one: they are apart.
	for range 3 {
		b, _, err := srcs[0].Poll(ctx)
		must(t, err)
		take(0, b)
	}
	b, _, err := srcs[1].Poll(ctx)
	must(t, err)
	take(1, b)
	var top uint64
	for _, s := range srcs {
		top = max(top, s.DrainHold())
	}
	if top == 0 || top >= 300 {
		t.Fatalf("held at %d, want within the 300 messages", top)
	}
	publishN(t, ctx, js, subj, 300, 320) // after the hold: past the stop
	for idx, s := range srcs {
		must(t, s.DrainTo(top))
		got, off := pollToEnd(t, ctx, s)
		for _, v := range got {
			if uint64(v) >= top || read[v] || PartitionOf(subj(v), 2) != idx {
				t.Fatalf("subtask %d read message %d (past the stop %d, twice, or another's)", idx, v, top)
			}
			read[v] = true
		}
		if seq, _ := DecodeOffset(off); seq != top {
			t.Fatalf("subtask %d ended at %d, want %d", idx, seq, top)
		}
	}
	if uint64(len(read)) != top {
		t.Fatalf("%d messages read, want the %d up to sequence %d", len(read), top, top)
	}
}

// Server-partitioned subtasks drained to the highest sequence any of
// their partitions covered: every partition reads on to it, and they end
// with every partition there, having read each message up to it once.
func TestJetStreamDrainPartitioned(t *testing.T) {
	ctx, js := partitionedStream(t) // 600 messages
	var srcs []*JetStream
	read := map[int]bool{}
	take := func(idx int, got []int) {
		for _, v := range got {
			if read[v] {
				t.Fatalf("subtask %d read message %d twice", idx, v)
			}
			read[v] = true
		}
	}
	for idx := range 2 {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, Partitions: 6,
			PartitionFilter: "in.{p}.*", MaxBatchRecords: 32, IdleCheck: time.Hour})
		must(t, err)
		defer src.Close()
		srcs = append(srcs, src)
	}
	recs, _ := pollRecords(t, ctx, srcs[0], 100)
	take(0, values(recs))
	var top uint64
	for _, s := range srcs {
		top = max(top, s.DrainHold())
	}
	if top == 0 {
		t.Fatal("held at 0 after reading 100 messages")
	}
	for idx, s := range srcs {
		must(t, s.DrainTo(top))
		got, off := pollToEnd(t, ctx, s)
		for _, v := range got {
			if uint64(v) >= top {
				t.Fatalf("subtask %d read message %d, past the stop %d", idx, v, top)
			}
		}
		take(idx, got)
		po, err := DecodePartitionOffsets(off)
		must(t, err)
		for p, seq := range po.Seqs {
			if seq != top {
				t.Fatalf("subtask %d ended with partition %d at %d, want %d (%v)", idx, p, seq, top, po.Seqs)
			}
		}
		if rt, _ := s.ReadThrough(off); rt != top {
			t.Fatalf("subtask %d read through %d, want %d", idx, rt, top)
		}
	}
	if uint64(len(read)) != top {
		t.Fatalf("%d messages read, want the %d up to sequence %d", len(read), top, top)
	}
}
