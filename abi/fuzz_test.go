package abi

import (
	"bytes"
	"testing"
)

// FuzzDecodeBatch feeds arbitrary bytes to the decoder: it must never panic,
// and whatever it accepts must re-encode to the same bytes.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(EmptyBatch)
	f.Add(EncodeBatch(Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 7}))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := DecodeBatch(b)
		if err != nil {
			return
		}
		n, err := ValidateBatch(b)
		if err != nil || n != len(recs) {
			t.Fatalf("DecodeBatch accepted what ValidateBatch refused: %v", err)
		}
		if re := EncodeBatch(recs...); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", re, b)
		}
	})
}

// FuzzRangeIter reads arbitrary runs of arbitrary bytes: it never panics,
// and a run it reads whole holds exactly the records a batch of just those
// bytes would.
func FuzzRangeIter(f *testing.F) {
	b := EncodeBatch(Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 7}, Record{Value: []byte("w")})
	f.Add(b, 4, len(b), 2)
	f.Add(b, 22, len(b), 1)
	f.Add(b, 4, 22, 1)
	f.Add([]byte{1, 0, 0, 0}, 4, 4, 0)
	f.Fuzz(func(t *testing.T, b []byte, from, to, n int) {
		it, err := NewRangeIter(b, from, to, n)
		if err != nil {
			return
		}
		var recs []Record
		for it.Next() {
			recs = append(recs, it.Record())
		}
		if it.Err() != nil {
			return
		}
		if len(recs) != n {
			t.Fatalf("read %d records of %d", len(recs), n)
		}
		whole := EncodeBatch(recs...)
		if !bytes.Equal(whole[BatchHeaderSize:], b[from:to]) {
			t.Fatalf("records re-encode differently:\n got %x\nwant %x", whole[BatchHeaderSize:], b[from:to])
		}
	})
}

// FuzzKeyedEntries feeds arbitrary bytes (state comes back from checkpoint
// storage) to the keyed state parser: it never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzKeyedEntries(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte(KeyedStateMagic))
	f.Add(AppendKeyedEntry(AppendKeyedEntry([]byte(KeyedStateMagic), []byte("k1"), []byte("v1")), nil, []byte("v")))
	f.Add([]byte("WKS1\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("WKS2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		re := []byte(KeyedStateMagic)
		err := KeyedEntries(b, func(k, v []byte) error {
			re = AppendKeyedEntry(re, k, v)
			return nil
		})
		if err != nil || len(b) == 0 {
			return
		}
		// The reserved field is not kept: compare entries, not bytes.
		var a, c [][2]string
		_ = KeyedEntries(b, func(k, v []byte) error { a = append(a, [2]string{string(k), string(v)}); return nil })
		_ = KeyedEntries(re, func(k, v []byte) error { c = append(c, [2]string{string(k), string(v)}); return nil })
		if len(a) != len(c) {
			t.Fatalf("%x: %d entries re-encoded as %d", b, len(a), len(c))
		}
		for i := range a {
			if a[i] != c[i] {
				t.Fatalf("%x: entry %d %q re-encoded as %q", b, i, a[i], c[i])
			}
		}
	})
}

// FuzzSplitBatch: SplitBatch never panics, refuses what the decoder
// refuses, and its pieces hold the batch's records in order, each within
// max or a single record.
func FuzzSplitBatch(f *testing.F) {
	f.Add(EncodeBatch(Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 7}, Record{Value: []byte("second")}), 20)
	f.Add([]byte{1, 0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		parts, err := SplitBatch(b, max)
		recs, derr := DecodeBatch(b)
		if len(b) <= max {
			return // handed back unchecked
		}
		if (err == nil) != (derr == nil) {
			t.Fatalf("SplitBatch error %v, DecodeBatch error %v", err, derr)
		}
		if err != nil {
			return
		}
		var all []Record
		for _, p := range parts {
			rs, err := DecodeBatch(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) > max && len(rs) != 1 {
				t.Fatalf("a piece of %d bytes (max %d) holds %d records", len(p), max, len(rs))
			}
			all = append(all, rs...)
		}
		if len(all) != len(recs) || !bytes.Equal(EncodeBatch(all...), EncodeBatch(recs...)) {
			t.Fatal("the pieces do not hold the batch's records in order")
		}
	})
}
