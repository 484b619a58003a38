package wasm

import (
	"strings"

	"github.com/weirhq/weir/host/wasm/internal/rustdemangle"
)

// demangleStack rewrites the function names of a wazero stack trace that
// are rustc legacy symbols ("_ZN…E") in their demangled form, and leaves
// every other line as it is. After the "wasm stack trace:" header, a frame
// is a tab, "MODULE.NAME(PARAMS)" and maybe " RESULT" or " (RESULTS)",
// MODULE being the module's own name from its name section (usually
// empty), which may hold anything; a source position is indented by two
// tabs, and the last line may be a note on omitted frames.
func demangleStack(stack string) string {
	if !strings.Contains(stack, "_ZN") {
		return stack
	}
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		lines[i] = demangleFrame(l)
	}
	return strings.Join(lines, "\n")
}

// demangleFrame demangles the function name of one frame line: from the
// last "._ZN" on back (a module name comes before the function's, and may
// hold anything), the first whose name, up to the next "(", demangles and
// is followed by nothing but a signature.
func demangleFrame(line string) string {
	if strings.HasPrefix(line, "\t\t") {
		return line // a source position
	}
	for to := len(line); ; {
		k := strings.LastIndex(line[:to], "._ZN")
		if k < 0 {
			return line
		}
		to = k
		start := k + 1
		end := strings.IndexByte(line[start:], '(')
		if end < 0 {
			continue
		}
		end += start
		if !isSignature(line[end:]) {
			continue
		}
		if name, ok := rustdemangle.Demangle(line[start:end]); ok {
			return line[:start] + name + line[end:]
		}
	}
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
