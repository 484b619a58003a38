//go:build unix

package main

import (
	"syscall"
	"testing"
)

// mkfifo makes a named pipe at path: a file weir run reads as the test
// writes it.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}
