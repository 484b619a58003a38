package modref

import "testing"

func TestParse(t *testing.T) {
	d := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	good := []struct {
		in   string
		want Ref
	}{
		{"wordcount", Ref{Kind: Registry, Name: "wordcount"}},
		{"wordcount@3", Ref{Kind: Registry, Name: "wordcount", Version: 3}},
		{"sha256:" + d, Ref{Kind: Digest, Digest: d}},
		{"./op.wasm", Ref{Kind: File, Path: "./op.wasm"}},
		{"op.wasm", Ref{Kind: File, Path: "op.wasm"}},
		{"upper.rs", Ref{Kind: File, Path: "upper.rs"}},
		{"upper.c", Ref{Kind: File, Path: "upper.c"}},
		{"upper.ts", Ref{Kind: File, Path: "upper.ts"}},
		{"upper.wat", Ref{Kind: File, Path: "upper.wat"}},
		{"/abs/x", Ref{Kind: File, Path: "/abs/x"}},
		{".", Ref{Kind: File, Path: "."}},
		{"..", Ref{Kind: File, Path: ".."}},
	}
	for _, c := range good {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if got.String() != c.in {
			t.Errorf("String() = %q, want %q", got.String(), c.in)
		}
	}
	for _, bad := range []string{"", "1abc", "a@0", "a@x", "a@", "sha256:xyz", "sha256:" + d[:10], "a b"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
