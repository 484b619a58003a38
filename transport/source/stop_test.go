package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// In these tests stream IN is fresh, so message value v (publishN) has
// stream sequence v+1.

// pollToEnd polls s until ErrEnded, within ctx (a hang guard: the test's
// own, generous), and returns the values of every record read and the
// final offset. It checks that the end repeats: later polls return
// ErrEnded, no batch and the same offset.
func pollToEnd(t *testing.T, ctx context.Context, s *JetStream) ([]int, []byte) {
	t.Helper()
	var got []int
	for {
		b, off, err := s.Poll(ctx)
		if errors.Is(err, ErrEnded) {
			if b != nil {
				t.Fatalf("ErrEnded with a batch of %d bytes", len(b))
			}
			for range 3 {
				b2, off2, err2 := s.Poll(ctx)
				if !errors.Is(err2, ErrEnded) || b2 != nil || !bytes.Equal(off2, off) {
					t.Fatalf("poll after the end: %d bytes, offset %x, %v; want none, %x, ErrEnded", len(b2), off2, err2, off)
				}
			}
			return got, off
		}
		if err != nil {
			t.Fatalf("poll after %d records: %v", len(got), err)
		}
		recs, err := abi.DecodeBatch(b)
		must(t, err)
		got = append(got, values(recs)...)
	}
}

// seqRange is [from, to).
func seqRange(from, to int) []int {
	out := []int{}
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// consumers is how many consumers stream IN has.
func consumers(t *testing.T, ctx context.Context, js jetstream.JetStream) int {
	t.Helper()
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	info, err := st.Info(ctx)
	must(t, err)
	return info.State.Consumers
}

// A source stopped in the middle of a stream reads exactly the messages up
// to the stop, in every batch, then ends for good: more messages published
// after it change nothing, its consumers are gone, Pending is 0, and Close
// still works.
func TestJetStreamStopMidStream(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 100)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StopSeq: 40, MaxBatchRecords: 10, PullMaxMessages: 20})
	must(t, err)
	defer src.Close()
	recs, _ := pollRecords(t, ctx, src, 10)
	// Still reading: at most what is left up to the stop is pending, not
	// the 60 messages past it.
	if n, ok := src.Pending(); !ok || n > 30 {
		t.Fatalf("pending after %d records: %d, %v; want at most 30", len(recs), n, ok)
	}
	rest, off := pollToEnd(t, ctx, src)
	got := append(values(recs), rest...)
	if !slices.Equal(got, seqRange(0, 40)) {
		t.Fatalf("read %v, want the values 0..39 (sequences 1..40)", got)
	}
	if seq, _ := DecodeOffset(off); seq != 40 {
		t.Fatalf("final offset %d, want 40", seq)
	}
	_, _, err = src.Poll(ctx)
	var ended interface{ InputEnded() bool }
	if !errors.As(err, &ended) || !ended.InputEnded() {
		t.Fatalf("%v does not say the input ended", err)
	}
	if n, ok := src.Pending(); n != 0 || !ok {
		t.Fatalf("pending after the end: %d, %v", n, ok)
	}
	if n := consumers(t, ctx, js); n != 0 {
		t.Fatalf("%d consumers left after the end", n)
	}
	publishN(t, ctx, js, func(int) string { return "in.a" }, 100, 150)
	if b, off2, err := src.Poll(ctx); !errors.Is(err, ErrEnded) || b != nil || !bytes.Equal(off2, off) {
		t.Fatalf("poll after more messages: %d bytes, %x, %v", len(b), off2, err)
	}
	must(t, src.Close())
	if _, _, err := src.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("poll after close: %v", err)
	}
}

// A filtered lane whose last message lies before the stop, in a stream
// that holds nothing past the stop and gets nothing more, ends at once
// (not after IdleCheck, 5 s by default, here an hour): its last delivery said nothing
// follows, and the server confirms it.
func TestJetStreamStopFilteredQuiet(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 10)  // seqs 1..10
	publishN(t, ctx, js, func(int) string { return "in.b" }, 10, 15) // seqs 11..15
	// With one filter, and with several (asked about one by one).
	for _, filters := range [][]string{{"in.a"}, {"in.a", "in.c"}} {
		// IdleCheck an hour: ending at all shows it did not wait for one.
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: filters, StopSeq: 15, IdleCheck: time.Hour})
		must(t, err)
		defer src.Close()
		got, off := pollToEnd(t, ctx, src)
		if !slices.Equal(got, seqRange(0, 10)) {
			t.Fatalf("%v: read %v", filters, got)
		}
		if seq, _ := DecodeOffset(off); seq != 15 {
			t.Fatalf("%v: final offset %d, want 15", filters, seq)
		}
	}
}

