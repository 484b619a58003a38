package sourcebuild

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/guests"
)

// The places in a recipe's arguments that a build fills in: the build's
// own directory for the SDK's files and the compilers' by-products, and
// the module it writes. A recipe names them by these placeholders so that
// it reads the same in every build, which the cache key needs.
const (
	workDir = "\x00work\x00"
	outFile = "\x00out\x00"
)

// A recipe is how one source file is built: the SDK files it needs, the
// compiler runs, and how to learn which files the compilers read.
type recipe struct {
	// tools are the files that make up the toolchain (compilers, the
	// libraries they link): their identity is part of the cache key.
	tools []string
	// sdk maps an SDK file (a path in guests.SDK) to where the build
	// writes it, relative to its directory.
	sdk   map[string]string
	steps []step
	// product is where the last step writes the module, relative to the
	// build's directory, when not where the build is to put it (rustc's
	// --emit cannot name every path).
	product string
	// read returns the files the build read to make its module, the
	// source among them, after it ran in work; nil when it cannot tell,
	// and the module is not cached. Files in work (the SDK's) are left
	// out: the key has the SDK.
	read func(src, work string) []string
}

// step is one compiler run.
type step struct {
	what string // what it builds when not the operator ("the SDK crate"), for its error
	dir  string // where it runs; "": the current directory
	tool string
	args []string
}

// run writes the SDK files into work and runs the steps.
func (r *recipe) run(ctx context.Context, out, work string) error {
	for name, rel := range r.sdk {
		if err := writeSDK(name, filepath.Join(work, rel)); err != nil {
			return err
		}
	}
	fill := strings.NewReplacer(workDir, work, outFile, out)
	for _, s := range r.steps {
		args := make([]string, len(s.args))
		for i, a := range s.args {
			args[i] = fill.Replace(a)
		}
		if err := run(ctx, s.dir, s.tool, args...); err != nil {
			if s.what != "" {
				return fmt.Errorf("%s: %w", s.what, err)
			}
			return err
		}
	}
	if r.product != "" {
		return os.Rename(filepath.Join(work, r.product), out)
	}
	return nil
}

// cacheVersion changes when what the cache stores, or how a key is made,
// does.
const cacheVersion = "weir sourcebuild cache 1"

