// Command uppercase is a stateless weir operator: it turns the ASCII
// letters a-z of each record's value into A-Z and emits the record on port
// 0 with its key and timestamp unchanged.
package main

import (
	"encoding/binary"

	"github.com/weirhq/weir/guests/go/weir"
)

type uppercase struct {
	buf []byte // scratch for the converted value, reused across records
}

func (u *uppercase) Init(config []byte) error { return nil }

// Every byte of a uint64 at once.
const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// upper8 converts the ASCII letters a-z among the 8 bytes of x to A-Z.
// Converting 8 bytes per step matters on wasm, where Go pays ~2 ns for
// every loop iteration; every language's uppercase example does the same,
// so that guests/conformance compares like with like.
func upper8(x uint64) uint64 {
	h := x &^ high              // each byte's low 7 bits (no carry between bytes below)
	ge := h + ones*(0x80-'a')   // high bit set: those bits >= 'a'
	gt := h + ones*(0x80-'z'-1) // high bit set: those bits > 'z'
	m := ge &^ gt &^ x & high   // high bit set: 'a' <= byte <= 'z' (an ASCII byte)
	return x ^ m>>2             // 0x80>>2 is 0x20, the case bit
}

func (u *uppercase) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		v := r.Value
		if cap(u.buf) < len(v) {
			u.buf = make([]byte, len(v))
		}
		buf := u.buf[:len(v)]
		i := 0
		for ; i+8 <= len(v); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], upper8(binary.LittleEndian.Uint64(v[i:])))
		}
		for ; i < len(v); i++ {
			c := v[i]
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			buf[i] = c
		}
		out.Emit(0, r.Key, buf, r.Timestamp)
	}
	return nil
}

func (u *uppercase) Snapshot(w *weir.StateWriter) error { return nil }
func (u *uppercase) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(&uppercase{}) }

func main() {}
