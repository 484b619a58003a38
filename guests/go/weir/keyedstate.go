package weir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/weirhq/weir/abi"
)

// KeyedStateWriter writes an operator's state in the keyed layout
// (abi.KeyedStateMagic): one entry per key. weir can then redistribute the
// state by key when the operator's parallelism changes on a restore (weir
// job restore -spec): each new subtask gets the entries whose key it will
// receive records for. Use it only when every entry's key is the key the
// operator's records arrive by, with its inputs partitioned by key.
//
//	kw := weir.NewKeyedStateWriter(w)
//	for k, n := range counts {
//		kw.Put([]byte(k), value(n))
//	}
//	return kw.Close()
//
// Entries go through w as they are put, so a Snapshot that returns without
// Close loses none of them.
type KeyedStateWriter struct {
	w   *StateWriter
	hdr [abi.RecordHeaderSize]byte
	err error
}

// NewKeyedStateWriter starts a keyed state on w. The keyed layout is the
// whole state: after anything else written to w (a version byte), Put and
// Close fail with errKeyedAfterState, and after another KeyedStateWriter
// on w with errSecondKeyedWriter; so does the snapshot, also when Snapshot
// ignores their error and returns nil. So does anything written to w
// itself after it (w.Write fails).
func NewKeyedStateWriter(w *StateWriter) *KeyedStateWriter {
	k := &KeyedStateWriter{w: w}
	switch {
	case w.keyed:
		// A second magic among the first writer's entries.
		k.err = errSecondKeyedWriter
	case w.started:
		k.err = errKeyedAfterState
	}
	if k.err != nil {
		// Sticky: the state written so far is not in the keyed layout
		// the operator meant, and would fail only its first restore.
		if w.err == nil {
			w.err = k.err
		}
		return k
	}
	_, k.err = w.append([]byte(abi.KeyedStateMagic))
	w.keyed = true
	return k
}

var errKeyedAfterState = errors.New("weir: KeyedStateWriter after other state: the keyed layout is the whole snapshot (create it first, with no version byte before it)")

var errSecondKeyedWriter = errors.New("weir: a second KeyedStateWriter in one snapshot: the keyed layout is the whole snapshot (make one and put every entry with it)")

// Put writes the entry for key (abi.AppendKeyedEntry's layout: the header
// of a batch record with timestamp 0, the key, the value) to the state.
// Each key at most once.
func (k *KeyedStateWriter) Put(key, value []byte) error {
	if k.err != nil {
		return k.err
	}
	binary.LittleEndian.PutUint32(k.hdr[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(k.hdr[4:], uint32(len(value)))
	// k.hdr[8:] is the reserved timestamp, always 0.
	for _, p := range [3][]byte{k.hdr[:], key, value} {
		if _, k.err = k.w.append(p); k.err != nil {
			break
		}
	}
	return k.err
}

// Close returns the first error of the keyed state. Put writes each entry
// to the state at once, so there is nothing left to write: a Snapshot that
// checks Put's errors may return without it.
func (k *KeyedStateWriter) Close() error {
	return k.err
}

// errNotKeyedState is ReadKeyedState's error for a state in another
// layout: one a build of the operator from before it wrote keyed state
// took, as the other SDKs say it.
var errNotKeyedState = errors.New("weir: the state to restore is in a layout of its own, and this build of the operator reads keyed state (abi/ABI.md §8): restore with the build that wrote it, or have this build read the old layout too (state that does not start with \"WKS1\")")

// ReadKeyedState reads a state written with KeyedStateWriter (also one
// weir redistributed after a rescale) and calls fn for each entry; the
// slices are valid during the call. An empty state has no entries; a state
// in another layout fails with an error that says what to do. The first
// error fn returns stops the reading and is returned as it is.
func ReadKeyedState(r *StateReader, fn func(key, value []byte) error) error {
	st, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("weir: read keyed state: %w", err)
	}
	var fnErr error
	err = abi.KeyedEntries(st, func(key, value []byte) error {
		fnErr = fn(key, value)
		return fnErr
	})
	switch {
	case fnErr != nil:
		return fnErr // the operator's own message, as in the other SDKs
	case errors.Is(err, abi.ErrNotKeyedState):
		return errNotKeyedState
	case err != nil:
		// abi's errors of the layout start with "keyed state:" already.
		return fmt.Errorf("weir: %w", err)
	}
	return nil
}
