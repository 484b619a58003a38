package wasm

import (
	"errors"
	"fmt"
)

// The load-time checks read a module's header and its type, import,
// function, memory and export sections themselves, before wazero compiles
// anything: a refused module costs microseconds, and each refusal gets its
// own precise error. Everything else (code, data, validation of
// instructions) is left to wazero's decoder.

const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secExport   = 7
	secStart    = 8
)

const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
	kindTag    = 4
)

// funcType is a function signature written one letter per value type:
// i=i32 I=i64 f=f32 F=f64 v=v128 r=funcref x=externref.
type funcType struct{ params, results string }

func (t funcType) String() string {
	return "(" + typeNames(t.params) + ") -> (" + typeNames(t.results) + ")"
}

func typeNames(s string) string {
	out := ""
	for i := 0; i < len(s); i++ {
		if i > 0 {
			out += ", "
		}
		switch s[i] {
		case 'i':
			out += "i32"
		case 'I':
			out += "i64"
		case 'f':
			out += "f32"
		case 'F':
			out += "f64"
		case 'v':
			out += "v128"
		case 'r':
			out += "funcref"
		case 'x':
			out += "externref"
		}
	}
	return out
}

type importEntry struct {
	module, name string
	kind         byte
	typeIdx      uint32 // for functions
}

type exportEntry struct {
	name  string
	kind  byte
	index uint32
}

type memLimits struct {
	min    uint64
	max    uint64
	hasMax bool
}

// moduleInfo is what the load-time checks need from a module.
type moduleInfo struct {
	types     []funcType
	imports   []importEntry
	funcs     []uint32 // type index of each defined function
	memories  []memLimits
	tables    []memLimits // defined tables' limits, in entries
	exports   []exportEntry
	nImported uint32 // imported functions
	start     uint32 // the start function, if hasStart
	hasStart  bool
	locals    uint64 // locals declared by all defined functions
	maxLocals uint64 // the most locals one function declares
	maxFunc   uint32 // the function that declares maxLocals
	// maxBody is the size in bytes of the largest function body of the
	// code section, maxBodyFunc that function's index.
	maxBody     uint64
	maxBodyFunc uint32
}

// funcTypeOf returns the type of function index idx.
func (m *moduleInfo) funcTypeOf(idx uint32) (funcType, bool) {
	var ti uint32
	if idx < m.nImported {
		n := uint32(0)
		for _, im := range m.imports {
			if im.kind != kindFunc {
				continue
			}
			if n == idx {
				ti = im.typeIdx
				break
			}
			n++
		}
	} else {
		d := idx - m.nImported
		if uint64(d) >= uint64(len(m.funcs)) {
			return funcType{}, false
		}
		ti = m.funcs[d]
	}
	if uint64(ti) >= uint64(len(m.types)) {
		return funcType{}, false
	}
	return m.types[ti], true
}

var errTruncated = errors.New("unexpected end of module")

type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) uleb(maxBits uint) (uint64, error) {
	var v uint64
	var shift uint
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift >= maxBits {
			return 0, fmt.Errorf("LEB128 integer too long at byte %d", r.off-1)
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			if maxBits < 64 && v>>maxBits != 0 {
				return 0, fmt.Errorf("LEB128 integer overflows %d bits at byte %d", maxBits, r.off-1)
			}
			return v, nil
		}
		shift += 7
	}
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, errTruncated
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(uint64(n))
	return string(b), err
}

// count reads a vector length, refusing one that cannot fit in the rest of
// the section (each element takes at least one byte), so a hostile count
// never drives a huge allocation.
func (r *reader) count() (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return 0, errTruncated
	}
	return int(n), nil
}

func valType(c byte) (byte, error) {
	switch c {
	case 0x7f:
		return 'i', nil
	case 0x7e:
		return 'I', nil
	case 0x7d:
		return 'f', nil
	case 0x7c:
		return 'F', nil
	case 0x7b:
		return 'v', nil
	case 0x70:
		return 'r', nil
	case 0x6f:
		return 'x', nil
	}
	return 0, fmt.Errorf("unsupported value type 0x%02x", c)
}

// errMemory64 is the limits of a 64-bit memory or table (memory64).
var errMemory64 = errors.New("64-bit memory (memory64)")

func (r *reader) limits() (memLimits, error) {
	flag, err := r.byte()
	if err != nil {
		return memLimits{}, err
	}
	if flag&^0x07 != 0 {
		return memLimits{}, fmt.Errorf("invalid limits flags 0x%02x", flag)
	}
	if flag&0x04 != 0 {
		// Memory64 and table64: wazero does not run them (it refuses
		// them as "invalid byte for limits: 0x4").
		return memLimits{}, errMemory64
	}
	const bits = 32
	var l memLimits
	if l.min, err = r.uleb(bits); err != nil {
		return l, err
	}
	if flag&0x01 != 0 {
		l.hasMax = true
		if l.max, err = r.uleb(bits); err != nil {
			return l, err
		}
	}
	return l, nil
}

