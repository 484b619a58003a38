package wasm

import (
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/weirhq/weir/host/wasm/internal/rustdemangle"
)

// demangleStack rewrites the function names of a wazero stack trace that
// are mangled in their demangled form: rustc's legacy symbols ("_ZN…E",
// internal/rustdemangle) and C++'s Itanium names ("_Z7processPKhm",
// demangleCxx); it leaves every other line, and every name that does not
// demangle, byte for byte as it was. After the "wasm stack trace:" header,
// a frame is a tab, "MODULE.NAME(PARAMS)" and maybe " RESULT" or
// " (RESULTS)", MODULE being the module's own name from its name section
// (usually empty), which may hold anything; a source position is indented
// by two tabs, and the last line may be a note on omitted frames.
func demangleStack(stack string) string {
	if !strings.Contains(stack, "._Z") {
		return stack
	}
	lines := strings.Split(stack, "\n")
	budget := maxCxxCost
	for i, l := range lines {
		lines[i] = demangleFrame(l, &budget)
	}
	return strings.Join(lines, "\n")
}

// demangleFrame demangles the function name of one frame line: from the
// last "._Z" on back (a module name comes before the function's, and may
// hold anything), the first whose name, up to the signature, demangles.
// The name runs from that "._Z" to the signature the line ends with, and
// holds no "(": so only the "._Z"s after the last "(" before the
// signature are candidates, and no more than maxCandidates of them are
// tried, each a pass over the rest of the name. A module's name section
// is anyone's to write: a name of many "._ZN", each candidate scanned to
// the end of the line, took time in the square of its length. budget is
// what is left of the stack's maxCxxCost (demangleCxx).
func demangleFrame(line string, budget *int) string {
	if strings.HasPrefix(line, "\t\t") {
		return line // a source position
	}
	if !strings.Contains(line, "._Z") {
		return line
	}
	sig := signatureStart(line)
	if sig < 0 || !isSignature(line[sig:]) {
		return line
	}
	from := strings.LastIndexByte(line[:sig], '(') + 1
	head := line[from:sig]
	for to, tries := len(head), 0; tries < maxCandidates; tries++ {
		k := strings.LastIndex(head[:to], "._Z")
		if k < 0 {
			return line
		}
		to = k
		if name, ok := demangleName(head[k+1:], budget); ok {
			return line[:from+k+1] + name + line[sig:]
		}
	}
	return line
}

// maxCandidates bounds the "._Z"s of a frame line demangleFrame tries: a
// function's own mangled name holds none after its start, and a module
// name (before it) rarely one.
const maxCandidates = 8

// demangleName demangles a Rust legacy symbol, else a C++ function's
// name. Rust's first: the two share "_ZN", and a Rust symbol read as C++
// is nonsense ("_$LT$probe..Probe…::h53750a72f7ed12e4"), while a C++
// function's name goes on after its path's "E" with its parameter types,
// and so is no Rust symbol.
func demangleName(sym string, budget *int) (string, bool) {
	if name, ok := rustdemangle.Demangle(sym); ok {
		return name, true
	}
	return demangleCxx(sym, budget)
}

// The bounds of the C++ demangler's work. A module's name section is
// anyone's to write, and the demangler takes time in the square of a
// name's length for some: "_Z1fKKK…Kv", f(void const const …), of 2 KiB
// took 50 to 90 ms, of 4 KiB 250 to 350 ms; and what it prints may grow
// faster than the name (a substitution prints the type it stands for).
// So a name longer than maxCxxName stays mangled (real ones, even those
// of libc++'s containers' templates, are some hundred bytes); a stack's
// names cost the demangler their lengths squared, at most maxCxxCost in
// all (two names of maxCxxName, or wazero's most frames, 30, of 512
// bytes: some 0.2 s at worst), and a name that would pass it stays
// mangled; and so does a name whose demangled form would be
// 1<<maxCxxOutputLog2 bytes or longer, rather than show cut short.
const (
	maxCxxName       = 2 << 10
	maxCxxCost       = 2 * maxCxxName * maxCxxName
	maxCxxOutputLog2 = 16 // 64 KiB
)

// demangleCxx returns the demangled form of a C++ function's Itanium-
// mangled name ("_Z7processPKhm": "process(unsigned char const*, unsigned
// long)", as c++filt and clang 14's wasm-ld, which demangles the names it
// writes unless told --no-demangle, write it) and true, or sym and false
// when sym is no such name the demangler (github.com/ianlancetaylor/
// demangle) reads whole, or is past the bounds above; budget is what is
// left of the stack's maxCxxCost, and goes down by sym's length squared
// when the demangler reads it. The demangled name holds only sym's bytes
// and the demangler's punctuation and words: no line break a frame had
// not.
func demangleCxx(sym string, budget *int) (name string, ok bool) {
	if !strings.HasPrefix(sym, "_Z") || len(sym) > maxCxxName || len(sym)*len(sym) > *budget {
		return sym, false
	}
	*budget -= len(sym) * len(sym)
	// The demangler reports a malformed name as an error, and panics only
	// on a bug of its own: a hostile name that finds one leaves the name
	// mangled, and does not take the worker down with the trap it reports.
	defer func() {
		if recover() != nil {
			name, ok = sym, false
		}
	}()
	a, err := demangle.ToAST(sym)
	if err != nil || !isFunctionName(a) {
		return sym, false
	}
	s := demangle.ASTToString(a, demangle.MaxLength(maxCxxOutputLog2))
	if s == "" || len(s) >= 1<<maxCxxOutputLog2 {
		return sym, false
	}
	return s, true
}

