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
// Each key at most once. Put keeps neither slice: Put([]byte(s), v) of a
// short string s allocates nothing.
func (k *KeyedStateWriter) Put(key, value []byte) error {
	if k.err != nil {
		return k.err
	}
	w := k.w
	if w.err != nil {
		k.err = w.err
		return k.err
	}
	if n := abi.RecordHeaderSize + len(key) + len(value); w.buf != nil && n < cap(w.buf)-len(w.buf) {
		// The entry fits in the chunk, with room to spare: one copy of
		// each part, no flush.
		e := w.buf[len(w.buf) : len(w.buf)+n]
		binary.LittleEndian.PutUint32(e[0:], uint32(len(key)))
		binary.LittleEndian.PutUint32(e[4:], uint32(len(value)))
		clear(e[8:abi.RecordHeaderSize]) // the reserved timestamp, always 0
		copy(e[abi.RecordHeaderSize:], key)
		copy(e[abi.RecordHeaderSize+len(key):], value)
		w.buf = w.buf[:len(w.buf)+n]
		return nil
	}
	binary.LittleEndian.PutUint32(k.hdr[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(k.hdr[4:], uint32(len(value)))
	// k.hdr[8:] is the reserved timestamp, always 0.
	for _, p := range [3][]byte{k.hdr[:], key, value} {
		if k.err = w.copyIn(p); k.err != nil {
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
//
// It reads the state as it goes, entry by entry, handing fn slices of the
// reader's buffer where an entry lies in it whole: the state is never
// held whole in the operator's memory besides what fn keeps of it.
func ReadKeyedState(r *StateReader, fn func(key, value []byte) error) error {
	var magic [len(abi.KeyedStateMagic)]byte
	switch n, err := io.ReadFull(r, magic[:]); {
	case n == 0 && err == io.EOF:
		return nil // an empty state
	case err == io.ErrUnexpectedEOF, err == nil && string(magic[:]) != abi.KeyedStateMagic:
		return errNotKeyedState
	case err != nil:
		return fmt.Errorf("weir: read keyed state: %w", err)
	}
	var hdrBuf, entryBuf []byte // where entries that straddle a chunk are gathered
	for off := len(magic); ; {
		hdr, err := r.take(abi.RecordHeaderSize, &hdrBuf)
		switch {
		case err == io.EOF:
			return nil
		case err == io.ErrUnexpectedEOF:
			// abi.KeyedEntries's words, as the host's check says them.
			return fmt.Errorf("weir: keyed state: entry header at byte %d passes the end: %w", off, abi.ErrMalformedBatch)
		case err != nil:
			return fmt.Errorf("weir: read keyed state: %w", err)
		}
		kl := int(binary.LittleEndian.Uint32(hdr[0:]))
		vl := int(binary.LittleEndian.Uint32(hdr[4:]))
		e, err := r.take(kl+vl, &entryBuf)
		switch {
		case err == io.EOF, err == io.ErrUnexpectedEOF:
			return fmt.Errorf("weir: keyed state: entry at byte %d: key of %d and value of %d bytes pass the end: %w", off, kl, vl, abi.ErrMalformedBatch)
		case err != nil:
			return fmt.Errorf("weir: read keyed state: %w", err)
		}
		if err := fn(e[:kl:kl], e[kl:]); err != nil {
			return err // the operator's own message, as in the other SDKs
		}
		off += abi.RecordHeaderSize + kl + vl
	}
}
