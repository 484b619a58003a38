package remote

import (
	"bytes"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/stream"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, and a frame it accepts re-encodes to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(EncodeFrame(1, 0, []stream.Element{
		stream.Records(abi.EncodeBatch(abi.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 5})),
		stream.BarrierElement(stream.Barrier{ID: 2, Timestamp: 9, Type: stream.Savepoint}),
		stream.Cancel(2),
		stream.EndOfData(),
		stream.EndOfPartition(),
	}))
	f.Add(EncodeFrame(7, FlagPriority, []stream.Element{stream.BarrierElement(stream.Barrier{ID: 3, Unaligned: true})}))
	f.Add(EncodeFrame(0, FlagProbe, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		again := EncodeFrame(fr.Seq, fr.Flags, fr.Elements)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, again)
		}
		for _, e := range fr.Elements {
			if e.Kind == stream.KindRecords {
				if _, err := abi.ValidateBatch(e.Batch); err != nil {
					t.Fatalf("accepted a bad batch: %v", err)
				}
			}
		}
	})
}
