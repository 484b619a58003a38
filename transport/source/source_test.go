package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// startServer and connect start a real embedded server for the test and
// connect to it (the server may restart; connections reconnect).
func startServer(t testing.TB) *embedded.Server { return embeddedtest.Server(t, embedded.Config{}) }

func connect(t testing.TB, srv *embedded.Server) (*nats.Conn, jetstream.JetStream) {
	return embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
}

// poller is what host.Source asks of a source (see host_test.go).
type poller interface {
	Poll(ctx context.Context) ([]byte, []byte, error)
}

// pollRecords polls until n records arrived and returns them with the
// offset after the last batch.
func pollRecords(t *testing.T, ctx context.Context, s poller, n int) ([]abi.Record, []byte) {
	t.Helper()
	var out []abi.Record
	var off []byte
	for len(out) < n {
		b, o, err := s.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d of %d records: %v", len(out), n, err)
		}
		recs, err := abi.DecodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
		off = o
	}
	return out, off
}

// pollWithin polls once, giving up after d.
func pollWithin(s poller, d time.Duration) ([]byte, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Poll(ctx)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCoreSource(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := NewCore(nc, CoreConfig{Subject: "in.>", MaxBatchRecords: 7})
	if err != nil {
		t.Fatal(err)
	}
	if src.Guarantee() != CoreGuarantee {
		t.Fatal("guarantee")
	}
	start := time.Now().UnixMilli()
	for i := 0; i < 20; i++ {
		m := nats.NewMsg("in.a")
		m.Data = []byte(strconv.Itoa(i))
		if i%2 == 0 {
			m.Header.Set(KeyHeader, "k"+strconv.Itoa(i))
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	recs, off := pollRecords(t, ctx, src, 20)
	if off != nil {
		t.Fatalf("core offset %v", off)
	}
	end := time.Now().UnixMilli()
	for i, r := range recs {
		// Stamped when polled: after the first publish, before the last poll.
		if string(r.Value) != strconv.Itoa(i) || r.Timestamp < start || r.Timestamp > end {
			t.Fatalf("record %d: %q ts %d, want %q in [%d, %d]", i, r.Value, r.Timestamp, strconv.Itoa(i), start, end)
		}
		wantKey := ""
		if i%2 == 0 {
			wantKey = "k" + strconv.Itoa(i)
		}
		if string(r.Key) != wantKey {
			t.Fatalf("record %d key %q, want %q", i, r.Key, wantKey)
		}
	}
	done := make(chan error)
	go func() {
		_, _, err := src.Poll(ctx)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked poll after close: %v", err)
	}
}

// createStream creates a stream. A stream deleted just before under the
// same name can make the server refuse for a moment ("error creating store
// for stream", 10049: a loaded machine is still removing the old store):
// that is tried again until ctx ends.
func createStream(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	var apiErr *jetstream.APIError
	for {
		_, err := js.CreateStream(ctx, cfg)
		if err == nil {
			return
		}
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10049 {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v (tried again until: %v)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func publishN(t *testing.T, ctx context.Context, js jetstream.JetStream, subject func(i int) string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m := nats.NewMsg(subject(i))
		m.Data = []byte(strconv.Itoa(i))
		m.Header.Set(KeyHeader, "k")
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

func values(recs []abi.Record) []int {
	out := make([]int, len(recs))
	for i, r := range recs {
		out[i], _ = strconv.Atoi(string(r.Value))
	}
	return out
}

// JetStream replay from a checkpointed offset: a new source sought to the
// offset of a batch reads exactly what followed it.
func TestJetStreamReplayFromOffset(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 100)

	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: 16})
	if err != nil {
		t.Fatal(err)
	}
	first, off := pollRecords(t, ctx, src, 40)
	src.Close()
	seq, _ := DecodeOffset(off)
	if int(seq) != len(first) {
		t.Fatalf("offset %d after %d records", seq, len(first))
	}
	for i, v := range values(first) {
		if v != i {
			t.Fatalf("record %d = %d", i, v)
		}
	}
	if string(first[0].Key) != "k" || first[0].Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
		t.Fatalf("key %q ts %d", first[0].Key, first[0].Timestamp)
	}

	again, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Seek(ctx, off); err != nil {
		t.Fatal(err)
	}
	rest, off2 := pollRecords(t, ctx, again, 100-len(first))
	for i, v := range values(rest) {
		if v != len(first)+i {
			t.Fatalf("replayed record %d = %d, want %d", i, v, len(first)+i)
		}
	}
	if s, _ := DecodeOffset(off2); s != 100 {
		t.Fatalf("final offset %d", s)
	}
}

// Parallel source subtasks split one stream by subject: together they read
// every message once.
func TestJetStreamPartitionedSubtasks(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	subj := func(i int) string { return fmt.Sprintf("in.dev%d", i%13) }
	publishN(t, ctx, js, subj, 0, 300)
	want := [3]int{}
	for i := 0; i < 300; i++ {
		want[PartitionOf(subj(i), 3)]++
	}
	seen := map[int]int{}
	for idx := 0; idx < 3; idx++ {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 3, Index: idx, FilterSubjects: []string{"in.>"}})
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := pollRecords(t, ctx, src, want[idx])
		src.Close()
		if len(recs) != want[idx] {
			t.Fatalf("subtask %d read %d, want %d", idx, len(recs), want[idx])
		}
		for _, v := range values(recs) {
			if PartitionOf(subj(v), 3) != idx {
				t.Fatalf("subtask %d read %d of partition %d", idx, v, PartitionOf(subj(v), 3))
			}
			seen[v]++
		}
	}
	if len(seen) != 300 {
		t.Fatalf("%d distinct messages read, want 300", len(seen))
	}
	if _, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 2}); err == nil {
		t.Fatal("index outside parallelism accepted")
	}
}

