package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// weir CMD -h puts a blank line between the usage text and the flags.
func TestHelpSeparatesUsageFromFlags(t *testing.T) {
	for name := range commands {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{name, "-h"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Errorf("weir %s -h exited %d: %s", name, code, errb.String())
			continue
		}
		help := errb.String()
		i := strings.Index(help, "\n  -")
		if !strings.HasPrefix(help, "usage: weir "+name+" ") || i >= 0 && !strings.HasSuffix(help[:i], "\n") || i < 0 && name != "version" {
			t.Errorf("weir %s -h: no blank line between usage and flags:\n%s", name, help)
		}
	}
}

// A flag mistake is one line naming the command, the mistake and how to
// list the command's flags, exit 2: flag's own handling printed the whole
// help first, and the line that said what was wrong came last, under it.
func TestFlagMistakeIsOneLine(t *testing.T) {
	for name := range commands {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{name, "-no-such-flag"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		got := errb.String()
		if code != 2 || strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "weir: "+name+": ") ||
			!strings.Contains(got, "-no-such-flag") || !strings.Contains(got, "(run 'weir "+name+" -h' for ") {
			t.Errorf("weir %s -no-such-flag: exit %d, stderr %q", name, code, got)
		}
	}
	// A flag of another subcommand is refused on one line too, before
	// weir connects anywhere.
	var ls, lserr bytes.Buffer
	if code := run(context.Background(), []string{"checkpoint", "ls", "-earlier", "wc"}, Stdio{In: strings.NewReader(""), Out: &ls, Err: &lserr}); code != 2 ||
		lserr.String() != "weir: checkpoint ls: -earlier is a flag of checkpoint rm, not of checkpoint ls (ls lists what earlier runs left stored already, marked \"earlier run\")\n" {
		t.Errorf("weir checkpoint ls -earlier wc: exit %d, stderr %q", code, lserr.String())
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"exec", "-outputs", "x"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if want := "weir: exec: invalid value \"x\" for flag -outputs: parse error (run 'weir exec -h' for its flags)\n"; code != 2 || errb.String() != want {
		t.Errorf("weir exec -outputs x: exit %d, stderr %q, want %q", code, errb.String(), want)
	}
	// A typo'd flag gets the likely one, as a typo'd command does.
	errb.Reset()
	code = run(context.Background(), []string{"run", "-nat", "x", "job.yaml"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if want := "weir: run: flag provided but not defined: -nat: did you mean -nats? (run 'weir run -h' for its flags)\n"; code != 2 || errb.String() != want {
		t.Errorf("weir run -nat x: exit %d, stderr %q, want %q", code, errb.String(), want)
	}
}

// A command or subcommand that names none says which it most likely
// meant: a misspelling, a plural (weir jobs: weir job ls) or a word other
// tools use (list: ls, delete: rm).
func TestUnknownCommandSaysWhichWasMeant(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs"}, `weir: unknown command "jobs" (did you mean job ls? run 'weir help')`},
		{[]string{"chekpoint"}, `weir: unknown command "chekpoint" (did you mean checkpoint? run 'weir help')`},
		{[]string{"nope"}, `weir: unknown command "nope" (run 'weir help')`},
		{[]string{"runs"}, `weir: unknown command "runs" (did you mean run? run 'weir help')`},
		{[]string{"job", "restores", "x"}, `weir: job: unknown subcommand "restores" (did you mean restore? ls, status, output, stop, cancel, savepoint, restore or rm)`},
		{[]string{"job", "list"}, `weir: job: unknown subcommand "list" (did you mean ls? ls, status, output, stop, cancel, savepoint, restore or rm)`},
		{[]string{"job", "stauts", "x"}, `weir: job: unknown subcommand "stauts" (did you mean status? ls, status, output, stop, cancel, savepoint, restore or rm)`},
		{[]string{"module", "delete", "m"}, `weir: module: unknown subcommand "delete" (did you mean rm? push, ls, inspect or rm)`},
	} {
		code, _, errs := weir(t, "", c.args...)
		if code != 2 || strings.TrimSpace(errs) != c.want {
			t.Errorf("%v: exit %d, %q; want exit 2, %q", c.args, code, errs, c.want)
		}
	}
}
