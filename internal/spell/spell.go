// Package spell finds the name a mistyped word most likely means, for the
// "did you mean" of weir's messages.
package spell

import "slices"

// Closest returns the name of names that word most likely misspells —
// at most two edits (a swap of neighbours counting as one) and fewer than
// half its length — or "": a job or vertex name a command was given
// that names none.
func Closest(word string, names []string) string {
	best, bestD := "", 3
	for _, n := range slices.Sorted(slices.Values(names)) {
		if d := editDistance(word, n); d < bestD && 2*d < len(n) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
