package checkpoint

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the metadata decoder: it must never
// panic, and whatever it accepts must re-encode to metadata that decodes
// the same.
func FuzzDecode(f *testing.F) {
	good, err := Encode(&Metadata{Job: "j", ID: 3, Triggered: at(0), Completed: at(5),
		Handles: map[string]string{"a-0": "j/chk-3/a-0"}, Metrics: map[string]map[string]int64{"a-0": {"state_bytes": 4}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"checksum":"sha256:00","metadata":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		md, err := Decode(data)
		if err != nil {
			return
		}
		re, err := Encode(md)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		md2, err := Decode(re)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		a, _ := Encode(md2)
		if !bytes.Equal(a, re) {
			t.Fatalf("not stable:\n%s\n%s", a, re)
		}
	})
}
