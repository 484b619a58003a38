// Package subject builds the NATS subjects a sink publishes records on: one
// fixed subject, or a template one of whose tokens, after at least one
// literal token, is the record's key ("counts.{key}": the record keyed
// "fox" goes to "counts.fox"; "orders.{key}.created" to
// "orders.fox.created").
//
// A key becomes subject tokens as it is: as the last token, a key with dots
// spans several ("eu.fr" → "counts.eu.fr"); before other tokens it must be
// one token (a filter can hold "*" in the middle, not ">"). A key that
// cannot be part of a subject — empty, with whitespace or control
// characters, with an empty token or a wildcard token, with a dot where it
// must be one token, not UTF-8 or holding U+FFFD, or making the subject
// longer than MaxLen — is refused with an error wrapping ErrBadKey.
package subject

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KeyToken is the template token replaced by a record's key.
const KeyToken = "{key}"

// MaxLen bounds a subject built from a key. A NATS protocol line carries the
// subject with the reply subject and sizes, and a server closes a connection
// whose line is longer than its max_control_line (4096 bytes by default):
// a record must not be able to do that.
const MaxLen = 2048

// ErrBadKey is wrapped by the error for a record key that cannot form a
// subject under a template.
var ErrBadKey = errors.New("record key cannot form a subject")

// Template is a sink's subject: fixed, or keyed (prefix, the key, suffix).
type Template struct {
	raw    string
	keyed  bool
	prefix string // "orders." for "orders.{key}.created"
	suffix string // ".created" for it; empty when the key goes last
}

// Parse reads s: a literal subject (no wildcards), or one with KeyToken as
// one of its tokens, once, after at least one literal token (a key must
// not choose the first token: "$JS" would reach the JetStream API). A
// token in braces other than KeyToken ("{KEY}", "{word}") is refused: it
// looks like a placeholder and would be published as it is.
func Parse(s string) (Template, error) {
	toks := strings.Split(s, ".")
	t := Template{raw: s}
	for i, tok := range toks {
		switch {
		case tok == "" || strings.ContainsFunc(tok, isSpaceOrControl):
			return Template{}, fmt.Errorf("bad subject %q (dot-separated tokens, none empty, without spaces)", s)
		case tok == "*" || tok == ">":
			return Template{}, fmt.Errorf("bad subject %q (a sink publishes to one subject: no wildcards)", s)
		case tok == KeyToken && i > 0 && !t.keyed:
			t.keyed = true
			t.prefix = strings.Join(toks[:i], ".") + "."
			if i < len(toks)-1 {
				t.suffix = "." + strings.Join(toks[i+1:], ".")
			}
		case strings.Contains(tok, KeyToken):
			return Template{}, fmt.Errorf("bad subject %q (%s is a whole token, once, after at least one other: e.g. out.%s or orders.%s.created)", s, KeyToken, KeyToken, KeyToken)
		case len(tok) > 2 && tok[0] == '{' && tok[len(tok)-1] == '}':
			// {KEY}, {word}: meant as the key, it would be published
			// literally, every record on one subject.
			return Template{}, fmt.Errorf("bad subject %q (%s is not a placeholder: the record's key is %s)", s, tok, KeyToken)
		}
	}
	if len(s) > MaxLen {
		return Template{}, fmt.Errorf("bad subject %q…: %d bytes, at most %d", s[:32], len(s), MaxLen)
	}
	return t, nil
}

// String returns the template as written.
func (t Template) String() string { return t.raw }

// Keyed reports whether the subject depends on the record's key.
func (t Template) Keyed() bool { return t.keyed }

// Filter is the subject filter every subject of t matches: the subject
// itself, or for a keyed template the key's token(s) as a wildcard: ">"
// when the key goes last, else "*".
func (t Template) Filter() string {
	switch {
	case !t.keyed:
		return t.raw
	case t.suffix == "":
		return t.prefix + ">"
	}
	return t.prefix + "*" + t.suffix
}

