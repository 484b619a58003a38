package wasm

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"
)

// TestBombMemory: an operator that grows its memory until the limit
// refuses and traps, restarted again and again (a crash loop), keeps the
// host near its limit: each run allocates at most twice the limit, a
// closed instance holds none of its memory even while it is still
// referenced (a failed attempt's task is kept until the next deploy), and
// closing it returns the memory to the OS. A trial's 1 GiB bomb took the
// process hosting it to 3–4 times its limit (memory.go).
func TestBombMemory(t *testing.T) {
	const limit = 64 << 20 // releaseAbove: the smallest a close releases
	e := newEngine(t)
	ctx := context.Background()
	m, err := e.Load(ctx, "bomb", misbehave(t), Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var closed []*Instance // kept, as a failed attempt's tasks are
	var ms goruntime.MemStats
	for run := range 4 {
		goruntime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		inst, err := m.Instantiate(ctx, InstanceConfig{Config: []byte("m"), WholeBatches: true})
		if err != nil {
			t.Fatal(err)
		}
		var te *TrapError
		if err := inst.Process(ctx, 0, batchOf(), newOut().emit); !errors.As(err, &te) || te.MemorySize != limit {
			t.Fatalf("run %d: got %v, want a trap at the limit", run, err)
		}
		goruntime.ReadMemStats(&ms)
		// Doubling allocates the limit and half of it, a quarter… The
		// slack is for what the call and the test allocate besides.
		if got := ms.TotalAlloc - before; got > 2*limit+4<<20 {
			t.Errorf("run %d allocated %d MiB for a %d MiB memory, want at most twice it", run, got>>20, limit>>20)
		}
		released := e.releases.Load()
		if err := inst.Close(ctx); err != nil {
			t.Fatal(err)
		}
		closed = append(closed, inst)
		for e.releases.Load() == released {
			time.Sleep(time.Millisecond) // the releaser runs on a goroutine of its own
		}
		goruntime.ReadMemStats(&ms)
		if kept := ms.HeapSys - ms.HeapReleased; kept > limit/2 {
			t.Errorf("run %d: the heap keeps %d MiB from the OS after the close, want under %d MiB", run, kept>>20, limit>>21)
		}
	}
	goruntime.KeepAlive(closed)
}