// A filter that matches nothing ends once the stream reached the stop:
// at once if it had, and soon after (without waiting for IdleCheck) if other
// subjects bring it there later.
func TestJetStreamStopFilterMatchesNothing(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 20)
	// IdleCheck an hour: ending at all shows it did not wait for one.
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.none"}, StopSeq: 10, IdleCheck: time.Hour})
	must(t, err)
	defer src.Close()
	got, off := pollToEnd(t, ctx, src)
	if seq, _ := DecodeOffset(off); len(got) != 0 || seq != 10 {
		t.Fatalf("read %v, final offset %d; want nothing, 10", got, seq)
	}

	// The stop is ahead of the stream: the source waits, and ends once
	// other subjects' messages reach it.
	src, err = NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.none"}, StopSeq: 30, IdleCheck: time.Hour})
	must(t, err)
	defer src.Close()
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
		b, _, err := pollWithin(src, time.Until(deadline))
		if errors.Is(err, ErrEnded) {
			t.Fatal("ended before the stream reached the stop")
		}
		if n, _ := abi.BatchCount(b); err == nil && n != 0 {
			t.Fatalf("%d records", n)
		}
	}
	publishN(t, ctx, js, func(int) string { return "in.a" }, 20, 30) // seqs 21..30
	got, off = pollToEnd(t, ctx, src)
	if seq, _ := DecodeOffset(off); len(got) != 0 || seq != 30 {
		t.Fatalf("read %v, final offset %d; want nothing, 30", got, seq)
	}
}

// A stop beyond the stream's last sequence: the source reads what there
// is and waits; more messages take it to the stop, and it ends there. A
// filtered lane that is quiet meanwhile ends too, once other subjects
// take the stream past the stop.
func TestJetStreamStopAhead(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 10)
	whole, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StopSeq: 25})
	must(t, err)
	defer whole.Close()
	// IdleCheck an hour: the filtered lane's end does not wait for one.
	filtered, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.a"}, StopSeq: 25, IdleCheck: time.Hour})
	must(t, err)
	defer filtered.Close()
	for _, src := range []*JetStream{whole, filtered} {
		recs, _ := pollRecords(t, ctx, src, 10)
		if !slices.Equal(values(recs), seqRange(0, 10)) {
			t.Fatalf("read %v", values(recs))
		}
		if _, _, err := pollWithin(src, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll with the stream short of the stop: %v, want it to wait", err)
		}
		if stop, last, ok := src.AwaitsStop(); !ok || stop != 25 || last != 10 {
			t.Fatalf("AwaitsStop() = %d, %d, %v while the stream is short of the stop; want 25, 10, true", stop, last, ok)
		}
	}
	publishN(t, ctx, js, func(int) string { return "in.b" }, 10, 30) // seqs 11..30
	got, off := pollToEnd(t, ctx, whole)
	if !slices.Equal(got, seqRange(10, 25)) {
		t.Fatalf("read %v after the wait", got)
	}
	if seq, _ := DecodeOffset(off); seq != 25 {
		t.Fatalf("final offset %d, want 25", seq)
	}
	if !whole.EndsAt(off) {
		t.Fatal("EndsAt(the final offset) = false")
	}
	got, off = pollToEnd(t, ctx, filtered)
	if seq, _ := DecodeOffset(off); len(got) != 0 || seq != 25 {
		t.Fatalf("filtered: read %v, final offset %d; want nothing, 25", got, seq)
	}
	for _, src := range []*JetStream{whole, filtered} {
		if stop, last, ok := src.AwaitsStop(); ok {
			t.Fatalf("AwaitsStop() = %d, %d, true after the source ended", stop, last)
		}
	}
	unbounded, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer unbounded.Close()
	pollRecords(t, ctx, unbounded, 30)
	if _, _, ok := unbounded.AwaitsStop(); ok {
		t.Fatal("an unbounded source awaits a stop")
	}
}

