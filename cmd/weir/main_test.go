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
		if !strings.HasPrefix(help, "usage: weir "+name+" ") || i < 0 || !strings.HasSuffix(help[:i], "\n") {
			t.Errorf("weir %s -h: no blank line between usage and flags:\n%s", name, help)
		}
	}
}