// Subtasks of a stream whose subjects carry a partition number — written
// by the stream's subject transform, {{partition(6,1)}} — each get only
// their partitions from the server: no subtask receives another's
// messages, every key stays in one subtask in order, and a subtask
// restored from its offset goes on with its own partitions.
// partitionedStream creates stream IN whose subjects in.KEY the server
// maps to in.P.KEY over 6 partitions, and publishes 600 messages keyed by
// key(i), values i.
func partitionedStream(t *testing.T) (context.Context, jetstream.JetStream) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "in.*", Destination: "in.{{partition(6,1)}}.{{wildcard(1)}}"}})
	publishN(t, ctx, js, func(i int) string { return "in." + key(i) }, 0, 600)
	return ctx, js
}

// key is the key of message i in partitionedStream.
func key(i int) string { return fmt.Sprintf("k%d", i%17) }

// partitions returns where the server put each key of partitionedStream:
// its partition, from the subjects (in.P.KEY) the stream holds, in one
// request. (Reading the 600 messages back one Next at a time took 5 to 15
// seconds under -race on a loaded machine, most of the tests' deadline.)
func partitions(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]int {
	t.Helper()
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("in.*.*"))
	must(t, err)
	partOf := map[string]int{}
	for subj := range info.State.Subjects {
		tok := strings.Split(subj, ".")
		p, err := strconv.Atoi(tok[1])
		must(t, err)
		partOf[tok[2]] = p
	}
	if len(partOf) != 17 {
		t.Fatalf("stream IN holds subjects %v, want 17 keys", info.State.Subjects)
	}
	return partOf
}

func TestJetStreamServerPartitionedSubtasks(t *testing.T) {
	ctx, js := partitionedStream(t)
	const parts, n = 6, 600

	partOf := partitions(t, ctx, js)

	read := map[int]bool{}
	for idx := 0; idx < 2; idx++ {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, Partitions: parts, PartitionFilter: "in.{p}.*"})
		must(t, err)
		mine := 0
		for i := 0; i < n; i++ {
			if partOf[key(i)]%2 == idx {
				mine++
			}
		}
		recs, off := pollRecords(t, ctx, src, mine/2)
		src.Close()
		// Restored from its offset, the subtask reads the rest of its own.
		src, err = NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx, Partitions: parts, PartitionFilter: "in.{p}.*"})
		must(t, err)
		must(t, src.Seek(ctx, off))
		more, _ := pollRecords(t, ctx, src, mine-len(recs))
		recs = append(recs, more...)
		// Nothing beyond its own: the server sent it nothing else.
		extra, _, err := pollWithin(src, 200*time.Millisecond)
		if err == nil && len(extra) > 0 {
			t.Fatalf("subtask %d got %d more records than its partitions hold", idx, len(extra))
		}
		src.Close()
		last := map[string]int{}
		for _, v := range values(recs) {
			if p := partOf[key(v)]; p%2 != idx {
				t.Fatalf("subtask %d read message %d of partition %d", idx, v, p)
			}
			if prev, ok := last[key(v)]; ok && prev >= v {
				t.Fatalf("key %s out of order: %d after %d", key(v), v, prev)
			}
			last[key(v)] = v
			if read[v] {
				t.Fatalf("message %d read twice", v)
			}
			read[v] = true
		}
	}
	if len(read) != n {
		t.Fatalf("%d messages read, want %d", len(read), n)
	}
}

