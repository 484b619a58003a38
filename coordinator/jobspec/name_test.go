package jobspec

import (
	"strings"
	"testing"
)

// A name refused for its length says the limit and the name's length,
// and does not print a long name whole; a name of MaxNameLen passes.
func TestNameLimitSaid(t *testing.T) {
	spec := func(name string) string {
		return "name: " + name + `
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`
	}
	if _, err := Parse("j.yaml", []byte(spec("a"+strings.Repeat("b", MaxNameLen-1))), Options{}); err != nil {
		t.Fatalf("a name of %d characters: %v", MaxNameLen, err)
	}
	long := "a" + strings.Repeat("b", 999)
	_, err := Parse("j.yaml", []byte(spec(long)), Options{})
	if err == nil || !strings.Contains(err.Error(), "1000 characters; at most 63") || strings.Contains(err.Error(), long) {
		t.Errorf("a name of 1000 characters: %v; want the limit and the length, not the whole name", err)
	}
	_, err = Parse("j.yaml", []byte(spec("a.b")), Options{})
	if err == nil || !strings.Contains(err.Error(), `bad name "a.b" (letters, digits and '-', starting with a letter, at most 63 characters)`) {
		t.Errorf("a dotted name: %v", err)
	}
}
