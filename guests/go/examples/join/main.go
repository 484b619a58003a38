// Command join is a two-input weir operator: an equi-join on the record key
// that buffers every record of both sides. Port 0 is the left input, port 1
// the right. A record from one side is joined with every buffered record of
// the other side with the same key, in arrival order, emitting key=k,
// value=left.value + "|" + right.value, timestamp=max of the two; then it is
// buffered.
//
// State (shared by every language's join): byte 0x01, u32 LE n_left, n_left
// records (u32 key length, key, u32 value length, value, i64 timestamp), u32
// LE n_right, the right records likewise, each side in arrival order.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/weirhq/weir/guests/go/weir"
)

const stateVersion = 1

// maxField bounds a key or value length in a state stream, so corrupt state
// fails cleanly instead of exhausting memory.
const maxField = 16 << 20

type rec struct {
	key, value []byte
	ts         int64
}

// side is one input's buffered records, in arrival order, indexed by key.
type side struct {
	all   []rec
	byKey map[string][]int // positions in all
}

func (s *side) reset() {
	s.all = nil
	s.byKey = make(map[string][]int)
}

func (s *side) add(r rec) {
	s.byKey[string(r.key)] = append(s.byKey[string(r.key)], len(s.all))
	s.all = append(s.all, r)
}

type join struct {
	sides [2]side
	val   []byte // scratch for the joined value
}

func (j *join) Init(config []byte) error {
	j.sides[0].reset()
	j.sides[1].reset()
	return nil
}

func (j *join) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	if port != 0 && port != 1 {
		return fmt.Errorf("join: input port %d: want 0 (left) or 1 (right)", port)
	}
	other := &j.sides[1-port]
	for in.Next() {
		r := in.Record()
		for _, k := range other.byKey[string(r.Key)] {
			o := other.all[k]
			left, right := r.Value, o.value
			if port == 1 {
				left, right = o.value, r.Value
			}
			j.val = append(append(append(j.val[:0], left...), '|'), right...)
			out.Emit(0, r.Key, j.val, max(r.Timestamp, o.ts))
		}
		// Keep one copy of key and value: they alias the input buffer.
		kv := append(append(make([]byte, 0, len(r.Key)+len(r.Value)), r.Key...), r.Value...)
		j.sides[port].add(rec{key: kv[:len(r.Key):len(r.Key)], value: kv[len(r.Key):], ts: r.Timestamp})
	}
	return nil
}

func (j *join) Snapshot(sw *weir.StateWriter) error {
	bw := bufio.NewWriterSize(sw, weir.ChunkSize)
	var h [8]byte
	bw.WriteByte(stateVersion)
	for _, s := range j.sides {
		binary.LittleEndian.PutUint32(h[:], uint32(len(s.all)))
		bw.Write(h[:4])
		for _, r := range s.all {
			binary.LittleEndian.PutUint32(h[:], uint32(len(r.key)))
			bw.Write(h[:4])
			bw.Write(r.key)
			binary.LittleEndian.PutUint32(h[:], uint32(len(r.value)))
			bw.Write(h[:4])
			bw.Write(r.value)
			binary.LittleEndian.PutUint64(h[:], uint64(r.ts))
			bw.Write(h[:8])
		}
	}
	return bw.Flush()
}

func (j *join) Restore(sr *weir.StateReader) error {
	j.sides[0].reset()
	j.sides[1].reset()
	var h [8]byte
	if _, err := io.ReadFull(sr, h[:1]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // no state yet
		}
		return fmt.Errorf("join: restore: %w", err)
	}
	if h[0] != stateVersion {
		return fmt.Errorf("join: restore: unknown state version %d", h[0])
	}
	field := func() ([]byte, error) {
		if _, err := io.ReadFull(sr, h[:4]); err != nil {
			return nil, err
		}
		n := binary.LittleEndian.Uint32(h[:4])
		if n > maxField {
			return nil, fmt.Errorf("field of %d bytes", n)
		}
		b := make([]byte, n)
		_, err := io.ReadFull(sr, b)
		return b, err
	}
	for p := range j.sides {
		if _, err := io.ReadFull(sr, h[:4]); err != nil {
			return fmt.Errorf("join: restore: side %d: %w", p, err)
		}
		n := binary.LittleEndian.Uint32(h[:4])
		for i := uint32(0); i < n; i++ {
			k, err := field()
			if err != nil {
				return fmt.Errorf("join: restore: side %d record %d key: %w", p, i, err)
			}
			v, err := field()
			if err != nil {
				return fmt.Errorf("join: restore: side %d record %d value: %w", p, i, err)
			}
			if _, err := io.ReadFull(sr, h[:8]); err != nil {
				return fmt.Errorf("join: restore: side %d record %d timestamp: %w", p, i, err)
			}
			j.sides[p].add(rec{key: k, value: v, ts: int64(binary.LittleEndian.Uint64(h[:8]))})
		}
	}
	return nil
}

func init() { weir.Register(&join{}) }

func main() {}
