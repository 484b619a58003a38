package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// -show N means N records in weir run (prints the first N) and in weir
// job output (stops after N), -1 no limit in both: weir job output took
// 0 for no limit, where weir run's -show 0 prints none. job output
// refuses 0, which would show nothing, saying so; below -1 is refused by
// both.
func TestShowMeansTheSameInRunAndJobOutput(t *testing.T) {
	var f jobFlags
	if def := f.flagSet("output").Lookup("show").DefValue; def != "-1" {
		t.Errorf("weir job output -show defaults to %s, want -1 (no limit)", def)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "output", "-show", "0", "j"}, "weir: job output: -show 0 would show no records (as weir run -show 0 prints none): give 1 or more, or -1 (the default) for no limit\n"},
		{[]string{"job", "output", "-show", "-2", "j"}, "weir: job output: -show -2: give a number of records, 1 or more (-1: no limit)\n"},
		{[]string{"run", "-show", "-2", "job.yaml"}, "weir: run: -show -2: give a number of records, 0 or more (0: none; -1: all)\n"},
	} {
		code, out, errs := weir(t, "", c.args...)
		if code != 2 || out != "" || errs != c.want {
			t.Errorf("weir %s: exit %d, stdout %q, stderr %q; want exit 2, %q", strings.Join(c.args, " "), code, out, errs, c.want)
		}
	}
	h := nats.Header{}
	for _, c := range []struct {
		show  int
		limit int // job output's
		want  string
	}{
		{0, 0, "… more output not shown (-show)\n"}, // weir run -show 0
		{2, 0, "a\nb\n… more output not shown (-show)\n"},
		{-1, 0, "a\nb\nc\n"}, // weir run -show -1
		{-1, 2, "a\nb\n"},    // weir job output -show 2
		{-1, 0, "a\nb\nc\n"}, // weir job output, no limit
	} {
		var b bytes.Buffer
		o := &output{std: Stdio{Out: &b}, show: c.show, limit: c.limit, full: make(chan struct{}), bare: true, bySink: map[string]int{}}
		for _, v := range []string{"a", "b", "c"} {
			o.record("out", h, []byte(v))
		}
		if b.String() != c.want {
			t.Errorf("show %d, limit %d: printed %q, want %q", c.show, c.limit, b.String(), c.want)
		}
	}
}
