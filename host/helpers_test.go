package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/stream"
)

// joinOp is the native Go join operator of the shared contract: equi-join on
// the key, buffering both sides in arrival order.
type joinOp struct {
	left, right []abi.Record
}

func cp(b []byte) []byte { return append([]byte{}, b...) }

func (j *joinOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	var out abi.Builder
	for it.Next() {
		r := it.Record()
		r = abi.Record{Key: cp(r.Key), Value: cp(r.Value), Timestamp: r.Timestamp}
		others := j.right
		if port == 1 {
			others = j.left
		}
		for _, o := range others {
			if !bytes.Equal(o.Key, r.Key) {
				continue
			}
			l, rr := r, o
			if port == 1 {
				l, rr = o, r
			}
			out.Add(r.Key, append(append(cp(l.Value), '|'), rr.Value...), max(l.Timestamp, rr.Timestamp))
		}
		if port == 0 {
			j.left = append(j.left, r)
		} else {
			j.right = append(j.right, r)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if out.Len() > 0 {
		return emit(0, cp(out.Bytes()))
	}
	return nil
}

func (j *joinOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }

func appendSide(b []byte, rs []abi.Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rs)))
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Key)))
		b = append(b, r.Key...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Value)))
		b = append(b, r.Value...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Timestamp))
	}
	return b
}

func (j *joinOp) Snapshot(ctx context.Context, w io.Writer) error {
	b := appendSide([]byte{1}, j.left)
	_, err := w.Write(appendSide(b, j.right))
	return err
}

// decodeJoinState parses the shared join state format.
func decodeJoinState(b []byte) (left, right []abi.Record, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	if b[0] != 1 {
		return nil, nil, errors.New("join state: bad version")
	}
	off := 1
	u32 := func() (int, bool) {
		if len(b)-off < 4 {
			return 0, false
		}
		v := binary.LittleEndian.Uint32(b[off:])
		off += 4
		return int(v), true
	}
	bytesN := func(n int) ([]byte, bool) {
		if n < 0 || len(b)-off < n {
			return nil, false
		}
		p := b[off : off+n]
		off += n
		return cp(p), true
	}
	side := func() ([]abi.Record, error) {
		n, ok := u32()
		if !ok {
			return nil, errors.New("join state: short")
		}
		var rs []abi.Record
		for i := 0; i < n; i++ {
			kl, ok1 := u32()
			k, ok2 := bytesN(kl)
			vl, ok3 := u32()
			v, ok4 := bytesN(vl)
			ts, ok5 := bytesN(8)
			if !(ok1 && ok2 && ok3 && ok4 && ok5) {
				return nil, errors.New("join state: short")
			}
			rs = append(rs, abi.Record{Key: k, Value: v, Timestamp: int64(binary.LittleEndian.Uint64(ts))})
		}
		return rs, nil
	}
	if left, err = side(); err != nil {
		return nil, nil, err
	}
	if right, err = side(); err != nil {
		return nil, nil, err
	}
	return left, right, nil
}

func (j *joinOp) Restore(ctx context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	j.left, j.right, err = decodeJoinState(b)
	return err
}

func (j *joinOp) CheckpointComplete(context.Context, int64) error { return nil }
func (j *joinOp) Close(context.Context) error                     { return nil }

// rec is a one-record batch element with key k and value v.
func rec(k, v string) stream.Element {
	return stream.Records(abi.EncodeBatch(abi.Record{Key: []byte(k), Value: []byte(v), Timestamp: 1}))
}

// values renders records' values ("" when there are none).
func values(rs []abi.Record) string {
	var s []string
	for _, r := range rs {
		s = append(s, string(r.Value))
	}
	return strings.Join(s, ",")
}

// render renders a sequence of elements: record values, |B<id> for barriers.
func render(t testing.TB, els []stream.Element) string {
	t.Helper()
	var s []string
	for _, e := range els {
		switch e.Kind {
		case stream.KindRecords:
			rs, err := abi.DecodeBatch(e.Batch)
			if err != nil {
				t.Fatal(err)
			}
			s = append(s, values(rs))
		case stream.KindBarrier:
			s = append(s, fmt.Sprintf("B%d", e.Barrier.ID))
		case stream.KindCancel:
			s = append(s, fmt.Sprintf("C%d", e.CheckpointID))
		case stream.KindEndOfPartition:
			s = append(s, "EOP")
		case stream.KindEndOfData:
			s = append(s, "EOD")
		}
	}
	return strings.Join(s, " ")
}

