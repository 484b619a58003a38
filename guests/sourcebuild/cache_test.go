package sourcebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain keeps the tests' builds out of the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sourcebuild-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv(CacheDirEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// counting puts a wrapper around the compiler at path in env, and returns
// a function that says how many times it compiled an operator (a run
// whose arguments contain mark).
func counting(t *testing.T, env, path, mark string) func() int {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := filepath.Join(dir, filepath.Base(path))
	body := "#!/bin/sh\ncase \"$*\" in *" + mark + "*) echo x >> " + log + ";; esac\nexec " + path + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, script)
	return func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "x")
	}
}

// lookPath finds a compiler on PATH.
func lookPath(name string) func() (string, error) {
	return func() (string, error) { return exec.LookPath(name) }
}

// write writes text to the file at path. (The cache goes by content, not
// modification times, which a test's fast edits may leave unchanged.)
func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A source built once is taken from the cache the next time, until it, or
// a file it reads — a Rust module, a C header beside it, an
// AssemblyScript file it imports — changes; what comes from the cache
// runs as what was built.
func TestBuildIsCached(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, env, mark string
		tool            func() (string, error)
		files           map[string]string // file -> content; the first key is the source
		src, dep        string            // the source; the file it reads
		edit            func(string) string
	}{
		{
			name: "rust", env: "WEIR_RUSTC", mark: "cdylib",
			tool: func() (string, error) { p, _, err := rustc(ctx); return p, err },
			src:  "op.rs", dep: "shout.rs",
			files: map[string]string{
				"op.rs":    "mod shout;\n#[derive(Default)]\nstruct Op;\nimpl weir::Operator for Op {\n    fn process(&mut self, _port: u32, input: weir::Batch, out: &mut weir::Emitter) -> weir::Result {\n        for r in input {\n            out.emit_with(0, r.key, r.value.len(), r.timestamp).copy_from_slice(&shout::shout(r.value));\n        }\n        Ok(())\n    }\n}\nweir::operator!(Op::default());\n",
				"shout.rs": "pub fn shout(v: &[u8]) -> Vec<u8> { v.to_ascii_lowercase() }\n",
			},
			edit: func(s string) string { return strings.Replace(s, "lowercase", "uppercase", 1) },
		},
		{
			name: "c", env: "WEIR_CLANG", mark: "-MD", tool: lookPath("clang"),
			src: "op.c", dep: "shout.h",
			files: map[string]string{
				"op.c":    "#include \"weir.h\"\n#include \"shout.h\"\nstatic int init(weir_bytes config) { (void)config; return WEIR_OK; }\nstatic int process(uint32_t port, weir_batch *in) {\n    (void)port;\n    weir_record r;\n    while (weir_batch_next(in, &r)) {\n        uint8_t *v = weir_emit_alloc(0, r.key, r.value.len, r.timestamp);\n        if (!v) return WEIR_ERR;\n        for (uint32_t i = 0; i < r.value.len; i++) v[i] = SHOUT(r.value.ptr[i]);\n    }\n    return WEIR_OK;\n}\nstatic int snapshot(void) { return WEIR_OK; }\nstatic int restore(void) { return WEIR_OK; }\nWEIR_OPERATOR(init, process, snapshot, restore)\n",
				"shout.h": "#define SHOUT(c) (c)\n",
			},
			edit: func(string) string {
				return "#define SHOUT(c) ((c) >= 'a' && (c) <= 'z' ? (c) - 32 : (c))\n"
			},
		},
		{
			name: "assemblyscript", env: "WEIR_ASC", mark: "--exportStart", tool: lookPath("asc"),
			src: "op.ts", dep: "shout.ts",
			files: map[string]string{
				"op.ts":    "import { Batch, Emitter, Operator, register } from \"weir\";\nimport { shout } from \"./shout\";\nexport * from \"weir/exports\";\nclass Op extends Operator {\n  process(port: i32, input: Batch, out: Emitter): string | null {\n    while (input.next()) {\n      const n = input.valueLen;\n      const p = out.emitAlloc(0, input.keyPtr, input.keyLen, n, input.timestamp);\n      for (let i = 0; i < n; i++) store<u8>(p + i, shout(load<u8>(input.valuePtr + i)));\n    }\n    return null;\n  }\n}\nregister(new Op());\n",
				"shout.ts": "export function shout(c: u8): u8 { return c; }\n",
			},
			edit: func(string) string {
				return "export function shout(c: u8): u8 { return c >= 97 && c <= 122 ? c - 32 : c; }\n"
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, err := c.tool()
			if err != nil {
				t.Fatal(err)
			}
			compiles := counting(t, c.env, path, c.mark)
			dir := t.TempDir()
			for name, text := range c.files {
				write(t, filepath.Join(dir, name), text)
			}
			src := filepath.Join(dir, c.src)
			build := func(wantCompiles int) string {
				t.Helper()
				out, err := Build(ctx, src, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				if n := compiles(); n != wantCompiles {
					t.Fatalf("%d compiles so far, want %d", n, wantCompiles)
				}
				return out
			}
			build(1)
			build(1) // cached
			write(t, filepath.Join(dir, c.dep), c.edit(c.files[c.dep]))
			uppercases(t, build(2)) // the file it reads changed
			uppercases(t, build(2)) // cached again, and what it gives runs
			write(t, src, c.files[c.src]+"\n// an edit\n")
			build(3)
		})
	}
}