// isFunctionName reports whether the demangler read a name as a
// function's: a name and its parameter types ("_Z7processPKhm"), maybe a
// clone of it ("_Z3foov.cold") or a thunk to it ("_ZThn8_N3Foo3barEv"). A
// name without types ("_ZN3fooE") is a variable's, which no function of a
// module has; it is also the shape of every Rust legacy symbol, and those
// are rustdemangle's alone: what it refuses ("_ZN5$u0a$E", an escape of a
// line break) stays as it was.
func isFunctionName(a demangle.AST) bool {
	for {
		switch n := a.(type) {
		case *demangle.Clone:
			a = n.Base
		case *demangle.Special:
			a = n.Val
		case *demangle.EnableIf:
			a = n.Type
		case *demangle.Constraint:
			a = n.Name
		case *demangle.Typed:
			return true
		default:
			return false
		}
	}
}

// signatureStart returns the index of the "(" that opens the function
// type a frame line ends with (isSignature), or -1 when it ends with
// none. It reads the line from its end, once.
func signatureStart(line string) int {
	s := line
	if !strings.HasSuffix(s, ")") {
		// One result: " i64".
		sp := strings.LastIndexByte(s, ' ')
		if sp < 0 {
			return -1
		}
		if r := s[sp+1:]; r == "" || !isTypeNames(r) || strings.Contains(r, ",") {
			return -1
		}
		s = s[:sp]
		if !strings.HasSuffix(s, ")") {
			return -1
		}
		i := strings.LastIndexByte(s, '(')
		if i < 0 || !isTypeNames(s[i+1:len(s)-1]) {
			return -1
		}
		return i
	}
	i := strings.LastIndexByte(s, '(')
	if i < 0 || !isTypeNames(s[i+1:len(s)-1]) {
		return -1
	}
	// Several results, " (i32,i32)", after the parameters' list.
	if params := s[:i]; strings.HasSuffix(params, ") ") {
		params = params[:len(params)-1]
		if j := strings.LastIndexByte(params, '('); j >= 0 && isTypeNames(params[j+1:len(params)-1]) {
			return j
		}
	}
	return i
}

// isSignature reports whether s is how wazero writes a function's type
// after its name: "(i32,i64)", then nothing, " f32" or " (i32,i32)".
func isSignature(s string) bool {
	params, ok := typeList(s)
	if !ok {
		return false
	}
	rest := s[len(params):]
	switch {
	case rest == "":
		return true
	case strings.HasPrefix(rest, " ("):
		results, ok := typeList(rest[1:])
		return ok && len(results) == len(rest)-1
	case strings.HasPrefix(rest, " "):
		result := rest[1:]
		return result != "" && isTypeNames(result) && !strings.Contains(result, ",")
	}
	return false
}

// typeList returns the leading "(...)" of s when it holds only value type
// names and commas.
func typeList(s string) (string, bool) {
	if !strings.HasPrefix(s, "(") {
		return "", false
	}
	end := strings.IndexByte(s, ')')
	if end < 0 || !isTypeNames(s[1:end]) {
		return "", false
	}
	return s[:end+1], true
}

// isTypeNames reports whether s is made of what wazero's value type names
// ("i32", "f64", "v128", "externref", "funcref") and the commas between
// them are.
func isTypeNames(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == ',') {
			return false
		}
	}
	return true
}

// omittedFrames is the note wazero ends a stack trace with when it
// listed only the innermost frames.
const omittedFrames = "\t... maybe followed by omitted frames"

// dropEmptyModuleName removes the "." wazero writes before the function
// name of each frame of a module whose name section names no module (most
// modules: "\t.weir_process(i32,i32,i32) i32"), so that the frame names
// the function as its source does. A frame of a module with a name keeps
// it ("\tops.process(i32) i32"), and so does a host function's
// ("\twasi_snapshot_preview1.fd_write(…)"); a source position (two tabs)
// and the omitted-frames note are left as they are. Run it after
// demangleStack, which finds a mangled name by its leading "._Z".
func dropEmptyModuleName(stack string) string {
	if !strings.Contains(stack, "\n\t.") {
		return stack
	}
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "\t.") && l != omittedFrames {
			lines[i] = "\t" + l[2:]
		}
	}
	return strings.Join(lines, "\n")
}

// minRecursion is how many of a stack trace's frames one function must
// have, and at least half of them, for recursion to name it.
const minRecursion = 8

// recursion returns the function a wasm stack trace (one frame per line,
// as TrapError.Stack) shows over and over ("depth(i32) i32"), or "" if
// no function fills at least half of its frames and minRecursion of
// them. wazero lists the innermost frames only, so a deep recursion fills
// the trace.
func recursion(stack string) string {
	counts := map[string]int{}
	frames, top, most := 0, "", 0
	for _, line := range strings.Split(stack, "\n") {
		f := strings.TrimSpace(line)
		if f == "" || strings.HasPrefix(f, "...") || strings.HasSuffix(f, ":") {
			continue // the header, the omitted-frames note
		}
		frames++
		counts[f]++
		if counts[f] > most {
			top, most = f, counts[f]
		}
	}
	if most < minRecursion || 2*most < frames {
		return ""
	}
	return top
}
