// Package sourcebuild compiles an operator's source file — Rust (.rs), C
// (.c), C++ (.cpp, .cc, .cxx; with the C SDK), AssemblyScript (.ts) or
// WebAssembly text (.wat) — to a module, against the guest SDK this weir
// ships (guests.SDK), with the toolchain the machine has: the ones
// guests/README.md names (Debian's rustc with the wasm32 standard library,
// clang with wasi-libc, clang++ with libc++ for wasm32, asc 0.28, wabt's
// wat2wasm). It builds what guests/build.sh builds, with the same flags,
// except that function names are kept in every language (a trap's stack
// trace names them).
//
//	wasm, err := sourcebuild.Build(ctx, "ops/upper.rs", tmpDir)
//
// An environment variable names a toolchain where the default is not the
// right one: WEIR_RUSTC, WEIR_CLANG, WEIR_CLANGXX (and WEIR_WASI_SYSROOT,
// default /usr), WEIR_ASC, WEIR_WAT2WASM.
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
	"slices"
	"strings"

	"github.com/weirhq/weir/guests"
)

// Language is a guest language sourcebuild compiles.
type Language string

// The languages, named as guests/README.md names them.
const (
	Rust           Language = "Rust"
	C              Language = "C"
	CPP            Language = "C++"
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
	case ".cpp", ".cc", ".cxx":
		return CPP, true
	case ".ts":
		return AssemblyScript, true
	case ".wat":
		return WAT, true
	}
	return "", false
}

// extensions are the file extensions Of knows, for a message that lists
// what can be built.
const extensions = ".rs, .c, .cpp, .cc, .cxx, .ts or .wat"

// ErrNoToolchain is wrapped by Build's error when the compiler the
// language needs is not on the machine; the message says what to install.
var ErrNoToolchain = errors.New("no toolchain")

// Build compiles the source file src into dir (which must exist) and
// returns the path of the module, dir/NAME.wasm for src NAME.EXT. A
// compiler's complaint follows the error's first line, as the compiler
// printed it.
//
// A module built before from the same source, with the same toolchain
// and SDK, is taken from the cache (CacheDirEnv) instead of being built
// again, as long as every file the compiler read for it is unchanged (a
// Rust module's other files, a C file's headers, an AssemblyScript file's
// relative imports).
func Build(ctx context.Context, src, dir string) (string, error) {
	return BuildSaying(ctx, src, dir, nil)
}

// BuildSaying is Build that calls compiling, if not nil, just before the
// compiler runs: not when the module is taken from the cache, so that a
// caller says "building" only of what it builds.
func BuildSaying(ctx context.Context, src, dir string, compiling func()) (string, error) {
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
	var r *recipe
	switch lang {
	case Rust:
		r, err = rustRecipe(ctx, abs)
	case C:
		r, err = cRecipe(abs)
	case CPP:
		r, err = cppRecipe(abs)
	case AssemblyScript:
		r, err = assemblyScriptRecipe(abs)
	case WAT:
		r, err = watRecipe(abs)
	}
	if err != nil {
		return "", fmt.Errorf("build %s (%s): %w", src, lang, err)
	}
	c := openCache(abs, r.key(abs))
	if c.get(out) {
		return out, nil
	}
	work, err := os.MkdirTemp(dir, "sdk-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", src, err)
	}
	defer os.RemoveAll(work)
	if compiling != nil {
		compiling()
	}
	if err := r.run(ctx, out, work); err != nil {
		return "", fmt.Errorf("build %s (%s): %w", src, lang, err)
	}
	c.put(out, r.read(abs, work))
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

