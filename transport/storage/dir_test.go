package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
