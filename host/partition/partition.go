// Package partition splits an operator's output record batches across the
// channels of one output port: forward, key-hash, broadcast, round-robin.
// Partitioners work on abi record batches and never modify their input.
package partition

import (
	"fmt"

	"github.com/weirhq/weir/abi"
)

// Partitioner splits one batch across n channels. Partition returns one
// batch per channel, nil where a channel gets nothing. Returned batches may
// share the input's bytes (nobody modifies a batch once emitted).
type Partitioner interface {
	Partition(batch []byte, n int) ([][]byte, error)
}

// Forward sends every batch to channel 0: a one-to-one connection.
type Forward struct{}

// Partition implements Partitioner.
func (Forward) Partition(batch []byte, n int) ([][]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("forward partitioner: no channels")
	}
	out := make([][]byte, n)
	out[0] = batch
	return out, nil
}

// Broadcast sends every batch to every channel.
type Broadcast struct{}

// Partition implements Partitioner.
func (Broadcast) Partition(batch []byte, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		out[i] = batch
	}
	return out, nil
}

// RoundRobin sends whole batches to the channels in turn.
type RoundRobin struct{ next int }

// Partition implements Partitioner.
func (r *RoundRobin) Partition(batch []byte, n int) ([][]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("round-robin partitioner: no channels")
	}
	out := make([][]byte, n)
	out[r.next%n] = batch
	r.next = (r.next + 1) % n
	return out, nil
}

// KeyHash sends each record to the channel its key hashes to, so all
// records of one key meet in one downstream subtask. Records keep their
// relative order per channel.
type KeyHash struct {
	builders []abi.Builder
}

// KeyChannel returns the channel of key among n: FNV-1a (32 bit) modulo n.
// Every component that routes by key (NATS subjects, sinks) uses it.
func KeyChannel(key []byte, n int) int {
	h := uint32(2166136261) // FNV-1a offset basis
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619 // FNV prime
	}
	return int(h % uint32(n))
}

// Partition implements Partitioner.
func (k *KeyHash) Partition(batch []byte, n int) ([][]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("key-hash partitioner: no channels")
	}
	if n == 1 {
		return [][]byte{batch}, nil
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return nil, fmt.Errorf("key-hash partitioner: %w", err)
	}
	if len(k.builders) != n {
		k.builders = make([]abi.Builder, n)
	}
	for i := range k.builders {
		k.builders[i].Reset()
	}
	for it.Next() {
		r := it.Record()
		k.builders[KeyChannel(r.Key, n)].AddRecord(r)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("key-hash partitioner: %w", err)
	}
	out := make([][]byte, n)
	for i := range k.builders {
		if k.builders[i].Len() > 0 {
			out[i] = append([]byte(nil), k.builders[i].Bytes()...)
		}
	}
	return out, nil
}

// New returns the partitioner named by kind: "forward", "key-hash",
// "broadcast" or "round-robin".
func New(kind string) (Partitioner, error) {
	switch kind {
	case "forward", "":
		return Forward{}, nil
	case "key-hash", "hash", "keyby":
		return &KeyHash{}, nil
	case "broadcast":
		return Broadcast{}, nil
	case "round-robin", "rebalance":
		return &RoundRobin{}, nil
	}
	return nil, fmt.Errorf("unknown partitioning %q (want forward, key-hash, broadcast or round-robin)", kind)
}
