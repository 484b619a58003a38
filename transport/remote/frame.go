package remote

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

// A frame is one NATS message on a channel's data subject. All integers are
// little-endian.
//
//	frame   := magic:u8 version:u8 flags:u8 reserved:u8 count:u32 seq:u64 element*count
//	element := kind:u8 body
//	body    := records: len:u32 batch:[len]u8        (an abi record batch)
//	         | barrier: id:i64 ts:i64 type:u8 unaligned:u8
//	         | cancel:  id:i64
//	         | end-of-partition, end-of-data: (nothing)
//
// Data frames carry consecutive sequence numbers starting at 1, priority
// frames included; a probe frame (FlagProbe) has sequence 0 and no elements.
const (
	// FrameMagic starts every frame.
	FrameMagic = 0x57 // 'W'
	// FrameVersion is the frame layout version.
	FrameVersion = 1
	// FrameHeaderSize is the fixed size of a frame header.
	FrameHeaderSize = 16
)

// Frame flags.
const (
	// FlagPriority marks a frame carrying one priority (unaligned) barrier
	// that overtakes everything the receiver has queued. It needs no credit.
	FlagPriority uint8 = 1 << 0
	// FlagProbe marks an empty frame by which a sender that has no credit
	// asks the receiver to repeat its current grant.
	FlagProbe uint8 = 1 << 1

	knownFlags = FlagPriority | FlagProbe
)

const (
	barrierBodySize = 18
	cancelBodySize  = 8
)

// ErrMalformedFrame is wrapped by every frame decoding error.
var ErrMalformedFrame = errors.New("malformed channel frame")

// Frame is a decoded frame.
type Frame struct {
	Seq      uint64
	Flags    uint8
	Elements []stream.Element // record batches alias the decoded bytes
}

// ElementWireSize is the number of bytes e takes inside a frame.
func ElementWireSize(e stream.Element) int {
	switch e.Kind {
	case stream.KindRecords:
		return 1 + 4 + len(e.Batch)
	case stream.KindBarrier:
		return 1 + barrierBodySize
	case stream.KindCancel:
		return 1 + cancelBodySize
	default:
		return 1
	}
}

// AppendFrameHeader appends a frame header for count elements.
func AppendFrameHeader(dst []byte, seq uint64, flags uint8, count int) []byte {
	var h [FrameHeaderSize]byte
	h[0], h[1], h[2] = FrameMagic, FrameVersion, flags
	binary.LittleEndian.PutUint32(h[4:], uint32(count))
	binary.LittleEndian.PutUint64(h[8:], seq)
	return append(dst, h[:]...)
}

// AppendElement appends the wire form of e.
func AppendElement(dst []byte, e stream.Element) []byte {
	dst = append(dst, byte(e.Kind))
	switch e.Kind {
	case stream.KindRecords:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Batch)))
		dst = append(dst, e.Batch...)
	case stream.KindBarrier:
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Barrier.ID))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Barrier.Timestamp))
		var u byte
		if e.Barrier.Unaligned {
			u = 1
		}
		dst = append(dst, byte(e.Barrier.Type), u)
	case stream.KindCancel:
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.CheckpointID))
	}
	return dst
}

// EncodeFrame returns a frame holding elems.
func EncodeFrame(seq uint64, flags uint8, elems []stream.Element) []byte {
	size := FrameHeaderSize
	for _, e := range elems {
		size += ElementWireSize(e)
	}
	out := AppendFrameHeader(make([]byte, 0, size), seq, flags, len(elems))
	for _, e := range elems {
		out = AppendElement(out, e)
	}
	return out
}

func frameErr(off int, format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrMalformedFrame, off, fmt.Sprintf(format, args...))
}