// A partitioned source rescaled from two subtasks to three: each new
// subtask merges both old offsets and reads the rest of its own
// partitions; every message is read once, each key in order.
func TestJetStreamPartitionedRescale(t *testing.T) {
	ctx, js := partitionedStream(t)
	const parts, n = 6, 600
	cfg := func(par, idx int) JetStreamConfig {
		return JetStreamConfig{Stream: "IN", Parallelism: par, Index: idx, Partitions: parts, PartitionFilter: "in.{p}.*"}
	}
	read := map[int]bool{}
	last := map[string]int{}
	partOf := partitions(t, ctx, js)
	take := func(par, idx int, recs []abi.Record) {
		t.Helper()
		for _, v := range values(recs) {
			if read[v] {
				t.Fatalf("message %d read twice", v)
			}
			read[v] = true
			if p := partOf[key(v)]; p%par != idx {
				t.Fatalf("subtask %d of %d read message %d of partition %d", idx, par, v, p)
			}
			if prev, ok := last[key(v)]; ok && prev >= v {
				t.Fatalf("key %s out of order: %d after %d", key(v), v, prev)
			}
			last[key(v)] = v
		}
	}
	var offsets [][]byte
	for idx := 0; idx < 2; idx++ {
		src, err := NewJetStream(js, cfg(2, idx))
		must(t, err)
		recs, off := pollRecords(t, ctx, src, n/8)
		src.Close()
		take(2, idx, recs)
		offsets = append(offsets, off)
	}
	// An old offset alone does not fit a subtask of the new parallelism.
	src, err := NewJetStream(js, cfg(3, 1))
	must(t, err)
	if err := src.Seek(ctx, offsets[0]); !errors.Is(err, ErrOffsetMismatch) {
		t.Errorf("seek to another parallelism's offset = %v, want ErrOffsetMismatch", err)
	}
	src.Close()
	for idx := 0; idx < 3; idx++ {
		src, err := NewJetStream(js, cfg(3, idx))
		must(t, err)
		merged, err := src.MergeOffsets(offsets)
		must(t, err)
		// It names this subtask's partitions only, as a Poll would: a
		// checkpoint before the first Poll stores it, and rescaling from
		// that checkpoint merges again without overlaps.
		po, err := DecodePartitionOffsets(merged)
		must(t, err)
		for p := range po.Seqs {
			if p%3 != idx {
				t.Fatalf("subtask %d's merged offset names partition %d", idx, p)
			}
		}
		if len(po.Seqs) != 2 {
			t.Fatalf("subtask %d's merged offset names %d partitions, want 2", idx, len(po.Seqs))
		}
		must(t, src.Seek(ctx, merged))
		// Until the subtask read what its partitions hold beyond the old
		// offsets, not until it is quiet for a while: a loaded machine
		// can take seconds to start a consumer.
		rest := 0
		for v := range n {
			if partOf[key(v)]%3 == idx && !read[v] {
				rest++
			}
		}
		recs, _ := pollRecords(t, ctx, src, rest)
		take(3, idx, recs)
		src.Close()
	}
	if len(read) != n {
		t.Fatalf("%d messages read, want %d", len(read), n)
	}
}

