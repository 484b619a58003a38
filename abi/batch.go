package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A record batch is the one byte layout records have everywhere in weir: in
// a NATS frame, in a checkpoint's channel state and in a guest's memory.
// All integers are little-endian.
//
//	batch  := count:u32 record*count
//	record := key_len:u32 value_len:u32 timestamp:i64 key:[key_len]u8 value:[value_len]u8
//
// The fixed 16-byte record header lets a guest without a library (WAT, C)
// walk a batch with plain loads. A batch has no trailing bytes.
const (
	// BatchHeaderSize is the size of the count that starts a batch.
	BatchHeaderSize = 4
	// RecordHeaderSize is the size of a record's fixed header.
	RecordHeaderSize = 16
)

// EmptyBatch is a valid batch with no records.
var EmptyBatch = []byte{0, 0, 0, 0}

// Record is one stream record. Key and Value alias the batch they were read
// from when they come from an Iter.
type Record struct {
	Key       []byte
	Value     []byte
	Timestamp int64 // milliseconds since the Unix epoch; 0 when unknown
}

// ErrMalformedBatch is the sentinel every BatchError wraps.
var ErrMalformedBatch = errors.New("malformed record batch")

// BatchError describes where and why a batch is malformed.
type BatchError struct {
	Offset int    // byte offset of the problem
	Record int    // index of the record being read, -1 for the header
	Reason string // what is wrong
}

func (e *BatchError) Error() string {
	if e.Record < 0 {
		return fmt.Sprintf("malformed record batch: %s at byte %d", e.Reason, e.Offset)
	}
	return fmt.Sprintf("malformed record batch: record %d: %s at byte %d", e.Record, e.Reason, e.Offset)
}

// Unwrap lets errors.Is(err, ErrMalformedBatch) hold.
func (e *BatchError) Unwrap() error { return ErrMalformedBatch }

// BatchCount returns the record count a batch declares, after checking that
// the count fits the batch's size. It does not walk the records; use
// ValidateBatch for that.
func BatchCount(b []byte) (int, error) {
	if len(b) < BatchHeaderSize {
		return 0, &BatchError{Offset: len(b), Record: -1, Reason: fmt.Sprintf("batch of %d bytes is shorter than its %d-byte header", len(b), BatchHeaderSize)}
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n)*RecordHeaderSize > uint64(len(b)-BatchHeaderSize) {
		return 0, &BatchError{Offset: 0, Record: -1, Reason: fmt.Sprintf("count %d needs at least %d bytes, batch has %d", n, uint64(n)*RecordHeaderSize+BatchHeaderSize, len(b))}
	}
	return int(n), nil
}

