package wasm

import (
	"fmt"
	"strings"
)

// Interrupting a running guest.
//
// wazero's own way (RuntimeConfig.WithCloseOnContextDone) makes compiled
// code leave to Go at every loop iteration and starts a goroutine per call;
// Go guests, whose functions are all loops, run 9x slower with it. Instead,
// weir rewrites each module once, before compiling it, like an epoch check:
// it adds a mutable i32 global, exported as interruptExport, and before
// every branch back to a loop header inserts
//
//	global.get $interrupt
//	if
//	  unreachable
//	end
//
// The watchdog sets the global to 1 to stop a call that overran its
// deadline: the guest traps at its next loop iteration, which costs a load
// and a branch per iteration.
//
// A guest spinning in compiled code never reaches a Go safe point, so a
// garbage collection that starts meanwhile would wait for it forever, and
// with it the watchdog and the whole process. So the check also counts
// iterations in a second global and every yieldEvery iterations executes
// `memory.grow 0`, which wazero's compiler implements by leaving to Go:
// the goroutine passes a safe point there, and a stop-the-world can
// proceed. It costs a decrement per iteration and a Go round trip per
// yieldEvery iterations. Code without backward branches finishes by
// itself (wasm has no other backward jumps, and recursion ends in a stack
// overflow).
// A module the rewriter cannot walk (an instruction it does not know) runs
// with wazero's mechanism instead.

// maxTableEntries bounds the entries of all of a module's tables together:
// a table lives in host memory (8 bytes an entry), outside the guest's
// memory limit, so an unbounded table.grow could exhaust the host. capTables
// gives every table a maximum that keeps the sum within it.
const maxTableEntries = 1 << 20

// capTables rewrites the table section so that each of the module's n
// tables has a maximum of at most maxTableEntries/n entries (and at least its
// minimum, which inspectModule has bounded). b has passed inspectModule.
func capTables(b []byte, m *moduleInfo) ([]byte, error) {
	if len(m.tables) == 0 {
		return b, nil
	}
	per := uint64(maxTableEntries / len(m.tables))
	out := make([]byte, 0, len(b)+16*len(m.tables))
	out = append(out, b[:8]...)
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		if id != secTable {
			out = append(out, b[start:r.off]...)
			continue
		}
		s := &reader{b: body}
		n, err := s.u32()
		if err != nil {
			return nil, err
		}
		nb := appendULEB(nil, uint64(n))
		copied := s.off
		for range n {
			l, at, err := s.table()
			if err != nil {
				return nil, err
			}
			if l.hasMax && l.max <= per || l.min > per {
				continue // already small enough (or refused at load)
			}
			// re-encode the limits [at, end of limits) with a maximum
			lr := &reader{b: body, off: at}
			if _, err := lr.limits(); err != nil {
				return nil, err
			}
			nb = append(nb, body[copied:at]...)
			nb = append(nb, 0x01)
			nb = appendULEB(nb, l.min)
			nb = appendULEB(nb, per)
			copied = lr.off
		}
		nb = append(nb, body[copied:]...)
		out = appendSection(out, secTable, nb)
	}
	return out, nil
}

// startExport names the export hoistStart makes of a module's start
// function.
const startExport = "weir.start"

// hoistStart removes the start section of a module that has one and exports
// its function as startExport instead, for Instantiate to call. wazero runs
// a start function inside InstantiateModule, before the instance exists:
// outside the call deadline (a looping start function would hang the host)
// and before the host functions can reach the instance's memory. Called
// right after instantiation, it is run exactly as often and as early as
// far as the guest can tell. b has passed inspectModule.
func hoistStart(b []byte, m *moduleInfo) ([]byte, error) {
	if !m.hasStart {
		return b, nil
	}
	out := make([]byte, 0, len(b)+len(startExport)+8)
	out = append(out, b[:8]...)
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		switch id {
		case secStart:
			// dropped
		case secExport:
			s := &reader{b: body}
			n, err := s.u32()
			if err != nil {
				return nil, err
			}
			nb := appendULEB(nil, uint64(n)+1)
			nb = append(nb, body[s.off:]...)
			nb = appendULEB(nb, uint64(len(startExport)))
			nb = append(nb, startExport...)
			nb = append(nb, kindFunc)
			nb = appendULEB(nb, uint64(m.start))
			out = appendSection(out, secExport, nb)
		default:
			out = append(out, b[start:r.off]...)
		}
	}
	return out, nil
}