// Subtasks that each read the whole stream (no partitions) stop at
// different sequences; rescaled 2 → 3 → 1, each step from offsets taken
// mid-stream, the new subtasks together read every message exactly once,
// each subject in order, and the offset sheds its rescale layers once the
// source has read past them.
func TestJetStreamWholeStreamRescale(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 600
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	subj := func(i int) string { return "in." + key(i) }
	publishN(t, ctx, js, subj, 0, n)
	cfg := func(par, idx int) JetStreamConfig {
		return JetStreamConfig{Stream: "IN", Parallelism: par, Index: idx, MaxBatchRecords: 8}
	}
	read := map[int]bool{}
	last := map[string]int{}
	take := func(par, idx int, recs []abi.Record) {
		t.Helper()
		for _, v := range values(recs) {
			if read[v] {
				t.Fatalf("message %d read twice", v)
			}
			if PartitionOf(subj(v), par) != idx {
				t.Fatalf("subtask %d of %d read message %d of subtask %d", idx, par, v, PartitionOf(subj(v), par))
			}
			read[v] = true
			if prev, ok := last[key(v)]; ok && prev >= v {
				t.Fatalf("key %s out of order: %d after %d", key(v), v, prev)
			}
			last[key(v)] = v
		}
	}
	// step reads up to want[i] records in each of par subtasks restored
	// from offsets (nil: none) and returns their offsets.
	step := func(offsets [][]byte, par int, want []int) [][]byte {
		t.Helper()
		var out [][]byte
		for idx := 0; idx < par; idx++ {
			src, err := NewJetStream(js, cfg(par, idx))
			must(t, err)
			if offsets != nil {
				merged, err := src.MergeOffsets(offsets)
				must(t, err)
				must(t, src.Seek(ctx, merged))
			}
			var off []byte
			for got := 0; got < want[idx]; {
				b, o, err := src.Poll(ctx)
				if err != nil {
					t.Fatalf("subtask %d of %d: poll after %d of %d records: %v", idx, par, got, want[idx], err)
				}
				recs, err := abi.DecodeBatch(b)
				must(t, err)
				take(par, idx, recs)
				got += len(recs)
				off = o
			}
			src.Close()
			out = append(out, off)
		}
		return out
	}
	offsets := step(nil, 2, []int{40, 150})
	offsets = step(offsets, 3, []int{30, 5, 40})
	// Subtask 1 stopped before the old subtasks' offsets: its offset
	// carries them on.
	if o, err := DecodeStreamOffset(offsets[1]); err != nil || len(o.Rescaled) == 0 {
		t.Fatalf("subtask 1 of 3 stopped early with offset %+v, %v; want rescale layers", o, err)
	}
	offsets = step(offsets, 1, []int{n - len(read)})
	if len(read) != n {
		t.Fatalf("%d messages read, want %d", len(read), n)
	}
	if len(offsets[0]) != 8 {
		t.Fatalf("offset after reading everything is %x, want the plain sequence", offsets[0])
	}
	// Seeking to a rescaled offset at the same parallelism skips what the
	// layers say was read.
	src, err := NewJetStream(js, cfg(1, 0))
	must(t, err)
	defer src.Close()
	must(t, src.Seek(ctx, EncodeStreamOffset(StreamOffset{Seq: 10, Rescaled: [][]uint64{{n - 1, 20}}})))
	recs, _ := pollRecords(t, ctx, src, 1)
	for _, v := range values(recs) {
		if v < 10 || (v < n-1 && PartitionOf(subj(v), 2) == 0) || (v < 20 && PartitionOf(subj(v), 2) == 1) {
			t.Fatalf("message %d read again", v)
		}
	}
}

// Offsets that cannot be merged, or do not fit the source, are refused
// with ErrOffsetMismatch.
func TestJetStreamOffsetMismatch(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 0, Partitions: 4, PartitionFilter: "in.{p}.*"})
	must(t, err)
	defer src.Close()
	enc := func(parts int, filter string, seqs map[int]uint64) []byte {
		return EncodePartitionOffsets(PartitionOffsets{Partitions: parts, Filter: filter, Seqs: seqs})
	}
	for _, c := range []struct {
		name    string
		offsets [][]byte
		want    string // "" merges
	}{
		{"both halves", [][]byte{enc(4, "in.{p}.*", map[int]uint64{0: 5, 2: 9}), enc(4, "in.{p}.*", map[int]uint64{1: 3, 3: 0})}, ""},
		{"a subtask that never polled", [][]byte{enc(4, "in.{p}.*", map[int]uint64{0: 5, 2: 9}), nil}, ""},
		{"a half missing", [][]byte{enc(4, "in.{p}.*", map[int]uint64{0: 5, 2: 9})}, "no offset names partition 1"},
		{"other partition count", [][]byte{enc(8, "in.{p}.*", map[int]uint64{0: 5}), enc(8, "in.{p}.*", map[int]uint64{1: 5})}, "the checkpoint read 8 partitions"},
		{"other filter", [][]byte{enc(4, "in.*.{p}", map[int]uint64{0: 5, 1: 1, 2: 2, 3: 3})}, `by "in.*.{p}"`},
		{"first format", [][]byte{enc(0, "", map[int]uint64{0: 5, 1: 1, 2: 2, 3: 3})}, "does not record its partitioning"},
		{"overlap", [][]byte{enc(4, "in.{p}.*", map[int]uint64{0: 5, 2: 9}), enc(4, "in.{p}.*", map[int]uint64{2: 9, 1: 1, 3: 1})}, "partition 2 in two subtasks' offsets"},
		{"not partitioned", [][]byte{EncodeOffset(9)}, "not a partitioned source's"},
	} {
		merged, err := src.MergeOffsets(c.offsets)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: merged %x, %v; want an error saying %q", c.name, merged, err, c.want)
		case c.want != "" && !errors.Is(err, ErrOffsetMismatch):
			t.Errorf("%s: %v is not ErrOffsetMismatch", c.name, err)
		}
	}
	// Seek checks the partitioning too (an offset of the first format,
	// which did not record it, is taken on trust).
	if err := src.Seek(ctx, enc(8, "in.{p}.*", map[int]uint64{0: 1, 2: 1})); !errors.Is(err, ErrOffsetMismatch) {
		t.Errorf("seek under another partition count = %v", err)
	}
	whole, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 0})
	must(t, err)
	defer whole.Close()
	if _, err := whole.MergeOffsets([][]byte{EncodeOffset(3), EncodePartitionOffsets(PartitionOffsets{Partitions: 4, Seqs: map[int]uint64{1: 1}})}); !errors.Is(err, ErrOffsetMismatch) {
		t.Errorf("merging a partitioned offset into a whole-stream source's = %v", err)
	}
}

