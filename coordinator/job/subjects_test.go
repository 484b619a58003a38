package job

import "testing"

func TestSubjectsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"counts", "counts", true},
		{"counts", "other", false},
		{"lines.>", "lines.a", true},
		{"lines.>", "lines", false},
		{"lines.>", "nolines.>", false},
		{"lines.*", "lines.a.b", false},
		{"lines.*", "lines.>", true},
		{"lines.*.x", "lines.a.*", true},
		{"lines.*.x", "lines.a.y", false},
		{">", "anything.at.all", true},
		{"a.b", "a.b.c", false},
	} {
		if got := subjectsOverlap(c.a, c.b); got != c.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := subjectsOverlap(c.b, c.a); got != c.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}