// interruptExport names the added global.
const interruptExport = "weir.interrupt"

// yieldEvery is how many loop iterations a guest runs between two visits to
// Go (see the comment on interrupting above).
const yieldEvery = 4096

// errUninstrumentable says the rewriter met something it does not know.
type errUninstrumentable struct{ reason string }

// Error returns the one-line message.
func (e *errUninstrumentable) Error() string { return "cannot instrument: " + e.reason }

func uninstrumentable(format string, args ...any) error {
	return &errUninstrumentable{reason: fmt.Sprintf(format, args...)}
}

const (
	secGlobal    = 6
	secCode      = 10
	secTag       = 13
	secDataCount = 12
)

// instrument returns the module with loop checks and the interrupt global.
// b has passed parseModule.
func instrument(b []byte, m *moduleInfo) ([]byte, error) {
	out := make([]byte, 0, len(b)+len(b)/8+64)
	out = append(out, b[:8]...)
	r := &reader{b: b, off: 8}
	nGlobals := uint32(0)
	for _, im := range m.imports {
		if im.kind == kindGlobal {
			nGlobals++
		}
	}
	globalIdx := uint32(0)
	haveGlobal := false
	wroteGlobal := false
	// First pass: count the defined globals.
	{
		r2 := &reader{b: b, off: 8}
		for r2.off < len(b) {
			id, _ := r2.byte()
			size, _ := r2.u32()
			body, err := r2.bytes(uint64(size))
			if err != nil {
				return nil, err
			}
			if id == secGlobal {
				n, err := (&reader{b: body}).u32()
				if err != nil {
					return nil, err
				}
				nGlobals += n
				haveGlobal = true
			}
		}
	}
	globalIdx = nGlobals
	// The interrupt flag (mut i32 = 0) and the yield countdown (mut i32 =
	// yieldEvery), at globalIdx and globalIdx+1.
	newGlobal := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41}
	newGlobal = appendSLEB(newGlobal, yieldEvery)
	newGlobal = append(newGlobal, 0x0b)
	yields := len(m.memories) > 0
	for r.off < len(b) {
		start := r.off
		id, _ := r.byte()
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		// A module without globals gets a global section before the first
		// section that must follow it.
		if !haveGlobal && !wroteGlobal && id != secCustom && id != secType && id != secImport && id != secFunction && id != 4 && id != secMemory && id != secTag {
			out = appendSection(out, secGlobal, append([]byte{2}, newGlobal...))
			wroteGlobal = true
		}
		switch id {
		case secGlobal:
			s := &reader{b: body}
			n, _ := s.u32()
			nb := appendULEB(nil, uint64(n)+2)
			nb = append(nb, body[s.off:]...)
			nb = append(nb, newGlobal...)
			out = appendSection(out, secGlobal, nb)
			wroteGlobal = true
		case secExport:
			s := &reader{b: body}
			n, _ := s.u32()
			nb := appendULEB(nil, uint64(n)+1)
			nb = append(nb, body[s.off:]...)
			nb = appendULEB(nb, uint64(len(interruptExport)))
			nb = append(nb, interruptExport...)
			nb = append(nb, 0x03) // global
			nb = appendULEB(nb, uint64(globalIdx))
			out = appendSection(out, secExport, nb)
		case secCode:
			nb, err := instrumentCode(body, globalIdx, yields)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, secCode, nb)
		case secCustom:
			if isDWARF(body) {
				continue // its addresses point into the code before the checks moved it
			}
			out = append(out, b[start:r.off]...)
		default:
			out = append(out, b[start:r.off]...)
		}
	}
	if !wroteGlobal {
		return nil, uninstrumentable("no place for the interrupt global")
	}
	return out, nil
}