func TestPartitionFilters(t *testing.T) {
	got, err := PartitionFilters("orders.{p}.>", 8, 3, 1)
	if err != nil || strings.Join(got, " ") != "orders.1.> orders.4.> orders.7.>" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, c := range []struct {
		tmpl      string
		n, par, i int
	}{
		{"orders.>", 4, 2, 0},     // no {p}
		{"o.{p}.{p}", 4, 2, 0},    // twice
		{"orders.{p}", 2, 3, 0},   // fewer partitions than subtasks
		{"orders.{p}", 4, 2, 2},   // index outside parallelism
		{"orders..{p}", 4, 2, 0},  // empty token
		{"orders.>.{p}", 4, 2, 0}, // > not last
		{"orders.x{p}*", 4, 2, 0}, // * inside a token
		{"orders.{p}", 0, 1, 0},   // no partitions
	} {
		if _, err := PartitionFilters(c.tmpl, c.n, c.par, c.i); err == nil {
			t.Errorf("PartitionFilters(%q, %d, %d, %d) accepted", c.tmpl, c.n, c.par, c.i)
		} else {
			t.Log(err)
		}
	}
}

// A server restart mid-stream: the client reconnects, the ordered consumer
// resumes after its last message, and the source loses and repeats nothing.
func TestJetStreamSurvivesServerRestart(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 500)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	recs, _ := pollRecords(t, ctx, src, 100)
	embeddedtest.Restart(t, srv, nc)
	// Publish more after the restart, retrying while the server's
	// JetStream comes back; a retry after a lost acknowledgement is
	// deduplicated by its message id.
	for i := 500; i < 1000; i++ {
		for {
			m := nats.NewMsg("in.a")
			m.Data = []byte(strconv.Itoa(i))
			m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := js.PublishMsg(pctx, m)
			pcancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	more, _ := pollRecords(t, ctx, src, 1000-len(recs))
	all := values(append(recs, more...))
	if len(all) != 1000 {
		t.Fatalf("%d records, want 1000", len(all))
	}
	for i, v := range all {
		if v != i {
			t.Fatalf("record %d = %d (loss or duplicate); around: %v", i, v, all[max(0, i-5):min(len(all), i+5)])
		}
	}
}

// Close returns promptly while the ordered consumer recreates itself after
// a server restart, at whatever point of the reset it lands. (With the
// Messages iterator of nats.go v1.55.0 a Close in the middle of a reset
// could wait forever: the end-to-end test caught it as a hung worker.)
func TestJetStreamCloseDuringReset(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 100)
	// The consumer resets once the client reconnected; close at points
	// around that.
	delays := []time.Duration{0, 0, 0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}
	for i, delay := range delays {
		src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
		if err != nil {
			t.Fatal(err)
		}
		pollRecords(t, ctx, src, 100)
		embeddedtest.Restart(t, srv, nc)
		time.Sleep(delay)
		closed := make(chan struct{})
		go func() { src.Close(); close(closed) }()
		select {
		case <-closed:
		case <-ctx.Done():
			t.Fatalf("round %d (close %v after the reconnect): Close did not return", i, delay)
		}
	}
}

func TestJetStreamOffsetGone(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, MaxMsgs: 10})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 50)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Seek(ctx, EncodeOffset(5)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Poll(ctx); !errors.Is(err, ErrOffsetGone) {
		t.Fatalf("poll from a dropped offset: %v", err)
	}
}

