package sink

import (
	"bytes"
	"testing"

	"github.com/weirhq/weir/abi"
)

// FuzzDecodeState feeds arbitrary bytes to the staged-state decoder (the
// bytes come back from checkpoint storage): it must never panic, and state
// it accepts re-encodes to the same bytes.
func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState([]staged{{id: 1, batch: batchOf(0, 2)}, {id: 3, batch: abi.EmptyBatch}}))
	f.Add(encodeState(nil))
	f.Add([]byte("WEOS\x01\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil || len(b) == 0 {
			return
		}
		if again := encodeState(st); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, again)
		}
	})
}
