package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// minimal is the smallest valid WebAssembly module: magic and version.
var minimal = []byte("\x00asm\x01\x00\x00\x00")

// module returns a real operator module when the WAT guests are built,
// else a minimal module.
func module(t *testing.T) []byte {
	if data, err := os.ReadFile("../../guests/wat/passthrough.wasm"); err == nil {
		return data
	}
	return minimal
}

func checkMagic(_ context.Context, _ string, wasm []byte) error {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return errors.New("not a WebAssembly module (bad magic)")
	}
	return nil
}

func openRegistry(t *testing.T) *Registry {
	t.Helper()
	nc := embeddedtest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), js, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistry(t *testing.T) {
	r := openRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wasm := module(t)
	other := append(append([]byte(nil), minimal...), 0) // different bytes

	m1, err := r.Push(ctx, "pass", wasm, 0, checkMagic)
	if err != nil || m1.Version != 1 || m1.Digest != Digest(wasm) || m1.Size != int64(len(wasm)) {
		t.Fatalf("push = %+v %v", m1, err)
	}
	m2, err := r.Push(ctx, "pass", other, 0, checkMagic)
	if err != nil || m2.Version != 2 {
		t.Fatalf("second push = %+v %v", m2, err)
	}
	if _, err := r.Push(ctx, "pass", wasm, 2, checkMagic); !errors.Is(err, ErrExists) ||
		err.Error() != "push pass@2: module version exists (with other bytes; versions do not change: push without -version for pass@3)" {
		t.Errorf("push of an existing version = %v", err)
	}
	if _, err := r.Push(ctx, "pass", other, 2, checkMagic); !errors.Is(err, ErrExists) ||
		err.Error() != "push pass@2: module version exists (with these bytes already: nothing to push)" {
		t.Errorf("push of an existing version's bytes = %v", err)
	}
	if m, err := r.Push(ctx, "pass", wasm, 7, nil); err != nil || m.Version != 7 {
		t.Errorf("push with version = %+v %v", m, err)
	}
	_, err = r.Push(ctx, "bad", []byte("hello"), 0, checkMagic)
	if !errors.Is(err, ErrInvalid) || err.Error() != "module bad refused: not a WebAssembly module (bad magic)" {
		t.Errorf("bad module = %v", err)
	}
	// A validator that names the module (host/wasm's errors do) is not
	// repeated: "module v2 refused: unknown ABI version 2 …".
	naming := func(_ context.Context, name string, _ []byte) error {
		return fmt.Errorf("module %s: unknown ABI version 2 (this host speaks 1)", name)
	}
	if _, err := r.Push(ctx, "v2", wasm, 0, naming); err == nil || err.Error() != "module v2 refused: unknown ABI version 2 (this host speaks 1)" {
		t.Errorf("module refused by a naming validator = %v", err)
	}
	if _, err := r.Push(ctx, "1x", wasm, 0, nil); err == nil {
		t.Error("bad name accepted")
	}

	list, err := r.List(ctx)
	if err != nil || len(list) != 3 || list[0].Ref() != "pass@1" || list[2].Ref() != "pass@7" {
		t.Fatalf("list = %+v %v", list, err)
	}
	if m, err := r.Inspect(ctx, "pass"); err != nil || m.Version != 7 {
		t.Errorf("inspect latest = %+v %v", m, err)
	}
	if m, err := r.Inspect(ctx, "pass@2"); err != nil || m.Digest != Digest(other) {
		t.Errorf("inspect pass@2 = %+v %v", m, err)
	}
	if _, err := r.Inspect(ctx, "nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("inspect missing = %v", err)
	}

	for _, ref := range []string{"pass@1", "sha256:" + Digest(other)} {
		data, m, err := Resolve(ctx, r, ref)
		if err != nil || m.Digest != Digest(data) {
			t.Errorf("resolve %s = %+v %v", ref, m, err)
		}
	}
	file := filepath.Join(t.TempDir(), "op.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if data, m, err := Resolve(ctx, nil, file); err != nil || !bytes.Equal(data, wasm) || m.Digest != Digest(wasm) {
		t.Errorf("resolve file = %+v %v", m, err)
	}
	// What is missing says what is there instead: the name's versions, a
	// name it likely misspells, or where to look.
	for ref, want := range map[string]string{
		"nosuch@3": "not in the module registry (weir module ls lists what it holds)",
		"pass@9":   "not in the module registry (pass has versions 1, 2, 7)",
		"pas@1":    "not in the module registry (did you mean pass? weir module ls lists them)",
	} {
		mr, _ := modref.Parse(ref)
		if err := Check(ctx, r, mr); err == nil || err.Error() != want {
			t.Errorf("check %s = %v, want %s", ref, err, want)
		}
	}

	gone, err := r.Remove(ctx, "pass@2")
	if err != nil || len(gone) != 1 {
		t.Errorf("rm pass@2 = %v %v", gone, err)
	}
	if m, _ := r.Inspect(ctx, "pass"); m.Version != 7 {
		t.Errorf("latest after rm = %+v", m)
	}
	if gone, err := r.Remove(ctx, "pass"); err != nil || len(gone) != 2 {
		t.Errorf("rm all = %v %v", gone, err)
	}
	if list, _ := r.List(ctx); len(list) != 0 {
		t.Errorf("left %v", list)
	}
	if _, err := r.Remove(ctx, "pass"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rm missing = %v", err)
	}
	// Auto-increment continues from what is stored now.
	if m, err := r.Push(ctx, "pass", wasm, 0, nil); err != nil || m.Version != 1 {
		t.Errorf("push after rm = %+v %v", m, err)
	}
}