// recorder is a CheckpointListener that keeps everything.
type recorder struct {
	mu       sync.Mutex
	acks     map[int64]map[string]string // id → task → handle
	metrics  map[int64]map[string]map[string]int64
	declines []string
	failed   []string
	onAck    func(task string, id int64)
}

func newRecorder() *recorder {
	return &recorder{acks: map[int64]map[string]string{}, metrics: map[int64]map[string]map[string]int64{}}
}

func (r *recorder) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	r.mu.Lock()
	if r.acks[id] == nil {
		r.acks[id] = map[string]string{}
		r.metrics[id] = map[string]map[string]int64{}
	}
	r.acks[id][task] = handle
	r.metrics[id][task] = m
	fn := r.onAck
	r.mu.Unlock()
	if fn != nil {
		fn(task, id)
	}
	return nil
}

func (r *recorder) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.declines = append(r.declines, fmt.Sprintf("%s %d %s: %s", task, id, kind, reason))
	return nil
}

func (r *recorder) Failed(ctx context.Context, task string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, err.Error())
	return nil
}

func (r *recorder) handle(id int64, task string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acks[id][task]
}

// metric is the metric name of task's ack of checkpoint id.
func (r *recorder) metric(id int64, task, name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.metrics[id][task][name]
}

type bytesBuf struct{ b []byte }

func (w *bytesBuf) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// probe wraps an operator (native or wasm): onRecord runs before each input
// record (tests move a fake clock or inject failures there), and Close
// captures the final state first.
type probe struct {
	host.Operator
	onRecord func(port int, r abi.Record) error
	final    []byte
	closed   bool
}

func (p *probe) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	if p.onRecord != nil {
		it, err := abi.NewIter(batch)
		if err != nil {
			return err
		}
		for it.Next() {
			if err := p.onRecord(port, it.Record()); err != nil {
				return err
			}
		}
	}
	return p.Operator.Process(ctx, port, batch, emit)
}

// RecordsWithin passes on the wrapped operator's pace, if it has one.
func (p *probe) RecordsWithin(d time.Duration) int {
	if pc, ok := p.Operator.(host.Paced); ok {
		return pc.RecordsWithin(d)
	}
	return 0
}

func (p *probe) Close(ctx context.Context) error {
	var b bytesBuf
	if err := p.Operator.Snapshot(ctx, &b); err == nil {
		p.final = b.b
	}
	p.closed = true
	return p.Operator.Close(ctx)
}

// finalState decodes the join state captured at Close.
func (p *probe) finalState(t testing.TB) (left, right []abi.Record) {
	t.Helper()
	if !p.closed {
		t.Fatal("operator not closed")
	}
	l, r, err := decodeJoinState(p.final)
	if err != nil {
		t.Fatal(err)
	}
	return l, r
}

// wordsOf rewrites batches so each record's value is its key (a word).
func wordsOf(batches [][]byte) [][]byte {
	var out [][]byte
	for _, b := range batches {
		rs, _ := abi.DecodeBatch(b)
		var bld abi.Builder
		for _, r := range rs {
			bld.Add(r.Key, r.Key, r.Timestamp)
		}
		out = append(out, append([]byte(nil), bld.Bytes()...))
	}
	return out
}

// verifyRunningCounts checks committed wordcount output ("word=count@ts"):
// per word exactly the counts 1..N, N its number of occurrences.
func verifyRunningCounts(t *testing.T, c jobCase, got []string, _ [2]*probe) {
	t.Helper()
	want := map[string]int{}
	for _, bs := range [][][]byte{c.left, c.right} {
		for _, b := range bs {
			rs, _ := abi.DecodeBatch(b)
			for _, r := range rs {
				want[string(r.Key)]++
			}
		}
	}
	counts := map[string][]int{}
	for _, g := range got {
		word, rest, _ := strings.Cut(g, "=")
		n, _, _ := strings.Cut(rest, "@")
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("%v: bad output %q", c, g)
		}
		counts[word] = append(counts[word], v)
	}
	for w, n := range want {
		cs := counts[w]
		sort.Ints(cs)
		if len(cs) != n {
			t.Fatalf("%v: word %s: counts %v, want 1..%d", c, w, cs, n)
		}
		for i, v := range cs {
			if v != i+1 {
				t.Fatalf("%v: word %s: counts %v, want 1..%d", c, w, cs, n)
			}
		}
	}
	if len(counts) != len(want) {
		t.Fatalf("%v: words %d, want %d", c, len(counts), len(want))
	}
}
