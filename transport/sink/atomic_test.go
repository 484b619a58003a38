package sink

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// streamIDs reads every message of stream in order and returns its
// Nats-Msg-Id ("" for none) and value.
func streamIDs(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) (ids, values []string) {
	t.Helper()
	for _, m := range readStream(t, ctx, js, stream) {
		ids = append(ids, m.id)
		values = append(values, m.value)
	}
	return ids, values
}

// withIDs lists the messages that carry an id as "index=id".
func withIDs(ids []string) string {
	var out []string
	for i, id := range ids {
		if id != "" {
			out = append(out, strconv.Itoa(i)+"="+id)
		}
	}
	return strings.Join(out, " ")
}

// autoSink starts a server with a stream OUT that allows both batched and
// atomic publish, and returns the config of a sink in mode auto with
// atomic batches of batchSize.
func autoSink(t *testing.T, batchSize int) (context.Context, *nats.Conn, jetstream.JetStream, ExactlyOnceConfig) {
	t.Helper()
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 10 * time.Minute,
		AllowAtomicPublish: true, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	return ctx, nc, js, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", BatchSize: batchSize}
}

// recoverNew recovers a new sink of cfg from checkpoint id's state, as the
// next attempt of a crashed task does.
func recoverNew(t *testing.T, ctx context.Context, nc *nats.Conn, cfg ExactlyOnceConfig, id int64, state []byte) {
	t.Helper()
	s, err := NewExactlyOnce(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	must(t, s.Recover(ctx, id, state))
}

// PlanPublish: auto switches to atomic batches for large checkpoints only
// when the stream allows atomic publish and the batch size reaches
// LargeCheckpoint.
func TestPlanPublish(t *testing.T) {
	both := jetstream.StreamConfig{Name: "OUT", AllowAtomicPublish: true, AllowBatchPublish: true}
	for _, c := range []struct {
		mode   PublishMode
		stream jetstream.StreamConfig
		batch  int
		want   PublishPlan
		detail string
	}{
		{PublishAuto, both, 0, PublishPlan{Mode: PublishFast, AtomicMax: MaxAtomicBatch}, ""},
		{PublishAuto, both, 100_000, PublishPlan{Mode: PublishFast, AtomicMax: 100_000, Large: true}, ", checkpoints of 10000+ records in atomic batches of up to 100000"},
		{PublishAuto, both, 5_000_000, PublishPlan{Mode: PublishFast, AtomicMax: MaxAtomicChunk, Large: true}, ", checkpoints of 10000+ records in atomic batches of up to 100000"},
		{PublishFast, both, 100_000, PublishPlan{Mode: PublishFast, AtomicMax: 100_000}, ""},
		{PublishAuto, jetstream.StreamConfig{Name: "OUT", AllowBatchPublish: true}, 100_000, PublishPlan{Mode: PublishFast}, ""},
		{PublishAuto, jetstream.StreamConfig{Name: "OUT", AllowAtomicPublish: true}, 0, PublishPlan{Mode: PublishAtomic, AtomicMax: MaxAtomicBatch}, ", batches of up to 1000"},
		{PublishAsync, both, 100_000, PublishPlan{Mode: PublishAsync, AtomicMax: 100_000}, ""},
		{PublishAsync, jetstream.StreamConfig{Name: "OUT", AllowBatchPublish: true}, 0, PublishPlan{Mode: PublishAsync}, ""},
	} {
		got, err := PlanPublish(c.mode, c.stream, c.batch)
		if err != nil || got != c.want || got.Detail() != c.detail {
			t.Errorf("PlanPublish(%s, atomic=%v batched=%v, %d) = %+v %q, %v; want %+v %q", c.mode, c.stream.AllowAtomicPublish, c.stream.AllowBatchPublish, c.batch, got, got.Detail(), err, c.want, c.detail)
		}
	}
}

// A batch size above the server's max_batch_size fails the commit with a
// reason that names both.
func TestAtomicBatchAboveTheServerLimit(t *testing.T) {
	ctx, _, s := sinkOn(t, embedded.Config{MaxAtomicBatch: -1}, PublishAtomic, ExactlyOnceConfig{BatchSize: 1500}) // nats-server's 1000
	must(t, s.Write(ctx, batchOf(0, 1200)))
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	must(t, s.Commit(ctx, 1))
	err := s.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "atomic publish batch is too large: 1000") || !strings.Contains(err.Error(), "max_batch_size is below this batch of 1200 messages") {
		t.Fatalf("Wait: %v", err)
	}
}