// TestConcurrentPush: pushes racing for the next version all get distinct
// versions.
func TestConcurrentPush(t *testing.T) {
	r := openRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 6
	versions := make(chan int, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			m, err := r.Push(ctx, "race", minimal, 0, nil)
			versions <- m.Version
			errs <- err
		}()
	}
	seen := map[int]bool{}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		v := <-versions
		if seen[v] {
			t.Errorf("version %d handed out twice", v)
		}
		seen[v] = true
	}
	if list, _ := r.List(ctx); len(list) != n {
		t.Errorf("%d versions stored, want %d", len(list), n)
	}
}

// TestPushContent: bytes the registry holds are not pushed again, under
// any name; new bytes become the next version of the name given.
func TestPushContent(t *testing.T) {
	r := openRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wasm := module(t)
	other := append(append([]byte(nil), minimal...), 0)
	m, pushed, err := r.PushContent(ctx, "op", wasm, checkMagic)
	if err != nil || !pushed || m.Ref() != "op@1" || m.Digest != Digest(wasm) {
		t.Fatalf("first push = %+v %v %v", m, pushed, err)
	}
	if m, pushed, err = r.PushContent(ctx, "renamed", wasm, checkMagic); err != nil || pushed || m.Ref() != "op@1" {
		t.Errorf("same bytes again = %+v %v %v", m, pushed, err)
	}
	if m, pushed, err = r.PushContent(ctx, "op", other, checkMagic); err != nil || !pushed || m.Ref() != "op@2" {
		t.Errorf("other bytes = %+v %v %v", m, pushed, err)
	}
	if _, _, err = r.PushContent(ctx, "bad", []byte("hello"), checkMagic); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad module = %v", err)
	}
	if list, _ := r.List(ctx); len(list) != 2 {
		t.Errorf("stored %+v, want op@1 and op@2", list)
	}
}

// A claim whose try was stored but not acknowledged (the acknowledgement
// lost in an election, or come after the try's deadline) finds its key
// there at the next try: the key holds the push's digest, so the version
// is its own — not "module version exists". A key that holds another
// push's digest is that push's, and the claim fails. Here the server is
// real and the key is stored; only the first acknowledgement is dropped.
func TestClaimWhoseAcknowledgementWasLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := openRegistry(t)
	create := r.create
	// lose stores the next create with stored as its value, and answers
	// it with a timeout, as a try whose acknowledgement never came.
	lose := func(stored func(value []byte) []byte) {
		lost := false
		r.create = func(ctx context.Context, key string, value []byte) (uint64, error) {
			if lost {
				return create(ctx, key, value)
			}
			lost = true
			if _, err := create(ctx, key, stored(value)); err != nil {
				return 0, err
			}
			return 0, nats.ErrTimeout
		}
	}
	lose(func(value []byte) []byte { return value })
	m, err := r.Push(ctx, "lost", minimal, 0, checkMagic)
	if err != nil || m.Version != 1 {
		t.Fatalf("push with its claim's acknowledgement lost: %+v, %v; want version 1", m, err)
	}
	if got, err := r.Find(ctx, modref.Ref{Kind: modref.Registry, Name: "lost", Version: 1}); err != nil || got[0].Digest != Digest(minimal) {
		t.Fatalf("find lost@1: %v, %v", got, err)
	}

	// Another push claimed the version while the try went unanswered.
	lose(func([]byte) []byte { return []byte(Digest([]byte("another push"))) })
	if _, err := r.Push(ctx, "taken", minimal, 1, checkMagic); !errors.Is(err, ErrExists) {
		t.Errorf("push taken@1, which another push claimed: %v; want %v", err, ErrExists)
	}
	lose(func([]byte) []byte { return []byte(Digest([]byte("another push"))) })
	if m, err := r.Push(ctx, "next", minimal, 0, checkMagic); err != nil || m.Version != 2 {
		t.Errorf("push next, whose version 1 another push claimed: %+v, %v; want version 2", m, err)
	}
}
