// Command forgetful is a test operator with the commonest bug of a
// stateful one: it counts the records of each key and emits key=the
// record's key, value=the new count, but its snapshot leaves the counts
// out, so after a restore it counts from 0 again. weir exec -check-restore
// catches it (cmd/weir TestExecCheckRestore).
package main

import (
	"strconv"

	"github.com/weirhq/weir/guests/go/weir"
)

type forgetful struct {
	counts map[string]uint64
	num    []byte
}

func (f *forgetful) Init(config []byte) error {
	f.counts = make(map[string]uint64)
	return nil
}

func (f *forgetful) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		n := f.counts[string(r.Key)] + 1
		f.counts[string(r.Key)] = n
		f.num = strconv.AppendUint(f.num[:0], n, 10)
		out.Emit(0, r.Key, f.num, r.Timestamp)
	}
	return nil
}

// Snapshot forgets the counts: the bug.
func (f *forgetful) Snapshot(w *weir.StateWriter) error { return nil }

func (f *forgetful) Restore(r *weir.StateReader) error { return nil }

func init() { weir.Register(&forgetful{}) }

func main() {}
