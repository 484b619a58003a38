package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/weirhq/weir/abi"
)

// benchBatch is a batch of n 64-byte records (16-byte header, 8-byte key,
// 40-byte lower-case value).
func benchBatch(n int) []byte {
	var b abi.Builder
	for i := range n {
		key := fmt.Sprintf("key%05d", i)
		value := fmt.Sprintf("the quick brown fox jumps over %010d", i)
		b.Add([]byte(key), []byte(value), int64(i))
	}
	return b.Bytes()
}

// uppercaseNative is the baseline: uppercase as a plain Go function over the
// same batch bytes, building the same output batch.
func uppercaseNative(in []byte, out *abi.Builder, val []byte) ([]byte, []byte, error) {
	it, err := abi.NewIter(in)
	if err != nil {
		return nil, val, err
	}
	out.Reset()
	for it.Next() {
		r := it.Record()
		val = append(val[:0], r.Value...)
		upper(val)
		out.Add(r.Key, val, r.Timestamp)
	}
	return out.Bytes(), val, it.Err()
}

// perRecord runs body b.N times and reports wall and CPU nanoseconds per
// record of n-record batches.
func perRecord(b *testing.B, n int, body func()) {
	cpu0, cpuOK := processCPU()
	for b.Loop() {
		body()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/record")
	}
}

// BenchmarkUppercase measures uppercase on batches of 1024 records per
// language, through host/wasm (one weir_process call and one emit per
// batch), beside the native Go baseline. ns/record is the figure to read;
// cpu-ns/record is the process's CPU time per record, steadier on a busy
// machine.
func BenchmarkUppercase(b *testing.B) {
	e := newEngine(b)
	const n = 1024
	batch := benchBatch(n)
	b.Run("native-go", func(b *testing.B) {
		var out abi.Builder
		var val []byte
		var err error
		b.SetBytes(int64(len(batch)))
		perRecord(b, n, func() {
			if _, val, err = uppercaseNative(batch, &out, val); err != nil {
				b.Fatal(err)
			}
		})
	})
	// The host's share: the WAT passthrough does no per-record work, so
	// this is one call, the batch copied in, and one emit copied out.
	floor := language{"host-floor-passthrough", func(string) string { return filepath.Join("..", "wat", "passthrough.wasm") }}
	for _, lang := range append([]language{floor}, languagesWith("uppercase")...) {
		b.Run(lang.name, func(b *testing.B) {
			inst := start(b, load(b, e, lang, "uppercase"), "uppercase")
			emit := func(port int, out []byte) error { return nil }
			b.SetBytes(int64(len(batch)))
			perRecord(b, n, func() {
				if err := inst.Process(context.Background(), 0, batch, emit); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// upper converts the ASCII letters a-z of b to A-Z in place, 8 bytes per
// step as every guest language's uppercase example does (upper8 in
// guests/go/examples/uppercase), so the comparison is like with like.
func upper(b []byte) {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		h := x &^ high
		m := (h + ones*(0x80-'a')) &^ (h + ones*(0x80-'z'-1)) &^ x & high
		binary.LittleEndian.PutUint64(b[i:], x^m>>2)
	}
	for ; i < len(b); i++ {
		if c := b[i]; 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
}
