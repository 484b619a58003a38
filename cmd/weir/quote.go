package main

import "strings"

// shellQuote returns s as one argument of a POSIX shell command line, for
// the commands weir prints for the user to paste: s as it is when the
// shell takes it so (letters, digits and @%+=:,./_-, as most paths, names
// and URLs are), else s in single quotes, each ' in it as '\”.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// needsQuote reports whether r in an argument makes the shell read it
// otherwise than as it is (a space, a glob, $, ~, a quote, a non-ASCII
// letter a locale may split).
func needsQuote(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("@%+=:,./_-", r)
}