// Under PublishAuto a checkpoint of LargeCheckpoint records or more goes
// out in atomic batches with one message id each, a smaller one as a fast
// batch with an id per message, in order; a re-commit of both after a
// crash stores nothing twice.
func TestAutoCommitsLargeCheckpointsAtomically(t *testing.T) {
	ctx, nc, js, cfg := autoSink(t, embedded.DefaultMaxAtomicBatch)
	s, err := NewExactlyOnce(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Plan(); !p.Large || p.AtomicMax != embedded.DefaultMaxAtomicBatch {
		t.Fatalf("plan %+v, want large atomic batches of %d", p, embedded.DefaultMaxAtomicBatch)
	}
	large := LargeCheckpoint + 5
	must(t, s.Write(ctx, batchOf(0, large)))
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	must(t, s.Write(ctx, batchOf(large, large+10)))
	state, err := s.PreCommit(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Commit(ctx, 2))
	must(t, s.Wait(ctx))
	s.Close()

	// A crash after the commit, before the task learned of it: the next
	// attempt re-commits both checkpoints from the snapshot.
	recoverNew(t, ctx, nc, cfg, 2, state)

	ids, values := streamIDs(t, ctx, js, "OUT")
	if want := wantValues(0, large+10); strings.Join(values, ",") != strings.Join(want, ",") {
		t.Fatalf("stream holds %d values, want %d in order", len(values), len(want))
	}
	for i, id := range ids {
		want := ""
		switch {
		case i == 0 || i == large-1:
			want = "j/sink0/1/" + strconv.Itoa(i) // the atomic batch's first and last
		case i >= large:
			want = "j/sink0/2/" + strconv.Itoa(i-large)
		}
		if id != want {
			t.Fatalf("message %d has id %q, want %q", i, id, want)
		}
	}
	// What the job status says of the sink is what it stored: not an id
	// on every message (a trial found 11 998 of 12 000 without one).
	if g := s.Guarantee(); !strings.Contains(g, "a re-commit is deduplicated by message id (each message's, or in atomic batches the first and last message's of each batch)") {
		t.Errorf("guarantee %q does not say which messages carry an id", g)
	}
}

// sinkOn starts a server configured as srv with a stream OUT that allows
// mode, and opens a sink on it configured as cfg (stream, subject, job "j"
// and task "sink0" filled in); the sink closes with the test.
func sinkOn(t *testing.T, srv embedded.Config, mode PublishMode, cfg ExactlyOnceConfig) (context.Context, jetstream.JetStream, *ExactlyOnce) {
	t.Helper()
	nc, js := connect(t, embeddedtest.Server(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, outStream(mode)); err != nil {
		t.Fatal(err)
	}
	cfg.Stream, cfg.Subject, cfg.Job, cfg.Task = "OUT", "out", "j", "sink0"
	s, err := NewExactlyOnce(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, js, s
}

// stateV2 encodes one staged entry the way PreCommit does, with the given
// atomic batch cut.
func stateV2(id int64, batch []byte, chunk, chunkBytes uint32) []byte {
	return encodeState([]staged{{id: id, batch: batch, chunk: chunk, chunkBytes: chunkBytes}})
}

// A re-commit cuts the atomic batches the state recorded — by count and by
// bytes — whatever the sink would choose now.
func TestRecoverCutsTheRecordedBatches(t *testing.T) {
	ctx, js, s := sinkOn(t, embedded.Config{}, PublishAtomic, ExactlyOnceConfig{})
	// Records "k0"+"v0" ... are 4 bytes up to v9, 5 from v10, so 13 bytes
	// cut [0-2] [3-5] [6-8] [9-10] [11]; the next entry is cut by count,
	// [12-15] [16-19].
	must(t, s.Recover(ctx, 3, stateV2(3, batchOf(0, 12), 1000, 13)))
	must(t, s.Recover(ctx, 4, encodeState([]staged{{id: 4, batch: batchOf(12, 20), chunk: 4}})))
	ids, values := streamIDs(t, ctx, js, "OUT")
	if strings.Join(values, ",") != strings.Join(wantValues(0, 20), ",") {
		t.Fatalf("values %v", values)
	}
	// Each batch's first and last message carry an id.
	want := "0=j/sink0/3/0 2=j/sink0/3/2 3=j/sink0/3/3 5=j/sink0/3/5 6=j/sink0/3/6 8=j/sink0/3/8 9=j/sink0/3/9 10=j/sink0/3/10 11=j/sink0/3/11 " +
		"12=j/sink0/4/0 15=j/sink0/4/3 16=j/sink0/4/4 19=j/sink0/4/7"
	if got := withIDs(ids); got != want {
		t.Fatalf("batch ids %s, want %s", got, want)
	}
}

// A checkpoint staged for larger atomic batches than the sink now
// publishes cannot be re-committed exactly once in other batches: the
// recovery fails with a reason instead of guessing.
func TestRecoverRefusesLargerBatchesThanConfigured(t *testing.T) {
	ctx, _, s := sinkOn(t, embedded.Config{MaxAtomicBatch: -1}, PublishAtomic, ExactlyOnceConfig{}) // nats-server's 1000
	err := s.Recover(ctx, 5, stateV2(5, batchOf(0, 3), 50_000, MaxAtomicChunkBytes))
	if err == nil || !strings.Contains(err.Error(), "checkpoint 5 was staged for atomic batches of up to 50000 messages, but the sink's batch size is 1000") {
		t.Fatalf("Recover: %v", err)
	}
}

// A checkpoint staged for atomic batches is re-committed in them by a sink
// restored with publish mode async, when its stream allows atomic publish:
// the mode applies to new output, the staged cut to what was staged.
func TestRecoverAtomicCheckpointUnderAsync(t *testing.T) {
	nc, js := connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := outStream(PublishAtomic) // the stream allows atomic publish
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: PublishAsync})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	must(t, s.Recover(ctx, 3, stateV2(3, batchOf(0, 12), 5, MaxAtomicChunkBytes)))
	ids, values := streamIDs(t, ctx, js, "OUT")
	if strings.Join(values, ",") != strings.Join(wantValues(0, 12), ",") {
		t.Fatalf("values %v", values)
	}
	// Each batch's first and last message carry an id.
	want := "0=j/sink0/3/0 4=j/sink0/3/4 5=j/sink0/3/5 9=j/sink0/3/9 10=j/sink0/3/10 11=j/sink0/3/11"
	if got := withIDs(ids); got != want {
		t.Fatalf("batch ids %s, want %s", got, want)
	}
}

// State written by version 1 (no batch cut recorded) is re-committed the
// way version 1 published: atomic batches of MaxAtomicBatch under
// PublishAtomic, an id per message otherwise.
func TestRecoverVersion1State(t *testing.T) {
	v1 := func(id int64, batch []byte) []byte {
		out := append([]byte("WEOS\x01"), 1, 0, 0, 0)
		out = binary.LittleEndian.AppendUint64(out, uint64(id))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(batch)))
		return append(out, batch...)
	}
	for _, mode := range []PublishMode{PublishAtomic, PublishFast} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, js, s := sinkOn(t, embedded.Config{}, mode, ExactlyOnceConfig{Publish: mode})
			n := MaxAtomicBatch + 2
			must(t, s.Recover(ctx, 1, v1(1, batchOf(0, n))))
			ids, values := streamIDs(t, ctx, js, "OUT")
			if len(values) != n {
				t.Fatalf("%d messages, want %d", len(values), n)
			}
			withID := 0
			for _, id := range ids {
				if id != "" {
					withID++
				}
			}
			want := n // an id per message
			if mode == PublishAtomic {
				want = 4 // the first and last of batches 0..999 and 1000..1001
			}
			if withID != want || ids[0] != "j/sink0/1/0" {
				t.Fatalf("%d messages with an id (first %q), want %d", withID, ids[0], want)
			}
		})
	}
}