// parseModule reads the sections the load-time checks need. b must already
// start with the magic number and version.
func parseModule(b []byte) (*moduleInfo, error) {
	m := &moduleInfo{}
	r := &reader{b: b, off: 8}
	for r.off < len(b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, fmt.Errorf("section %d of %d bytes: %w", id, size, err)
		}
		s := &reader{b: body}
		switch id {
		case secType:
			err = m.parseTypes(s)
		case secImport:
			err = m.parseImports(s)
		case secFunction:
			err = m.parseFunctions(s)
		case secMemory:
			err = m.parseMemories(s)
		case secTable:
			err = m.parseTables(s)
		case secExport:
			err = m.parseExports(s)
		case secStart:
			m.start, err = s.u32()
			m.hasStart = true
		case secCode:
			err = m.parseCode(s)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		if s.off != len(body) {
			return nil, fmt.Errorf("section %d: %d bytes left over", id, len(body)-s.off)
		}
	}
	return m, nil
}

func (m *moduleInfo) parseTypes(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	m.types = make([]funcType, 0, n)
	for i := 0; i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("type %d: unsupported type form 0x%02x", i, form)
		}
		var sig [2]string
		for k := range sig {
			c, err := r.count()
			if err != nil {
				return err
			}
			buf := make([]byte, c)
			for j := range buf {
				v, err := r.byte()
				if err != nil {
					return err
				}
				if buf[j], err = valType(v); err != nil {
					return fmt.Errorf("type %d: %w", i, err)
				}
			}
			sig[k] = string(buf)
		}
		m.types = append(m.types, funcType{params: sig[0], results: sig[1]})
	}
	return nil
}

func (m *moduleInfo) parseImports(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var im importEntry
		if im.module, err = r.name(); err != nil {
			return err
		}
		if im.name, err = r.name(); err != nil {
			return err
		}
		if im.kind, err = r.byte(); err != nil {
			return err
		}
		switch im.kind {
		case kindFunc:
			if im.typeIdx, err = r.u32(); err != nil {
				return err
			}
			m.nImported++
		case kindTable:
			if _, err = r.byte(); err != nil {
				return err
			}
			if _, err = r.limits(); err != nil {
				return err
			}
		case kindMemory:
			if _, err = r.limits(); err != nil {
				return err
			}
		case kindGlobal:
			if _, err = r.bytes(2); err != nil {
				return err
			}
		case kindTag:
			if _, err = r.byte(); err != nil {
				return err
			}
			if _, err = r.u32(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("import %d: unknown kind 0x%02x", i, im.kind)
		}
		m.imports = append(m.imports, im)
	}
	return nil
}

func (m *moduleInfo) parseFunctions(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	m.funcs = make([]uint32, n)
	for i := range m.funcs {
		if m.funcs[i], err = r.u32(); err != nil {
			return err
		}
	}
	return nil
}

func (m *moduleInfo) parseMemories(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		l, err := r.limits()
		if err != nil {
			return err
		}
		m.memories = append(m.memories, l)
	}
	return nil
}

func (m *moduleInfo) parseExports(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var e exportEntry
		if e.name, err = r.name(); err != nil {
			return err
		}
		if e.kind, err = r.byte(); err != nil {
			return err
		}
		if e.index, err = r.u32(); err != nil {
			return err
		}
		m.exports = append(m.exports, e)
	}
	return nil
}

// parseCode counts the locals each function declares, skipping its
// instructions.
func (m *moduleInfo) parseCode(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return err
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return fmt.Errorf("function body %d: %w", i, err)
		}
		if uint64(size) > m.maxBody {
			m.maxBody, m.maxBodyFunc = uint64(size), m.nImported+uint32(i)
		}
		f := &reader{b: body}
		k, err := f.count()
		if err != nil {
			return fmt.Errorf("function body %d: %w", i, err)
		}
		var sum uint64
		for range k {
			c, err := f.u32()
			if err != nil {
				return fmt.Errorf("function body %d: %w", i, err)
			}
			t, err := f.byte()
			if err != nil {
				return fmt.Errorf("function body %d: %w", i, err)
			}
			if t == 0x63 || t == 0x64 { // (ref null? heaptype)
				if err := f.sleb(33); err != nil {
					return fmt.Errorf("function body %d: %w", i, err)
				}
			}
			sum += uint64(c)
		}
		m.locals += sum
		if sum > m.maxLocals {
			m.maxLocals, m.maxFunc = sum, m.nImported+uint32(i)
		}
	}
	return nil
}

func (m *moduleInfo) parseTables(r *reader) error {
	n, err := r.count()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		l, _, err := r.table()
		if err != nil {
			return fmt.Errorf("table %d: %w", i, err)
		}
		m.tables = append(m.tables, l)
	}
	return nil
}

// table reads one table: reftype limits, or 0x40 0x00 reftype limits expr.
// It returns the limits and the offset, within r, where they start.
func (r *reader) table() (memLimits, int, error) {
	c, err := r.byte()
	if err != nil {
		return memLimits{}, 0, err
	}
	withInit := c == 0x40
	if withInit {
		if z, err := r.byte(); err != nil || z != 0 {
			return memLimits{}, 0, fmt.Errorf("invalid table prefix")
		}
		if _, err := r.byte(); err != nil { // reftype
			return memLimits{}, 0, err
		}
	}
	at := r.off
	l, err := r.limits()
	if err != nil {
		return l, 0, err
	}
	if withInit {
		// a constant expression, ended by 0x0b
		for {
			op, err := r.byte()
			if err != nil {
				return l, 0, err
			}
			if op == 0x0b {
				break
			}
			if err := skipImmediates(r, op); err != nil {
				return l, 0, err
			}
		}
	}
	return l, at, nil
}