// A restored source whose offset covers the stop ends on its first Poll
// without starting a consumer, its offset as it was; so does one whose
// StartSeq lies past the stop (an empty range). A partitioned source with
// one partition past the stop reads the others up to it.
func TestJetStreamStopSeekPast(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}})
	publishN(t, ctx, js, func(i int) string { return fmt.Sprintf("in.%d.x", i%2) }, 0, 50)
	for _, c := range []struct {
		name   string
		cfg    JetStreamConfig
		offset []byte
		want   []byte
	}{
		{"at the stop", JetStreamConfig{StopSeq: 20}, EncodeOffset(20), EncodeOffset(20)},
		{"past the stop", JetStreamConfig{StopSeq: 20}, EncodeOffset(30), EncodeOffset(30)},
		{"start past the stop", JetStreamConfig{StopSeq: 20, StartSeq: 31}, nil, EncodeOffset(30)},
		{"start after the stop", JetStreamConfig{StopSeq: 20, StartSeq: 21}, nil, EncodeOffset(20)},
		{"partitions past the stop", JetStreamConfig{StopSeq: 20, Partitions: 2, PartitionFilter: "in.{p}.*"},
			EncodePartitionOffsets(PartitionOffsets{Partitions: 2, Filter: "in.{p}.*", Seqs: map[int]uint64{0: 20, 1: 25}}),
			EncodePartitionOffsets(PartitionOffsets{Partitions: 2, Filter: "in.{p}.*", Seqs: map[int]uint64{0: 20, 1: 25}})},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Stream = "IN"
			src, err := NewJetStream(js, c.cfg)
			must(t, err)
			defer src.Close()
			must(t, src.Seek(ctx, c.offset))
			b, off, err := src.Poll(ctx)
			if !errors.Is(err, ErrEnded) || b != nil || !bytes.Equal(off, c.want) {
				t.Fatalf("first poll: %d bytes, offset %x, %v; want none, %x, ErrEnded", len(b), off, err, c.want)
			}
			for _, l := range src.lanes {
				if l.rd != nil {
					t.Fatal("a consumer was started")
				}
			}
			if n, ok := src.Pending(); n != 0 || !ok {
				t.Fatalf("pending %d, %v", n, ok)
			}
		})
	}
	// Partition 1 is past the stop, partition 0 at 10: it reads the
	// even values 10..18 (sequences 11..19) of partition 0. (IdleCheck an
	// hour: ending at all shows it did not wait for one.)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StopSeq: 20, Partitions: 2, PartitionFilter: "in.{p}.*", IdleCheck: time.Hour})
	must(t, err)
	defer src.Close()
	must(t, src.Seek(ctx, EncodePartitionOffsets(PartitionOffsets{Partitions: 2, Filter: "in.{p}.*", Seqs: map[int]uint64{0: 10, 1: 25}})))
	got, off := pollToEnd(t, ctx, src)
	if !slices.Equal(got, []int{10, 12, 14, 16, 18}) {
		t.Fatalf("read %v", got)
	}
	po, err := DecodePartitionOffsets(off)
	must(t, err)
	if po.Seqs[0] != 20 || po.Seqs[1] != 25 {
		t.Fatalf("final offsets %v, want 0:20 1:25", po.Seqs)
	}
	if src.lanes[1].rd != nil {
		t.Fatal("a consumer was started for the partition past the stop")
	}
}

// Server-partitioned subtasks each end with every partition at the stop;
// together they read every message up to it, once.
func TestJetStreamStopPartitioned(t *testing.T) {
	ctx, js := partitionedStream(t) // 600 messages
	const stop = 300
	read := map[int]bool{}
	for idx := 0; idx < 2; idx++ {
		// IdleCheck an hour: ending at all shows it did not wait for one.
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, Partitions: 6,
			PartitionFilter: "in.{p}.*", StopSeq: stop, MaxBatchRecords: 32, IdleCheck: time.Hour})
		must(t, err)
		defer src.Close()
		got, off := pollToEnd(t, ctx, src)
		for _, v := range got {
			if v >= stop || read[v] {
				t.Fatalf("subtask %d read message %d (past the stop, or twice)", idx, v)
			}
			read[v] = true
		}
		po, err := DecodePartitionOffsets(off)
		must(t, err)
		if len(po.Seqs) != 3 {
			t.Fatalf("subtask %d's final offset names %v", idx, po.Seqs)
		}
		for p, seq := range po.Seqs {
			if p%2 != idx || seq != stop {
				t.Fatalf("subtask %d's final offset %v, want its partitions at %d", idx, po.Seqs, stop)
			}
		}
	}
	if len(read) != stop {
		t.Fatalf("%d messages read, want %d", len(read), stop)
	}
}