// DecodeFrame decodes and validates a frame, record batches included. The
// returned record batches alias b.
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) < FrameHeaderSize {
		return Frame{}, frameErr(len(b), "frame of %d bytes is shorter than its header", len(b))
	}
	if b[0] != FrameMagic {
		return Frame{}, frameErr(0, "bad magic 0x%02x", b[0])
	}
	if b[1] != FrameVersion {
		return Frame{}, frameErr(1, "unsupported version %d", b[1])
	}
	f := Frame{Flags: b[2], Seq: binary.LittleEndian.Uint64(b[8:])}
	if f.Flags&^knownFlags != 0 {
		return Frame{}, frameErr(2, "unknown flags 0x%02x", f.Flags)
	}
	if b[3] != 0 {
		return Frame{}, frameErr(3, "reserved byte is %d", b[3])
	}
	count := binary.LittleEndian.Uint32(b[4:])
	// Every element takes at least one byte.
	if uint64(count) > uint64(len(b)-FrameHeaderSize) {
		return Frame{}, frameErr(4, "count %d exceeds the %d bytes that follow", count, len(b)-FrameHeaderSize)
	}
	switch {
	case f.Flags&FlagProbe != 0:
		if count != 0 || f.Flags != FlagProbe || f.Seq != 0 {
			return Frame{}, frameErr(2, "probe frame with elements, other flags or a sequence")
		}
	case f.Seq == 0:
		return Frame{}, frameErr(8, "data frame with sequence 0")
	}
	if f.Flags&FlagPriority != 0 && count != 1 {
		return Frame{}, frameErr(4, "priority frame with %d elements, want 1", count)
	}
	off := FrameHeaderSize
	if count > 0 {
		f.Elements = make([]stream.Element, 0, count)
	}
	for i := uint32(0); i < count; i++ {
		if off >= len(b) {
			return Frame{}, frameErr(off, "element %d missing", i)
		}
		kind := stream.Kind(b[off])
		off++
		var e stream.Element
		switch kind {
		case stream.KindRecords:
			if len(b)-off < 4 {
				return Frame{}, frameErr(off, "element %d: records length passes the end", i)
			}
			n := uint64(binary.LittleEndian.Uint32(b[off:]))
			off += 4
			if n > uint64(len(b)-off) {
				return Frame{}, frameErr(off, "element %d: batch of %d bytes passes the end", i, n)
			}
			end := off + int(n)
			batch := b[off:end:end]
			if _, err := abi.ValidateBatch(batch); err != nil {
				return Frame{}, fmt.Errorf("%w: element %d: %w", ErrMalformedFrame, i, err)
			}
			e = stream.Records(batch)
			off = end
		case stream.KindBarrier:
			if len(b)-off < barrierBodySize {
				return Frame{}, frameErr(off, "element %d: barrier passes the end", i)
			}
			typ, un := b[off+16], b[off+17]
			if typ > uint8(stream.Savepoint) || un > 1 {
				return Frame{}, frameErr(off+16, "element %d: barrier type %d / unaligned %d invalid", i, typ, un)
			}
			e = stream.BarrierElement(stream.Barrier{
				ID:        int64(binary.LittleEndian.Uint64(b[off:])),
				Timestamp: int64(binary.LittleEndian.Uint64(b[off+8:])),
				Type:      stream.CheckpointType(typ),
				Unaligned: un == 1,
			})
			off += barrierBodySize
		case stream.KindCancel:
			if len(b)-off < cancelBodySize {
				return Frame{}, frameErr(off, "element %d: cancel marker passes the end", i)
			}
			e = stream.Cancel(int64(binary.LittleEndian.Uint64(b[off:])))
			off += cancelBodySize
		case stream.KindEndOfPartition:
			e = stream.EndOfPartition()
		case stream.KindEndOfData:
			e = stream.EndOfData()
		default:
			return Frame{}, frameErr(off-1, "element %d: unknown kind %d", i, kind)
		}
		if f.Flags&FlagPriority != 0 && e.Kind != stream.KindBarrier {
			return Frame{}, frameErr(off, "priority frame carries a %s", e.Kind)
		}
		f.Elements = append(f.Elements, e)
	}
	if off != len(b) {
		return Frame{}, frameErr(off, "%d trailing bytes", len(b)-off)
	}
	return f, nil
}
