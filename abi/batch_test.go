package abi

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	recs := []Record{
		{Key: []byte("k1"), Value: []byte("hello"), Timestamp: 1},
		{Key: nil, Value: []byte("no key"), Timestamp: -5},
		{Key: []byte("k3"), Value: nil, Timestamp: 1 << 40},
	}
	var b Builder
	for _, r := range recs {
		b.AddRecord(r)
	}
	enc := b.Bytes()
	if !bytes.Equal(enc, EncodeBatch(recs...)) {
		t.Fatalf("Builder and EncodeBatch disagree")
	}
	if b.Size() != len(enc) {
		t.Fatalf("Size %d != len %d", b.Size(), len(enc))
	}
	got, err := DecodeBatch(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("got %d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if !bytes.Equal(got[i].Key, recs[i].Key) || !bytes.Equal(got[i].Value, recs[i].Value) || got[i].Timestamp != recs[i].Timestamp {
			t.Errorf("record %d: got %+v want %+v", i, got[i], recs[i])
		}
	}
	b.Reset()
	if n, err := ValidateBatch(b.Bytes()); err != nil || n != 0 {
		t.Fatalf("empty builder: %d, %v", n, err)
	}
}

func TestIterOffset(t *testing.T) {
	b := EncodeBatch(Record{Key: []byte("a"), Value: []byte("1")}, Record{Key: []byte("bb")}, Record{Value: []byte("ccc")})
	it, err := NewIter(b)
	if err != nil || it.Offset() != BatchHeaderSize {
		t.Fatalf("before the first record: %d, %v", it.Offset(), err)
	}
	for _, want := range []int{22, 40, 59} {
		if !it.Next() || it.Offset() != want {
			t.Fatalf("after record %d: offset %d, want %d", it.Index(), it.Offset(), want)
		}
	}
	if it.Next() || it.Err() != nil || it.Offset() != len(b) {
		t.Fatalf("at the end: offset %d, err %v", it.Offset(), it.Err())
	}
}

func TestRangeIter(t *testing.T) {
	b := EncodeBatch(Record{Key: []byte("a"), Value: []byte("1")}, Record{Key: []byte("bb"), Timestamp: 5}, Record{Value: []byte("ccc")})
	// Records 1 and 2: from the offset after record 0 to the end.
	it, err := NewRangeIter(b, 22, len(b), 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for it.Next() {
		r := it.Record()
		got = append(got, fmt.Sprintf("%d:%s=%s@%d", it.Index(), r.Key, r.Value, r.Timestamp))
	}
	if it.Err() != nil || fmt.Sprint(got) != "[0:bb=@5 1:=ccc@0]" {
		t.Fatalf("got %v, %v", got, it.Err())
	}
	// Record 1 alone.
	it, _ = NewRangeIter(b, 22, 40, 1)
	if !it.Next() || string(it.Record().Key) != "bb" || it.Next() || it.Err() != nil {
		t.Fatalf("record 1 alone: %v", it.Err())
	}
	// A run that is not n whole records ends with an error.
	for _, r := range [][3]int{{22, 40, 2}, {22, len(b), 1}, {22, 39, 1}, {23, 40, 1}} {
		it, err := NewRangeIter(b, r[0], r[1], r[2])
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		for it.Next() {
		}
		if !errors.Is(it.Err(), ErrMalformedBatch) {
			t.Errorf("%v: err = %v, want ErrMalformedBatch", r, it.Err())
		}
	}
	// Bounds outside the batch are refused.
	for _, r := range [][3]int{{0, 22, 1}, {40, 22, 1}, {22, len(b) + 1, 1}, {22, 40, -1}} {
		if _, err := NewRangeIter(b, r[0], r[1], r[2]); !errors.Is(err, ErrMalformedBatch) {
			t.Errorf("%v: err = %v, want ErrMalformedBatch", r, err)
		}
	}
}

func TestBatchErrors(t *testing.T) {
	good := EncodeBatch(Record{Key: []byte("a"), Value: []byte("bc")})
	cases := map[string][]byte{
		"short header":   {1, 0},
		"count too big":  {200, 0, 0, 0, 1, 2, 3},
		"truncated body": good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 9),
		"huge key": func() []byte {
			b := append([]byte{}, good...)
			b[4], b[5], b[6], b[7] = 0xff, 0xff, 0xff, 0xff
			return b
		}(),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ValidateBatch(b)
			if !errors.Is(err, ErrMalformedBatch) {
				t.Fatalf("err = %v, want ErrMalformedBatch", err)
			}
			var be *BatchError
			if !errors.As(err, &be) {
				t.Fatalf("not a *BatchError: %T", err)
			}
		})
	}
}

func BenchmarkIter1024(b *testing.B) {
	var bl Builder
	v := bytes.Repeat([]byte("x"), 48)
	for i := 0; i < 1024; i++ {
		bl.Add([]byte(fmt.Sprintf("key-%04d", i)), v, int64(i))
	}
	enc := bl.Bytes()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		it, _ := NewIter(enc)
		for it.Next() {
		}
	}
}

// SplitBatch keeps every record once, in order, in pieces within max
// (a record larger than max alone), and hands a small batch back as it is.
func TestSplitBatch(t *testing.T) {
	var recs []Record
	for i := range 50 {
		recs = append(recs, Record{Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{'v'}, i*7), Timestamp: int64(i)})
	}
	recs = append(recs, Record{Value: bytes.Repeat([]byte{'x'}, 5000)}, Record{Key: []byte("last")})
	b := EncodeBatch(recs...)
	if got, _ := SplitBatch(b, len(b)); len(got) != 1 || &got[0][0] != &b[0] {
		t.Fatal("a batch within max was not returned as it is")
	}
	for _, max := range []int{1, 100, 512, 4096} {
		parts, err := SplitBatch(b, max)
		if err != nil {
			t.Fatal(err)
		}
		var all []Record
		for _, p := range parts {
			rs, err := DecodeBatch(p)
			if err != nil {
				t.Fatalf("max %d: a piece does not decode: %v", max, err)
			}
			if len(p) > max && len(rs) != 1 {
				t.Fatalf("max %d: a piece of %d bytes holds %d records", max, len(p), len(rs))
			}
			all = append(all, rs...)
		}
		if !bytes.Equal(EncodeBatch(all...), b) {
			t.Fatalf("max %d: the pieces do not hold the batch's records in order", max)
		}
	}
	if _, err := SplitBatch([]byte{9, 0, 0, 0, 1, 2}, 2); err == nil {
		t.Fatal("a malformed batch was split")
	}
}