// An entry whose module was changed since it was stored (or replaced by
// another build's of the same source) is not used: the source is built.
func TestCacheChecksTheModule(t *testing.T) {
	ctx := context.Background()
	w2w, err := lookPath("wat2wasm")()
	if err != nil {
		t.Fatal(err)
	}
	compiles := counting(t, "WEIR_WAT2WASM", w2w, "-o")
	cacheDir := t.TempDir()
	t.Setenv(CacheDirEnv, cacheDir)
	src := filepath.Join(t.TempDir(), "uppercase.wat")
	b, err := os.ReadFile("../wat/uppercase.wat")
	if err != nil {
		t.Fatal(err)
	}
	write(t, src, string(b))
	if _, err := Build(ctx, src, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	mods, _ := filepath.Glob(filepath.Join(cacheDir, "*.wasm"))
	if len(mods) != 1 {
		t.Fatalf("cache holds %q; want one module", mods)
	}
	write(t, mods[0], "not the module")
	out, err := Build(ctx, src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if n := compiles(); n != 2 {
		t.Fatalf("%d compiles; want 2 (the changed entry not used)", n)
	}
	uppercases(t, out)

	// "off" caches nothing.
	t.Setenv(CacheDirEnv, "off")
	for range 2 {
		if _, err := Build(ctx, src, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	if n := compiles(); n != 4 {
		t.Fatalf("%d compiles; want 4 with the cache off", n)
	}
}

// An AssemblyScript source that imports a package (found in node_modules,
// where weir does not look) or sits beside an asconfig.json is not cached.
func TestTSImports(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.ts"), "import { x } from \"./lib\";\nimport { Operator } from \"weir\";\nexport * from \"weir/exports\";\n")
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "lib", "index.ts"), "export { y as x } from \"../b\";\n")
	write(t, filepath.Join(dir, "b.ts"), "export const y = 1;\n")
	got := tsImports(filepath.Join(dir, "a.ts"), "")
	want := []string{filepath.Join(dir, "a.ts"), filepath.Join(dir, "b.ts"), filepath.Join(dir, "lib", "index.ts")}
	if !slices.Equal(got, want) {
		t.Errorf("tsImports = %q; want %q", got, want)
	}
	write(t, filepath.Join(dir, "c.ts"), "import { JSON } from \"json-as\";\n")
	if got := tsImports(filepath.Join(dir, "c.ts"), ""); got != nil {
		t.Errorf("a package import: %q; want nil", got)
	}
	write(t, filepath.Join(dir, "d.ts"), "import { z } from \"./missing\";\n")
	if got := tsImports(filepath.Join(dir, "d.ts"), ""); got != nil {
		t.Errorf("an import not found: %q; want nil", got)
	}
	write(t, filepath.Join(dir, "asconfig.json"), "{}\n")
	if got := tsImports(filepath.Join(dir, "b.ts"), ""); got != nil {
		t.Errorf("beside asconfig.json: %q; want nil", got)
	}
}

func TestParseDeps(t *testing.T) {
	work := "/tmp/work"
	for _, c := range []struct {
		text string
		want []string
	}{
		{"out.wasm: /src/op.rs\n\n/src/op.rs:\n", []string{"/src/op.rs"}},
		{"c.wasm: /src/op.c /tmp/work/include/weir.h \\\n  /usr/include/stdint.h\n", []string{"/src/op.c", "/usr/include/stdint.h"}},
		{"x: /my\\ dir/op.c /a$$b.h\n", []string{"/my dir/op.c", "/a$b.h"}},
		{"no rule here\n", nil},
	} {
		if got := parseDeps(c.text, work); !slices.Equal(got, c.want) {
			t.Errorf("parseDeps(%q) = %q; want %q", c.text, got, c.want)
		}
	}
}