// A quiet partition's offset follows the stream while the source runs, so
// after the stream's retention dropped other partitions' old messages a
// restore still resumes it; a message of its own that was dropped unread
// is still refused.
func TestJetStreamQuietPartitionKeepsUp(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}, MaxMsgs: 20})
	cfg := JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 1, Partitions: 2, PartitionFilter: "in.{p}.*", IdleCheck: 20 * time.Millisecond}
	publishN(t, ctx, js, func(int) string { return "in.1.x" }, 0, 1) // seq 1, partition 1
	src, err := NewJetStream(js, cfg)
	must(t, err)
	recs, _ := pollRecords(t, ctx, src, 1)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	var off []byte
	publishN(t, ctx, js, func(int) string { return "in.0.x" }, 1, 101) // seqs 2..101, partition 0
	// Partition 1 is quiet; its offset moves to 101 with an empty batch.
	for {
		b, o, err := src.Poll(ctx)
		must(t, err)
		if n, _ := abi.BatchCount(b); n != 0 {
			t.Fatalf("%d records from the quiet partition", n)
		}
		po, err := DecodePartitionOffsets(o)
		must(t, err)
		if po.Seqs[1] == 101 {
			off = o
			break
		}
	}
	src.Close()
	// Retention keeps seqs 82..101 now; the restored source resumes.
	src, err = NewJetStream(js, cfg)
	must(t, err)
	must(t, src.Seek(ctx, off))
	publishN(t, ctx, js, func(int) string { return "in.1.x" }, 101, 102)
	recs, off = pollRecords(t, ctx, src, 1)
	if values(recs)[0] != 101 {
		t.Fatalf("resumed with %v", values(recs))
	}
	src.Close()

	// While no source runs, a message of partition 1 arrives and retention
	// drops it unread: the restore is refused.
	publishN(t, ctx, js, func(int) string { return "in.1.x" }, 102, 103)
	publishN(t, ctx, js, func(int) string { return "in.0.x" }, 103, 130)
	src, err = NewJetStream(js, cfg)
	must(t, err)
	defer src.Close()
	must(t, src.Seek(ctx, off))
	if _, _, err := src.Poll(ctx); !errors.Is(err, ErrOffsetGone) {
		t.Fatalf("poll past a dropped message: %v", err)
	}
}

// A partition with no message yet, on a stream that holds other
// partitions' messages when its consumer starts (which scans past them,
// so the server counts them as delivered), follows the stream too.
func TestJetStreamQuietPartitionFromTheStart(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}})
	cfg := JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 1, Partitions: 2, PartitionFilter: "in.{p}.*", IdleCheck: 20 * time.Millisecond}
	publishN(t, ctx, js, func(int) string { return "in.0.x" }, 0, 100) // seqs 1..100, partition 0
	src, err := NewJetStream(js, cfg)
	must(t, err)
	defer src.Close()
	for round, last := range []uint64{100, 200} {
		if round == 1 {
			publishN(t, ctx, js, func(int) string { return "in.0.x" }, 100, 200)
		}
		for {
			pctx, c := context.WithTimeout(ctx, 300*time.Millisecond)
			b, o, err := src.Poll(pctx)
			c()
			if err == nil {
				if n, _ := abi.BatchCount(b); n != 0 {
					t.Fatalf("%d records from the quiet partition", n)
				}
				po, err := DecodePartitionOffsets(o)
				must(t, err)
				if po.Seqs[1] == last {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("round %d: the quiet partition's offset did not reach %d: %v", round, last, ctx.Err())
			}
		}
	}
}

func TestParseAck(t *testing.T) {
	for _, c := range []struct {
		reply                  string
		seq, cseq, ts, pending uint64
		ok                     bool
	}{
		{"$JS.ACK.IN.cons.1.42.7.1700000000000000000.3", 42, 7, 1700000000000000000, 3, true},
		{"$JS.ACK.dom.hash.IN.cons.1.43.8.1700000000000000001.0.rnd", 43, 8, 1700000000000000001, 0, true},
		{"$JS.ACK.IN.cons.1.x.7.1.3", 0, 0, 0, 0, false},
		{"$JS.ACK.IN.cons.1.42.x.1.3", 0, 0, 0, 0, false},
		{"$JS.ACK.IN.cons.1.42.7.1.x", 0, 0, 0, 0, false},
		{"_INBOX.abc", 0, 0, 0, 0, false},
		{"", 0, 0, 0, 0, false},
	} {
		a, ok := parseAck(c.reply)
		if a.seq != c.seq || a.cseq != c.cseq || a.ts != c.ts || a.pending != c.pending || ok != c.ok || (ok && a.consumer != "cons") {
			t.Errorf("%q: %+v %v", c.reply, a, ok)
		}
	}
}