// key identifies the module r builds from src: the toolchain (each
// tool's path, size and modification time), the SDK files, the compiler
// runs and the source's path. The source's content, and that of the
// other files the compilers read, are checked when the module is looked
// up (cache.get).
func (r *recipe) key(src string) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s\n", len(s), s) }
	field(cacheVersion)
	field(src)
	for _, t := range r.tools {
		field(t)
		if st, err := os.Stat(evalSymlinks(t)); err == nil {
			field(strconv.FormatInt(st.Size(), 10) + " " + st.ModTime().UTC().Format(time.RFC3339Nano))
		}
	}
	names := make([]string, 0, len(r.sdk))
	for name := range r.sdk {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, _ := fs.ReadFile(guests.SDK(), name)
		field(name)
		field(r.sdk[name])
		field(string(b))
	}
	for _, s := range r.steps {
		field(s.dir)
		field(s.tool)
		field(strings.Join(s.args, "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// evalSymlinks is path with its symbolic links resolved, or path when
// that fails.
func evalSymlinks(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// depFile reads the dependency file (Makefile syntax) a compiler wrote to
// work/deps.d: rustc's --emit dep-info, clang's -MD.
func depFile(src, work string) []string {
	b, err := os.ReadFile(filepath.Join(work, "deps.d"))
	if err != nil {
		return nil
	}
	return parseDeps(string(b), work)
}

// parseDeps returns the prerequisites of the first rule of a Makefile
// dependency file, except those in work. Spaces in a path are escaped
// ("\ "), long lines continued by a backslash at their end.
func parseDeps(text, work string) []string {
	text = strings.ReplaceAll(text, "\\\r\n", " ")
	text = strings.ReplaceAll(text, "\\\n", " ")
	line, _, _ := strings.Cut(text, "\n")
	// The target ends at the first ": " (a Windows drive's "C:" has none).
	_, rest, ok := strings.Cut(line, ": ")
	if !ok {
		return nil
	}
	var deps []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			if p := cur.String(); !within(p, work) {
				deps = append(deps, p)
			}
			cur.Reset()
		}
	}
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\' && i+1 < len(rest) && rest[i+1] == ' ':
			cur.WriteByte(' ')
			i++
		case c == '$' && i+1 < len(rest) && rest[i+1] == '$':
			cur.WriteByte('$')
			i++
		case c == ' ' || c == '\t':
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return deps
}

// within reports whether path lies in dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// tsImports returns src and the files it imports by relative path, and
// theirs, as asc resolves them (PATH.ts, else PATH/index.ts); nil when a
// file imports a package other than the SDK ("weir", asc's "~lib/…"),
// which asc finds where weir does not look (node_modules), or when the
// source's directory has an asconfig.json, which asc reads.
func tsImports(src, _ string) []string {
	if _, err := os.Stat(filepath.Join(filepath.Dir(src), "asconfig.json")); err == nil {
		return nil
	}
	seen := map[string]bool{}
	todo := []string{src}
	for len(todo) > 0 {
		f := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[f] {
			continue
		}
		seen[f] = true
		text, err := os.ReadFile(f)
		if err != nil {
			return nil
		}
		for _, m := range tsImport.FindAllSubmatch(text, -1) {
			spec := string(m[1])
			switch {
			case spec == "weir" || strings.HasPrefix(spec, "weir/") || strings.HasPrefix(spec, "~lib/"):
				continue
			case !strings.HasPrefix(spec, "."):
				return nil
			}
			base := filepath.Join(filepath.Dir(f), filepath.FromSlash(spec))
			found := false
			for _, p := range []string{base + ".ts", filepath.Join(base, "index.ts")} {
				if _, err := os.Stat(p); err == nil {
					todo = append(todo, p)
					found = true
					break
				}
			}
			if !found {
				return nil
			}
		}
	}
	files := make([]string, 0, len(seen))
	for f := range seen {
		files = append(files, f)
	}
	sort.Strings(files)
	return files
}

// CacheDirEnv names the environment variable that sets where built
// modules are cached (default: os.UserCacheDir()/weir/sourcebuild); "off"
// turns the cache off.
const CacheDirEnv = "WEIR_SOURCEBUILD_CACHE"

// cache is the cached module of one source file: one entry per source
// path, so that editing a file replaces its entry rather than adding one.
// A nil *cache caches nothing. Its failures are not the build's: a
// module that cannot be cached is built.
type cache struct {
	wasm, manifest string // the entry's files
	key            string
}

// maxAge is how long an entry nobody used stays in the cache.
const maxAge = 30 * 24 * time.Hour

// openCache returns the cache entry for the source file src (an absolute
// path) built as key says; nil when there is no cache.
func openCache(src, key string) *cache {
	dir := os.Getenv(CacheDirEnv)
	switch dir {
	case "off":
		return nil
	case "":
		d, err := os.UserCacheDir()
		if err != nil {
			return nil
		}
		dir = filepath.Join(d, "weir", "sourcebuild")
	}
	sum := sha256.Sum256([]byte(src))
	slot := filepath.Join(dir, hex.EncodeToString(sum[:12])+"-"+strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	return &cache{wasm: slot + ".wasm", manifest: slot + ".deps", key: key}
}

// get copies the cached module to out when the entry was built as the key
// says and no file the build read changed since; it reports whether it
// did.
func (c *cache) get(out string) bool {
	if c == nil {
		return false
	}
	f, err := os.Open(c.manifest)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || sc.Text() != c.key || !sc.Scan() {
		return false
	}
	module := sc.Text()
	n := 0
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), " ")
		if !ok || hashFile(path) != sum {
			return false
		}
		n++
	}
	if sc.Err() != nil || n == 0 {
		return false
	}
	// The module is checked after the copy: another build of the same
	// source may have replaced the entry since the manifest was read.
	if copyFile(c.wasm, out) != nil || hashFile(out) != module {
		os.Remove(out)
		return false
	}
	now := time.Now()
	_ = os.Chtimes(c.manifest, now, now)
	return true
}

// put stores the module at out as the entry, with the files the build
// read (nil: it cannot tell, and nothing is stored), and removes entries
// nobody used for maxAge.
func (c *cache) put(out string, read []string) {
	if c == nil || len(read) == 0 {
		return
	}
	module := hashFile(out)
	if module == "" {
		return
	}
	var m strings.Builder
	m.WriteString(c.key + "\n" + module + "\n")
	for _, p := range read {
		sum := hashFile(p)
		if sum == "" || strings.ContainsAny(p, "\n") {
			return
		}
		m.WriteString(sum + " " + p + "\n")
	}
	dir := filepath.Dir(c.wasm)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	// The module first, then the manifest that makes it an entry: a
	// reader between the two finds the old key, or none, and builds.
	os.Remove(c.manifest)
	if writeAtomic(c.wasm, func(w io.Writer) error {
		in, err := os.Open(out)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(w, in)
		return err
	}) != nil {
		return
	}
	if writeAtomic(c.manifest, func(w io.Writer) error {
		_, err := io.WriteString(w, m.String())
		return err
	}) != nil {
		return
	}
	prune(dir, time.Now().Add(-maxAge))
}

// prune removes the entries of dir whose manifest is older than before.
func prune(dir string, before time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".deps") {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(before) {
			slot := filepath.Join(dir, strings.TrimSuffix(name, ".deps"))
			os.Remove(slot + ".deps")
			os.Remove(slot + ".wasm")
		}
	}
}

// hashFile returns the SHA-256 of the file at path in hex, "" when it
// cannot be read.
func hashFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// copyFile copies the file at from to to.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeAtomic writes the file at path through a temporary file renamed
// over it, so that a reader never sees part of it.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
