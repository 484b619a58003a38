package source

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseAckReply feeds arbitrary reply subjects to the ack-reply parser:
// it never panics, and what it accepts holds the numbers it returns.
func FuzzParseAckReply(f *testing.F) {
	f.Add("$JS.ACK.IN.cons.1.42.7.1700000000000000000.3")
	f.Add("$JS.ACK.dom.hash.IN.cons.1.43.8.1700000000000000001.0.rnd")
	f.Add("$JS.ACK.IN.cons.1.99999999999999999999.7.1.3")
	f.Add("")
	f.Fuzz(func(t *testing.T, reply string) {
		a, ok := parseAck(reply)
		seq, ts, pending, cons := a.seq, a.ts, a.pending, a.consumer
		if !ok {
			if a != (ackInfo{}) {
				t.Fatalf("rejected %q but returned %+v", reply, a)
			}
			return
		}
		if !strings.HasPrefix(reply, "$JS.ACK.") {
			t.Fatalf("accepted %q", reply)
		}
		tokens := strings.Split(reply, ".")
		if !holds(tokens, seq) || !holds(tokens, a.cseq) || !holds(tokens, ts) || !holds(tokens, pending) {
			t.Fatalf("%q: %d %d %d are not tokens of the subject", reply, seq, ts, pending)
		}
		if !slices.Contains(tokens, cons) {
			t.Fatalf("%q: consumer %q is not a token of the subject", reply, cons)
		}
	})
}

// holds reports whether a token is the decimal form of v.
func holds(tokens []string, v uint64) bool {
	for _, t := range tokens {
		if n, err := strconv.ParseUint(t, 10, 64); err == nil && n == v {
			return true
		}
	}
	return false
}

// FuzzDecodePartitionOffsets feeds arbitrary bytes to the partitioned
// offset decoder (offsets come back from checkpoint storage): it never
// panics, and what it accepts encodes back to an offset that decodes to
// the same partitions (in the current format).
func FuzzDecodePartitionOffsets(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodePartitionOffsets(PartitionOffsets{Partitions: 4, Filter: "in.{p}.*", Seqs: map[int]uint64{0: 42, 2: 7}}))
	f.Add(EncodePartitionOffsets(PartitionOffsets{Partitions: 8, Seqs: map[int]uint64{5: 1 << 63}}))
	f.Add([]byte("WPO1\x02\x00\x00\x00\x00\x00\x00\x00\x2a\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("WPO1\xff\xff\xff\xff"))
	f.Add([]byte("WPO2\x04\x00\x00\x00\xff\xff"))
	f.Add(EncodeOffset(42))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodePartitionOffsets(b)
		if err != nil || len(b) == 0 {
			return
		}
		got := EncodePartitionOffsets(o)
		o2, err := DecodePartitionOffsets(got)
		if err != nil {
			t.Fatalf("re-encoding %x gave undecodable %x: %v", b, got, err)
		}
		if o2.Partitions != o.Partitions || o2.Filter != o.Filter || len(o2.Seqs) != len(o.Seqs) {
			t.Fatalf("%x: %+v re-encoded as %+v", b, o, o2)
		}
		for p, seq := range o.Seqs {
			if o2.Seqs[p] != seq {
				t.Fatalf("%x: partition %d: %d re-encoded as %d", b, p, seq, o2.Seqs[p])
			}
		}
	})
}

// FuzzDecodeStreamOffset feeds arbitrary bytes to the whole-stream offset
// decoder (offsets come back from checkpoint storage): it never panics,
// and what it accepts encodes back to the same bytes — or, for an empty
// offset, to sequence 0 — and merges without panicking.
func FuzzDecodeStreamOffset(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeOffset(42))
	f.Add(EncodeStreamOffset(StreamOffset{Seq: 7, Rescaled: [][]uint64{{9, 12}, {8, 1, 30}}}))
	f.Add([]byte("WSO1\x07\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff"))
	f.Add([]byte("WSO1\x07\x00\x00\x00\x00\x00\x00\x00\x09"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeStreamOffset(b)
		if err != nil {
			return
		}
		if got := EncodeStreamOffset(o); len(b) > 0 && !bytes.Equal(got, b) {
			t.Fatalf("%x decoded as %+v, encodes as %x", b, o, got)
		}
		m, err := mergeStreamOffsets([][]byte{b, EncodeOffset(o.Seq + 1)})
		if err == nil && m.Seq > o.Seq {
			t.Fatalf("merging %+v with a later offset resumes after %d", o, m.Seq)
		}
	})
}
