package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/guests/sourcebuild"
)

// moduleBuilder builds the operator modules a command is given as source:
// a Go package directory (guestbuild, cached across runs) or a Rust, C,
// AssemblyScript or WAT file (sourcebuild), whose module it writes to a
// directory of its own that Close removes. It says on std.Err what it
// builds, as the compiler starts ("building X (Rust) …"), and of a module
// the build cache had ("X (Rust): unchanged since it was built, the cached
// module"): once per source, however many operators name it.
type moduleBuilder struct {
	std   Stdio
	dir   string            // "" until the first source file
	built map[string]string // absolute source path -> module, once built
	said  map[string]bool   // absolute source path -> said
}

// saying returns the function that says path (of lang) is being built,
// for guestbuild and sourcebuild to call as the compiler starts, and the
// one to call after a build that succeeded, which says, if that did not
// run, that the build cache had the module. Each says so once per
// source.
func (b *moduleBuilder) saying(path, lang string) (compiling, done func()) {
	key := path
	if abs, err := filepath.Abs(path); err == nil {
		key = abs
	}
	compiled := false
	compiling = func() {
		compiled = true
		if b.said == nil {
			b.said = map[string]bool{}
		}
		b.said[key] = true
		fmt.Fprintf(b.std.Err, "building %s (%s) …\n", path, lang)
	}
	done = func() {
		if compiled || b.said[key] {
			return
		}
		if b.said == nil {
			b.said = map[string]bool{}
		}
		b.said[key] = true
		fmt.Fprintf(b.std.Err, "%s (%s): unchanged since it was built, the cached module\n", path, lang)
	}
	return compiling, done
}

// Close removes the modules built from source files.
func (b *moduleBuilder) Close() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// build returns the module file for path: path itself unless it is a Go
// package directory or a source file, whose module it builds (built
// true).
func (b *moduleBuilder) build(ctx context.Context, path string) (out string, built bool, err error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		out, err := b.buildGoPackage(ctx, path)
		return out, err == nil, err
	}
	lang, ok := sourcebuild.Of(path)
	if !ok {
		if filepath.Ext(path) == ".go" {
			return "", false, fmt.Errorf("build %s: a Go operator is built from its package: give the directory %s, not a file of it", path, filepath.Dir(path))
		}
		return path, false, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false, err
	}
	if out, ok := b.built[abs]; ok {
		return out, true, nil
	}
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "weir-build-"); err != nil {
			return "", false, err
		}
		b.built = map[string]string{}
	}
	// A directory per source: a/op.rs and b/op.rs both build op.wasm.
	dir, err := os.MkdirTemp(b.dir, "m-")
	if err != nil {
		return "", false, err
	}
	compiling, done := b.saying(path, string(lang))
	if out, err = sourcebuild.BuildSaying(ctx, path, dir, compiling); err != nil {
		return "", false, err
	}
	done()
	b.built[abs] = out
	return out, true, nil
}

// buildSpec replaces the operator modules of spec that name a Go package
// directory or a source file by the module built from it, and returns
// the source of each module file it built.
func (b *moduleBuilder) buildSpec(ctx context.Context, spec *jobspec.Spec) (map[string]string, error) {
	built := map[string]string{}
	for i := range spec.Operators {
		op := &spec.Operators[i]
		ref, err := modref.Parse(op.Module)
		if err != nil || ref.Kind != modref.File {
			continue
		}
		if st, err := os.Stat(ref.Path); err != nil || !st.IsDir() {
			if _, ok := sourcebuild.Of(ref.Path); (!ok && filepath.Ext(ref.Path) != ".go") || err != nil {
				continue
			}
		}
		out, _, err := b.build(ctx, ref.Path)
		if err != nil {
			return nil, interruptedIn(ctx, "building module "+displayPath(ref.Path), fmt.Errorf("operator %s: %w", op.Name, err))
		}
		op.Module, built[out] = out, ref.Path
	}
	return built, nil
}

// buildGoPackage builds the Go package in directory dir into a wasm
// module, saying so on std.Err (or that the build cache had it), and
// returns the module's path.
func (b *moduleBuilder) buildGoPackage(ctx context.Context, dir string) (string, error) {
	if m, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(m) == 0 {
		return "", fmt.Errorf("module %s is a directory without Go files", dir)
	}
	pkg := dir
	if !filepath.IsAbs(pkg) && !strings.HasPrefix(pkg, ".") {
		pkg = "./" + pkg
	}
	compiling, done := b.saying(dir, "GOOS=wasip1")
	out, err := guestbuild.BuildSaying(ctx, pkg, compiling)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", dir, err)
	}
	done()
	return out, nil
}
