package source

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// A whole-stream source (no Partitions) is split among its subtasks by a
// hash of each message's subject, and every subtask reads the whole stream:
// its offset is the last sequence it covered, its own messages processed
// and the others skipped. Subtasks of one parallelism stop at different
// sequences, so when the parallelism changes on restore, a message's fate
// depends on which old subtask owned it: processed if its sequence is at
// most that subtask's offset. A rescaled source therefore carries, until
// it has read past them, the old subtasks' offsets as a rescale layer
// (StreamOffset.Rescaled) and skips what a layer says was processed.

// streamOffsetMagic starts a whole-stream offset that carries rescale
// layers: "WSO1" seq:u64 layers:u8 (n:u32 seq:u64*n)*layers,
// little-endian. Without layers the offset is the plain 8-byte sequence
// (EncodeOffset), as before rescaling existed.
const streamOffsetMagic = "WSO1"

// Bounds of a rescaled offset: how many rescales may be pending at once
// (each is dropped once the source reads past it) and the largest old
// parallelism recorded.
const (
	maxRescaleLayers      = 8
	maxRescaleParallelism = 1 << 16
)

// StreamOffset is a whole-stream source's offset.
type StreamOffset struct {
	// Seq is the last sequence covered: every message up to it was
	// processed (if the subtask owns it) or skipped.
	Seq uint64
	// Rescaled holds one layer per change of parallelism the source has
	// not yet read past: layer[i] is the last sequence old subtask i of
	// len(layer) covered. A message whose subject hashes to i
	// (PartitionOf) was processed if its sequence is at most layer[i].
	Rescaled [][]uint64
}

// processed reports whether a message at seq on subject was processed
// before a rescale, by the layers of o.
func (o StreamOffset) processed(seq uint64, subject string) bool {
	for _, l := range o.Rescaled {
		if seq <= l[PartitionOf(subject, len(l))] {
			return true
		}
	}
	return false
}

// pending returns o without the layers that say nothing past Seq.
func (o StreamOffset) pending() StreamOffset {
	var keep [][]uint64
	for _, l := range o.Rescaled {
		if slices.Max(l) > o.Seq {
			keep = append(keep, l)
		}
	}
	return StreamOffset{Seq: o.Seq, Rescaled: keep}
}

// EncodeStreamOffset encodes o as a source offset: the plain 8-byte
// sequence when it has no rescale layers.
func EncodeStreamOffset(o StreamOffset) []byte {
	if len(o.Rescaled) == 0 {
		return EncodeOffset(o.Seq)
	}
	n := 13
	for _, l := range o.Rescaled {
		n += 4 + 8*len(l)
	}
	out := make([]byte, 0, n)
	out = append(out, streamOffsetMagic...)
	out = binary.LittleEndian.AppendUint64(out, o.Seq)
	out = append(out, byte(len(o.Rescaled)))
	for _, l := range o.Rescaled {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(l)))
		for _, seq := range l {
			out = binary.LittleEndian.AppendUint64(out, seq)
		}
	}
	return out
}

// DecodeStreamOffset decodes what EncodeStreamOffset made; nil is sequence
// 0 (the beginning).
func DecodeStreamOffset(off []byte) (StreamOffset, error) {
	if len(off) <= 8 {
		seq, err := DecodeOffset(off)
		return StreamOffset{Seq: seq}, err
	}
	bad := func(format string, args ...any) (StreamOffset, error) {
		return StreamOffset{}, fmt.Errorf("jetstream source offset: "+format, args...)
	}
	if len(off) < 13 || string(off[:4]) != streamOffsetMagic {
		return bad("%d bytes that are not a whole-stream source's (was the source partitioned when the checkpoint was taken?)", len(off))
	}
	o := StreamOffset{Seq: binary.LittleEndian.Uint64(off[4:])}
	layers := int(off[12])
	rest := off[13:]
	if layers == 0 || layers > maxRescaleLayers {
		return bad("%d rescale layers, want 1 to %d", layers, maxRescaleLayers)
	}
	for range layers {
		if len(rest) < 4 {
			return bad("truncated rescale layer")
		}
		n := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if n == 0 || n > maxRescaleParallelism || uint64(len(rest)) < 8*uint64(n) {
			return bad("rescale layer of %d subtasks in %d bytes", n, len(rest))
		}
		l := make([]uint64, n)
		for i := range l {
			l[i] = binary.LittleEndian.Uint64(rest[8*i:])
		}
		rest = rest[8*n:]
		o.Rescaled = append(o.Rescaled, l)
	}
	if len(rest) != 0 {
		return bad("%d bytes after the last rescale layer", len(rest))
	}
	return o, nil
}

// mergeStreamOffsets merges the offsets of the old subtasks of a
// whole-stream source, in subtask order, into the offset every new subtask
// resumes from: the lowest sequence any old subtask covered, a new layer
// with each old subtask's, and the layers the old offsets still carried
// (each states what was processed before an earlier rescale, for every
// subject, so their union holds).
func mergeStreamOffsets(offsets [][]byte) (StreamOffset, error) {
	if len(offsets) == 0 || len(offsets) > maxRescaleParallelism {
		return StreamOffset{}, fmt.Errorf("%d offsets to merge, want 1 to %d", len(offsets), maxRescaleParallelism)
	}
	layer := make([]uint64, len(offsets))
	var layers [][]uint64
	for i, off := range offsets {
		o, err := DecodeStreamOffset(off)
		if err != nil {
			return StreamOffset{}, fmt.Errorf("offset %d of %d: %w", i+1, len(offsets), err)
		}
		layer[i] = o.Seq
		for _, l := range o.Rescaled {
			if !slices.ContainsFunc(layers, func(k []uint64) bool { return slices.Equal(k, l) }) {
				layers = append(layers, l)
			}
		}
	}
	merged := StreamOffset{Seq: slices.Min(layer), Rescaled: append([][]uint64{layer}, layers...)}.pending()
	if len(merged.Rescaled) > maxRescaleLayers {
		return StreamOffset{}, fmt.Errorf("%d changes of parallelism not yet read past, at most %d: let the job catch up before rescaling again", len(merged.Rescaled), maxRescaleLayers)
	}
	return merged, nil
}
