package snapshot

import (
	"bytes"
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
