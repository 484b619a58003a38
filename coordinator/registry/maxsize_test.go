package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// padded returns wasm with a custom section appended that brings it to
// size bytes: a module as valid as wasm, of any size.
func padded(t *testing.T, wasm []byte, size int) []byte {
	t.Helper()
	const name = "pad"
	// id, a 5-byte LEB128 size, the name's length and the name.
	body := size - len(wasm) - 1 - 5
	if body < 1+len(name) {
		t.Fatalf("cannot pad %d bytes to %d", len(wasm), size)
	}
	out := append([]byte(nil), wasm...)
	out = append(out, 0, byte(body)|0x80, byte(body>>7)|0x80, byte(body>>14)|0x80, byte(body>>21)|0x80, byte(body>>28))
	out = append(out, byte(len(name)))
	out = append(out, name...)
	return append(out, make([]byte, body-1-len(name))...)
}

// TestMaxModuleSize: the registry refuses a module over its size limit
// before validating or storing it, and a load of a stored one over it
// before reading it; the limit is kept in NATS, so that every process on
// the bucket (weir module push, weir run, every worker) applies the one
// whoever runs weir set.
func TestMaxModuleSize(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *Registry {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(ctx, js, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	coord, client := open(), open()
	if n, err := client.MaxModuleSize(ctx); err != nil || n != DefaultMaxModuleSize {
		t.Fatalf("limit of a new registry: %d, %v; want %d", n, err, DefaultMaxModuleSize)
	}

	// Over the object store's chunks and NATS's max_payload (1 MiB), a
	// module goes in and comes back whole: neither limits its size.
	big := padded(t, module(t), 3<<20)
	m, err := client.Push(ctx, "big", big, 0, checkMagic)
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := Resolve(ctx, client, m.Ref()); err != nil || len(data) != len(big) {
		t.Fatalf("resolve %s: %d bytes, %v", m.Ref(), len(data), err)
	}

	const limit = 1 << 20
	if err := coord.SetMaxModuleSize(ctx, limit); err != nil {
		t.Fatal(err)
	}
	if n, err := client.MaxModuleSize(ctx); err != nil || n != limit {
		t.Fatalf("limit seen by another registry client: %d, %v; want %d", n, err, limit)
	}

	// Over it: refused before the validator runs, nothing stored.
	over := padded(t, module(t), limit+1)
	_, err = client.Push(ctx, "over", over, 0, func(context.Context, string, []byte) error {
		t.Fatal("the validator ran on a module over the limit")
		return nil
	})
	want := "module over is 1 MiB (1048577 bytes), over the module registry's limit of 1 MiB: shrink it (strip its debug info: " +
		`wasm-opt --strip-debug, Go -ldflags="-s -w"), or have whoever runs weir raise weir up -max-module-size`
	if !errors.Is(err, ErrTooLarge) || err.Error() != want {
		t.Fatalf("push over the limit: %v\nwant %s", err, want)
	}
	if _, _, err := client.PushContent(ctx, "over", over, checkMagic); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("push content over the limit: %v", err)
	}
	if ms, err := client.List(ctx); err != nil || len(ms) != 1 {
		t.Fatalf("after refused pushes the registry holds %v, %v; want big@1 only", ms, err)
	}
	// At it: taken.
	if _, err := client.Push(ctx, "at", padded(t, module(t), limit), 0, checkMagic); err != nil {
		t.Fatal(err)
	}

	// Stored before the limit was lowered: not loaded, by name or digest.
	for _, ref := range []string{"big", "big@1", "sha256:" + m.Digest} {
		_, _, err := Resolve(ctx, client, ref)
		want := "module big@1 is 3 MiB (3145728 bytes), over the module registry's limit of 1 MiB"
		if !errors.Is(err, ErrTooLarge) || err.Error()[:len(want)] != want {
			t.Fatalf("resolve %s: %v\nwant %s…", ref, err, want)
		}
	}
	// Nor is a file over it.
	file := filepath.Join(t.TempDir(), "big.wasm")
	if err := os.WriteFile(file, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Resolve(ctx, client, file); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("resolve a file over the limit: %v", err)
	}

	// Raised again: loaded again. 0 sets the default.
	if err := coord.SetMaxModuleSize(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Resolve(ctx, client, "big"); err != nil {
		t.Fatal(err)
	}
	if n, err := client.MaxModuleSize(ctx); err != nil || n != DefaultMaxModuleSize {
		t.Fatalf("limit after SetMaxModuleSize(0): %d, %v; want %d", n, err, DefaultMaxModuleSize)
	}
}
