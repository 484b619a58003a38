// Package rustdemangle turns the symbol names rustc's legacy mangling
// scheme gives functions back into the paths they came from, as a trap's
// stack trace shows them:
//
//	_ZN47_$LT$probe..Probe$u20$as$u20$weir..Operator$GT$7process17h53750a72f7ed12e4E
//	<probe::Probe as weir::Operator>::process
//
// The output is that of the rustc-demangle crate's alternate form
// ({:#}): the hash is dropped. Symbol names come from a module's name
// section, which anyone may write, so the parser is strict and total: it
// takes a symbol whole or not at all, in one pass over it, and what it
// does not take whole (a C or Go name, rustc's v0 mangling "_R…", a
// malformed legacy symbol) it returns unchanged.
package rustdemangle

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Demangle returns the demangled form of a legacy Rust symbol and true, or
// sym itself and false when sym is not one it can read in full.
//
// A legacy symbol is "_ZN", then one or more path components each written
// as its length in decimal and its bytes, then "E"; the last component is
// usually the hash, "h" and 16 hex digits, which Demangle drops. Inside a
// component ".." stands for "::", "$LT$" and the like for punctuation,
// "$uXX$" for any character by its hex code point, and a leading "_" before
// a "$" is dropped. A ThinLTO suffix ".llvm.DIGITS" is dropped; any other
// suffix starting with "." (".cold", ".0") is kept after the demangled path.
//
// Demangle refuses (returns sym, false) a symbol with a byte outside
// ASCII, a component with a zero or zero-led length or one that runs past
// the end, a character other than letters, digits, "_", "." and "$" in a
// component, an unknown or unterminated "$" escape, and an escape that
// stands for a character that does not print (a newline, a control or
// format character): the result is always one line of printable text.
func Demangle(sym string) (string, bool) {
	s := sym
	if i := strings.Index(s, ".llvm."); i >= 0 && isLLVMHash(s[i+len(".llvm."):]) {
		s = s[:i]
	}
	if !strings.HasPrefix(s, "_ZN") {
		return sym, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return sym, false
		}
	}
	rest := s[len("_ZN"):]
	var parts []string
	for {
		if rest == "" {
			return sym, false // no closing E
		}
		if rest[0] == 'E' {
			rest = rest[1:]
			break
		}
		if rest[0] < '1' || rest[0] > '9' {
			return sym, false
		}
		n, i := 0, 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			n = n*10 + int(rest[i]-'0')
			i++
			if n > len(rest) {
				return sym, false // longer than what is left
			}
		}
		if n > len(rest)-i {
			return sym, false
		}
		parts = append(parts, rest[i:i+n])
		rest = rest[i+n:]
	}
	if len(parts) == 0 {
		return sym, false
	}
	suffix := rest
	if suffix != "" && (suffix[0] != '.' || !isSymbolLike(suffix)) {
		return sym, false
	}
	if len(parts) > 1 && isHash(parts[len(parts)-1]) {
		parts = parts[:len(parts)-1]
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, p := range parts {
		if i > 0 {
			b.WriteString("::")
		}
		if !writeComponent(&b, p) {
			return sym, false
		}
	}
	b.WriteString(suffix)
	return b.String(), true
}

// escapes are the punctuation rustc writes as "$NAME$" in a legacy
// symbol's component; other characters are "$uXX$".
var escapes = map[string]string{
	"SP": "@",
	"BP": "*",
	"RF": "&",
	"LT": "<",
	"GT": ">",
	"LP": "(",
	"RP": ")",
	"C":  ",",
}

// writeComponent writes one path component of a legacy symbol, its
// escapes undone, and reports whether it read it all.
func writeComponent(b *strings.Builder, p string) bool {
	if strings.HasPrefix(p, "_$") {
		p = p[1:]
	}
	for p != "" {
		c := p[0]
		switch {
		case c == '.':
			if strings.HasPrefix(p, "..") {
				b.WriteString("::")
				p = p[2:]
			} else {
				b.WriteByte('.')
				p = p[1:]
			}
		case c == '$':
			end := strings.IndexByte(p[1:], '$')
			if end < 0 {
				return false
			}
			esc := p[1 : 1+end]
			p = p[end+2:]
			if r, ok := escapes[esc]; ok {
				b.WriteString(r)
				continue
			}
			r, ok := unicodeEscape(esc)
			if !ok {
				return false
			}
			b.WriteRune(r)
		case c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			b.WriteByte(c)
			p = p[1:]
		default:
			return false
		}
	}
	return true
}

// unicodeEscape reads the inside of a "$uXX$" escape, "u" and lower-case
// hex digits, and returns the character if it prints.
func unicodeEscape(esc string) (rune, bool) {
	if len(esc) < 2 || len(esc) > 7 || esc[0] != 'u' {
		return 0, false
	}
	for i := 1; i < len(esc); i++ {
		if c := esc[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(esc[1:], 16, 32)
	if err != nil {
		return 0, false
	}
	r := rune(v)
	if !utf8.ValidRune(r) || !unicode.IsPrint(r) {
		return 0, false
	}
	return r, true
}

// isHash reports whether a component is a legacy symbol's hash: "h" and
// 16 hex digits.
func isHash(p string) bool {
	if len(p) != 17 || p[0] != 'h' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if c := p[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isLLVMHash reports whether s is what ThinLTO puts after ".llvm." when it
// renames a symbol it imports: digits, "A" to "F" and "@".
func isLLVMHash(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'A' <= c && c <= 'F' || c == '@') {
			return false
		}
	}
	return true
}

// isSymbolLike reports whether s is ASCII letters, digits and punctuation
// only, as the suffixes LLVM adds (".cold", ".0") are.
func isSymbolLike(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
