package subject

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, filter string
		keyed      bool
		bad        string // part of the error; "" if it parses
	}{
		{in: "counts", filter: "counts"},
		{in: "a.b.c", filter: "a.b.c"},
		{in: "counts.{key}", filter: "counts.>", keyed: true},
		{in: "a.b.{key}", filter: "a.b.>", keyed: true},
		{in: "a.{key}.b", filter: "a.*.b", keyed: true},
		{in: "orders.{key}.created.v1", filter: "orders.*.created.v1", keyed: true},
		{in: "{key}", bad: "after at least one other"},
		{in: "{key}.a", bad: "after at least one other"},
		{in: "a.{key}.{key}", bad: "once"},
		{in: "a.x{key}", bad: "a whole token"},
		{in: "counts.{KEY}", bad: `bad subject "counts.{KEY}" ({KEY} is not a placeholder: the record's key is {key})`},
		{in: "counts.{word}.total", bad: "{word} is not a placeholder"},
		{in: "a.{}", filter: "a.{}"},
		{in: "a.{", filter: "a.{"},
		{in: "a.*", bad: "no wildcards"},
		{in: "a.>", bad: "no wildcards"},
		{in: "a..b", bad: "none empty"},
		{in: "a b", bad: "without spaces"},
		{in: "a.\x01", bad: "without spaces"},
		{in: strings.Repeat("a", MaxLen+1), bad: "at most"},
	} {
		tm, err := Parse(c.in)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("Parse(%q) = %v, want an error with %q", c.in, err, c.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if tm.Keyed() != c.keyed || tm.Filter() != c.filter || tm.String() != c.in {
			t.Errorf("Parse(%q) = keyed %v, filter %q, string %q; want %v, %q", c.in, tm.Keyed(), tm.Filter(), tm.String(), c.keyed, c.filter)
		}
	}
}

func TestFor(t *testing.T) {
	keyed, err := Parse("counts.{key}")
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := Parse("counts")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, want, bad string
	}{
		{key: "fox", want: "counts.fox"},
		{key: "eu.fr", want: "counts.eu.fr"},
		{key: "a*b", want: "counts.a*b"},
		{key: "größe", want: "counts.größe"},
		{key: "", bad: "no key"},
		{key: "a b", bad: "whitespace or a control character at byte 1"},
		{key: "a\tb", bad: "byte 1"},
		{key: "a\x7f", bad: "byte 1"},
		{key: ".a", bad: "empty token at byte 0"},
		{key: "a.", bad: "empty token at byte 2"},
		{key: "a..b", bad: "empty token at byte 2"},
		{key: "*", bad: `wildcard token "*" at byte 0`},
		{key: "a.>", bad: `wildcard token ">" at byte 2`},
		{key: "\xff", bad: "not UTF-8"},
		{key: "a\uFFFDb", bad: "U+FFFD"},
		{key: strings.Repeat("k", MaxLen), bad: "at most"},
	} {
		got, err := keyed.For([]byte(c.key))
		if c.bad != "" {
			if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("For(%q) = %q, %v; want ErrBadKey with %q", c.key, got, err, c.bad)
			}
			if (keyed.Check([]byte(c.key)) == nil) != (err == nil) {
				t.Errorf("Check(%q) disagrees with For", c.key)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("For(%q) = %q, %v; want %q", c.key, got, err, c.want)
		}
		if s, err := fixed.For([]byte(c.key)); err != nil || s != "counts" {
			t.Errorf("fixed For(%q) = %q, %v", c.key, s, err)
		}
	}
	if s, err := fixed.For(nil); err != nil || s != "counts" {
		t.Errorf("fixed For(nil) = %q, %v", s, err)
	}
}

// A key before other tokens is one token: the filter holds "*" there.
func TestForInTheMiddle(t *testing.T) {
	mid, err := Parse("orders.{key}.created")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, want, bad string
	}{
		{key: "fox", want: "orders.fox.created"},
		{key: "größe", want: "orders.größe.created"},
		{key: "eu.fr", bad: "a dot at byte 2: in orders.{key}.created the key is one token"},
		{key: "*", bad: "wildcard token"},
		{key: ">", bad: "wildcard token"},
		{key: "", bad: "no key"},
		{key: "a b", bad: "whitespace"},
		{key: strings.Repeat("k", MaxLen-len("orders..created")+1), bad: "at most"},
	} {
		got, err := mid.For([]byte(c.key))
		if c.bad != "" {
			if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("For(%q) = %q, %v; want ErrBadKey with %q", c.key, got, err, c.bad)
			}
			if (mid.Check([]byte(c.key)) == nil) != (err == nil) {
				t.Errorf("Check(%q) disagrees with For", c.key)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("For(%q) = %q, %v; want %q", c.key, got, err, c.want)
		}
		if !Covers(mid.Filter(), got) {
			t.Errorf("filter %s does not cover %s", mid.Filter(), got)
		}
	}
	if s, err := mid.For([]byte(strings.Repeat("k", MaxLen-len("orders..created")))); err != nil || len(s) != MaxLen {
		t.Errorf("a key that just fits: %d bytes, %v", len(s), err)
	}
}