// isDWARF reports whether a custom section's body is DWARF debug info
// (".debug_info", ".debug_line", ...). instrument drops it: its addresses
// are offsets into the code section as the compiler wrote it, and every
// loop check inserted before them moves the code they name, so wazero's
// stack traces would cite wrong source lines (the line of code some bytes
// further on). The name section, which names functions by index, stays:
// the stack trace still names each function.
func isDWARF(body []byte) bool {
	name, err := (&reader{b: body}).name()
	return err == nil && strings.HasPrefix(name, ".debug_")
}

func appendSection(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = appendULEB(out, uint64(len(body)))
	return append(out, body...)
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// loopCheck is the code inserted before a backward branch: it leaves the
// operand stack as it found it.
//
//	global.get $countdown  i32.const 1  i32.sub  global.set $countdown
//	global.get $countdown  i32.eqz
//	if                     ;; every yieldEvery iterations:
//	  i32.const 0  memory.grow 0  drop          ;; visit Go (a safe point)
//	  i32.const yieldEvery  global.set $countdown
//	end
//	global.get $interrupt
//	if  unreachable  end                        ;; the watchdog said stop
//
// Without a memory to grow (not a weir operator) only the interrupt check
// is inserted.
func loopCheck(globalIdx uint32, yields bool) []byte {
	var c []byte
	if yields {
		cd := appendULEB(nil, uint64(globalIdx)+1)
		c = append(c, 0x23)
		c = append(c, cd...)
		c = append(c, 0x41, 0x01, 0x6b, 0x24)
		c = append(c, cd...)
		c = append(c, 0x23)
		c = append(c, cd...)
		c = append(c, 0x45, 0x04, 0x40, 0x41, 0x00, 0x40, 0x00, 0x1a, 0x41)
		c = appendSLEB(c, yieldEvery)
		c = append(c, 0x24)
		c = append(c, cd...)
		c = append(c, 0x0b)
	}
	c = append(c, 0x23)
	c = appendULEB(c, uint64(globalIdx))
	return append(c, 0x04, 0x40, 0x00, 0x0b) // if (empty) unreachable end
}

// appendSLEB appends v as a signed LEB128 (i32.const's immediate).
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func instrumentCode(body []byte, globalIdx uint32, yields bool) ([]byte, error) {
	check := loopCheck(globalIdx, yields)
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := appendULEB(make([]byte, 0, len(body)+len(body)/8), uint64(n))
	var fb []byte
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		fn, err := r.bytes(uint64(size))
		if err != nil {
			return nil, err
		}
		fb, err = instrumentFunc(fb[:0], fn, check)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = appendULEB(out, uint64(len(fb)))
		out = append(out, fb...)
	}
	if r.off != len(body) {
		return nil, uninstrumentable("code section has trailing bytes")
	}
	return out, nil
}

// instrumentFunc copies one function body, inserting check before every
// branch back to a loop: br, br_if or br_table whose target (one of its
// targets) is a loop. Entering a loop costs nothing; each iteration costs the
// check. (Go's compiler opens every function with a loop for goroutine
// resumption, so checking at loop entry would tax every call.)
func instrumentFunc(out, fn, check []byte) ([]byte, error) {
	r := &reader{b: fn}
	// locals
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return nil, err
		}
		if _, err := r.byte(); err != nil {
			return nil, err
		}
	}
	// frames holds one entry per open block: true for a loop. The function
	// body itself is the outermost block.
	frames := []bool{false}
	isLoop := func(depth uint32) bool {
		return uint64(depth) < uint64(len(frames)) && frames[len(frames)-1-int(depth)]
	}
	copied := 0
	for r.off < len(fn) {
		at := r.off
		op, _ := r.byte()
		backward := false
		switch op {
		case 0x02, 0x03, 0x04: // block loop if
			frames = append(frames, op == 0x03)
		case 0x0b: // end
			if len(frames) == 0 {
				return nil, uninstrumentable("unbalanced end")
			}
			frames = frames[:len(frames)-1]
		case 0x0c, 0x0d: // br br_if
			save := r.off
			l, err := r.u32()
			if err != nil {
				return nil, err
			}
			backward = isLoop(l)
			r.off = save
		case 0x0e: // br_table
			save := r.off
			c, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range uint64(c) + 1 {
				l, err := r.u32()
				if err != nil {
					return nil, err
				}
				backward = backward || isLoop(l)
			}
			r.off = save
		}
		if err := skipImmediates(r, op); err != nil {
			return nil, err
		}
		if backward {
			out = append(out, fn[copied:at]...)
			out = append(out, check...)
			copied = at
		}
	}
	if len(frames) != 0 {
		return nil, uninstrumentable("unbalanced blocks")
	}
	return append(out, fn[copied:]...), nil
}

