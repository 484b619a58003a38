package wasm

import (
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultMaxCacheBytes bounds the on-disk compilation cache unless
// Config.MaxCacheBytes says otherwise: a compiled Go operator takes about
// 16 MB (the bound holds some 60), a Rust, C or AssemblyScript one far
// less.
const DefaultMaxCacheBytes = 1 << 30

// staleTemp is how old a temporary file of the cache must be to be taken
// for one a crashed compile left behind: younger, it may be one another
// process is writing, whose compile would fail if it were removed.
const staleTemp = time.Hour

// cacheEntry is one file of the on-disk compilation cache.
type cacheEntry struct {
	path string
	size int64
	used time.Time // when it was last written or read (lastUsed)
}

// lastUsed is when the cache file info describes was last written, or
// read where the file system says so and that is later (accessed).
func lastUsed(info fs.FileInfo) time.Time {
	if at := accessed(info); at.After(info.ModTime()) {
		return at
	}
	return info.ModTime()
}

// trimCache removes entries of the compilation cache in dir, least
// recently used first, while it holds more than limit bytes, down to three
// quarters of limit (so that the compiles after a trim do not each trim
// again). It touches only what wazero writes there: in each subdirectory
// named wazero-VERSION-ARCH-OS, files named by a 64-digit hex key, and
// temporary files of such a name older than staleTemp. Removing an entry
// is safe at any time, from any process sharing the directory: wazero
// writes an entry to a temporary file and renames it into place, and
// reads it through an open file, so a removed entry is one the next
// compile of its module misses, and compiles again. It returns the bytes
// the cache holds after the trim.
//
// An entry's last use is when it was written or, where the file system
// records it, last read (wazero reads an entry without another trace weir
// could use). Linux's default relatime records a read a day late at most:
// an entry in use stays before the ones not read for longer. Where reads
// are not recorded (noatime, or another system), the order is by when an
// entry was written, and an entry in use that was written long ago goes
// first: its module is compiled once more.
func trimCache(dir string, limit int64) int64 {
	var entries []cacheEntry
	var total int64
	subs, _ := filepath.Glob(filepath.Join(dir, "wazero-*"))
	for _, sub := range subs {
		files, err := os.ReadDir(sub)
		if err != nil {
			continue
		}
		for _, f := range files {
			name := f.Name()
			key, rest, _ := strings.Cut(name, ".")
			if len(key) != 64 || !isHex(key) || (rest != "" && !strings.HasSuffix(rest, ".tmp")) {
				continue
			}
			info, err := f.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			if rest != "" && time.Since(info.ModTime()) < staleTemp {
				continue // perhaps being written
			}
			entries = append(entries, cacheEntry{filepath.Join(sub, name), info.Size(), lastUsed(info)})
			total += info.Size()
		}
	}
	if limit < 0 || total <= limit {
		return total
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].used.Before(entries[j].used) })
	for _, e := range entries {
		if total <= limit-limit/4 {
			break
		}
		if err := os.Remove(e.path); err == nil || os.IsNotExist(err) {
			total -= e.size
		}
	}
	return total
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}