func TestLongKeyQuotedShort(t *testing.T) {
	keyed, _ := Parse("out.{key}")
	_, err := keyed.For([]byte(strings.Repeat("x", 100) + " "))
	if err == nil || len(err.Error()) > 250 || !strings.Contains(err.Error(), "(101 bytes)") {
		t.Errorf("error for a long key: %v", err)
	}
}

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"counts.>", "counts.fox", true},
		{"counts.>", "counts.eu.fr", true},
		{"counts.>", "counts", false},
		{"counts.*", "counts.fox", true},
		{"counts.*", "counts.eu.fr", false},
		{"counts", "counts", true},
		{"counts", "count", false},
		{">", "anything.at.all", true},
		{"a.*.c", "a.b.>", true},
		{"a.*.c", "a.b.d", false},
		{"counts", "other", false},
		{"lines.>", "nolines.>", false},
		{"lines.*", "lines.>", true},
		{"lines.*.x", "lines.a.*", true},
		{"lines.*.x", "lines.a.y", false},
		{"a.b", "a.b.c", false},
	} {
		if got := Overlap(c.a, c.b); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v", c.a, c.b, got)
		}
		if got := Overlap(c.b, c.a); got != c.want {
			t.Errorf("Overlap(%q, %q) = %v", c.b, c.a, got)
		}
	}
	for _, c := range []struct {
		pattern, filter string
		want            bool
	}{
		{"counts.>", "counts.>", true},
		{">", "counts.>", true},
		{"*.>", "counts.>", true},
		{"counts.*", "counts.>", false},
		{"counts.a.>", "counts.>", false},
		{"counts.>", "counts.a.>", true},
		{"counts", "counts", true},
		{"counts.*", "counts.fox", true},
		{"counts.fox", "counts.*", false},
		{"other.>", "counts.>", false},
		{"counts.>", "counts", false},
	} {
		if got := Covers(c.pattern, c.filter); got != c.want {
			t.Errorf("Covers(%q, %q) = %v", c.pattern, c.filter, got)
		}
	}
	if !Captured([]string{"x", "counts.*"}, "counts.fox") || Captured([]string{"counts.*"}, "counts.eu.fr") {
		t.Error("Captured")
	}
}

// FuzzFor checks that every subject For builds from a key is one literal
// subject that the template's filter matches: tokens non-empty, none a
// wildcard, no whitespace or control bytes, UTF-8 without U+FFFD, at most
// MaxLen bytes.
func FuzzFor(f *testing.F) {
	for _, k := range []string{"fox", "eu.fr", "", ".", "a..b", "*", ">", "a b", "\xff", "größe", "a.*.b"} {
		f.Add("counts.{key}", []byte(k))
	}
	f.Add("a.b.{key}", []byte("x.y"))
	f.Add("orders.{key}.created", []byte("fox"))
	f.Add("orders.{key}.created", []byte("eu.fr"))
	f.Add("plain", []byte("x"))
	f.Fuzz(func(t *testing.T, template string, key []byte) {
		tm, err := Parse(template)
		if err != nil {
			return
		}
		s, err := tm.For(key)
		if (tm.Check(key) == nil) != (err == nil) {
			t.Fatalf("Check and For disagree on %q", key)
		}
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("For(%q): %v does not wrap ErrBadKey", key, err)
			}
			return
		}
		if len(s) > MaxLen || !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
			t.Fatalf("subject %q: %d bytes or not UTF-8", s, len(s))
		}
		for _, tok := range strings.Split(s, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				t.Fatalf("subject %q has a bad token %q", s, tok)
			}
		}
		if !Overlap(tm.Filter(), s) || !Covers(tm.Filter(), s) {
			t.Fatalf("filter %s does not match subject %q", tm.Filter(), s)
		}
	})
}

// BenchmarkFor is the per-record cost of a keyed subject (checking the
// key and building the subject) beside a fixed one.
func BenchmarkFor(b *testing.B) {
	key := []byte("some.key-0042")
	for _, tmpl := range []string{"counts", "counts.{key}"} {
		tm, err := Parse(tmpl)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tmpl, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tm.For(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
