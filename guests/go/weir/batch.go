package weir

import (
	"iter"

	"github.com/weirhq/weir/abi"
)

// Batch is one input record batch. It iterates the records in place,
// without copying; their Key and Value slices are valid until Process
// returns.
//
//	for in.Next() {
//		r := in.Record()
//		...
//	}
//
// or, equivalently, for r := range in.All() { ... }.
type Batch struct {
	it abi.Iter
}

// Len is the number of records in the batch.
func (b *Batch) Len() int { return b.it.Count() }

// Next advances to the next record and reports whether there is one.
func (b *Batch) Next() bool {
	if !b.it.Next() {
		st.cursor = -1
		return false
	}
	st.cursor = int32(b.it.Index())
	return true
}

// Record returns the current record.
func (b *Batch) Record() Record { return b.it.Record() }

// Index is the index of the current record in the batch, -1 before the
// first Next.
func (b *Batch) Index() int { return b.it.Index() }

// All returns an iterator over the remaining records.
func (b *Batch) All() iter.Seq[Record] {
	return func(yield func(Record) bool) {
		for b.Next() {
			if !yield(b.it.Record()) {
				return
			}
		}
	}
}

// Err reports a malformed input batch after Next returned false. The host
// forwards batches that were validated when they entered weir, so this is
// nil in practice.
func (b *Batch) Err() error { return b.it.Err() }
