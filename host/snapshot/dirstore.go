package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DirStore keeps checkpoint objects as files under a directory: key
// "chk-7/join-0" is the file <dir>/chk-7/join-0. Put writes a temporary file,
// fsyncs it, renames it into place and fsyncs the directory, so a reader (or
// a restart after a crash) sees a whole object or none. It satisfies
// host.Store.
type DirStore struct {
	dir string
}

// NewDirStore returns a store rooted at dir, creating it.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	return &DirStore{dir: dir}, nil
}

// Dir returns the root directory.
func (s *DirStore) Dir() string { return s.dir }

func (s *DirStore) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") {
		return "", fmt.Errorf("checkpoint store: bad key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".tmp-") {
			return "", fmt.Errorf("checkpoint store: bad key %q", key)
		}
	}
	return filepath.Join(s.dir, filepath.FromSlash(key)), nil
}

// Put stores r's bytes under key atomically and durably.
func (s *DirStore) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint store: put %s: fsync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("checkpoint store: put %s: fsync dir: %w", key, err)
		}
	}
	return nil
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Get opens the object under key; a missing key wraps fs.ErrNotExist.
func (s *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: get %s: %w", key, err)
	}
	return f, nil
}

// List returns the keys starting with prefix, sorted.
func (s *DirStore) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		if k := filepath.ToSlash(rel); strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: list %q: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Delete removes every object whose key starts with prefix, and the
// directories left empty.
func (s *DirStore) Delete(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, k := range keys {
		p := filepath.Join(s.dir, filepath.FromSlash(k))
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checkpoint store: delete %s: %w", k, err)
		}
		for d := filepath.Dir(p); d != s.dir && strings.HasPrefix(d, s.dir); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	// Remove emptied directories, deepest first; non-empty ones stay.
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return len(ds[i]) > len(ds[j]) })
	for _, d := range ds {
		os.Remove(d)
	}
	return nil
}
