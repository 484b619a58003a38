// Package snapshot is the on-storage format of one task's checkpoint — task
// metadata, the operator's state, and the in-flight channel state of
// unaligned checkpoints — plus MemStore, an in-memory implementation of the
// checkpoint storage interface (the durable ones are in transport/storage).
//
// Format, version 1 (all integers little-endian):
//
//	magic "WEIRSNAP"  version:u8
//	task:str  checkpoint:i64  timestamp:i64  flags:u8 (bit 0: unaligned)
//	source_offset:bytes  sink_state:bytes  module_state:bytes
//	inputs:channels  outputs:channels
//	crc32c:u32 of everything before it
//
//	str, bytes := len:u32 data
//	channels   := n:u32 (index:u32 elements:u32 element*)*n
//	element    := kind:u8 payload   (see AppendElement)
//
// Decode treats its input as untrusted: every length is checked against what
// is left, and the checksum must match.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

// Magic starts every task snapshot.
const Magic = "WEIRSNAP"

// Version is the format version Encode writes.
const Version = 1

// MaxSize bounds what Decode reads (1 GiB).
const MaxSize = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every Decode error about the bytes themselves.
var ErrCorrupt = errors.New("corrupt task snapshot")

// ChannelState is the in-flight data of one channel, in order.
type ChannelState struct {
	Channel  int // input or output channel index within the task
	Elements []stream.Element
}

// Bytes returns the payload size of the elements.
func (c ChannelState) Bytes() int64 {
	var n int64
	for _, e := range c.Elements {
		n += int64(len(e.Batch))
	}
	return n
}

// Task is one task's snapshot for one checkpoint.
type Task struct {
	Task         string
	CheckpointID int64
	Timestamp    int64 // the barrier's trigger timestamp
	Unaligned    bool
	SourceOffset []byte // source tasks: where to resume
	SinkState    []byte // sink tasks: Sink.PreCommit's result
	ModuleState  []byte // Operator.Snapshot's stream
	Inputs       []ChannelState
	Outputs      []ChannelState
	// EndedPorts lists, in increasing order, the operator's input ports
	// whose end the task handled before the snapshot (every channel of the
	// port delivered end-of-data, and the operator's EndOfInput ran): a
	// restore does not end them again.
	EndedPorts []int
}

// flagUnaligned and flagEndedPorts are the bits of a snapshot's flags
// byte; with flagEndedPorts, count:u32 port:u32*count follow the output
// channels.
const (
	flagUnaligned  = 1
	flagEndedPorts = 2
)

// ChannelStateBytes is the payload size of all channel state.
func (t *Task) ChannelStateBytes() int64 {
	var n int64
	for _, c := range t.Inputs {
		n += c.Bytes()
	}
	for _, c := range t.Outputs {
		n += c.Bytes()
	}
	return n
}

func appendBytes(b, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// AppendElement appends e's encoding: kind:u8, then for records the batch as
// bytes, for a barrier id:i64 timestamp:i64 type:u8 unaligned:u8, for a
// cancel marker id:i64, for end-of-partition and end-of-data nothing.
func AppendElement(b []byte, e stream.Element) []byte {
	b = append(b, byte(e.Kind))
	switch e.Kind {
	case stream.KindRecords:
		b = appendBytes(b, e.Batch)
	case stream.KindBarrier:
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Barrier.ID))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Barrier.Timestamp))
		b = append(b, byte(e.Barrier.Type))
		u := byte(0)
		if e.Barrier.Unaligned {
			u = 1
		}
		b = append(b, u)
	case stream.KindCancel:
		b = binary.LittleEndian.AppendUint64(b, uint64(e.CheckpointID))
	}
	return b
}

// Encode returns t's encoding.
func Encode(t *Task) []byte {
	var buf bytes.Buffer
	buf.Grow(64 + len(t.Task) + len(t.ModuleState) + len(t.SourceOffset) + len(t.SinkState) + int(t.ChannelStateBytes())*11/10)
	WriteTo(&buf, t) // a bytes.Buffer does not fail
	return buf.Bytes()
}

// crcWriter writes through to w, keeping the CRC-32C and the count.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
	err error
}

func (c *crcWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	c.crc = crc32.Update(c.crc, castagnoli, p)
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

// WriteTo streams t's encoding to w without building it in memory first:
// the large parts (operator state, record batches) are written as they are.
// It returns the bytes written.
func WriteTo(w io.Writer, t *Task) (int64, error) {
	c := &crcWriter{w: w}
	var hdr []byte
	put := func(p []byte) { // length-prefixed bytes
		hdr = binary.LittleEndian.AppendUint32(hdr[:0], uint32(len(p)))
		c.write(hdr)
		c.write(p)
	}
	head := append([]byte(Magic), Version)
	c.write(head)
	put([]byte(t.Task))
	hdr = binary.LittleEndian.AppendUint64(hdr[:0], uint64(t.CheckpointID))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(t.Timestamp))
	flags := byte(0)
	if t.Unaligned {
		flags |= flagUnaligned
	}
	if len(t.EndedPorts) > 0 {
		flags |= flagEndedPorts
	}
	c.write(append(hdr, flags))
	put(t.SourceOffset)
	put(t.SinkState)
	put(t.ModuleState)
	for _, cs := range [][]ChannelState{t.Inputs, t.Outputs} {
		c.write(binary.LittleEndian.AppendUint32(hdr[:0], uint32(len(cs))))
		for _, ch := range cs {
			hdr = binary.LittleEndian.AppendUint32(hdr[:0], uint32(ch.Channel))
			c.write(binary.LittleEndian.AppendUint32(hdr, uint32(len(ch.Elements))))
			for _, e := range ch.Elements {
				if e.Kind == stream.KindRecords {
					c.write([]byte{byte(e.Kind)})
					put(e.Batch)
				} else {
					c.write(AppendElement(hdr[:0], e))
				}
			}
		}
	}
	if len(t.EndedPorts) > 0 {
		hdr = binary.LittleEndian.AppendUint32(hdr[:0], uint32(len(t.EndedPorts)))
		for _, p := range t.EndedPorts {
			hdr = binary.LittleEndian.AppendUint32(hdr, uint32(p))
		}
		c.write(hdr)
	}
	sum := c.crc
	c.write(binary.LittleEndian.AppendUint32(hdr[:0], sum))
	return c.n, c.err
}