// For returns the subject of a record with key key: the fixed subject, or
// the template with the key in its place.
func (t Template) For(key []byte) (string, error) {
	if !t.keyed {
		return t.raw, nil
	}
	if err := t.check(key); err != nil {
		return "", err
	}
	if t.suffix == "" {
		return t.prefix + string(key), nil
	}
	return t.prefix + string(key) + t.suffix, nil
}

// Check reports whether For accepts key, without building the subject.
func (t Template) Check(key []byte) error {
	if !t.keyed {
		return nil
	}
	return t.check(key)
}

func (t Template) check(key []byte) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: key %s: %s", ErrBadKey, quote(key), why)
	}
	if len(key) == 0 {
		return bad("the record has no key")
	}
	if n := len(t.prefix) + len(key) + len(t.suffix); n > MaxLen {
		return bad(fmt.Sprintf("the subject would be %d bytes, at most %d", n, MaxLen))
	}
	start, ascii := 0, true
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] == '.' && t.suffix != "" {
			return bad(fmt.Sprintf("a dot at byte %d: in %s the key is one token", i, t.raw))
		}
		if i < len(key) && key[i] != '.' {
			if c := key[i]; c <= ' ' || c == 0x7f {
				return bad(fmt.Sprintf("whitespace or a control character at byte %d", i))
			} else if c >= utf8.RuneSelf {
				ascii = false
			}
			continue
		}
		switch tok := key[start:i]; {
		case len(tok) == 0:
			return bad(fmt.Sprintf("an empty token at byte %d (a leading, trailing or double dot)", i))
		case len(tok) == 1 && (tok[0] == '*' || tok[0] == '>'):
			return bad(fmt.Sprintf("the wildcard token %q at byte %d", tok, start))
		}
		start = i + 1
	}
	if ascii {
		return nil
	}
	if !utf8.Valid(key) {
		return bad("not UTF-8")
	}
	// nats-server stores it, but takes a subject holding U+FFFD for
	// corrupt when it reads a stream back (and rebuilds the stream's state
	// at every restart).
	if bytes.Contains(key, []byte(replacementChar)) {
		return bad("the replacement character U+FFFD")
	}
	return nil
}

// replacementChar is U+FFFD, utf8.RuneError.
const replacementChar = "\uFFFD"

// quote shows a key in an error: quoted, and cut after 64 bytes.
func quote(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", key[:64], len(key))
	}
	return fmt.Sprintf("%q", key)
}

func isSpaceOrControl(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError
}

// Overlap reports whether some subject matches both a and b, NATS subjects
// that may hold wildcards ("*" one token, ">" one or more).
func Overlap(a, b string) bool {
	for {
		ta, ra, moreA := strings.Cut(a, ".")
		tb, rb, moreB := strings.Cut(b, ".")
		switch {
		case ta == ">" || tb == ">":
			return true
		case ta != "*" && tb != "*" && ta != tb:
			return false
		case !moreA || !moreB:
			return moreA == moreB
		}
		a, b = ra, rb
	}
}

// Covers reports whether every subject that matches filter also matches
// pattern: a stream listening on pattern stores all of them.
func Covers(pattern, filter string) bool {
	for {
		tp, rp, moreP := strings.Cut(pattern, ".")
		tf, rf, moreF := strings.Cut(filter, ".")
		switch {
		case tp == ">":
			return true
		case tf == ">":
			return false
		case tp != "*" && (tf == "*" || tp != tf):
			return false
		case !moreP || !moreF:
			return moreP == moreF
		}
		pattern, filter = rp, rf
	}
}

// Captured reports whether a stream listening on subjects stores a message
// published on subj (a literal subject).
func Captured(subjects []string, subj string) bool {
	for _, s := range subjects {
		if Overlap(s, subj) {
			return true
		}
	}
	return false
}
