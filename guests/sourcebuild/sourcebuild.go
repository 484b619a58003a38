// Package sourcebuild compiles an operator's source file — Rust (.rs), C
// (.c), AssemblyScript (.ts) or WebAssembly text (.wat) — to a module,
// against the guest SDK this weir ships (guests.SDK), with the toolchain
// the machine has: the ones guests/README.md names (Debian's rustc with
// the wasm32 standard library, clang with wasi-libc, asc 0.28, wabt's
// wat2wasm). It builds what guests/build.sh builds, with the same flags,
// except that function names are kept (a trap's stack trace names them).
//
//	wasm, err := sourcebuild.Build(ctx, "ops/upper.rs", tmpDir)
//
// An environment variable names a toolchain where the default is not the
// right one: WEIR_RUSTC, WEIR_CLANG (and WEIR_WASI_SYSROOT, default /usr),
// WEIR_ASC, WEIR_WAT2WASM.
package sourcebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/weirhq/weir/guests"
)

// Language is a guest language sourcebuild compiles.
type Language string

// The languages, named as guests/README.md names them.
const (
	Rust           Language = "Rust"
	C              Language = "C"
	AssemblyScript Language = "AssemblyScript"
	WAT            Language = "WAT"
)

// Of returns the language of a source file by its extension, and false for
// a file that is no source sourcebuild builds (a .wasm among them).
func Of(path string) (Language, bool) {
	switch filepath.Ext(path) {
	case ".rs":
		return Rust, true
	case ".c":
		return C, true
	case ".ts":
		return AssemblyScript, true
	case ".wat":
		return WAT, true
	}
	return "", false
}

// extensions are the file extensions Of knows, for a message that lists
// what can be built.
const extensions = ".rs, .c, .ts or .wat"

// ErrNoToolchain is wrapped by Build's error when the compiler the
// language needs is not on the machine; the message says what to install.
var ErrNoToolchain = errors.New("no toolchain")

// Build compiles the source file src into dir (which must exist) and
// returns the path of the module, dir/NAME.wasm for src NAME.EXT. A
// compiler's complaint follows the error's first line, as the compiler
// printed it.
func Build(ctx context.Context, src, dir string) (string, error) {
	lang, ok := Of(src)
	if !ok {
		return "", fmt.Errorf("build %s: not a source file weir builds (want %s)", src, extensions)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", src, err)
	}
	if st, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("build %s: no such file", src)
	} else if err != nil {
		return "", fmt.Errorf("build %s: %w", src, err)
	} else if st.IsDir() {
		return "", fmt.Errorf("build %s: a directory, not a %s source file", src, lang)
	}
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))+".wasm")
	work, err := os.MkdirTemp(dir, "sdk-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", src, err)
	}
	defer os.RemoveAll(work)
	switch lang {
	case Rust:
		err = buildRust(ctx, abs, out, work)
	case C:
		err = buildC(ctx, abs, out, work)
	case AssemblyScript:
		err = buildAssemblyScript(ctx, abs, out, work)
	case WAT:
		err = buildWAT(ctx, abs, out)
	}
	if err != nil {
		return "", fmt.Errorf("build %s (%s): %w", src, lang, err)
	}
	return out, nil
}

// run runs a compiler in dir ("" for the current directory) and returns
// an error with what it printed when it fails.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(outb.String())
		if msg == "" {
			return fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
		return fmt.Errorf("%s: %w:\n%s", filepath.Base(name), err, msg)
	}
	return nil
}

