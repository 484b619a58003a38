//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package node

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A data directory is held by one process: a second lock is refused
// naming the holder's pid, also after the lock file was deleted (an SRE
// trial then ran a second weir up on the same store), and the lock comes
// free when released.
func TestDataDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	unlock, _, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "data directory " + dir + " is in use by another weir process (pid " + strconv.Itoa(os.Getpid()) + "): one weir process per data directory"
	if _, _, err := lockDataDir(dir); !errors.Is(err, ErrDataDirInUse) || err.Error() != want {
		t.Errorf("second lock: %v; want %s", err, want)
	}
	if err := os.Remove(filepath.Join(dir, lockFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lockDataDir(dir); !errors.Is(err, ErrDataDirInUse) {
		t.Errorf("lock after the lock file was deleted: %v; want %v", err, ErrDataDirInUse)
	}
	unlock()
	again, _, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after the release: %v", err)
	}
	again()
}
