// Package storage holds checkpoint storage: a flat key space of immutable
// objects ("JOB/chk-ID/TASK", "JOB/chk-ID/_metadata"), with three
// implementations of one Store interface:
//
//   - Dir: a local directory (the embedded default); every Put writes a
//     temporary file, fsyncs it, renames it into place and fsyncs the
//     directory, so a reader sees a whole object or none.
//   - ObjectStore: a JetStream Object Store bucket, for state and
//     channel-state blobs shared by workers on several machines.
//   - KV: a JetStream Key-Value bucket, for small objects such as
//     checkpoint metadata and job records.
//
// The two JetStream stores read, list and delete through the bucket's
// stream leader (STREAM.MSG.GET, STREAM.INFO), never through a direct get
// or a consumer, which on a cluster a replica that lags may serve (see
// leader.go): what one client wrote, another lists and reads right after,
// wherever it is connected. While a stream has no leader (its leader's
// server gone, its replicas electing another), they wait for one, and
// so do their puts: a KV value, and each chunk of an object, is
// published again until one stores it (see ObjectStore.Put, which
// publishes an object in the object store's layout itself).
//
// Store has the same method set as the host's storage interface (host.Store),
// so each implementation satisfies both without importing the host.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// Store is checkpoint storage.
type Store interface {
	// Put stores the bytes of r under key, atomically: a reader sees the
	// whole object or none. Putting an existing key replaces it.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the object under key. A missing key gives an error for
	// which errors.Is(err, fs.ErrNotExist) holds.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes every object whose key starts with prefix (see
	// CheckPrefix).
	Delete(ctx context.Context, prefix string) error
	// List returns the keys that start with prefix (see CheckPrefix),
	// sorted.
	List(ctx context.Context, prefix string) ([]string, error)
}

// KeyDeleter is a Store that removes one object by its key, and no other,
// at a cost that does not grow with the other objects it holds (KV,
// ObjectStore). A JetStream bucket finds the keys under a prefix (Delete)
// only by listing all of its own: its subjects hold each key whole, or
// encoded, where no subject filter can match the start of one.
type KeyDeleter interface {
	// DeleteKey removes the object under key; a key with no object is no
	// error.
	DeleteKey(ctx context.Context, key string) error
}

// DeleteKey removes the object under key from s: through s's DeleteKey
// where it has one (KeyDeleter), else through Delete, which also removes
// the objects whose keys key is the start of.
func DeleteKey(ctx context.Context, s Store, key string) error {
	if kd, ok := s.(KeyDeleter); ok {
		return kd.DeleteKey(ctx, key)
	}
	return s.Delete(ctx, key)
}

// Locator is a Store that names where it keeps its objects. A coordinator
// and its workers must share one checkpoint store: the coordinator reads
// what the workers write. Equal locations are the same objects.
type Locator interface {
	// Location names the store's objects, e.g. "dir HOST:/var/weir/checkpoints"
	// or "jetstream object store weir_state".
	Location() string
}

// Location returns s's location, or "" when s does not name one (it is
// not a Locator).
func Location(s any) string {
	if l, ok := s.(Locator); ok {
		return l.Location()
	}
	return ""
}

// ErrUnreachable is wrapped by the error of Reachable for a store that
// cannot reach its server now.
var ErrUnreachable = errors.New("checkpoint store unreachable")

// Reacher is a Store that can tell, without a round trip, whether it can
// reach the server that keeps its objects now. ObjectStore and KV can
// (their NATS connection is up); a Dir is always there.
type Reacher interface {
	// Reachable returns nil when the store's server can be reached now,
	// else an error wrapping ErrUnreachable that says why not.
	Reachable() error
}

// Reachable returns s's Reachable, or nil when s is not a Reacher.
func Reachable(s any) error {
	if r, ok := s.(Reacher); ok {
		return r.Reachable()
	}
	return nil
}

// ErrBadKey is wrapped by errors about keys a store cannot hold.
var ErrBadKey = errors.New("bad storage key")

// CheckKey validates a key: non-empty, '/'-separated segments of letters,
// digits, '-', '_', '=' and '.', no segment empty, "." or "..". Every Store
// here accepts exactly these keys.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrBadKey)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return fmt.Errorf("%w %q: empty, dot or dot-dot segment", ErrBadKey, key)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=' || r == '.') {
				return fmt.Errorf("%w %q: character %q", ErrBadKey, key, r)
			}
		}
	}
	return nil
}

// CheckPrefix validates a prefix of List or Delete: empty (every key), or
// a key optionally followed by '/' (whose last segment may be the start of
// a key's, as in "JOB/chk-"). A prefix with a ".." segment could name a
// directory outside a Dir's root.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

func notExist(key string, err error) error {
	return fmt.Errorf("storage: %s: %w (%v)", key, fs.ErrNotExist, err)
}

// ReadAll reads the whole object under key.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("storage: read %s: %w", key, err)
	}
	return data, nil
}
