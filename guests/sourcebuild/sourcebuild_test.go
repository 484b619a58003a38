package sourcebuild

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/wasm"
)

// uppercases runs the module at path over one batch of two records and
// fails the test unless it emits their values in upper case.
func uppercases(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, filepath.Base(path), b, wasm.Limits{})
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	inst, err := m.Instantiate(ctx, wasm.InstanceConfig{WholeBatches: true})
	if err != nil {
		t.Fatalf("instantiate %s: %v", path, err)
	}
	defer inst.Close(ctx)
	var in abi.Builder
	in.Add([]byte("k"), []byte("Hello, weir"), 1)
	in.Add(nil, []byte("a"), 2)
	var got []string
	err = inst.Process(ctx, 0, in.Bytes(), func(port int, batch []byte) error {
		it, err := abi.NewIter(batch)
		if err != nil {
			return err
		}
		for it.Next() {
			got = append(got, string(it.Record().Value))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: process: %v", path, err)
	}
	if want := []string{"HELLO, WEIR", "A"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s emitted %q; want %q", path, got, want)
	}
}

// Each language builds, the repository's examples and an operator outside
// the repository alike (C's and C++'s "weir.h" with none beside it,
// AssemblyScript's package "weir", Rust's crate weir), and what it builds
// runs; so does an AssemblyScript file that imports a copy of the SDK by a
// relative path.
func TestBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, src := range []string{
		"../rust/examples/uppercase.rs", "testdata/shout.rs",
		"../c/examples/uppercase.c", "testdata/shout.c",
		"../cpp/examples/uppercase.cpp", "testdata/shout.cpp",
		"../assemblyscript/examples/uppercase.ts", "testdata/shout.ts",
		"../wat/uppercase.wat",
	} {
		t.Run(src, func(t *testing.T) {
			out, err := Build(ctx, src, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)) + ".wasm"; filepath.Base(out) != want {
				t.Errorf("built %s; want a file named %s", out, want)
			}
			uppercases(t, out)
		})
	}
}

// An AssemblyScript entry file may import a copy of the SDK by a relative
// path instead of the package "weir": it builds in its own directory with
// the abort handler named by that path.
func TestBuildAssemblyScriptWithACopyOfTheSDK(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"index.ts", "exports.ts"} {
		if err := writeSDK("assemblyscript/weir/"+f, filepath.Join(dir, "sdk", "weir", f)); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile("testdata/shout.ts")
	if err != nil {
		t.Fatal(err)
	}
	text = []byte(strings.NewReplacer(`from "weir"`, `from "../sdk/weir"`, `"weir/exports"`, `"../sdk/weir/exports"`).Replace(string(text)))
	src := filepath.Join(dir, "op", "shout.ts")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, text, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Build(context.Background(), src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	uppercases(t, out)
}

// A compiler's complaint is the error's, after a first line that names the
// file and the language; a file sourcebuild does not build, or cannot
// find, is one line.
func TestBuildErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		src   string
		first string // the error's first line
		more  string // in the compiler's part
	}{
		{write("bad.rs", "fn f() -> u32 { \"no\" }\n"), "build " + filepath.Join(dir, "bad.rs") + " (Rust): rustc: exit status 1:", "mismatched types"},
		{write("bad.c", "int f(void) { return undeclared; }\n"), "build " + filepath.Join(dir, "bad.c") + " (C): clang: exit status 1:", "undeclared"},
		{write("bad.cc", "int f() { return undeclared; }\n"), "build " + filepath.Join(dir, "bad.cc") + " (C++): clang++: exit status 1:", "undeclared"},
		// libc++ for wasm32 has no exceptions: a throw is refused where it
		// is, not at link time as an undefined __cxa_throw.
		{write("throws.cxx", "int f(int x) { if (x < 0) throw x; return x; }\n"), "build " + filepath.Join(dir, "throws.cxx") + " (C++): clang++: exit status 1:",
			"cannot use 'throw' with exceptions disabled"},
		{write("nosdk.ts", "export function f(): i32 { return 1; }\n"), "build " + filepath.Join(dir, "nosdk.ts") + " (AssemblyScript): it does not import the SDK: an operator's entry file starts with import { Operator, register } from \"weir\"; export * from \"weir/exports\"", ""},
		{write("bad.wat", "(module (func (result i32)))\n"), "build " + filepath.Join(dir, "bad.wat") + " (WAT): wat2wasm: exit status 1:", "type mismatch"},
		{filepath.Join(dir, "missing.rs"), "build " + filepath.Join(dir, "missing.rs") + ": no such file", ""},
		{write("notes.txt", "x"), "build " + filepath.Join(dir, "notes.txt") + ": not a source file weir builds (want .rs, .c, .cpp, .cc, .cxx, .ts or .wat)", ""},
	} {
		_, err := Build(ctx, c.src, dir)
		if err == nil {
			t.Errorf("%s built", c.src)
			continue
		}
		first, rest, _ := strings.Cut(err.Error(), "\n")
		if first != c.first || !strings.Contains(rest, c.more) {
			t.Errorf("%s: error\n%s\nwant its first line %q, and %q after it", c.src, err, c.first, c.more)
		}
	}
}

