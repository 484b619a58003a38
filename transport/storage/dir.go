package storage

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

// Dir stores objects as files under a root directory; key segments become
// subdirectories.
type Dir struct {
	root string
}

// NewDir returns a store rooted at root, creating it if needed.
func NewDir(root string) (*Dir, error) {
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("storage dir: %w", err)
	}
	return &Dir{root: root}, nil
}

// Root returns the directory.
func (d *Dir) Root() string { return d.root }

// Location names the directory with the machine it is on ("dir
// HOST:/ABS/PATH"): a directory is reached from its own machine only.
func (d *Dir) Location() string {
	host, _ := os.Hostname()
	abs, err := filepath.Abs(d.root)
	if err != nil {
		abs = d.root
	}
	return "dir " + host + ":" + abs
}

func (d *Dir) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// tmpPrefix starts the names of Put's temporary files (keys never start
// with '.', so no object is named so).
const tmpPrefix = ".tmp-"

// Put writes the object via a temporary file, fsync and rename.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := d.mkdirSynced(dir); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage put %s: fsync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("storage put %s: rename: %w", key, err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	return nil
}

// mkdirSynced creates dir and its missing parents below the root, and
// fsyncs the parent of each directory it creates: a new directory's entry
// is part of its parent, and without the parent's fsync a crash can lose
// the directory, with the objects in it, after Put returned.
func (d *Dir) mkdirSynced(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if err := os.MkdirAll(d.root, 0o755); err != nil {
		return err
	}
	var missing []string
	for p := dir; p != d.root && strings.HasPrefix(p, d.root); p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs a directory, making the entries in it durable.
func syncDir(dir string) error {
	df, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	err = df.Sync()
	_ = df.Close()
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
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

// Get opens the object's file.
func (d *Dir) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, notExist(key, err)
		}
		return nil, fmt.Errorf("storage get %s: %w", key, err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		_ = f.Close()
		return nil, notExist(key, errors.New("is a directory"))
	}
	return f, nil
}

// Delete removes every object whose key starts with prefix and the
// directories that became empty. A prefix that names a whole directory
// ("" or ending in '/', as a checkpoint's does) also takes the temporary
// files in it: those of a Put that a crash cut off would otherwise keep
// the space of a partial snapshot, and the directory, for good (a Put
// still running there fails).
func (d *Dir) Delete(ctx context.Context, prefix string) error {
	keys, err := d.List(ctx, prefix)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(keys))
	for _, k := range keys {
		paths = append(paths, filepath.Join(d.root, filepath.FromSlash(k)))
	}
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		tmps, err := d.temps(filepath.Join(d.root, filepath.FromSlash(prefix)))
		if err != nil {
			return fmt.Errorf("storage delete %s: %w", prefix, err)
		}
		paths = append(paths, tmps...)
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("storage delete %s: %w", p, err)
		}
		for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
			dirs[dir] = true
		}
	}
	// Remove empty directories, deepest first.
	var ds []string
	for dir := range dirs {
		ds = append(ds, dir)
	}
	sort.Slice(ds, func(i, j int) bool { return len(ds[i]) > len(ds[j]) })
	for _, dir := range ds {
		_ = os.Remove(dir) // fails harmlessly when not empty
	}
	return nil
}

// temps returns the paths of Put's temporary files under dir.
func (d *Dir) temps(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !e.IsDir() && strings.HasPrefix(e.Name(), tmpPrefix) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// List walks the directory for keys starting with prefix.
func (d *Dir) List(_ context.Context, prefix string) ([]string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	var keys []string
	// Walk only the deepest directory the prefix fully names.
	start := d.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		k := filepath.ToSlash(rel)
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}
