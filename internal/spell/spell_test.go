package spell

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"inputs", "parallelism", "keysum", "ls", "rm"}
	for _, c := range []struct{ word, want string }{
		{"inptus", "inputs"}, // a swap is one edit
		{"paralelism", "parallelism"},
		{"keysm", "keysum"},
		{"lst", ""},   // one edit from "ls" is half its length: too far
		{"x", ""},     // two edits to "ls" or "rm" is more than half of them
		{"doomd", ""}, // nothing near
		{"inputs", "inputs"},
	} {
		if got := Closest(c.word, names); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
	if d := editDistance("inptus", "inputs"); d != 1 {
		t.Errorf("editDistance(inptus, inputs) = %d, want 1 (a swap)", d)
	}
}