// A language whose compiler the machine lacks says what to install, and
// the error is ErrNoToolchain.
func TestNoToolchain(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, c := range []struct{ env, src, want string }{
		{"WEIR_ASC", "testdata/shout.ts", "no asc found: npm install -g assemblyscript@0.28, or set WEIR_ASC"},
		{"WEIR_CLANG", "testdata/shout.c", "no clang found: install clang and lld"},
		{"WEIR_CLANGXX", "testdata/shout.cpp", "no clang++ found: install clang and lld, and " + cppPackages + ", or set WEIR_CLANGXX"},
		{"WEIR_WAT2WASM", "../wat/uppercase.wat", "no wat2wasm found: install wabt, or set WEIR_WAT2WASM"},
	} {
		t.Setenv(c.env, "")
		_, err := Build(context.Background(), c.src, t.TempDir())
		if !errors.Is(err, ErrNoToolchain) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with no compiler: %v; want ErrNoToolchain and %q", c.src, err, c.want)
		}
	}
}

// A compiler an environment variable names that is not there, or a
// WEIR_RUSTC without the wasm32 standard library, is one ErrNoToolchain
// naming the variable and what to do — not the exec error of running it,
// nor rustc's complaint about a crate std it cannot find.
func TestToolchainVariable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nothere")
	// A rustc whose sysroot has no wasm32 standard library, as rustup's
	// without the target.
	rustup := filepath.Join(dir, "rustc")
	if err := os.WriteFile(rustup, []byte("#!/bin/sh\necho "+dir+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ env, path, src, want string }{
		{"WEIR_RUSTC", missing, "testdata/shout.rs", "WEIR_RUSTC=" + missing + " names no compiler weir can run ("},
		{"WEIR_CLANG", missing, "testdata/shout.c", "WEIR_CLANG=" + missing + " names no compiler weir can run ("},
		{"WEIR_CLANGXX", missing, "testdata/shout.cpp", "WEIR_CLANGXX=" + missing + " names no compiler weir can run ("},
		{"WEIR_ASC", missing, "testdata/shout.ts", "WEIR_ASC=" + missing + " names no compiler weir can run ("},
		{"WEIR_WAT2WASM", missing, "../wat/uppercase.wat", "WEIR_WAT2WASM=" + missing + " names no compiler weir can run ("},
		{"WEIR_RUSTC", rustup, "testdata/shout.rs", "WEIR_RUSTC=" + rustup + " has no wasm32-unknown-unknown standard library: " +
			"rustup target add wasm32-unknown-unknown for it, or unset WEIR_RUSTC for the first rustc that has it"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, c.path)
			_, err := Build(context.Background(), c.src, t.TempDir())
			if !errors.Is(err, ErrNoToolchain) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s=%s: %v; want one line of ErrNoToolchain with %q", c.env, c.path, err, c.want)
			}
		})
	}
}

// C++ needs libc++ for wasm32, and wasi-libc under it: without them a C++
// source is an ErrNoToolchain that names the Debian packages to install,
// not clang++'s "'string' file not found".
func TestNoLibcxx(t *testing.T) {
	if _, err := exec.LookPath("clang++"); err != nil {
		t.Skip("no clang++")
	}
	noLibc := t.TempDir()
	noLibcxx := t.TempDir()
	if err := os.MkdirAll(filepath.Join(noLibcxx, "lib", "wasm32-wasi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noLibcxx, "lib", "wasm32-wasi", "libc.a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, want string }{
		{noLibc, "no wasi-libc in " + noLibc + " (lib/wasm32-wasi/libc.a), which C++'s libc++ needs: install " + cppPackages + ", or set WEIR_WASI_SYSROOT"},
		{noLibcxx, "no libc++ for wasm32 in " + noLibcxx + " (lib/wasm32-wasi/libc++.a): install " + cppPackages + ", or set WEIR_WASI_SYSROOT"},
	} {
		t.Setenv("WEIR_WASI_SYSROOT", c.root)
		_, err := Build(context.Background(), "testdata/shout.cpp", t.TempDir())
		if !errors.Is(err, ErrNoToolchain) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WEIR_WASI_SYSROOT=%s: %v; want ErrNoToolchain and %q", c.root, err, c.want)
		}
	}
}

