//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockFile is the file in a data directory that a node holds locked.
const lockFile = "weir.lock"

// lockDataDir takes an exclusive lock on dir (creating it), so that two
// weir processes never run on one data directory. The lock goes with the
// process: a crashed weir leaves none behind. unlock releases it.
//
// The lock is on the directory itself, which cannot be swapped from under
// it (an SRE trial deleted the lock file, and a second weir up then ran on
// the same store); the lock file beside it, locked too, says which
// process holds it.
//
// discard, called instead of unlock by a node that failed to start (a
// port in use), removes what lockDataDir created — the lock file, and dir
// if it made it and nothing else is in it — and releases the lock.
func lockDataDir(dir string) (unlock, discard func(), err error) {
	_, statErr := os.Stat(dir)
	madeDir := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	_, statErr = os.Stat(path)
	madeFile := errors.Is(statErr, fs.ErrNotExist)
	d, err := os.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("data directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("data directory: %w", err)
	}
	err = syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		}
	}
	if err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another weir process"
			if pid := string(bytes.TrimSpace(owner)); pid != "" {
				who += " (pid " + pid + ")"
			}
			return nil, nil, fmt.Errorf("data directory %s is in use by %s: %w", dir, who, ErrDataDirInUse)
		}
		return nil, nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	unlock = func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}
	discard = func() {
		if madeFile {
			_ = os.Remove(path) // still locked: no other weir has it
		}
		unlock()
		if madeDir {
			_ = os.Remove(dir) // only if empty
		}
	}
	return unlock, discard, nil
}
