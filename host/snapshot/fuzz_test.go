package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, and
// whatever it accepts must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sample()))
	f.Add(Encode(&Task{Task: "t"}))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		task, err := Decode(b)
		if err != nil {
			return
		}
		if again := Encode(task); !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes do not re-encode identically")
		}
	})
}

// FuzzReadElement checks the element decoder alone (the spill-file format).
func FuzzReadElement(f *testing.F) {
	for _, c := range sample().Outputs[0].Elements {
		f.Add(AppendElement(nil, c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, n, err := ReadElement(b)
		if err != nil {
			return
		}
		if again := AppendElement(nil, e); !bytes.Equal(again, b[:n]) {
			t.Fatalf("element does not re-encode identically")
		}
	})
}

// FuzzDecodeBody is FuzzDecode past the checksum: the bytes get a matching
// CRC-32C appended, so that mutations reach the parser behind it (almost
// none of FuzzDecode's inputs pass the checksum).
func FuzzDecodeBody(f *testing.F) {
	for _, t := range []*Task{sample(), {Task: "t"}} {
		b := Encode(t)
		f.Add(b[:len(b)-4])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
		task, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
		}
		if again := Encode(task); !bytes.Equal(again, b) {
			t.Fatalf("accepted bytes do not re-encode identically")
		}
	})
}
