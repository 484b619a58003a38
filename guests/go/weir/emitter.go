package weir

import (
	"encoding/binary"
	"fmt"

	"github.com/weirhq/weir/abi"
)

// MaxPorts bounds the output port numbers an Emitter accepts.
const MaxPorts = 1024

// Emitter collects output records. Records emitted to one output port during
// a call travel to the host as one batch when the call returns. Ports are
// numbered from 0 in the order the job spec lists the task's outputs.
type Emitter struct {
	ports []portBatch
	used  []int // ports with records since the last flush, in first-use order
	err   error // first bad port number
}

// portBatch is the batch being built for one output port. Its buffer is
// kept across calls, so a steady stream of records allocates nothing.
type portBatch struct {
	buf   []byte // the encoded batch, count first
	n     uint32
	first int32 // the input record cursor at its first record: the host's message of a refused emit names it
}

func (b *portBatch) add(key, value []byte, ts int64) {
	need := abi.RecordHeaderSize + len(key) + len(value)
	off := len(b.buf)
	if cap(b.buf)-off < need {
		nb := make([]byte, off, max(2*cap(b.buf), off+need, 4096))
		copy(nb, b.buf)
		b.buf = nb
	}
	b.buf = b.buf[:off+need]
	h := b.buf[off : off+need]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(key)))
	binary.LittleEndian.PutUint32(h[4:8], uint32(len(value)))
	binary.LittleEndian.PutUint64(h[8:16], uint64(ts))
	copy(h[16:], key)
	copy(h[16+len(key):], value)
	b.n++
}

// Emit appends one record to output port port. Key and value are copied.
func (e *Emitter) Emit(port int, key, value []byte, ts int64) {
	// The path of nearly every record — a port already in use this call,
	// with room in its buffer — is written out here, free of calls: on
	// wasm every Go call costs ~25 ns, a fifth of the SDK's per-record
	// share (and a fast path that only called add cost as much again).
	if uint(port) < uint(len(e.ports)) {
		b := &e.ports[port]
		need := abi.RecordHeaderSize + len(key) + len(value)
		if off := len(b.buf); b.n > 0 && cap(b.buf)-off >= need {
			b.buf = b.buf[:off+need]
			h := b.buf[off : off+need]
			binary.LittleEndian.PutUint32(h[0:4], uint32(len(key)))
			binary.LittleEndian.PutUint32(h[4:8], uint32(len(value)))
			binary.LittleEndian.PutUint64(h[8:16], uint64(ts))
			if len(key) > 0 {
				copy(h[16:], key)
			}
			copy(h[16+len(key):], value)
			b.n++
			return
		}
	}
	if b := e.batch(port); b != nil {
		b.add(key, value, ts)
	}
}

// EmitRecord appends r to output port port.
func (e *Emitter) EmitRecord(port int, r Record) { e.Emit(port, r.Key, r.Value, r.Timestamp) }

func (e *Emitter) batch(port int) *portBatch {
	if uint(port) < uint(len(e.ports)) {
		if b := &e.ports[port]; b.n > 0 {
			return b // the common case: a port already in use this call
		}
	}
	if port < 0 || port >= MaxPorts {
		if e.err == nil {
			e.err = fmt.Errorf("weir: emit to output port %d: out of range", port)
		}
		return nil
	}
	for port >= len(e.ports) {
		e.ports = append(e.ports, portBatch{})
	}
	b := &e.ports[port]
	if len(b.buf) < abi.BatchHeaderSize {
		b.buf = append(b.buf[:0], 0, 0, 0, 0)
	}
	b.first = st.cursor
	e.used = append(e.used, port)
	return b
}

// flush emits every non-empty port's batch, in first-use order.
func (e *Emitter) flush() error {
	defer e.reset()
	if e.err != nil {
		return e.err
	}
	defer func(c int32) { st.cursor = c }(st.cursor)
	for _, p := range e.used {
		b := &e.ports[p]
		binary.LittleEndian.PutUint32(b.buf, b.n)
		// The cursor on the record that first emitted to the port: the
		// host names it if it refuses the batch (a port the task lacks).
		st.cursor = b.first
		if err := emitBatch(p, b.buf); err != nil {
			return err
		}
	}
	return nil
}

// reset drops everything collected.
func (e *Emitter) reset() {
	for _, p := range e.used {
		b := &e.ports[p]
		b.buf, b.n = b.buf[:abi.BatchHeaderSize], 0
	}
	e.used = e.used[:0]
	e.err = nil
}
