package jobspec

import (
	"fmt"
	"unicode/utf8"
)

// MaxNameLen is the longest job, source, operator or sink name (ValidName).
const MaxNameLen = 63

// BadName returns why name is not a valid job, source, operator or sink
// name, as an error message's `bad name "NAME" (RULE)`: the name cut
// short when long, and the rule, with the name's length where that is
// what is wrong; "" for a valid one.
func BadName(name string) string {
	if ValidName(name) {
		return ""
	}
	shown := name
	if utf8.RuneCountInString(shown) > 32 {
		shown = string([]rune(shown)[:32]) + "…"
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return fmt.Sprintf("bad name %q (%d characters; at most %d: letters, digits and '-', starting with a letter)", shown, n, MaxNameLen)
	}
	return fmt.Sprintf("bad name %q (letters, digits and '-', starting with a letter, at most %d characters)", shown, MaxNameLen)
}
