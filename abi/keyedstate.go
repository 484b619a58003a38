package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// KeyedStateMagic starts an operator state stream in the keyed state
// layout. An operator whose state is a set of entries, one per routing key
// (the key its key-partitioned inputs deliver records by), may write its
// state this way:
//
//	state := "WKS1" entry*
//	entry := key_len:u32 value_len:u32 reserved:i64 key:[key_len]u8 value:[value_len]u8
//
// An entry is laid out as a batch record (the reserved field is the
// timestamp's place; write 0). The host can then split the state by key
// when the operator's parallelism changes on restore: each new subtask
// restores, in the same layout, the entries of all old subtasks whose key
// routes to it by the hash of "partition: key". State in any other layout
// is opaque to the host and ties the operator to its parallelism.
const KeyedStateMagic = "WKS1"

// ErrNotKeyedState is returned for a non-empty state stream that does not
// start with KeyedStateMagic.
var ErrNotKeyedState = errors.New("operator state is not in the keyed state layout")

// IsKeyedState reports whether state starts with KeyedStateMagic.
func IsKeyedState(state []byte) bool {
	return len(state) >= len(KeyedStateMagic) && string(state[:len(KeyedStateMagic)]) == KeyedStateMagic
}

// KeyedEntries calls fn for each entry of a keyed state, in order; the
// slices alias state. An empty state has no entries.
func KeyedEntries(state []byte, fn func(key, value []byte) error) error {
	if len(state) == 0 {
		return nil
	}
	if !IsKeyedState(state) {
		return ErrNotKeyedState
	}
	for off := len(KeyedStateMagic); off < len(state); {
		if len(state)-off < RecordHeaderSize {
			return fmt.Errorf("keyed state: entry header at byte %d passes the end: %w", off, ErrMalformedBatch)
		}
		kl := uint64(binary.LittleEndian.Uint32(state[off:]))
		vl := uint64(binary.LittleEndian.Uint32(state[off+4:]))
		start := uint64(off) + RecordHeaderSize
		if start+kl+vl > uint64(len(state)) {
			return fmt.Errorf("keyed state: entry at byte %d: key of %d and value of %d bytes pass the end: %w", off, kl, vl, ErrMalformedBatch)
		}
		ke := start + kl
		ve := ke + vl
		if err := fn(state[start:ke:ke], state[ke:ve:ve]); err != nil {
			return err
		}
		off = int(ve)
	}
	return nil
}

// AppendKeyedEntry appends one entry to a keyed state (which must already
// start with KeyedStateMagic).
func AppendKeyedEntry(state, key, value []byte) []byte { return AppendRecord(state, key, value, 0) }

// MergeKeyedState returns the keyed state made of the entries of all
// states whose key keep accepts, in the order of states and of their
// entries. An empty state contributes nothing; a key in two states (each
// key routes to one subtask, so their states never share one) or a state
// in another layout is an error.
func MergeKeyedState(states [][]byte, keep func(key []byte) bool) ([]byte, error) {
	out := []byte(KeyedStateMagic)
	seen := map[string]int{}
	for i, st := range states {
		err := KeyedEntries(st, func(k, v []byte) error {
			if j, dup := seen[string(k)]; dup {
				if j == i {
					return fmt.Errorf("key %q is twice in the state of subtask %d (an operator must put each key once)", k, i)
				}
				return fmt.Errorf("key %q is in the state of subtask %d and of subtask %d", k, j, i)
			}
			seen[string(k)] = i
			if keep(k) {
				out = AppendKeyedEntry(out, k, v)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("state %d of %d: %w", i+1, len(states), err)
		}
	}
	return out, nil
}
