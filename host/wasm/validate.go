package wasm

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/weirhq/weir/abi"
)

// A local declaration is a count and a type, so a module of a few bytes
// can declare billions of locals, and wazero allocates host memory for
// every declared local when it compiles a module (about 26 bytes each). A
// function may declare at most maxFunctionLocals, the limit web browsers
// enforce, so every portable module keeps within it, and a module at most
// maxModuleLocals in all (real modules declare thousands: a Go guest of
// 1,900 functions declares 7,400).
const (
	maxFunctionLocals = 50000
	maxModuleLocals   = 1 << 22
)

// wazero's compile time and memory grow with the number of functions and,
// faster than linearly, with the size of one function's code: measured
// with wazero v1.12 on amd64, 1,000,000 empty functions (a 4 MB module)
// took 6.9 s and 290 MB to validate, 4,000,000 took 32 s and 1.1 GB, and
// one function of 24 MB of arithmetic took 8.9 s and 1.2 GB (spread over
// 100 functions, the same code took 0.95 s and 140 MB). A module may
// therefore have at most maxFunctions functions, imported ones included,
// and no function's code (its body in the code section) over
// maxFunctionBytes: at the limits, 68 MB and 61 MB, and a second or less
// on a machine not busy otherwise. Real modules stay far below both: a Go guest has 2,200
// functions, the largest of 29 KB; Rust, C and C++ guests have a few
// hundred, of at most 5 KB.
const (
	maxFunctions     = 200000
	maxFunctionBytes = 1 << 20
)

// wasiModule is the WASI import module a guest may use.
const wasiModule = "wasi_snapshot_preview1"

var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// checkModule runs every load-time check that needs no compilation.
func checkModule(name string, b []byte, lim Limits) error {
	_, err := inspectModule(name, b, lim)
	return err
}