// Whole-stream subtasks (split by subject hash, each skipping the others'
// messages) each end at the stop; together they read every message up to
// it, once, each only its own.
func TestJetStreamStopWholeStreamSplit(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	subj := func(i int) string { return "in." + key(i) }
	publishN(t, ctx, js, subj, 0, 300)
	const stop = 200
	read := map[int]bool{}
	for idx := 0; idx < 2; idx++ {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, StopSeq: stop, MaxBatchRecords: 16})
		must(t, err)
		defer src.Close()
		got, off := pollToEnd(t, ctx, src)
		for _, v := range got {
			if v >= stop || read[v] || PartitionOf(subj(v), 2) != idx {
				t.Fatalf("subtask %d read message %d (past the stop, twice, or another's)", idx, v)
			}
			read[v] = true
		}
		if seq, _ := DecodeOffset(off); seq != stop {
			t.Fatalf("subtask %d's final offset %d, want %d", idx, seq, stop)
		}
	}
	if len(read) != stop {
		t.Fatalf("%d messages read, want %d", len(read), stop)
	}
}

// The message at the stop was deleted: a lane ends on the first message
// past it, without it; or, with nothing past it, once the server confirms
// nothing is left up to the stop.
func TestJetStreamStopDeleted(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 30)
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	must(t, st.DeleteMsg(ctx, 20))
	must(t, st.DeleteMsg(ctx, 30)) // the last
	for _, stop := range []uint64{20, 30} {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", StopSeq: stop})
		must(t, err)
		defer src.Close()
		got, off := pollToEnd(t, ctx, src)
		want := slices.DeleteFunc(seqRange(0, int(stop)-1), func(v int) bool { return v == 19 })
		if !slices.Equal(got, want) {
			t.Fatalf("stop %d: read %v, want %v", stop, got, want)
		}
		if seq, _ := DecodeOffset(off); seq != stop {
			t.Fatalf("final offset %d, want %d", seq, stop)
		}
	}
}

// EndsAt tells from an offset alone whether the source would read nothing
// more: every lane at or past the stop. A source task's checkpoint acks
// carry it (host.BoundedSource), also for a task restored to its end that
// has not polled since.
func TestJetStreamEndsAt(t *testing.T) {
	_, js := connect(t, startServer(t))
	mk := func(cfg JetStreamConfig) *JetStream {
		cfg.Stream = "IN"
		s, err := NewJetStream(js, cfg)
		must(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	parts := func(seqs map[int]uint64) []byte {
		return EncodePartitionOffsets(PartitionOffsets{Partitions: 2, Filter: "in.{p}.*", Seqs: seqs})
	}
	whole := mk(JetStreamConfig{StopSeq: 20})
	partitioned := mk(JetStreamConfig{StopSeq: 20, Partitions: 2, PartitionFilter: "in.{p}.*"})
	for _, c := range []struct {
		name   string
		s      *JetStream
		offset []byte
		want   bool
	}{
		{"nothing read", whole, nil, false},
		{"one short of the stop", whole, EncodeOffset(19), false},
		{"at the stop", whole, EncodeOffset(20), true},
		{"past the stop", whole, EncodeOffset(30), true},
		{"a merged offset at the stop", whole, EncodeStreamOffset(StreamOffset{Seq: 20}), true},
		{"garbage", whole, []byte{1, 2, 3}, false},
		{"start past the stop, nothing read", mk(JetStreamConfig{StopSeq: 20, StartSeq: 21}), nil, true},
		{"unbounded", mk(JetStreamConfig{}), EncodeOffset(1 << 40), false},
		{"every partition at the stop", partitioned, parts(map[int]uint64{0: 20, 1: 20}), true},
		{"one partition short", partitioned, parts(map[int]uint64{0: 20, 1: 19}), false},
		{"a partition missing", partitioned, parts(map[int]uint64{0: 20}), false},
		{"another partitioning", partitioned, EncodePartitionOffsets(PartitionOffsets{Partitions: 4, Filter: "in.{p}.*", Seqs: map[int]uint64{0: 20, 1: 20, 2: 20, 3: 20}}), false},
	} {
		if got := c.s.EndsAt(c.offset); got != c.want {
			t.Errorf("%s: EndsAt = %v, want %v", c.name, got, c.want)
		}
	}
}
