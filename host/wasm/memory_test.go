package wasm

import (
	"context"
	"errors"
	"testing"
)

// TestMemoryLimitPerInstance: the memory limit is each instance's, not
// its compiled module's: one module loaded under two limits is compiled
// once, and each instance is refused at its own limit.
func TestMemoryLimitPerInstance(t *testing.T) {
	e, err := NewEngine(Config{CacheDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer e.Close(ctx)
	for _, limit := range []uint64{4 << 20, 8 << 20, 4 << 20, 8<<20 + 1000} {
		m, err := e.Load(ctx, "m", misbehave(t), Limits{MemoryBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		inst, err := m.Instantiate(ctx, InstanceConfig{Config: []byte("m")})
		if err != nil {
			t.Fatal(err)
		}
		err = inst.Process(ctx, 0, batchOf(), newOut().emit)
		inst.Close(ctx)
		pages := limit / PageSize * PageSize // whole pages
		var te *TrapError
		if !errors.As(err, &te) || te.MemorySize != pages {
			t.Fatalf("limit %d: got %v, want a trap at the limit", limit, err)
		}
	}
	if n := e.cachedModules(); n != 1 {
		t.Fatalf("%d compiled modules, want 1", n)
	}
}

// TestGuestMemory: the allocator behind an instance's memory refuses, and
// notes, a grow past its limit, and never its initial allocation; memory
// it hands out is zeroed.
func TestGuestMemory(t *testing.T) {
	g := &guestMemory{limit: 4 * PageSize}
	lm := g.Allocate(PageSize, MaxMemoryBytes)
	if b := lm.Reallocate(2 * PageSize); len(b) != 2*PageSize {
		t.Fatalf("initial allocation: %d bytes", len(b))
	}
	b := lm.Reallocate(4 * PageSize)
	if len(b) != 4*PageSize || g.refused != 0 {
		t.Fatalf("grow to the limit: %d bytes, refused %d", len(b), g.refused)
	}
	for _, c := range b {
		if c != 0 {
			t.Fatal("grown memory is not zeroed")
		}
	}
	b[len(b)-1] = 7
	if lm.Reallocate(5*PageSize) != nil || g.refused != PageSize || g.refusedAt != 4*PageSize {
		t.Fatalf("grow past the limit: refused %d at %d", g.refused, g.refusedAt)
	}
	if len(g.buf) != 4*PageSize || g.buf[len(g.buf)-1] != 7 {
		t.Fatal("a refused grow changed the memory")
	}
	g.resetRefused()
	if g.refused != 0 || g.refusedAt != 0 {
		t.Fatal("resetRefused kept the note")
	}
	// Load refuses a declared minimum over the limit; were one to get
	// through, wazero would panic on a nil initial allocation.
	g2 := &guestMemory{limit: PageSize}
	if b := g2.Allocate(0, MaxMemoryBytes).Reallocate(2 * PageSize); len(b) != 2*PageSize {
		t.Fatalf("initial allocation over the limit: %d bytes", len(b))
	}
}