// inspectModule runs the checks of checkModule and returns what it parsed.
func inspectModule(name string, b []byte, lim Limits) (*moduleInfo, error) {
	verr := func(k Kind, format string, args ...any) error {
		return &ValidationError{Module: name, Kind: k, Detail: fmt.Sprintf(format, args...)}
	}
	if len(b) < 4 || !bytes.Equal(b[:4], wasmMagic) {
		return nil, verr(KindNotWasm, "not a WebAssembly module (no \\0asm magic number)%s", notWasmHint(b))
	}
	if len(b) < 8 {
		return nil, verr(KindMalformed, "truncated module (%d bytes)", len(b))
	}
	if v := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24; v != 1 {
		return nil, verr(KindNotWasm, "not a WebAssembly core module (binary version %d, want 1)", v)
	}
	m, err := parseModule(b)
	if errors.Is(err, errMemory64) {
		return nil, &ValidationError{Module: name, Kind: KindMalformed, Err: err,
			Detail: "uses 64-bit memory (memory64), which weir does not support: build the operator for wasm32"}
	}
	if err != nil {
		return nil, &ValidationError{Module: name, Kind: KindMalformed, Detail: "truncated or malformed module: " + err.Error(), Err: err}
	}

	for _, im := range m.imports {
		if im.module == "gojs" {
			// Before the exports: GOOS=js leaves out the SDK's exports
			// (they are built for wasip1 only), which would be blamed on
			// a missing weir.Register.
			return nil, verr(KindImport, "import %s.%s not allowed: the module was built with GOOS=js, for JavaScript; "+
				"build operators with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared", im.module, im.name)
		}
	}

	exports := make(map[string]exportEntry, len(m.exports))
	var versions []int
	hasV1 := false
	for _, e := range m.exports {
		exports[e.name] = e
		if rest, ok := strings.CutPrefix(e.name, abi.VersionExportPrefix); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 1 {
				return nil, verr(KindABIVersion, "unknown ABI version marker %q (this host speaks %d)", e.name, abi.Version)
			}
			if n == abi.Version {
				hasV1 = true
			} else {
				versions = append(versions, n)
			}
		}
	}
	marker := abi.VersionExportPrefix + strconv.Itoa(abi.Version)
	if !hasV1 {
		if len(versions) > 0 {
			return nil, verr(KindABIVersion, "unknown ABI version %d (this host speaks %d)", versions[0], abi.Version)
		}
		const sdks = "the SDKs define the exports: Rust weir::operator!(…), C WEIR_OPERATOR(…), " +
			"AssemblyScript export * from \"weir/exports\" in the entry file, Go weir.Register from init"
		if !exportsABI(m.exports) {
			// Nothing of the ABI at all: most often an SDK build whose
			// entry file left out what defines the exports.
			return nil, verr(KindMissingExport, "missing export %s: the module exports no weir_* function, so it is no weir operator (%s)", marker, sdks)
		}
		// Some of the ABI, without its marker: exports written by hand,
		// perhaps misspelled, where the SDK's would define them all.
		also := ""
		if unknown := unknownABIExports(m.exports); len(unknown) > 0 {
			also = fmt.Sprintf("; it exports %s, which the ABI does not define", nameList(unknown))
		}
		return nil, verr(KindMissingExport, "missing export %s, the ABI version marker: the module exports weir_* functions without it%s "+
			"(not built with a weir SDK's exports, or for another ABI; %s)", marker, also, sdks)
	}
	if _, ok := exports["_start"]; ok {
		return nil, verr(KindCommandModule, "exports _start: a WASI command module; build a reactor, with no main "+
			"(Go -buildmode=c-shared, C -mexec-model=reactor or --no-entry, Rust --crate-type cdylib)")
	}

	for _, im := range m.imports {
		if err := checkImport(m, im); err != "" {
			return nil, verr(KindImport, "import %s.%s not allowed: %s", displayName(im.module), displayName(im.name), err)
		}
	}

	// Exports: memory, the version marker, then every function of the ABI.
	mem, ok := exports[abi.ExportMemory]
	if !ok {
		return nil, verr(KindMissingExport, "missing export %s", abi.ExportMemory)
	}
	if mem.kind != kindMemory {
		return nil, verr(KindExportSignature, "export %s is not a memory", abi.ExportMemory)
	}
	if uint64(mem.index) >= uint64(len(m.memories)) {
		return nil, verr(KindMalformed, "export %s names memory %d, which the module does not define", abi.ExportMemory, mem.index)
	}
	sigs := append([]abi.ExportSig{{Name: marker, Required: true}}, abi.Exports...)
	for _, want := range sigs {
		e, ok := exports[want.Name]
		if !ok {
			if want.Required {
				if unknown := unknownABIExports(m.exports); len(unknown) > 0 {
					// Most often the missing one, misspelled.
					return nil, verr(KindMissingExport, "missing export %s (the module exports %s, which the ABI does not define)",
						want.Name, nameList(unknown))
				}
				if !exportsCallbacks(exports) {
					// The SDK's own exports without the operator's: C's
					// weir.h defines weir_abi_v1, weir_input and
					// weir_cursor, WEIR_OPERATOR the rest.
					return nil, verr(KindMissingExport, "missing export %s: the module exports none of an operator's callbacks "+
						"(weir_init, weir_process, weir_snapshot, weir_restore), only what an SDK defines for them "+
						"(C: name your callbacks with WEIR_OPERATOR(init, process, snapshot, restore) after including weir.h)", want.Name)
				}
				return nil, verr(KindMissingExport, "missing export %s", want.Name)
			}
			continue
		}
		if e.kind != kindFunc {
			return nil, verr(KindExportSignature, "export %s is not a function", want.Name)
		}
		got, ok := m.funcTypeOf(e.index)
		if !ok {
			return nil, verr(KindMalformed, "export %s names function %d, which has no valid type", want.Name, e.index)
		}
		if got.params != want.Params || got.results != want.Results {
			return nil, verr(KindExportSignature, "export %s has type %s, want %s", want.Name, got, funcType{want.Params, want.Results})
		}
	}

	if m.hasStart {
		// The start function becomes an export (hoistStart): check the type
		// wazero would have checked in the start section.
		got, ok := m.funcTypeOf(m.start)
		if !ok {
			return nil, verr(KindMalformed, "start section names function %d, which has no valid type", m.start)
		}
		if got != (funcType{}) {
			return nil, verr(KindMalformed, "start function %d has type %s, want () -> ()", m.start, got)
		}
	}

	var entries uint64
	for _, t := range m.tables {
		entries += t.min
	}
	if entries > maxTableEntries {
		return nil, verr(KindMemoryLimit, "declares tables of %d entries, over the limit of %d", entries, maxTableEntries)
	}
	if n := uint64(m.nImported) + uint64(len(m.funcs)); n > maxFunctions {
		return nil, verr(KindMemoryLimit, "has %d functions, over the limit of %d (compiling so many takes seconds and gigabytes)", n, maxFunctions)
	}
	if m.maxBody > maxFunctionBytes {
		return nil, verr(KindMemoryLimit, "function %d has %d bytes of code, over the limit of %d (%s; compiling a function so large takes seconds and gigabytes): split it",
			m.maxBodyFunc, m.maxBody, maxFunctionBytes, sizeIEC(maxFunctionBytes))
	}
	if m.maxLocals > maxFunctionLocals {
		return nil, verr(KindMemoryLimit, "function %d declares %d locals, over the limit of %d", m.maxFunc, m.maxLocals, maxFunctionLocals)
	}
	if m.locals > maxModuleLocals {
		return nil, verr(KindMemoryLimit, "declares %d locals in all, over the limit of %d", m.locals, maxModuleLocals)
	}
	minBytes := m.memories[mem.index].min * PageSize
	if minBytes > lim.MemoryBytes {
		err := verr(KindMemoryLimit, "declares a minimum memory of %s (%d pages), over its memory limit of %s: give the operator limits: {memory: %s} or more (weir exec: -memory)",
			sizeIEC(minBytes), m.memories[mem.index].min, sizeIEC(lim.MemoryBytes), limitSize(minBytes))
		err.(*ValidationError).MinMemoryBytes = minBytes
		return nil, err
	}
	return m, nil
}

