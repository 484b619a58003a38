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
