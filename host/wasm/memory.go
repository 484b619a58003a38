package wasm

import (
	"runtime/debug"

	"github.com/tetratelabs/wazero/experimental"
)

// The memory limit, and the grows it refuses.
//
// When a guest asks for more memory than its limit allows, memory.grow
// returns -1, and most guest runtimes then trap with a bare `unreachable`
// (AssemblyScript, Rust's default alloc error handler, Go's runtime). To
// tell the user that the limit refused an allocation, the host has to see
// the refusal, and wazero's own limit (RuntimeConfig.WithMemoryLimitPages)
// refuses without telling anyone. So weir enforces the limit itself, in
// the allocator that backs each instance's memory (wazero's
// experimental.MemoryAllocator, handed to InstantiateModule: its
// Reallocate may fail, and memory.grow then returns -1), and notes the
// last grow it refused during a call. The runtimes run with wazero's limit
// at the wasm32 maximum, so that every grow within it reaches the
// allocator; the limit, now each instance's, no longer takes a runtime and
// a compilation per distinct limit. A call that fails after a refused
// grow says so at the end of its message (TrapError.GrowRefused, and the
// same field of DeadlineError, ExitError and OperatorError):
//
//	wasm error: unreachable (memory.grow of 16384 pages (1 GiB) refused: the operator's memory limit (limits.memory) is 64 MiB and it had 2 MiB)
//
// A guest that handles the -1 and carries on is not affected: the note is
// reset at every call, and only a failure reports it.
//
// wazero refuses, before asking the allocator, a grow past the module's
// own declared maximum or past 4 GiB in all (65536 pages): those are not
// noted, and a failure after them gets at most the note that the memory
// had grown near its limit.

// How a crash-looping memory bomb's memory is kept near its limit.
//
// A trial's operator under limits.memory 1 GiB that grew its memory page
// by page until refused, trapped and was restarted took the process
// hosting it to 3–4 times its limit, and the memory stayed after the job
// was canceled. Measured (misbehave's "m", 256 MiB limit, 8 runs): each run
// allocated 1397 MiB, 5.5 times the limit, as append grew the buffer by a
// quarter at a time and left every smaller copy to the garbage collector,
// which lets the heap reach twice what it kept at its last collection;
// RSS reached 1.2 GB. A closed Instance still held its memory through
// wazero's handles (a failed attempt kept until the next deploy held one
// limit more), and what the collector freed went back to the OS over
// minutes. So:
//
//   - the memory grows by doubling, capped at the limit: a run allocates
//     under twice its final size, and the buffer never outgrows the limit;
//   - Instance.Close drops its handles into the module (instance.go);
//   - closing an instance whose memory reached releaseAbove has the
//     engine return freed memory to the OS (debug.FreeOSMemory) on a
//     goroutine of its own, one collection at a time.
//
// With those, each run allocates 511 MiB (2.0 times the limit), RSS peaks
// at 405 MB (1.6 times), and drops back to the process's 12 MB after each
// close, run after run, closed instances kept or not (TestBombMemory
// holds the first and the last to bounds).

// releaseAbove is the memory size at which closing an instance returns
// freed memory to the OS: the default memory limit. Smaller instances
// are left to the runtime's own pace.
const releaseAbove = DefaultMemoryBytes

// guestMemory is the linear memory of one instance: a Go slice under the
// instance's limit, grown by doubling its capacity up to the limit. Only
// the goroutine calling into the instance touches it (memory.grow runs
// on it).
type guestMemory struct {
	buf    []byte
	limit  uint64 // bytes, a whole number of pages
	inited bool   // the initial allocation was made (see Reallocate)
	grown  uint64 // the largest capacity it had, in bytes, freed or not
	// refused is the size in bytes of the last grow refused during the
	// current call, 0 if none; refusedAt is the memory's size then.
	refused, refusedAt uint64
}

// Allocate implements experimental.MemoryAllocator: wazero calls it once,
// when it instantiates the module. max, wazero's limit, is ignored.
func (g *guestMemory) Allocate(capacity, _ uint64) experimental.LinearMemory {
	g.buf = make([]byte, 0, min(capacity, g.limit))
	g.grown = uint64(cap(g.buf))
	return g
}

// Reallocate implements experimental.LinearMemory: it grows the memory to
// size bytes, or, past the limit, refuses (memory.grow returns -1) and
// notes the request.
func (g *guestMemory) Reallocate(size uint64) []byte {
	have := uint64(len(g.buf))
	// The first call allocates the module's declared minimum, which Load
	// has checked against the limit (and wazero would panic on a refusal).
	if size > g.limit && g.inited {
		g.refused, g.refusedAt = size-have, have
		return nil
	}
	g.inited = true
	if size > uint64(cap(g.buf)) {
		// Doubling, not append's quarter at a time for large slices: less
		// garbage left behind (see the top of this file). Bytes past len
		// were never handed to the guest, so they are still zero.
		c := max(size, 2*uint64(cap(g.buf)))
		if c > g.limit {
			c = max(size, g.limit)
		}
		nb := make([]byte, size, c)
		copy(nb, g.buf)
		g.buf, g.grown = nb, c
	} else if size > have {
		g.buf = g.buf[:size]
	}
	return g.buf
}

// Free implements experimental.LinearMemory.
func (g *guestMemory) Free() { g.buf = nil }

// releaser returns freed memory to the OS when asked (releaseToOS), one
// collection at a time, until the engine closes.
func (e *Engine) releaser() {
	defer close(e.releaseDone)
	for {
		select {
		case <-e.stopWatch:
			return
		case <-e.release:
			debug.FreeOSMemory()
			e.releases.Add(1)
		}
	}
}

// releaseToOS asks the releaser for a collection that returns freed memory
// to the OS; one asked for while another waits is the same one.
func (e *Engine) releaseToOS() {
	select {
	case e.release <- struct{}{}:
	default:
	}
}

// resetRefused forgets the grow refused in an earlier call.
func (g *guestMemory) resetRefused() { g.refused, g.refusedAt = 0, 0 }