// A crash in the middle of committing a large checkpoint under auto (the
// first of its atomic batches stored): the recovery re-commits the
// checkpoint in the same batches, the stored one is refused as a duplicate
// as a whole, and the stream holds every record once, in order.
func TestAutoLargeCheckpointCrashMidCommit(t *testing.T) {
	ctx, nc, js, cfg := autoSink(t, LargeCheckpoint)
	s, err := NewExactlyOnce(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 2*LargeCheckpoint + LargeCheckpoint/2 // batches of 10000, 10000, 5000
	must(t, s.Write(ctx, batchOf(0, n)))
	state, err := s.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.commitChunk(ctx, s.prefix, firstChunk(t, s, 1), nil, nil)
	must(t, err) // then the crash
	s.Close()

	recoverNew(t, ctx, nc, cfg, 1, state)
	ids, values := streamIDs(t, ctx, js, "OUT")
	if strings.Join(values, ",") != strings.Join(wantValues(0, n), ",") {
		t.Fatalf("stream holds %d values, want %d once each in order", len(values), n)
	}
	if got, want := withIDs(ids), "0=j/sink0/1/0 9999=j/sink0/1/9999 10000=j/sink0/1/10000 19999=j/sink0/1/19999 20000=j/sink0/1/20000 24999=j/sink0/1/24999"; got != want {
		t.Fatalf("batch ids %s, want %s", got, want)
	}
}

// TestStagedCuts checks where a staged entry's atomic batches are cut —
// by count, by bytes, a record larger than the byte bound alone — against
// the rule written out record by record, and that each cut's bytes hold
// exactly its records.
func TestStagedCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var b abi.Builder
		var recs []abi.Record
		for range rng.IntN(60) {
			r := abi.Record{Key: make([]byte, rng.IntN(4)), Value: make([]byte, rng.IntN(40)), Timestamp: int64(trial)}
			if rng.IntN(10) == 0 {
				r.Value = make([]byte, 100) // larger than any byte bound below
			}
			recs = append(recs, r)
			b.AddRecord(r)
		}
		e := staged{batch: b.Bytes(), chunk: uint32(1 + rng.IntN(8)), chunkBytes: uint32(rng.IntN(3) * 50)}
		// The rule: a batch takes records while it has fewer than
		// e.chunk and, where e.chunkBytes is set, while the next one fits
		// — but never none.
		var want [][2]int
		for first := 0; first < len(recs); {
			end, size := first, 0
			for end < len(recs) && end-first < int(e.chunk) {
				n := len(recs[end].Key) + len(recs[end].Value)
				if e.chunkBytes > 0 && end > first && size+n > int(e.chunkBytes) {
					break
				}
				size += n
				end++
			}
			want = append(want, [2]int{first, end})
			first = end
		}
		cuts, err := e.cuts()
		if err != nil {
			t.Fatal(err)
		}
		var got [][2]int
		for _, c := range cuts {
			got = append(got, [2]int{c.first, c.end})
			it, err := atomicChunk{batch: e.batch, chunkCut: c}.records()
			must(t, err)
			for i := c.first; it.Next(); i++ {
				if r := it.Record(); len(r.Key) != len(recs[i].Key) || len(r.Value) != len(recs[i].Value) {
					t.Fatalf("trial %d: cut %v reads record %d as %d+%d bytes, want %d+%d", trial, c, i, len(r.Key), len(r.Value), len(recs[i].Key), len(recs[i].Value))
				}
			}
			if it.Err() != nil || it.Index() != c.end-c.first-1 {
				t.Fatalf("trial %d: cut %v: read up to %d: %v", trial, c, it.Index(), it.Err())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("trial %d (chunk %d, %d bytes): cuts %v, want %v", trial, e.chunk, e.chunkBytes, got, want)
		}
	}
}