// notWasmHint says what a file that is no WebAssembly module is, when its
// first bytes tell: a native binary (built for the machine, not for
// wasm) or WebAssembly text, each with the way to the module; "" if they
// do not tell.
func notWasmHint(b []byte) string {
	const native = "; build the operator for wasm: Go GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, C clang --target=wasm32-wasi or --target=wasm32, Rust --target wasm32-unknown-unknown"
	switch {
	case len(b) == 0:
		return ": the file is empty (a build that failed, or a copy cut short?)"
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		return ": an ELF file, a native executable or library" + native
	case bytes.HasPrefix(b, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(b, []byte{0xce, 0xfa, 0xed, 0xfe}),
		bytes.HasPrefix(b, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return ": a Mach-O file, a native executable or library" + native
	case bytes.HasPrefix(b, []byte("MZ")):
		return ": a Windows executable or DLL" + native
	}
	// WebAssembly text: "(module", perhaps after blank lines and ;; comments.
	t := b
	for {
		t = bytes.TrimLeft(t, " \t\r\n")
		if !bytes.HasPrefix(t, []byte(";;")) {
			break
		}
		if k := bytes.IndexByte(t, '\n'); k >= 0 {
			t = t[k+1:]
		} else {
			t = nil
		}
	}
	if bytes.HasPrefix(t, []byte("(module")) {
		return ": WebAssembly text (WAT); assemble it into a module with wat2wasm"
	}
	if head := b[:min(len(b), 512)]; len(head) > 0 && isText(head) {
		return ": the file is text, a source file perhaps; give the .wasm, or a source weir builds (a Go package directory, a .rs, .c, .cpp, .ts or .wat file: guests/README.md)"
	}
	return ""
}

// isText reports whether b looks like text: valid UTF-8 (but for a rune
// cut at its end) without control characters other than tab, CR and LF.
func isText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
		b = b[n:]
	}
	return true
}

// exportsABI reports whether any of exports is named like a function of
// the ABI (weir_…).
func exportsABI(exports []exportEntry) bool {
	for _, e := range exports {
		if strings.HasPrefix(e.name, "weir_") {
			return true
		}
	}
	return false
}

// exportsCallbacks reports whether exports has any of the operator
// callbacks the ABI requires (weir_init, weir_process, weir_snapshot,
// weir_restore).
func exportsCallbacks(exports map[string]exportEntry) bool {
	for _, name := range []string{abi.ExportInit, abi.ExportProcess, abi.ExportSnapshot, abi.ExportRestore} {
		if _, ok := exports[name]; ok {
			return true
		}
	}
	return false
}