// Parallel core source subtasks in one queue group share a subject: every
// message reaches exactly one of them.
func TestCoreSourceQueueGroup(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var srcs []*Core
	for i := 0; i < 3; i++ {
		s, err := NewCore(nc, CoreConfig{Subject: "q", Queue: "weir.job.src"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srcs = append(srcs, s)
	}
	const n = 300
	for i := 0; i < n; i++ {
		if err := nc.Publish("q", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	total := 0
	for total < n {
		progressed := false
		for _, s := range srcs {
			pctx, pcancel := context.WithTimeout(ctx, 20*time.Millisecond)
			b, _, err := s.Poll(pctx)
			pcancel()
			if err != nil {
				continue
			}
			recs, err := abi.DecodeBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range values(recs) {
				seen[v]++
				total++
			}
			progressed = true
		}
		if !progressed && ctx.Err() != nil {
			t.Fatalf("only %d of %d messages arrived", total, n)
		}
	}
	if len(seen) != n || total != n {
		t.Fatalf("%d distinct of %d deliveries, want %d once each", len(seen), total, n)
	}
}

// FilterSubjects restricts what a JetStream source reads, and the offset
// still advances through the stream's sequence.
func TestJetStreamFilterSubjects(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(i int) string {
		if i%2 == 0 {
			return "in.even"
		}
		return "in.odd"
	}, 0, 100)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.odd"}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	recs, off := pollRecords(t, ctx, src, 50)
	for i, v := range values(recs) {
		if v != 2*i+1 {
			t.Fatalf("record %d = %d, want %d", i, v, 2*i+1)
		}
	}
	if seq, _ := DecodeOffset(off); seq != 100 {
		t.Fatalf("offset %d, want 100 (sequence of the last odd message)", seq)
	}
}

// A purged stream cannot resume from an offset it no longer holds, but a
// stream whose messages up to the offset are gone resumes fine.
func TestJetStreamOffsetAfterPurge(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 10)
	st, err := js.Stream(ctx, "IN")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	if err := lost.Seek(ctx, EncodeOffset(4)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lost.Poll(ctx); !errors.Is(err, ErrOffsetGone) {
		t.Fatalf("poll after a purge of unread messages: %v", err)
	}
	publishN(t, ctx, js, func(int) string { return "in.a" }, 10, 12)
	ok, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if err := ok.Seek(ctx, EncodeOffset(10)); err != nil {
		t.Fatal(err)
	}
	recs, _ := pollRecords(t, ctx, ok, 2)
	if v := values(recs); v[0] != 10 || v[1] != 11 {
		t.Fatalf("resumed with %v", v)
	}
}

// LimitBatch makes Poll's batches smaller, and the offset of each still
// covers exactly the records before it: a limit set before the first Poll
// holds from the first batch; a raised one lets batches grow again.
func TestJetStreamLimitBatch(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 200)

	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	src.LimitBatch(3)
	read, raised, largest := 0, false, 0
	for read < 200 {
		b, off, err := src.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, err := abi.BatchCount(b)
		if err != nil {
			t.Fatal(err)
		}
		if !raised && n > 3 {
			t.Fatalf("batch of %d records under a limit of 3", n)
		}
		read += n
		if seq, _ := DecodeOffset(off); int(seq) != read {
			t.Fatalf("offset %d after %d records", seq, read)
		}
		if raised {
			largest = max(largest, n)
		}
		if read >= 30 && !raised {
			src.LimitBatch(0)
			raised = true
			// The consumer has the rest at hand: wait until more than the
			// old limit has gathered.
			for {
				src.acc.mu.Lock()
				n := src.acc.b.Len()
				src.acc.mu.Unlock()
				if n > 3 || ctx.Err() != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	if largest <= 3 {
		t.Fatalf("batches stayed at %d records after the limit was lifted", largest)
	}
}

// A whole-stream subtask that only skips other subtasks' messages reports
// the offset past them with empty batches: otherwise its checkpointed
// offset stays at its last own message, and once the stream's retention
// dropped the skipped messages its restore is refused.
func TestJetStreamSkippedMessagesMoveOffset(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, MaxMsgs: 20})
	var mine, other string // subjects of subtask 1 and 0 of 2
	for i := 0; mine == "" || other == ""; i++ {
		if s := "in." + key(i); PartitionOf(s, 2) == 1 {
			mine = s
		} else {
			other = s
		}
	}
	cfg := JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 1}
	publishN(t, ctx, js, func(int) string { return mine }, 0, 1)
	src, err := NewJetStream(js, cfg)
	must(t, err)
	_, off := pollRecords(t, ctx, src, 1)
	// Seqs 2..101, 10 at a time, each 10 read before the next: the stream
	// (20 at most) drops only what the source read. (A burst of 100 may
	// outrun the reader, under -race, and lose messages unread.)
	for from := 1; from < 101; from += 10 {
		publishN(t, ctx, js, func(int) string { return other }, from, from+10)
		for seq := uint64(0); seq != uint64(from+10); {
			b, o, err := src.Poll(ctx)
			if err != nil {
				t.Fatalf("offset stuck at %d, the stream is at %d: %v", seq, from+10, err)
			}
			if n, _ := abi.BatchCount(b); n != 0 {
				t.Fatalf("%d records of the other subtask", n)
			}
			off = o
			seq, _ = DecodeOffset(o)
		}
	}
	src.Close()
	// Retention keeps seqs 82..101: the restored source resumes.
	src, err = NewJetStream(js, cfg)
	must(t, err)
	defer src.Close()
	must(t, src.Seek(ctx, off))
	publishN(t, ctx, js, func(int) string { return mine }, 101, 102)
	if recs, _ := pollRecords(t, ctx, src, 1); values(recs)[0] != 101 {
		t.Fatalf("resumed with %v", values(recs))
	}
}

// A stream deleted and created again while the source reads it: the
// ordered consumer recreates itself after its last sequence, which on the
// new stream would skip the first messages unseen; the source fails
// instead, as a restore would (ErrOffsetAhead).
func TestJetStreamStreamRecreatedWhileReading(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	scfg := jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}}
	// A bystander: nats-server v2.15.2 removes an account's streams
	// directory with its last stream, and creating IN again meanwhile
	// can fail ("could not create storage directory").
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}})
	createStream(t, ctx, js, scfg)
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 10)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer src.Close()
	pollRecords(t, ctx, src, 10)
	must(t, js.DeleteStream(ctx, "IN"))
	createStream(t, ctx, js, scfg)
	publishN(t, ctx, js, func(int) string { return "in.a" }, 100, 120) // seqs 1..20 of the new stream
	var got []int
	for {
		b, _, err := src.Poll(ctx)
		if errors.Is(err, ErrOffsetAhead) {
			break
		}
		if err != nil {
			t.Fatalf("poll after the stream was recreated, having read %v: %v", got, err)
		}
		recs, err := abi.DecodeBatch(b)
		must(t, err)
		got = append(got, values(recs)...)
	}
	if len(got) != 0 {
		t.Fatalf("read %v of the new stream", got)
	}
}