// C++ sources are .cpp, .cc and .cxx files.
func TestOfCpp(t *testing.T) {
	for _, name := range []string{"op.cpp", "op.cc", "dir.d/op.cxx"} {
		if lang, ok := Of(name); lang != CPP || !ok {
			t.Errorf("Of(%q) = %q, %v; want %q, true", name, lang, ok, CPP)
		}
	}
	if lang, ok := Of("op.hpp"); ok {
		t.Errorf("Of(op.hpp) = %q, true; want a header to be no source", lang)
	}
}

// The AssemblyScript SDK's import is found in an entry file as the
// repository's examples and a user's operator write it.
func TestSDKImport(t *testing.T) {
	for _, c := range []struct {
		src, rel string
		ok       bool
	}{
		{`import { Operator } from "weir";` + "\nexport * from \"weir/exports\";", "", true},
		{`import { Operator } from "../weir";` + "\nexport * from \"../weir/exports\";", "../weir", true},
		{`import {Batch} from '../../sdk/weir/index'`, "../../sdk/weir", true},
		{`import { x } from "./weirdo"; export function f(): void {}`, "", false},
	} {
		if rel, ok := sdkImport([]byte(c.src)); rel != c.rel || ok != c.ok {
			t.Errorf("sdkImport(%q) = %q, %v; want %q, %v", c.src, rel, ok, c.rel, c.ok)
		}
	}
}

// The same source builds to the same bytes wherever it is built (weir run
// pushes a module by content: a build that differs every time would store
// a new version on every run), with no DWARF (Debian's libstd brings 5 MiB
// of it to a Rust module, wasi-libc three quarters of a small C one); every
// language keeps the name section the host names a trap's functions by.
func TestBuildReproducible(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Setenv(CacheDirEnv, "off") // two builds, not one and a copy
	for _, c := range []struct {
		src   string
		names bool // whether the build keeps a name section
	}{
		{"testdata/shout.rs", true}, {"testdata/shout.c", true}, {"testdata/shout.cpp", true}, {"testdata/shout.ts", true},
		{"../wat/uppercase.wat", true},
	} {
		src := c.src
		t.Run(src, func(t *testing.T) {
			var builds [][]byte
			// Directories of different lengths, as a user's temporary
			// directories are.
			for _, sub := range []string{"a", "a-longer-directory"} {
				dir := filepath.Join(t.TempDir(), sub)
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				out, err := Build(ctx, src, dir)
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				builds = append(builds, b)
			}
			if !bytes.Equal(builds[0], builds[1]) {
				t.Errorf("two builds of %s differ (%d and %d bytes)", src, len(builds[0]), len(builds[1]))
			}
			names, err := customSections(builds[0])
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasPrefix(n, ".debug_") {
					t.Errorf("%s built with DWARF: custom section %s (%d bytes in all)", src, n, len(builds[0]))
				}
			}
			if c.names && !slices.Contains(names, "name") {
				t.Errorf("%s built without a name section (custom sections %q): a trap's stack would not name functions", src, names)
			}
		})
	}
}

// An AssemblyScript and a WAT operator that trap in a function of their
// own name it in the trap's stack, by the name section their build keeps
// (asc and wat2wasm write none unless told to: the stack said "$4()").
func TestTrapStackNamesTheFunction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Setenv(CacheDirEnv, "off") // this build, not one cached before
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	for _, c := range []struct{ src, frame string }{
		{"testdata/boom.ts", "\tboom/Boom#process(i32,i32)\n"},
		{"testdata/boom.wat", "\texplode()\n"},
	} {
		t.Run(c.src, func(t *testing.T) {
			out, err := Build(ctx, c.src, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			m, err := e.Load(ctx, filepath.Base(c.src), b, wasm.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			inst, err := m.Instantiate(ctx, wasm.InstanceConfig{WholeBatches: true})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close(ctx)
			var in abi.Builder
			in.Add([]byte("k"), []byte("boom"), 1)
			err = inst.Process(ctx, 0, in.Bytes(), func(int, []byte) error { return nil })
			var te *wasm.TrapError
			if !errors.As(err, &te) {
				t.Fatalf("got %v, want a trap", err)
			}
			if !strings.Contains(te.Stack+"\n", c.frame) {
				t.Errorf("%v: stack\n%s\nhas no frame %q", err, te.Stack, strings.TrimSpace(c.frame))
			}
		})
	}
}

// customSections returns the names of a module's custom sections, in order.
func customSections(b []byte) ([]string, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, errors.New("not a wasm module")
	}
	var names []string
	for b = b[8:]; len(b) > 0; {
		id := b[0]
		size, n := binary.Uvarint(b[1:])
		if n <= 0 || uint64(len(b)-1-n) < size {
			return nil, errors.New("truncated section")
		}
		body := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 0 {
			continue
		}
		l, m := binary.Uvarint(body)
		if m <= 0 || uint64(len(body)-m) < l {
			return nil, errors.New("truncated custom section name")
		}
		names = append(names, string(body[m:m+int(l)]))
	}
	return names, nil
}
