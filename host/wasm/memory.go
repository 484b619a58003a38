package wasm

import (
	"slices"

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

// guestMemory is the linear memory of one instance: a Go slice grown by
// append, as wazero's default memory is, under the instance's limit. Only
// the goroutine calling into the instance touches it (memory.grow runs
// on it).
type guestMemory struct {
	buf    []byte
	limit  uint64 // bytes, a whole number of pages
	inited bool   // the initial allocation was made (see Reallocate)
	// refused is the size in bytes of the last grow refused during the
	// current call, 0 if none; refusedAt is the memory's size then.
	refused, refusedAt uint64
}

// Allocate implements experimental.MemoryAllocator: wazero calls it once,
// when it instantiates the module. max, wazero's limit, is ignored.
func (g *guestMemory) Allocate(capacity, _ uint64) experimental.LinearMemory {
	g.buf = make([]byte, 0, min(capacity, g.limit))
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
	if size > have {
		g.buf = slices.Grow(g.buf, int(size-have))[:size]
	}
	return g.buf
}

// Free implements experimental.LinearMemory.
func (g *guestMemory) Free() { g.buf = nil }

// resetRefused forgets the grow refused in an earlier call.
func (g *guestMemory) resetRefused() { g.refused, g.refusedAt = 0, 0 }
