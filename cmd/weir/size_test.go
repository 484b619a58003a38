package main

import "testing"

// size picks the largest binary unit the count reaches, up to GiB: a
// checkpoint of 42 GiB is not 43008.0 MiB.
func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		0:                "0 B",
		1023:             "1023 B",
		1536:             "1.5 KiB",
		5 << 20:          "5.0 MiB",
		42<<30 + 512<<20: "42.5 GiB",
	} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}