// tool finds a compiler: the one env names, else name on PATH. When there
// is none, or env names one that is not there, it is an ErrNoToolchain
// that says what to do: install (what to install), or set env — not the
// exec error of its first use, which names neither.
func tool(env, name, install string) (string, error) {
	if p, err := fromEnv(env); p != "" || err != nil {
		return p, err
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no %s found: %s, or set %s", ErrNoToolchain, name, install, env)
}

// fromEnv returns the compiler the environment variable env names, ""
// when it is unset, and an error when what it names is no executable.
func fromEnv(env string) (string, error) {
	v := os.Getenv(env)
	if v == "" {
		return "", nil
	}
	p, err := exec.LookPath(v)
	if err != nil {
		return "", fmt.Errorf("%w: %s=%s names no compiler weir can run (%v): give its path, or unset %s", ErrNoToolchain, env, v, err, env)
	}
	return p, nil
}

// rustTarget is the target Rust operators are built for: no WASI, as
// guests/build.sh builds them.
const rustTarget = "wasm32-unknown-unknown"

// rustc finds a rustc that has the standard library for rustTarget:
// WEIR_RUSTC, else the first of rustc on PATH and Debian's /usr/bin/rustc
// that has it (a rustup rustc often comes first on PATH and lacks it). It
// returns the directory of that library too. A WEIR_RUSTC that names no
// executable, or one without that library, is an ErrNoToolchain saying so.
func rustc(ctx context.Context) (path, lib string, err error) {
	how := "install Debian's rustc and libstd-rust-dev-wasm32 (or rustup target add " + rustTarget + "), or set WEIR_RUSTC"
	if p, err := fromEnv("WEIR_RUSTC"); err != nil {
		return "", "", err
	} else if p != "" {
		lib, ok := rustLib(ctx, p)
		if !ok {
			return "", "", fmt.Errorf("%w: WEIR_RUSTC=%s has no %s standard library: rustup target add %s for it, or unset WEIR_RUSTC for the first rustc that has it",
				ErrNoToolchain, os.Getenv("WEIR_RUSTC"), rustTarget, rustTarget)
		}
		return p, lib, nil
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
		if lib, ok := rustLib(ctx, p); ok {
			return p, lib, nil
		}
	}
	if len(tried) == 0 {
		return "", "", fmt.Errorf("%w: no rustc found: %s", ErrNoToolchain, how)
	}
	return "", "", fmt.Errorf("%w: no rustc with the %s standard library (tried %s): %s", ErrNoToolchain, rustTarget, strings.Join(tried, ", "), how)
}

// rustLib returns the directory of rustc's standard library for
// rustTarget, and whether it has one.
func rustLib(ctx context.Context, rustc string) (string, bool) {
	root, err := exec.CommandContext(ctx, rustc, "--print", "sysroot").Output()
	if err != nil {
		return "", false
	}
	lib := filepath.Join(strings.TrimSpace(string(root)), "lib", "rustlib", rustTarget, "lib")
	if _, err := os.Stat(lib); err != nil {
		return "", false
	}
	return lib, true
}

func rustRecipe(ctx context.Context, src string) (*recipe, error) {
	rc, std, err := rustc(ctx)
	if err != nil {
		return nil, err
	}
	lib := filepath.Join(workDir, "weir", "lib.rs")
	rlib := filepath.Join(workDir, "libweir.rlib")
	// strip=debuginfo drops the DWARF that Debian's libstd brings along
	// (debuginfo=0 covers only what this build compiles): 5 MiB of a
	// 5.1 MiB module, of no use to the host, which names functions by
	// the name section this keeps. The SDK crate's temporary directory
	// is remapped out of its panic locations, so that the same source
	// builds to the same bytes, and weir run pushes it once.
	flags := []string{"--edition", "2021", "--target", rustTarget, "-C", "opt-level=3", "-C", "debuginfo=0",
		"-C", "strip=debuginfo", "--remap-path-prefix=" + workDir + "=weir-sdk"}
	tools := []string{rc}
	if std != "" {
		tools = append(tools, std) // a directory: its time changes with what it holds
	}
	return &recipe{
		tools: tools,
		sdk:   map[string]string{"rust/weir/lib.rs": "weir/lib.rs"},
		steps: []step{
			{what: "the SDK crate", tool: rc, args: append(slices.Clip(flags), "--crate-type", "rlib", "--crate-name", "weir", "-o", rlib, lib)},
			// dep-info lists the files rustc read: the source and its
			// modules (the cache checks them).
			{tool: rc, args: append(slices.Clip(flags), "--crate-type", "cdylib", "--extern", "weir="+rlib,
				"--emit=link="+filepath.Join(workDir, "module.wasm")+",dep-info="+filepath.Join(workDir, "deps.d"), src)},
		},
		product: "module.wasm",
		read:    depFile,
	}, nil
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

func cRecipe(src string) (*recipe, error) {
	cc, err := tool("WEIR_CLANG", "clang", "install clang and lld (and wasi-libc with libclang-rt-14-dev-wasm32 for a WASI build)")
	if err != nil {
		return nil, err
	}
	// A source's own weir.h (#include "weir.h" next to it) comes first:
	// quoted includes look beside the source before -I.
	// --strip-debug drops wasi-libc's DWARF (three quarters of a small
	// module) and keeps the name section.
	args := []string{"-O2", "-Wall", "-I", filepath.Join(workDir, "include"), "-Wl,--stack-first", "-Wl,--strip-debug",
		"-MD", "-MF", filepath.Join(workDir, "deps.d"), "-o", outFile, src}
	tools := []string{cc}
	if root := wasiSysroot(); root != "" {
		args = append([]string{"--target=wasm32-wasi", "--sysroot=" + root, "-mexec-model=reactor"}, args...)
		tools = append(tools, filepath.Join(root, "lib", "wasm32-wasi", "libc.a"))
	} else {
		args = append([]string{"--target=wasm32", "-nostdlib", "-Wl,--no-entry"}, args...)
	}
	return &recipe{
		tools: tools,
		sdk:   map[string]string{"c/weir.h": "include/weir.h"},
		steps: []step{{tool: cc, args: args}},
		read:  depFile,
	}, nil
}

// cppPackages are the Debian packages of libc++ for wasm32, which C++
// operators link, and of what it needs; 14 is clang's version (Debian 12).
const cppPackages = "wasi-libc libclang-rt-14-dev-wasm32 libc++-14-dev-wasm32 libc++abi-14-dev-wasm32"

// cppRecipe builds C++ with the C SDK (weir.h, which WEIR_OPERATOR gives
// an operator new that fails the call when memory runs out), as
// guests/build.sh builds guests/cpp: a WASI reactor, since libc++ needs
// wasi-libc, -std=c++17 and -fno-exceptions (libc++ for wasm32 is built
// without them: a throw, also one inside its headers, would not link).
func cppRecipe(src string) (*recipe, error) {
	cxx, err := tool("WEIR_CLANGXX", "clang++", "install clang and lld, and "+cppPackages)
	if err != nil {
		return nil, err
	}
	root := wasiSysroot()
	if root == "" {
		dir := os.Getenv("WEIR_WASI_SYSROOT")
		if dir == "" {
			dir = "/usr"
		}
		return nil, fmt.Errorf("%w: no wasi-libc in %s (lib/wasm32-wasi/libc.a), which C++'s libc++ needs: install %s, or set WEIR_WASI_SYSROOT",
			ErrNoToolchain, dir, cppPackages)
	}
	var libs []string
	for _, lib := range []string{"libc++.a", "libc++abi.a"} {
		p := filepath.Join(root, "lib", "wasm32-wasi", lib)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: no libc++ for wasm32 in %s (lib/wasm32-wasi/%s): install %s, or set WEIR_WASI_SYSROOT",
				ErrNoToolchain, root, lib, cppPackages)
		}
		libs = append(libs, p)
	}
	args := []string{"--target=wasm32-wasi", "--sysroot=" + root, "-mexec-model=reactor", "-std=c++17", "-fno-exceptions",
		"-O2", "-Wall", "-I", filepath.Join(workDir, "include"), "-Wl,--stack-first", "-Wl,--strip-debug",
		"-MD", "-MF", filepath.Join(workDir, "deps.d"), "-o", outFile, src}
	return &recipe{
		tools: append([]string{cxx, filepath.Join(root, "lib", "wasm32-wasi", "libc.a")}, libs...),
		sdk:   map[string]string{"c/weir.h": "include/weir.h"},
		steps: []step{{tool: cxx, args: args}},
		read:  depFile,
	}, nil
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

func assemblyScriptRecipe(src string) (*recipe, error) {
	asc, err := tool("WEIR_ASC", "asc", "npm install -g assemblyscript@0.28")
	if err != nil {
		return nil, err
	}
	text, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	rel, ok := sdkImport(text)
	if !ok {
		return nil, errors.New(`it does not import the SDK: an operator's entry file starts with import { Operator, register } from "weir"; export * from "weir/exports"`)
	}
	// asc runs in the source's directory: a relative import is then the
	// path --use names the SDK's abort handler by (guests/README.md), and
	// the names of the file's functions are relative to it
	// ("shout/Shout#process"), the same wherever the file is. --debug
	// keeps the function names in a name section, for a trap's stack:
	// without --sourceMap that is all it adds (the code is byte for byte
	// the same, the module about a tenth bigger).
	args := []string{filepath.Base(src), "-O3", "--noAssert", "--debug", "--exportStart", "_initialize", "-o", outFile}
	sdk := map[string]string{}
	if rel != "" {
		args = append(args, "--use", "abort="+filepath.ToSlash(rel)+"/index/weirAbort")
	} else {
		// The SDK as the package "weir": asc looks a package up as
		// PATH/weir/index.ts for each --path.
		for _, f := range []string{"index.ts", "exports.ts"} {
			sdk["assemblyscript/weir/"+f] = filepath.Join("packages", "weir", f)
		}
		args = append(args, "--path", filepath.Join(workDir, "packages"), "--use", "abort=~lib/weir/index/weirAbort")
	}
	return &recipe{
		// asc is a script: its package (its version) is what changes.
		tools: []string{asc, filepath.Join(filepath.Dir(filepath.Dir(evalSymlinks(asc))), "package.json")},
		sdk:   sdk,
		steps: []step{{dir: filepath.Dir(src), tool: asc, args: args}},
		read:  tsImports,
	}, nil
}

func watRecipe(src string) (*recipe, error) {
	w2w, err := tool("WEIR_WAT2WASM", "wat2wasm", "install wabt")
	if err != nil {
		return nil, err
	}
	// --debug-names writes the $names of functions and locals to a name
	// section, for a trap's stack; the code is the same without it.
	return &recipe{
		tools: []string{w2w},
		steps: []step{{tool: w2w, args: []string{"--debug-names", src, "-o", outFile}}},
		read:  func(src, _ string) []string { return []string{src} },
	}, nil
}
