package modref

import "testing"

// FuzzParse: Parse never panics, and what it accepts prints back to a
// reference that parses to the same thing.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"wc", "wc@3", "./a.wasm", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "a@", "@1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		r2, err := Parse(r.String())
		if err != nil || r2 != r {
			t.Fatalf("Parse(%q) = %+v; reparse of %q = %+v, %v", s, r, r.String(), r2, err)
		}
	})
}
