package wasm

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/weirhq/weir/abi"
)

// ErrRecordTooLarge is wrapped by the error of an emitted record that no
// operator can be handed: as a batch of one it is over the maximum input
// batch (Limits.MaxBatchBytes), which Process refuses. Every replay of the
// input emits it again.
var ErrRecordTooLarge = errors.New("record too large for an operator's input")

// CheckEmitted refuses a batch an operator emitted with a record that, as a
// batch of one, is over maxBatch bytes (an operator's Limits.MaxBatchBytes,
// DefaultMaxBatchBytes by default): the operator it goes to could never be
// handed it. The error wraps ErrRecordTooLarge and names the first such
// record (its place in the batch, counted from 1, and its key), its size
// and the limit — of the input of to ("operator passop"), or of any
// operator's where to is "" — and what to do; it does not name the
// operator that emitted it, which Process's error does.
func CheckEmitted(batch []byte, maxBatch int, to string) error {
	if maxBatch <= 0 || len(batch) <= maxBatch {
		return nil // no record of it can be larger than the whole batch
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	for i := 1; it.Next(); i++ {
		r := it.Record()
		size := abi.BatchHeaderSize + abi.RecordSize(len(r.Key), len(r.Value))
		if size <= maxBatch {
			continue
		}
		whose := "an operator's"
		if to != "" {
			whose = to + "'s"
		}
		return fmt.Errorf("record %d of an emitted batch (key %s): %w: a record of %d bytes (key %d, value %d) makes a batch of %d bytes, "+
			"over the %d-byte (%s) limit of %s input batch; emit smaller records (split a large value across several)",
			i, quoteKey(r.Key), ErrRecordTooLarge, len(r.Key)+len(r.Value), len(r.Key), len(r.Value), size, maxBatch, sizeIEC(uint64(maxBatch)), whose)
	}
	return it.Err()
}

// quoteKey quotes a record's key for an error, its first 64 bytes where it
// is longer (as transport/sink's errors do).
func quoteKey(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", key[:64], len(key))
	}
	return strconv.Quote(string(key))
}