// reader walks untrusted bytes.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d", ErrCorrupt, what, r.off)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail(what + " runs past the end")
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8(what string) byte {
	p := r.take(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u32(what string) uint32 {
	p := r.take(4, what)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

func (r *reader) i64(what string) int64 {
	p := r.take(8, what)
	if p == nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(p))
}

func (r *reader) bytes(what string) []byte {
	n := r.u32(what + " length")
	p := r.take(int(n), what)
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (r *reader) element() stream.Element {
	k := stream.Kind(r.u8("element kind"))
	switch k {
	case stream.KindRecords:
		batch := r.bytes("record batch")
		if r.err != nil {
			return stream.Element{}
		}
		if batch == nil {
			batch = []byte{}
		}
		if _, err := abi.ValidateBatch(batch); err != nil {
			r.fail(err.Error())
			return stream.Element{}
		}
		return stream.Records(batch)
	case stream.KindBarrier:
		b := stream.Barrier{ID: r.i64("barrier id"), Timestamp: r.i64("barrier timestamp")}
		t := r.u8("barrier type")
		u := r.u8("barrier flag")
		if t > byte(stream.Savepoint) || u > 1 {
			r.fail("bad barrier type or flag")
		}
		b.Type, b.Unaligned = stream.CheckpointType(t), u == 1
		return stream.BarrierElement(b)
	case stream.KindCancel:
		return stream.Cancel(r.i64("cancel id"))
	case stream.KindEndOfPartition:
		return stream.EndOfPartition()
	case stream.KindEndOfData:
		return stream.EndOfData()
	}
	r.fail(fmt.Sprintf("unknown element kind %d", k))
	return stream.Element{}
}

// ReadElement decodes one element from the start of b and returns the bytes
// it used.
func ReadElement(b []byte) (stream.Element, int, error) {
	r := &reader{b: b}
	e := r.element()
	return e, r.off, r.err
}

func (r *reader) channels(what string) []ChannelState {
	n := r.u32(what + " count")
	var cs []ChannelState
	for i := uint32(0); i < n && r.err == nil; i++ {
		c := ChannelState{Channel: int(r.u32(what + " index"))}
		m := r.u32(what + " element count")
		// Each element takes at least one byte: a count beyond what is left is
		// corrupt, and checking it first keeps allocations bounded.
		if int(m) > len(r.b)-r.off {
			r.fail(what + " element count exceeds the data")
			return nil
		}
		for j := uint32(0); j < m && r.err == nil; j++ {
			c.Elements = append(c.Elements, r.element())
		}
		cs = append(cs, c)
	}
	return cs
}

// Decode parses a task snapshot.
func Decode(b []byte) (*Task, error) {
	if len(b) < len(Magic)+1+4 || string(b[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: not a task snapshot (bad magic)", ErrCorrupt)
	}
	if v := b[len(Magic)]; v != Version {
		return nil, fmt.Errorf("%w: unknown version %d (this build reads %d)", ErrCorrupt, v, Version)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r := &reader{b: body, off: len(Magic) + 1}
	t := &Task{}
	t.Task = string(r.bytes("task name"))
	t.CheckpointID = r.i64("checkpoint id")
	t.Timestamp = r.i64("timestamp")
	flags := r.u8("flags")
	if flags > flagUnaligned|flagEndedPorts {
		r.fail("unknown flags")
	}
	t.Unaligned = flags&flagUnaligned != 0
	t.SourceOffset = r.bytes("source offset")
	t.SinkState = r.bytes("sink state")
	t.ModuleState = r.bytes("module state")
	t.Inputs = r.channels("input channels")
	t.Outputs = r.channels("output channels")
	if flags&flagEndedPorts != 0 {
		n := r.u32("ended port count")
		if n == 0 || uint64(n)*4 > uint64(len(body)-r.off) {
			r.fail("ended port count")
		}
		for i := uint32(0); i < n && r.err == nil; i++ {
			p := int(r.u32("ended port"))
			if len(t.EndedPorts) > 0 && p <= t.EndedPorts[len(t.EndedPorts)-1] {
				r.fail("ended ports not increasing")
			}
			t.EndedPorts = append(t.EndedPorts, p)
		}
	}
	if r.err == nil && r.off != len(body) {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return t, nil
}

// Read reads and decodes a task snapshot of at most MaxSize bytes.
func Read(rd io.Reader) (*Task, error) {
	b, err := io.ReadAll(io.LimitReader(rd, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read task snapshot: %w", err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrCorrupt, MaxSize)
	}
	return Decode(b)
}