// Close does not wait for the idle watcher's requests while the server is
// down: it cancels them. Their timeout is an hour here, so Close returning
// at all shows it did not wait one out.
func TestJetStreamCloseWhileServerDown(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}})
	publishN(t, ctx, js, func(int) string { return "in.0.x" }, 0, 1)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Partitions: 8, PartitionFilter: "in.{p}.*",
		IdleCheck: time.Second, IdleCheckTimeout: time.Hour})
	must(t, err)
	pollRecords(t, ctx, src, 1)
	srv.Shutdown()
	time.Sleep(1500 * time.Millisecond) // the watcher is in a round of requests
	done := make(chan struct{})
	go func() { src.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a liveness guard, far below the hour
		t.Fatal("Close waited for the idle watcher's requests to a server that is down")
	}
}

// A connection that closed for good (its reconnects exhausted) ends the
// consumers' iteration: Poll fails rather than wait forever.
func TestJetStreamPollFailsAfterConnectionClosed(t *testing.T) {
	srv := startServer(t)
	nc, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 1)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN"})
	must(t, err)
	defer src.Close()
	pollRecords(t, ctx, src, 1)
	nc.Close()
	if _, _, err := src.Poll(ctx); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("poll after the connection closed: %v", err)
	}
}

// A start that fails after some partitions' consumers delivered (here the
// stream allows one consumer, the subtask needs two) stops the source:
// a retried Poll would read those partitions again into the same batches.
// The error says to create a new source.
func TestJetStreamFailedStartIsFinal(t *testing.T) {
	_, js := connect(t, startServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}, MaxConsumers: 1})
	publishN(t, ctx, js, func(i int) string { return fmt.Sprintf("in.%d.x", i%2) }, 0, 10)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Partitions: 2, PartitionFilter: "in.{p}.*"})
	must(t, err)
	defer src.Close()
	_, _, err = src.Poll(ctx)
	if err == nil || !strings.Contains(err.Error(), "ordered consumer") {
		t.Fatalf("first poll: %v, want the second consumer refused", err)
	}
	for range 2 {
		b, _, err := src.Poll(ctx)
		if err == nil || !strings.Contains(err.Error(), "create a new one") {
			n, _ := abi.BatchCount(b)
			t.Fatalf("poll after the failed start: %d records, %v; want the start's error", n, err)
		}
	}
}

// TestStamp sets every record's timestamp and nothing else, whatever the
// key and value lengths.
func TestStamp(t *testing.T) {
	var b abi.Builder
	var want []abi.Record
	for i := range 50 {
		r := abi.Record{Key: []byte(strings.Repeat("k", i%7)), Value: []byte(strings.Repeat("v", (i*13)%97)), Timestamp: int64(i % 3)}
		b.Add(r.Key, r.Value, r.Timestamp)
		want = append(want, r)
	}
	batch := b.Bytes()
	stamp(batch, 1234)
	got, err := abi.DecodeBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		ts := want[i].Timestamp // a record's own time (a Weir-Time header's) stays
		if ts == 0 {
			ts = 1234
		}
		if !bytes.Equal(r.Key, want[i].Key) || !bytes.Equal(r.Value, want[i].Value) || r.Timestamp != ts {
			t.Fatalf("record %d: %q=%q@%d, want @%d", i, r.Key, r.Value, r.Timestamp, ts)
		}
	}
	stamp(abi.EmptyBatch, 1) // no records: nothing to do
}
