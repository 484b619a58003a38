package wasm

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
)

// benchBatch is a batch of n 64-byte records: 16-byte header, 8-byte key,
// 40-byte value.
func benchBatch(n int) []byte {
	var b abi.Builder
	val := []byte("0123456789012345678901234567890123456789")
	for i := range n {
		b.Add(fmt.Appendf(nil, "key%05d", i%100000), val, int64(i))
	}
	return append([]byte(nil), b.Bytes()...)
}

var benchSizes = []int{1, 16, 256, 1024}

// nativePassthrough does in Go what the guests do: validate the batch and
// hand a copy of it to emit.
func nativePassthrough(batch []byte, emit func(int, []byte) error) error {
	if _, err := abi.ValidateBatch(batch); err != nil {
		return err
	}
	return emit(0, append([]byte(nil), batch...))
}

// BenchmarkPassthrough measures ns/record of a passthrough of 64-byte
// records through the WAT guest, the Go-SDK guest and a native Go function,
// at several batch sizes.
func BenchmarkPassthrough(b *testing.B) {
	e := newEngine(b)
	guests := []struct {
		name string
		wasm []byte
	}{
		{"wat", watPassthrough(b)},
		{"go", goGuest(b, "passthrough")},
	}
	discard := func(int, []byte) error { return nil }
	for _, n := range benchSizes {
		batch := benchBatch(n)
		for _, g := range guests {
			b.Run(fmt.Sprintf("%s/batch=%d", g.name, n), func(b *testing.B) {
				inst := instantiate(b, e, g.name, g.wasm, Limits{}, InstanceConfig{})
				ctx := context.Background()
				got := 0
				check := func(_ int, out []byte) error { got = len(out); return nil }
				if err := inst.Process(ctx, 0, batch, check); err != nil || got != len(batch) {
					b.Fatalf("%v: emitted %d bytes of %d", err, got, len(batch))
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					if err := inst.Process(ctx, 0, batch, discard); err != nil {
						b.Fatal(err)
					}
				}
				reportPerRecord(b, n, cpuTime()-cpu0)
			})
		}
		b.Run(fmt.Sprintf("native/batch=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if err := nativePassthrough(batch, discard); err != nil {
					b.Fatal(err)
				}
			}
			reportPerRecord(b, n, cpuTime()-cpu0)
		})
	}
}

// reportPerRecord reports wall-clock and CPU nanoseconds per record. The
// CPU figure (the process's user+system time) stays meaningful on a shared,
// loaded machine, where wall time also counts waiting for a core.
func reportPerRecord(b *testing.B, n int, cpu time.Duration) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(n)
	b.ReportMetric(ns, "ns/record")
	b.ReportMetric(1e3/ns, "Mrecords/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/record")
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompileGoGuest measures loading (validating and compiling) the
// Go passthrough guest with an empty compilation cache and with a warm one,
// each time in a new Engine so the in-memory module map does not help.
func BenchmarkCompileGoGuest(b *testing.B) {
	wasm := goGuest(b, "passthrough")
	ctx := context.Background()
	load := func(b *testing.B, dir string) {
		e, err := NewEngine(Config{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Load(ctx, "pt", wasm, Limits{}); err != nil {
			b.Fatal(err)
		}
		e.Close(ctx)
	}
	b.Run("cold", func(b *testing.B) {
		cpu0 := cpuTime()
		for b.Loop() {
			load(b, b.TempDir())
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	b.Run("cached", func(b *testing.B) {
		dir := b.TempDir()
		load(b, dir)
		cpu0 := cpuTime()
		for b.Loop() {
			load(b, dir)
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkMemoryGrow measures a guest growing its memory a page at a time
// to its 64 MiB limit (misbehave's "m": 1022 memory.grow calls, the last
// refused, then a trap), instantiation and failure included: the cost of
// memory.grow on the host's side.
func BenchmarkMemoryGrow(b *testing.B) {
	e := newEngine(b)
	ctx := context.Background()
	m, err := e.Load(ctx, "grow", misbehave(b), Limits{CallTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime()
	for b.Loop() {
		inst, err := m.Instantiate(ctx, InstanceConfig{Config: []byte("m"), WholeBatches: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := inst.Process(ctx, 0, benchBatch(1), nil); err == nil {
			b.Fatal("the guest did not trap")
		}
		inst.Close(ctx)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
