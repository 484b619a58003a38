package sink

import (
	"bytes"
	"testing"

	"github.com/weirhq/weir/abi"
)

// FuzzDecodeState feeds arbitrary bytes to the staged-state decoder (the
// bytes come back from checkpoint storage): it must never panic, state it
// accepts re-encodes (as the current version) to state that decodes to the
// same entries, and current-version state re-encodes to the same bytes.
func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState([]staged{{id: 1, batch: batchOf(0, 2)}, {id: 3, batch: abi.EmptyBatch}}))
	f.Add(encodeState([]staged{{id: 2, batch: batchOf(0, 3), chunk: 2, chunkBytes: 100}}))
	f.Add(encodeState([]staged{{id: 4, at: 1, batch: batchOf(0, 3), subject: "out.{key}"}, {id: 5, at: 2, batch: batchOf(3, 4), subject: "orders"}}))
	f.Add(encodeState([]staged{{id: 6, at: 3, batch: batchOf(0, 3), subject: "out.{key}", stream: "OUT"}, {id: 7, at: 4, batch: batchOf(3, 4), chunk: 10, subject: "orders", stream: "ORDERS"}}))
	f.Add(encodeState([]staged{{id: 6, ref: 7, subject: "out", stream: "OUT"}, {id: 7, at: 4, batch: batchOf(3, 4), stream: "OUT"}}))
	f.Add(appendState(nil, []staged{{id: 8, home: 9, batch: batchOf(0, 2)}, {id: 9, batch: batchOf(2, 3)}}, true))
	f.Add(encodeState(nil))
	f.Add([]byte("WEOS\x01\xff\xff\xff\xff"))
	f.Add([]byte("WEOS\x02\xff\xff\xff\xff"))
	f.Add([]byte("WEOS\x04\xff\xff\xff\xff"))
	f.Add([]byte("WEOS\x05\xff\xff\xff\xff"))
	f.Add([]byte("WEOS\x06\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil || len(b) == 0 {
			return
		}
		again := encodeState(st)
		if b[4] == stateVersion && !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, again)
		}
		st2, err := decodeState(again)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if len(st2) != len(st) {
			t.Fatalf("re-encoded state has %d entries, want %d", len(st2), len(st))
		}
		for i := range st {
			a, c := st[i], st2[i]
			if a.id != c.id || a.at != c.at || a.chunk != c.chunk || a.chunkBytes != c.chunkBytes || a.subject != c.subject || a.stream != c.stream || a.ref != c.ref || !bytes.Equal(a.batch, c.batch) {
				t.Fatalf("entry %d: %+v, re-decoded %+v", i, a, c)
			}
		}
	})
}