// ValidateBatch walks every record of b and returns the record count, or a
// *BatchError naming the first problem: a short header, a length that passes
// the end, or trailing bytes.
func ValidateBatch(b []byte) (int, error) {
	it, err := NewIter(b)
	if err != nil {
		return 0, err
	}
	for it.Next() {
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	return it.Count(), nil
}

// Iter walks a batch without copying: the records it yields alias the batch.
// Use it as
//
//	it, err := abi.NewIter(b)
//	for it.Next() { r := it.Record(); ... }
//	if err := it.Err(); err != nil { ... }
type Iter struct {
	b     []byte
	off   int
	n     int
	i     int
	rec   Record
	err   error
	index int // index of the record last returned, -1 before the first
}

// NewIter checks the batch header and returns an iterator over its records.
func NewIter(b []byte) (Iter, error) {
	n, err := BatchCount(b)
	if err != nil {
		return Iter{}, err
	}
	return Iter{b: b, off: BatchHeaderSize, n: n, index: -1}, nil
}

// NewRangeIter returns an iterator over the n records that batch b holds
// in bytes [from, to): a run of whole records, from the Offset an Iter
// over b reported before the run's first record (BatchHeaderSize for the
// batch's first) to the one it reported after its last. Its Index counts
// from 0 at the run's first record; it stops with an error where those
// bytes are not exactly n well-formed records.
func NewRangeIter(b []byte, from, to, n int) (Iter, error) {
	if from < BatchHeaderSize || from > to || to > len(b) || n < 0 {
		return Iter{}, &BatchError{Offset: from, Record: -1, Reason: fmt.Sprintf("a run of %d records in bytes %d to %d of a batch of %d bytes", n, from, to, len(b))}
	}
	return Iter{b: b[:to], off: from, n: n, index: -1}, nil
}

// Count is the number of records the batch declares.
func (it *Iter) Count() int { return it.n }

// Index is the index of the record Record returns, -1 before the first Next.
func (it *Iter) Index() int { return it.index }

// Next advances to the next record. It returns false at the end of the batch
// or at the first malformed record; Err tells which.
func (it *Iter) Next() bool {
	if it.err != nil {
		return false
	}
	if it.i == it.n {
		if it.off != len(it.b) {
			it.err = &BatchError{Offset: it.off, Record: it.n, Reason: fmt.Sprintf("%d trailing bytes after the last record", len(it.b)-it.off)}
		}
		return false
	}
	b, off := it.b, it.off
	if len(b)-off < RecordHeaderSize {
		it.err = &BatchError{Offset: off, Record: it.i, Reason: "record header passes the end of the batch"}
		return false
	}
	kl := uint64(binary.LittleEndian.Uint32(b[off:]))
	vl := uint64(binary.LittleEndian.Uint32(b[off+4:]))
	ts := int64(binary.LittleEndian.Uint64(b[off+8:]))
	start := uint64(off) + RecordHeaderSize
	if start+kl+vl > uint64(len(b)) {
		it.err = &BatchError{Offset: off, Record: it.i, Reason: fmt.Sprintf("key of %d and value of %d bytes pass the end of the batch", kl, vl)}
		return false
	}
	ks := int(start)
	ke := ks + int(kl)
	ve := ke + int(vl)
	it.rec = Record{Key: b[ks:ke:ke], Value: b[ke:ve:ve], Timestamp: ts}
	it.off = ve
	it.index = it.i
	it.i++
	return true
}

// Offset is the byte offset in the batch just past the record Next last
// returned (BatchHeaderSize before the first): where the rest begins.
func (it *Iter) Offset() int { return it.off }

// Record returns the current record; its slices alias the batch.
func (it *Iter) Record() Record { return it.rec }

// Err returns the error that stopped the iteration, if any.
func (it *Iter) Err() error { return it.err }

// RecordSize is the number of bytes a record with the given key and value
// lengths takes in a batch.
func RecordSize(keyLen, valueLen int) int { return RecordHeaderSize + keyLen + valueLen }

// AppendRecord appends one encoded record (header, key, value) to dst. It does
// not touch a batch count; Builder does that.
func AppendRecord(dst []byte, key, value []byte, ts int64) []byte {
	var h [RecordHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(h[4:], uint32(len(value)))
	binary.LittleEndian.PutUint64(h[8:], uint64(ts))
	dst = append(dst, h[:]...)
	dst = append(dst, key...)
	return append(dst, value...)
}

// Builder accumulates records into one batch. The zero value is ready to use.
// A Builder reuses its buffer across Reset calls.
type Builder struct {
	buf []byte
	n   uint32
}

// Reset empties the builder, keeping its buffer.
func (b *Builder) Reset() {
	b.buf = b.buf[:0]
	b.n = 0
}

// Add appends a record.
func (b *Builder) Add(key, value []byte, ts int64) {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	b.buf = AppendRecord(b.buf, key, value, ts)
	b.n++
}

// AddRecord appends r.
func (b *Builder) AddRecord(r Record) { b.Add(r.Key, r.Value, r.Timestamp) }

// Len is the number of records added since the last Reset.
func (b *Builder) Len() int { return int(b.n) }

// Size is the size in bytes of the batch Bytes would return.
func (b *Builder) Size() int {
	if len(b.buf) == 0 {
		return BatchHeaderSize
	}
	return len(b.buf)
}

// Bytes returns the encoded batch. It aliases the builder's buffer and is
// valid until the next Add or Reset.
func (b *Builder) Bytes() []byte {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(b.buf, b.n)
	return b.buf
}

// EncodeBatch encodes records into a new batch.
func EncodeBatch(records ...Record) []byte {
	size := BatchHeaderSize
	for _, r := range records {
		size += RecordSize(len(r.Key), len(r.Value))
	}
	out := make([]byte, BatchHeaderSize, size)
	binary.LittleEndian.PutUint32(out, uint32(len(records)))
	for _, r := range records {
		out = AppendRecord(out, r.Key, r.Value, r.Timestamp)
	}
	return out
}

// DecodeBatch decodes a batch into records that alias b.
func DecodeBatch(b []byte) ([]Record, error) {
	it, err := NewIter(b)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, it.Count())
	for it.Next() {
		out = append(out, it.Record())
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// SplitBatch cuts a well-formed batch into batches of at most max bytes
// each, at record boundaries and in order; a record too large for max goes
// into a batch of its own. A batch within max is returned as it is (not
// copied); the pieces of a larger one are fresh copies.
func SplitBatch(b []byte, max int) ([][]byte, error) {
	if len(b) <= max {
		return [][]byte{b}, nil
	}
	it, err := NewIter(b)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	start, n := BatchHeaderSize, 0 // the records of the piece being cut
	cut := func(end int) {
		p := make([]byte, BatchHeaderSize+end-start)
		binary.LittleEndian.PutUint32(p, uint32(n))
		copy(p[BatchHeaderSize:], b[start:end])
		out = append(out, p)
		start, n = end, 0
	}
	prev := BatchHeaderSize
	for it.Next() {
		if n > 0 && BatchHeaderSize+it.Offset()-start > max {
			cut(prev)
		}
		n++
		prev = it.Offset()
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if n > 0 {
		cut(prev)
	}
	return out, nil
}