// unknownABIExports returns the names of exports that are named like
// functions of the ABI (weir_…) but are none of them, nor a version
// marker.
func unknownABIExports(exports []exportEntry) []string {
	var names []string
	for _, e := range exports {
		if !strings.HasPrefix(e.name, "weir_") || strings.HasPrefix(e.name, abi.VersionExportPrefix) {
			continue
		}
		known := false
		for _, want := range abi.Exports {
			known = known || e.name == want.Name
		}
		if !known {
			names = append(names, e.name)
		}
	}
	return names
}

// maxNamesListed bounds the names nameList lists, and maxNameLen the
// bytes of each it shows.
const (
	maxNamesListed = 5
	maxNameLen     = 64
)

// nameList lists names from a module for an error: the first
// maxNamesListed, each as displayName writes it, then how many more. A
// module may export thousands of names, each as long and with whatever
// characters its author likes, and the error is a job's failure reason,
// one line, kept in its record.
func nameList(names []string) string {
	shown := make([]string, 0, min(len(names), maxNamesListed))
	for _, n := range names[:min(len(names), maxNamesListed)] {
		shown = append(shown, displayName(n))
	}
	list := strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return list
}

// displayName writes a name from a module for an error: as it is when it
// is plain (letters, digits, "_", ".", "-", "$") and short, else quoted
// (Go syntax: one line, no control characters), past maxNameLen bytes cut
// and marked so.
func displayName(n string) string {
	cut := ""
	if len(n) > maxNameLen {
		k := maxNameLen
		for k > 0 && !utf8.RuneStart(n[k]) {
			k--
		}
		n, cut = n[:k], "..."
	}
	plain := n != ""
	for i := 0; i < len(n) && plain; i++ {
		c := n[i]
		plain = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-' || c == '$'
	}
	if plain && cut == "" {
		return n
	}
	return strconv.Quote(n) + cut
}

// checkImport returns why an import is not allowed, or "".
func checkImport(m *moduleInfo, im importEntry) string {
	switch im.module {
	case abi.ImportModule:
		if im.kind != kindFunc {
			return "only functions are imported from " + abi.ImportModule
		}
		for _, want := range abi.Imports {
			if want.Name != im.name {
				continue
			}
			if uint64(im.typeIdx) >= uint64(len(m.types)) {
				return "invalid type index"
			}
			got := m.types[im.typeIdx]
			if got.params != want.Params || got.results != want.Results {
				return fmt.Sprintf("has type %s, want %s", got, funcType{want.Params, want.Results})
			}
			return ""
		}
		return "the host provides no such function"
	case wasiModule:
		if im.kind != kindFunc {
			return "only functions are imported from " + wasiModule
		}
		if strings.HasPrefix(im.name, "sock_") {
			return "sockets are not available to operators"
		}
		return ""
	}
	if im.module == "env" && im.name == "abort" {
		// AssemblyScript's default abort; the SDK has a replacement.
		return "operators may import only from " + abi.ImportModule + " and " + wasiModule +
			" (AssemblyScript: build with --use abort=PATH/weir/index/weirAbort, see guests/README.md)"
	}
	if im.module == "env" && (strings.HasPrefix(im.name, "console.") || im.name == "trace") {
		// AssemblyScript's console.log and trace(); the SDK logs through weir.log.
		return "operators may import only from " + abi.ImportModule + " and " + wasiModule +
			" (AssemblyScript's console and trace: log with the SDK's log(LOG_INFO, message), see guests/README.md)"
	}
	if im.module == "env" && (im.name == "Date.now" || im.name == "seed") {
		// AssemblyScript's Date.now and Math.random (which seeds itself
		// from env.seed).
		return "operators may import only from " + abi.ImportModule + " and " + wasiModule +
			" (AssemblyScript's Date.now and Math.random: take the time from the records' timestamps and seed a generator from the config, see guests/README.md)"
	}
	return "operators may import only from " + abi.ImportModule + " and " + wasiModule
}

// limitSize writes n, a whole number of wasm pages, as a limits.memory
// jobspec takes: in the largest binary unit that divides it.
func limitSize(n uint64) string {
	for _, u := range []struct {
		suffix string
		size   uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return strconv.FormatUint(n, 10)
}
