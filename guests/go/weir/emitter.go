package weir

import (
	"fmt"

	"github.com/weirhq/weir/abi"
)

// MaxPorts bounds the output port numbers an Emitter accepts.
const MaxPorts = 1024

// Emitter collects output records. Records emitted to one output port during
// a call travel to the host as one batch when the call returns. Ports are
// numbered from 0 in the order the job spec lists the task's outputs.
type Emitter struct {
	ports []abi.Builder
	used  []int // ports with records since the last flush, in first-use order
	err   error // first bad port number
}

// Emit appends one record to output port port. Key and value are copied.
func (e *Emitter) Emit(port int, key, value []byte, ts int64) {
	if b := e.builder(port); b != nil {
		b.Add(key, value, ts)
	}
}

// EmitRecord appends r to output port port.
func (e *Emitter) EmitRecord(port int, r Record) {
	if b := e.builder(port); b != nil {
		b.Add(r.Key, r.Value, r.Timestamp)
	}
}

func (e *Emitter) builder(port int) *abi.Builder {
	if port < 0 || port >= MaxPorts {
		if e.err == nil {
			e.err = fmt.Errorf("weir: emit to output port %d: out of range", port)
		}
		return nil
	}
	for port >= len(e.ports) {
		e.ports = append(e.ports, abi.Builder{})
	}
	b := &e.ports[port]
	if b.Len() == 0 {
		e.used = append(e.used, port)
	}
	return b
}

// flush emits every non-empty port's batch, in first-use order.
func (e *Emitter) flush() error {
	defer e.reset()
	if e.err != nil {
		return e.err
	}
	for _, p := range e.used {
		if err := emitBatch(p, e.ports[p].Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// reset drops everything collected.
func (e *Emitter) reset() {
	for _, p := range e.used {
		e.ports[p].Reset()
	}
	e.used = e.used[:0]
	e.err = nil
}
