package storage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A prefix naming a directory outside the root reaches nothing: neither
// List nor Delete walk or remove files beside the store's directory.
func TestDirPrefixStaysInside(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	outside := filepath.Join(parent, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "precious")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := NewDir(filepath.Join(parent, "store"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"../", "../outside/", "../outside/prec", "a/../../outside/"} {
		keys, err := s.List(ctx, prefix)
		if len(keys) != 0 {
			t.Errorf("List(%q) = %v, %v: keys outside the store", prefix, keys, err)
		}
		if err == nil || !errors.Is(err, ErrBadKey) {
			t.Errorf("List(%q) error = %v, want ErrBadKey", prefix, err)
		}
		if err := s.Delete(ctx, prefix); !errors.Is(err, ErrBadKey) {
			t.Errorf("Delete(%q) = %v, want ErrBadKey", prefix, err)
		}
		if _, err := os.Stat(victim); err != nil {
			t.Fatalf("Delete(%q) removed a file outside the store: %v", prefix, err)
		}
	}
}

// A Put cut off by a crash leaves its temporary file; deleting the
// checkpoint's prefix removes it with the rest, and the emptied directory.
func TestDirDeleteRemovesLeftoverTempFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "j/chk-1/a-0", strings.NewReader("whole")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "j/chk-2/a-0", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	// What a process killed in the middle of Put("j/chk-1/b-0") leaves.
	partial := filepath.Join(root, "j", "chk-1", ".tmp-123456")
	if err := os.WriteFile(partial, bytes.Repeat([]byte("s"), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.List(ctx, "j/chk-1/"); err != nil || len(keys) != 1 {
		t.Fatalf("list = %v, %v: the partial file is not an object", keys, err)
	}
	if err := s.Delete(ctx, "j/chk-1/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "j", "chk-1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("discarded checkpoint's directory still there (with the partial snapshot): %v", err)
	}
	if got, err := ReadAll(ctx, s, "j/chk-2/a-0"); err != nil || string(got) != "kept" {
		t.Errorf("other checkpoint: %q, %v", got, err)
	}
}

// A root given as an unclean relative path ("./a//b/") works like the clean
// one: Put creates the key's directories, Delete removes the emptied ones,
// and a root removed behind the store's back is made again.
func TestDirUncleanRoot(t *testing.T) {
	ctx := context.Background()
	t.Chdir(t.TempDir())
	s, err := NewDir("./a//b/")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "job/1/task-0", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("a", "b", "job", "1", "task-0")); err != nil {
		t.Fatalf("object not where the root says: %v", err)
	}
	if err := s.Delete(ctx, "job/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("a", "b", "job")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("emptied directory left behind: %v", err)
	}
	if err := os.RemoveAll("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "job/2/task-0", strings.NewReader("y")); err != nil {
		t.Fatalf("Put after the root was removed: %v", err)
	}
}