func (r *reader) sleb(maxBits uint) error {
	_, err := r.uleb(maxBits + 7) // only skipping: any continuation pattern of that length
	return err
}

func (r *reader) blockType() error {
	c, err := r.byte()
	if err != nil {
		return err
	}
	if c == 0x40 || c&0x80 == 0 && c >= 0x40 {
		return nil // empty or a value type
	}
	r.off--
	return r.sleb(33) // a type index
}

func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: memory index
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.uleb(64)
	return err
}

// skipImmediates skips the immediates of the instruction with opcode op.
func skipImmediates(r *reader, op byte) error {
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04: // block loop if
		return r.blockType()
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b || op == 0xd1:
		return nil
	case op == 0x0c || op == 0x0d || op == 0x10 || op == 0x12 || op == 0xd2 || op == 0x08 || op == 0x09:
		return r.skipU32s(1) // br br_if call return_call ref.func throw rethrow
	case op == 0x0e: // br_table
		n, err := r.u32()
		if err != nil {
			return err
		}
		return r.skipU32s(uint64(n) + 1)
	case op == 0x11 || op == 0x13: // call_indirect return_call_indirect
		return r.skipU32s(2)
	case op == 0x1c: // select t*
		n, err := r.u32()
		if err != nil {
			return err
		}
		_, err = r.bytes(uint64(n))
		return err
	case op >= 0x20 && op <= 0x26: // local/global/table get/set/tee
		return r.skipU32s(1)
	case op >= 0x28 && op <= 0x3e: // loads and stores
		return r.memarg()
	case op == 0x3f || op == 0x40: // memory.size memory.grow
		return r.skipU32s(1)
	case op == 0x41:
		return r.sleb(32)
	case op == 0x42:
		return r.sleb(64)
	case op == 0x43:
		_, err := r.bytes(4)
		return err
	case op == 0x44:
		_, err := r.bytes(8)
		return err
	case op >= 0x45 && op <= 0xc4: // numeric
		return nil
	case op == 0xd0: // ref.null t
		_, err := r.byte()
		return err
	case op == 0xfc:
		sub, err := r.u32()
		if err != nil {
			return err
		}
		switch {
		case sub <= 7:
			return nil
		case sub == 8 || sub == 10 || sub == 12 || sub == 14: // memory.init memory.copy table.init table.copy
			return r.skipU32s(2)
		case sub == 9 || sub == 11 || sub == 13 || sub == 15 || sub == 16 || sub == 17:
			return r.skipU32s(1)
		}
		return uninstrumentable("unknown instruction 0xfc %d", sub)
	case op == 0xfd:
		sub, err := r.u32()
		if err != nil {
			return err
		}
		switch {
		case sub <= 11 || sub == 92 || sub == 93: // loads, stores
			return r.memarg()
		case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
			_, err = r.bytes(16)
			return err
		case sub >= 21 && sub <= 34: // extract/replace lane
			_, err = r.byte()
			return err
		case sub >= 84 && sub <= 91: // load/store lane
			if err = r.memarg(); err != nil {
				return err
			}
			_, err = r.byte()
			return err
		case sub <= 0x113: // the rest have no immediates
			return nil
		}
		return uninstrumentable("unknown instruction 0xfd %d", sub)
	case op == 0xfe: // atomics
		sub, err := r.u32()
		if err != nil {
			return err
		}
		if sub == 0x03 {
			_, err = r.byte()
			return err
		}
		return r.memarg()
	}
	return uninstrumentable("unknown opcode 0x%02x", op)
}

// skipU32s skips n LEB128 u32s.
func (r *reader) skipU32s(n uint64) error {
	for ; n > 0; n-- {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}
