package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"sync"
)

// MemStore keeps checkpoint objects in memory: for tests and for local runs
// that need no durability. It satisfies host.Store and is safe for
// concurrent use.
type MemStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{objs: map[string][]byte{}} }

// Put stores r's bytes under key.
func (s *MemStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("checkpoint store: put %s: %w", key, err)
	}
	s.mu.Lock()
	s.objs[key] = b
	s.mu.Unlock()
	return nil
}

// Get returns the object under key; a missing key wraps fs.ErrNotExist.
func (s *MemStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	b, ok := s.objs[key]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("checkpoint store: get %s: %w", key, fs.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// List returns the keys starting with prefix, sorted.
func (s *MemStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.objs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Delete removes every object whose key starts with prefix.
func (s *MemStore) Delete(ctx context.Context, prefix string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.objs {
		if strings.HasPrefix(k, prefix) {
			delete(s.objs, k)
		}
	}
	return nil
}