// An atomic batch's id keeps its messages' headers — "NATS/1.0", the id,
// the sequence up to 99 999 — within the 64 bytes the server's header
// searches read fastest, without a capital N, and does not repeat.
func TestBatchID(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := newBatchID()
		hdr := "NATS/1.0\r\nNats-Batch-Id: " + id + "\r\nNats-Batch-Sequence: 99999\r\n\r\n"
		if len(hdr) > 64 || strings.Contains(id, "N") || seen[id] {
			t.Fatalf("batch id %q: headers of %d bytes, or a capital N, or a repeat", id, len(hdr))
		}
		seen[id] = true
	}
}

// A batch whose id another batch open on the stream drew too is dropped
// by the server with that one, nothing of either stored: the sink streams
// it again under a new id, and the checkpoint's output is stored once, in
// order; the other batch stays dropped.
func TestRepeatedBatchID(t *testing.T) {
	ctx, js, s := sinkOn(t, embedded.Config{}, PublishAtomic, ExactlyOnceConfig{BatchSize: 10})
	const repeated = "rEpEat1"
	var drawn atomic.Int32
	s.batchID = func() string {
		if drawn.Add(1) == 1 {
			return repeated
		}
		return newBatchID()
	}
	// The other batch's first message, on the sink's connection so that
	// the server takes it in before the sink's.
	nc := s.js.Conn()
	other := func(seq string, commit bool) *nats.Msg {
		m := &nats.Msg{Subject: "out", Data: []byte("other"),
			Header: nats.Header{jetstreamext.BatchIDHeader: {repeated}, jetstreamext.BatchSeqHeader: {seq}}}
		if commit {
			m.Header.Set(jetstreamext.BatchCommitHeader, "1")
		}
		return m
	}
	must(t, nc.PublishMsg(other("1", false)))

	must(t, s.Write(ctx, batchOf(0, 25)))
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	must(t, s.Commit(ctx, 1))
	must(t, s.Wait(ctx))
	if got, want := streamValues(t, ctx, js, "OUT"), wantValues(0, 25); !slices.Equal(got, want) {
		t.Fatalf("stream holds %q, want %q", got, want)
	}
	if n := drawn.Load(); n != 5 {
		t.Errorf("%d batch ids drawn, want 5: three batches, the first once more, and the second, streamed ahead as the first was committed, streamed ahead again", n)
	}
	resp, err := nc.RequestMsg(other("2", true), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil || ack.Error == nil || ack.Error.ErrorCode != errCodeAtomicIncomplete {
		t.Errorf("the other batch's commit: %s, want it refused as incomplete", resp.Data)
	}
}
