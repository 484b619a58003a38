// Command keyedcount is a stateful weir operator that can be rescaled: it
// counts the records of each key and emits key=the record's key, value=the
// new count in decimal, with the input record's timestamp. Its state is in
// the keyed layout (weir.KeyedStateWriter: one entry per key, the value a
// u64 LE count), so weir redistributes the counts by key when the
// operator's parallelism changes on a restore. Partition its input by key.
package main

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"

	"github.com/weirhq/weir/guests/go/weir"
)

type keyedcount struct {
	counts map[string]uint64
	num    []byte // scratch for the decimal count
}

func (c *keyedcount) Init(config []byte) error {
	c.counts = make(map[string]uint64)
	return nil
}

func (c *keyedcount) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		n := c.counts[string(r.Key)] + 1
		c.counts[string(r.Key)] = n
		c.num = strconv.AppendUint(c.num[:0], n, 10)
		out.Emit(0, r.Key, c.num, r.Timestamp)
	}
	return nil
}

func (c *keyedcount) Snapshot(w *weir.StateWriter) error {
	keys := make([]string, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same state, the same bytes
	kw := weir.NewKeyedStateWriter(w)
	var v [8]byte
	for _, k := range keys {
		binary.LittleEndian.PutUint64(v[:], c.counts[k])
		if err := kw.Put([]byte(k), v[:]); err != nil {
			return err
		}
	}
	return kw.Close()
}

func (c *keyedcount) Restore(r *weir.StateReader) error {
	c.counts = make(map[string]uint64)
	return weir.ReadKeyedState(r, func(k, v []byte) error {
		if len(v) != 8 {
			return errors.New("keyedcount: a count of " + strconv.Itoa(len(v)) + " bytes, want 8")
		}
		c.counts[string(k)] = binary.LittleEndian.Uint64(v)
		return nil
	})
}

func init() { weir.Register(&keyedcount{}) }

func main() {}
