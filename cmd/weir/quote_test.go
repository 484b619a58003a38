package main

import (
	"os/exec"
	"strings"
	"testing"
)

// An argument weir prints in a command for the user to paste reaches the
// command as it is: quoted only when the shell would read it otherwise, so
// that a plain path, name or URL prints as it did.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"data":                         "data",
		"/var/lib/weir-1/data_2":       "/var/lib/weir-1/data_2",
		"nats://alice:xxxxx@h:4222":    "nats://alice:xxxxx@h:4222",
		"nats://a:4222,nats://b:4222":  "nats://a:4222,nats://b:4222",
		"":                             "''",
		"my data":                      "'my data'",
		"it's":                         `'it'\''s'`,
		"$HOME/d":                      "'$HOME/d'",
		"~/d":                          "'~/d'",
		"d;rm -rf x":                   "'d;rm -rf x'",
		"a*b":                          "'a*b'",
		"nats://a:4222, nats://b:4222": "'nats://a:4222, nats://b:4222'",
		"dätä":                         "'dätä'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to read the quoted arguments back")
	}
	args := []string{"my data", "it's", "$HOME", "`x`", "a\\b", "'", "''", "!x", "\t\n", "plain"}
	var line strings.Builder
	line.WriteString(`printf '%s\0'`)
	for _, a := range args {
		line.WriteString(" " + shellQuote(a))
	}
	out, err := exec.Command(sh, "-c", line.String()).Output()
	if err != nil {
		t.Fatalf("sh -c %s: %v", line.String(), err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(args, "|") {
		t.Errorf("sh read %q back as %q", args, got)
	}
}
