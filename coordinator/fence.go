package coordinator

import (
	"context"
	"fmt"
	"io"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// fenced is a store whose writes (Put, Delete) a Fence guards: refused
// once the coordinator lost its lease, and canceled when it loses it
// while they are under way. Reads pass through.
type fenced struct {
	s     storage.Store
	fence control.Fence
}

// fencedKeys is fenced for a store that deletes one key by itself
// (storage.KeyDeleter), which the catalog asks for.
type fencedKeys struct{ fenced }

// fence returns s with its writes guarded by f; s itself without f.
func fence(s storage.Store, f control.Fence) storage.Store {
	if f == nil {
		return s
	}
	fs := fenced{s: s, fence: f}
	if _, ok := s.(storage.KeyDeleter); ok {
		return fencedKeys{fs}
	}
	return fs
}

// guard runs write under the fence, naming what it does in the error of
// a refusal.
func (f fenced) guard(ctx context.Context, what string, write func(context.Context) error) error {
	g, release, err := f.fence(ctx)
	if err != nil {
		return fmt.Errorf("storage %s: %w", what, err)
	}
	defer release()
	return write(g)
}

// Put implements storage.Store, guarded.
func (f fenced) Put(ctx context.Context, key string, r io.Reader) error {
	return f.guard(ctx, "put "+key, func(ctx context.Context) error { return f.s.Put(ctx, key, r) })
}

// Delete implements storage.Store, guarded.
func (f fenced) Delete(ctx context.Context, prefix string) error {
	return f.guard(ctx, "delete "+prefix, func(ctx context.Context) error { return f.s.Delete(ctx, prefix) })
}

// Get implements storage.Store.
func (f fenced) Get(ctx context.Context, key string) (io.ReadCloser, error) { return f.s.Get(ctx, key) }

// List implements storage.Store.
func (f fenced) List(ctx context.Context, prefix string) ([]string, error) {
	return f.s.List(ctx, prefix)
}

// Location is the store's (storage.Locator).
func (f fenced) Location() string { return storage.Location(f.s) }

// Reachable is the store's (storage.Reacher).
func (f fenced) Reachable() error { return storage.Reachable(f.s) }

// DeleteKey implements storage.KeyDeleter, guarded.
func (f fencedKeys) DeleteKey(ctx context.Context, key string) error {
	return f.guard(ctx, "delete "+key, func(ctx context.Context) error { return storage.DeleteKey(ctx, f.s, key) })
}
