package wasm

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// The compilation cache is trimmed least recently used first: an entry
// written long ago but read since (its module deployed again) stays, and
// entries written later but never read go before it.
func TestTrimCacheKeepsAnEntryReadSince(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("reads are taken into account where the file system records them, on Linux")
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "wazero-v1.12.0-amd64-linux")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	entry := func(c string, written, read time.Time) string {
		p := filepath.Join(sub, strings.Repeat(c, 64))
		if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, read, written); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inUse := entry("a", now.Add(-3*time.Hour), now.Add(-time.Minute))
	unread := entry("b", now.Add(-2*time.Hour), now.Add(-2*time.Hour))
	newer := entry("c", now.Add(-time.Hour), now.Add(-time.Hour))
	if n := trimCache(dir, 250); n != 100 {
		t.Fatalf("the cache holds %d bytes after the trim, want 100", n)
	}
	for _, c := range []struct {
		path string
		kept bool
	}{{inUse, true}, {unread, false}, {newer, false}} {
		if _, err := os.Stat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path)[:1], err == nil, c.kept)
		}
	}
}
