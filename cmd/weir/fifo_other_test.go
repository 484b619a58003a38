//go:build !unix

package main

import "testing"

// mkfifo skips the test: named pipes are a Unix thing.
func mkfifo(t *testing.T, path string) {
	t.Skip("needs a named pipe (Unix)")
}
