package wasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// withFunctions returns testdata/bad/locals.wasm with extra functions of
// its own type () -> () and an empty body added: a module of a few bytes a
// function.
func withFunctions(t *testing.T, extra int) []byte {
	t.Helper()
	b := bad(t, "locals")
	out := append([]byte(nil), b[:8]...)
	r := &reader{b: b, off: 8}
	var typ uint32
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		if id != secFunction && id != secCode {
			out = append(out, b[start:r.off]...)
			continue
		}
		s := &reader{b: body}
		n, _ := s.u32()
		nb := appendULEB(nil, uint64(n)+uint64(extra))
		rest := body[s.off:]
		nb = append(nb, rest...)
		for range extra {
			if id == secFunction {
				typ = uint32(rest[len(rest)-1]) // the last function's: () -> ()
				nb = appendULEB(nb, uint64(typ))
			} else {
				nb = append(nb, 2, 0, 0x0b) // size, no locals, end
			}
		}
		out = appendSection(out, id, nb)
	}
	return out
}

// withBigFunction returns testdata/bad/locals.wasm with the body of its
// first function that declares one i64 local grown to size bytes of
// arithmetic on it (local = local + 1, over and over).
func withBigFunction(t *testing.T, size int) []byte {
	t.Helper()
	b := bad(t, "locals")
	out := append([]byte(nil), b[:8]...)
	r := &reader{b: b, off: 8}
	done := false
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		sz, _ := r.u32()
		body, err := r.bytes(uint64(sz))
		if err != nil {
			t.Fatal(err)
		}
		if id != secCode {
			out = append(out, b[start:r.off]...)
			continue
		}
		s := &reader{b: body}
		fns, _ := s.u32()
		nb := appendULEB(nil, uint64(fns))
		for range fns {
			n, _ := s.u32()
			fn, _ := s.bytes(uint64(n))
			if !done && bytes.HasPrefix(fn, []byte{1, 1, 0x7e}) {
				done = true
				add := []byte{0x42, 0x01, 0x20, 0x00, 0x7c, 0x21, 0x00} // i64.const 1, local.get 0, i64.add, local.set 0
				big := []byte{1, 1, 0x7e}
				for len(big)+len(add) < size {
					big = append(big, add...)
				}
				for len(big)+1 < size {
					big = append(big, 0x01) // nop
				}
				fn = append(big, 0x0b)
			}
			nb = appendULEB(nb, uint64(len(fn)))
			nb = append(nb, fn...)
		}
		out = appendSection(out, secCode, nb)
	}
	return out
}

// TestCompileBounds: wazero's compile time and memory grow with the
// number of functions and, faster than linearly, with one function's
// code; a module of 1,000,000 empty functions (4 MB) took 7 s and 290 MB
// to validate, one function of 24 MB of code 9 s and 1.2 GB. Modules past
// the limits are refused before wazero sees them, by every check.
func TestCompileBounds(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		code   []byte
		detail string
	}{
		{"many functions", withFunctions(t, maxFunctions), "has 200106 functions, over the limit of 200000 (compiling so many takes seconds and gigabytes)"},
		{"one big function", withBigFunction(t, maxFunctionBytes+10),
			"function 6 has 1048586 bytes of code, over the limit of 1048576 (1 MiB; compiling a function so large takes seconds and gigabytes): split it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, check := range []struct {
				how string
				err error
			}{
				{"Check", Check("m", c.code, Limits{})},
				{"Load", func() error { _, err := e.Load(ctx, "m", c.code, Limits{}); return err }()},
				{"Validate", e.Validate(ctx, "m", c.code, Limits{})},
			} {
				var ve *ValidationError
				if !errors.As(check.err, &ve) || !errors.Is(check.err, ErrMemoryLimit) || check.err.Error() != "module m: "+c.detail {
					t.Fatalf("%s: got %v, want a *ValidationError %q", check.how, check.err, c.detail)
				}
			}
		})
	}
	// Below the limits, modules load and run (at the function limit, one
	// takes a minute under the race detector).
	for _, code := range [][]byte{withFunctions(t, 10000), withBigFunction(t, maxFunctionBytes)} {
		inst := instantiate(t, e, "m", code, Limits{}, InstanceConfig{})
		if err := inst.Process(ctx, 0, batchOf(), newOut().emit); err != nil {
			t.Fatal(err)
		}
	}
}

// cacheBytes is what the compilation cache in dir holds, as trimCache
// counts it (it trims nothing with a negative limit).
func cacheBytes(dir string) int64 { return trimCache(dir, -1) }

// TestCompilationCacheBounded: the on-disk compilation cache is trimmed,
// oldest entries first, to its bound at NewEngine and after each compile,
// and what is not wazero's in its directory is left alone.
func TestCompilationCacheBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	foreign := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(foreign, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var mods [][]byte
	for _, name := range []string{"wordcount", "keyedcount", "join", "filter", "uppercase"} {
		mods = append(mods, readFile(t, filepath.Join("..", "..", "guests", "rust", "examples", name+".wasm")))
	}
	// Unbounded: every module's entry stays.
	e, err := NewEngine(Config{CacheDir: dir, MaxCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if _, err := e.Load(ctx, "m", m, Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	e.Close(ctx)
	all := cacheBytes(dir)
	if all == 0 {
		t.Fatal("the compilation cache holds nothing")
	}
	// A new engine with a bound below that trims at once.
	limit := all / 2
	e, err = NewEngine(Config{CacheDir: dir, MaxCacheBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if n := cacheBytes(dir); n > limit || n == 0 {
		t.Fatalf("after NewEngine the cache holds %d bytes; want 1 to %d", n, limit)
	}
	// And after each compile of a module it has not compiled.
	for i, m := range mods {
		m = padCustom(m, i) // other bytes: another entry
		if _, err := e.Load(ctx, "m", m, Limits{}); err != nil {
			t.Fatal(err)
		}
		if n := cacheBytes(dir); n > limit || n == 0 {
			t.Fatalf("after compile %d the cache holds %d bytes; want 1 to %d", i, n, limit)
		}
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("a file that is not the cache's: %v", err)
	}
}

// padCustom returns wasm with a custom section of n+1 bytes appended:
// the same module, other bytes.
func padCustom(wasm []byte, n int) []byte {
	body := append([]byte{1, 'x'}, make([]byte, n+1)...)
	return appendSection(append([]byte(nil), wasm...), secCustom, body)
}
