package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/snapshot"
)

// weir exec -restore takes a task's snapshot from a checkpoint (the
// WEIRSNAP file a worker wrote) as it takes a -snapshot file: it restores
// the operator state in it. A source's or a sink's snapshot, one with no
// operator state, one that does not decode, and a keyed state that breaks
// its layout are refused, naming the file.
func TestExecRestoresATaskSnapshot(t *testing.T) {
	mod := example(t, "keyedcount")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if code, _, errs := weir(t, "a\tx\nb\tx\na\tx\n", "exec", mod, "-snapshot", state); code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, errs)
	}
	st, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	task := write("count-0", snapshot.Encode(&snapshot.Task{Task: "count-0", CheckpointID: 298, ModuleState: st}))
	code, out, errs := weir(t, "a\tx\n", "exec", mod, "-restore", task)
	if code != 0 || out != "a\t3\n" {
		t.Fatalf("restore from a task snapshot: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	broken := abi.AppendKeyedEntry([]byte(abi.KeyedStateMagic), []byte("a"), []byte("1"))
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"in-0", snapshot.Encode(&snapshot.Task{Task: "in-0", CheckpointID: 298, SourceOffset: []byte{1}}),
			"the snapshot of task in-0 in checkpoint 298 is a source's (its read offsets), with no operator state: take an operator's task (JOB/chk-ID/OPERATOR-N)"},
		{"out-0", snapshot.Encode(&snapshot.Task{Task: "out-0", CheckpointID: 298, SinkState: []byte{1}}),
			"the snapshot of task out-0 in checkpoint 298 is a sink's (its staged output), with no operator state: take an operator's task (JOB/chk-ID/OPERATOR-N)"},
		{"empty-0", snapshot.Encode(&snapshot.Task{Task: "empty-0", CheckpointID: 298}),
			"the snapshot of task empty-0 in checkpoint 298 holds no operator state (the operator's snapshot was empty): nothing to restore"},
		{"cut-0", snapshot.Encode(&snapshot.Task{Task: "cut-0", CheckpointID: 298, ModuleState: st})[:20],
			`a task snapshot (it starts "WEIRSNAP") that does not decode: corrupt task snapshot: checksum mismatch`},
		{"keyed-0", snapshot.Encode(&snapshot.Task{Task: "keyed-0", CheckpointID: 298, ModuleState: broken[:len(broken)-1]}),
			`the snapshot of task keyed-0 in checkpoint 298: operator keyedcount: state starts with "WKS1" but is not in the keyed layout: `},
	} {
		p := write(c.name, c.file)
		code, _, errs := weir(t, "", "exec", mod, "-restore", p)
		if want := "weir: exec: restore from " + p + ": " + c.want; code != 1 || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q, want 1 and one line starting %q", c.name, code, errs, want)
		}
	}
}