// writeSDK writes the SDK file name (a path in guests.SDK) to path.
func writeSDK(name, path string) error {
	b, err := fs.ReadFile(guests.SDK(), name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// tool finds a compiler: the one env names, else name on PATH, else the
// fallbacks that exist.
func tool(env, name string, fallbacks ...string) (string, bool) {
	if p := os.Getenv(env); p != "" {
		return p, true
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, p := range fallbacks {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// rustTarget is the target Rust operators are built for: no WASI, as
// guests/build.sh builds them.
const rustTarget = "wasm32-unknown-unknown"

// rustc finds a rustc that has the standard library for rustTarget:
// WEIR_RUSTC, else the first of rustc on PATH and Debian's /usr/bin/rustc
// that has it (a rustup rustc often comes first on PATH and lacks it).
func rustc(ctx context.Context) (string, error) {
	if p := os.Getenv("WEIR_RUSTC"); p != "" {
		return p, nil
	}
	var tried []string
	cands := []string{"/usr/bin/rustc"}
	if p, err := exec.LookPath("rustc"); err == nil && p != cands[0] {
		cands = append([]string{p}, cands...)
	}
	for _, p := range cands {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		tried = append(tried, p)
		root, err := exec.CommandContext(ctx, p, "--print", "sysroot").Output()
		if err != nil {
			continue
		}
		lib := filepath.Join(strings.TrimSpace(string(root)), "lib", "rustlib", rustTarget, "lib")
		if _, err := os.Stat(lib); err == nil {
			return p, nil
		}
	}
	how := "install Debian's rustc and libstd-rust-dev-wasm32 (or rustup target add " + rustTarget + "), or set WEIR_RUSTC"
	if len(tried) == 0 {
		return "", fmt.Errorf("%w: no rustc found: %s", ErrNoToolchain, how)
	}
	return "", fmt.Errorf("%w: no rustc with the %s standard library (tried %s): %s", ErrNoToolchain, rustTarget, strings.Join(tried, ", "), how)
}

func buildRust(ctx context.Context, src, out, work string) error {
	rc, err := rustc(ctx)
	if err != nil {
		return err
	}
	lib := filepath.Join(work, "weir", "lib.rs")
	if err := writeSDK("rust/weir/lib.rs", lib); err != nil {
		return err
	}
	flags := []string{"--edition", "2021", "--target", rustTarget, "-C", "opt-level=3", "-C", "debuginfo=0"}
	rlib := filepath.Join(work, "libweir.rlib")
	if err := run(ctx, "", rc, append(flags, "--crate-type", "rlib", "--crate-name", "weir", "-o", rlib, lib)...); err != nil {
		return fmt.Errorf("the SDK crate: %w", err)
	}
	return run(ctx, "", rc, append(flags, "--crate-type", "cdylib", "--extern", "weir="+rlib, "-o", out, src)...)
}

// wasiSysroot returns the sysroot of wasi-libc for clang: WEIR_WASI_SYSROOT,
// else /usr, where Debian's wasi-libc keeps it; "" when there is none there,
// and C operators build freestanding (weir.h brings what they need).
func wasiSysroot() string {
	root := os.Getenv("WEIR_WASI_SYSROOT")
	if root == "" {
		root = "/usr"
	}
	if _, err := os.Stat(filepath.Join(root, "lib", "wasm32-wasi", "libc.a")); err != nil {
		return ""
	}
	return root
}

func buildC(ctx context.Context, src, out, work string) error {
	cc, ok := tool("WEIR_CLANG", "clang")
	if !ok {
		return fmt.Errorf("%w: no clang found: install clang and lld (and wasi-libc with libclang-rt-14-dev-wasm32 for a WASI build), or set WEIR_CLANG", ErrNoToolchain)
	}
	inc := filepath.Join(work, "include")
	if err := writeSDK("c/weir.h", filepath.Join(inc, "weir.h")); err != nil {
		return err
	}
	// A source's own weir.h (#include "weir.h" next to it) comes first:
	// quoted includes look beside the source before -I.
	args := []string{"-O2", "-Wall", "-I", inc, "-Wl,--stack-first", "-o", out, src}
	if root := wasiSysroot(); root != "" {
		args = append([]string{"--target=wasm32-wasi", "--sysroot=" + root, "-mexec-model=reactor"}, args...)
	} else {
		args = append([]string{"--target=wasm32", "-nostdlib", "-Wl,--no-entry"}, args...)
	}
	return run(ctx, "", cc, args...)
}

// tsImport matches the module specifiers of an AssemblyScript file's
// imports and re-exports.
var tsImport = regexp.MustCompile(`(?:\bfrom|\bimport)\s*["']([^"']+)["']`)

// sdkImport returns how src imports the AssemblyScript SDK: "" for the
// package name "weir", or the relative path of an SDK copy's directory it
// imports instead, e.g. "../sdk/weir"; ok is false when it imports
// neither.
func sdkImport(src []byte) (rel string, ok bool) {
	for _, m := range tsImport.FindAllSubmatch(src, -1) {
		spec := strings.TrimSuffix(string(m[1]), "/exports")
		spec = strings.TrimSuffix(spec, "/index")
		if spec == "weir" {
			return "", true
		}
		if strings.HasPrefix(spec, ".") && filepath.Base(spec) == "weir" {
			return spec, true
		}
	}
	return "", false
}

func buildAssemblyScript(ctx context.Context, src, out, work string) error {
	asc, ok := tool("WEIR_ASC", "asc")
	if !ok {
		return fmt.Errorf("%w: no asc found: npm install -g assemblyscript@0.28, or set WEIR_ASC", ErrNoToolchain)
	}
	text, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	rel, ok := sdkImport(text)
	if !ok {
		return errors.New(`it does not import the SDK: an operator's entry file starts with import { Operator, register } from "weir"; export * from "weir/exports"`)
	}
	// asc runs in the source's directory: a relative import is then the
	// path --use names the SDK's abort handler by (guests/README.md).
	args := []string{filepath.Base(src), "-O3", "--noAssert", "--exportStart", "_initialize", "-o", out}
	if rel != "" {
		args = append(args, "--use", "abort="+filepath.ToSlash(rel)+"/index/weirAbort")
	} else {
		// The SDK as the package "weir": asc looks a package up as
		// PATH/weir/index.ts for each --path.
		pkgs := filepath.Join(work, "packages")
		for _, f := range []string{"index.ts", "exports.ts"} {
			if err := writeSDK("assemblyscript/weir/"+f, filepath.Join(pkgs, "weir", f)); err != nil {
				return err
			}
		}
		args = append(args, "--path", pkgs, "--use", "abort=~lib/weir/index/weirAbort")
	}
	return run(ctx, filepath.Dir(src), asc, args...)
}

func buildWAT(ctx context.Context, src, out string) error {
	w2w, ok := tool("WEIR_WAT2WASM", "wat2wasm")
	if !ok {
		return fmt.Errorf("%w: no wat2wasm found: install wabt, or set WEIR_WAT2WASM", ErrNoToolchain)
	}
	return run(ctx, "", w2w, src, "-o", out)
}
