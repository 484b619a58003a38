package wasm

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A guest's log level outside the ABI's -1 (debug) to 2 (error) is taken
// as the nearest: a trial's level 7 printed as ERROR+20.
func TestLogLevelOutsideTheABIClamped(t *testing.T) {
	e := newEngine(t)
	var logs bytes.Buffer
	inst := instantiate(t, e, "lv", readFile(t, filepath.Join("testdata", "loglevels.wasm")), Limits{}, InstanceConfig{Logger: testLogger(&logs)})
	inst.Close(context.Background())
	for _, want := range []string{`level=ERROR msg=seven`, `level=DEBUG msg=minus-nine`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %q", logs.String(), want)
		}
	}
	if strings.Contains(logs.String(), "+") || strings.Contains(logs.String(), "DEBUG-") {
		t.Errorf("log %q has a level outside debug..error", logs.String())
	}
}
