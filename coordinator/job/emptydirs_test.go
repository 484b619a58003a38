package job

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// weir job rm takes, in a directory store, the empty directories of the
// job's checkpoints that never completed (their uploads were cut: Put
// removes its temporary file, not the directory), which no listing of
// objects finds, and the job's directory once empty; not another job's,
// nor one that holds a file.
func TestRemoveJobTakesItsEmptyCheckpointDirs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "gone", "checkpointing: {disabled: true}\n"))
	e.savepoint(t, ctx, "gone")
	if _, err := e.api.CancelJob(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	mkdir := func(parts ...string) string {
		t.Helper()
		p := filepath.Join(append([]string{e.dir}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// As if the run had triggered checkpoints up to 502 whose uploads were
	// cut; 503 is above what it reserved: a new run's of the name.
	j, err := e.mgr.job("gone")
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.triggered = max(j.triggered, 502)
	j.mu.Unlock()
	mkdir("gone", "chk-500")
	above := mkdir("gone", "chk-503")
	mkdir("gone", "chk-501", "in-0", "ch-1")
	held := mkdir("gone", "chk-502")
	if err := os.WriteFile(filepath.Join(held, ".tmp-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := mkdir("other", "chk-7")
	if _, err := e.api.RemoveJob(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"chk-500", "chk-501"} {
		if _, err := os.Stat(filepath.Join(e.dir, "gone", p)); !os.IsNotExist(err) {
			t.Errorf("gone/%s: %v; want it removed", p, err)
		}
	}
	if _, err := os.Stat(held); err != nil {
		t.Errorf("a directory with a file in it: %v; want it kept", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another job's empty directory: %v; want it kept", err)
	}
	if _, err := os.Stat(above); err != nil {
		t.Errorf("an empty directory above the run's reserved IDs: %v; want it kept (a new run's)", err)
	}
	if err := os.Remove(filepath.Join(held, ".tmp-1")); err != nil {
		t.Fatal(err)
	}
	if n := removeEmptyCheckpointDirs(e.mgr.opts.Catalog, "gone", 0); n != 2 {
		t.Errorf("removed %d directories, want 2 (chk-502, chk-503)", n)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "gone")); !os.IsNotExist(err) {
		t.Errorf("the job's directory, empty: %v; want it removed", err)
	}
	mkdir("again", "chk-3")
	mkdir("again", "chk-9")
	if n := removeEmptyCheckpointDirs(e.mgr.opts.Catalog, "again", 5); n != 1 {
		t.Errorf("below 5: removed %d directories, want 1 (chk-3)", n)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "again", "chk-9")); err != nil {
		t.Errorf("chk-9, of a newer run: %v; want it kept", err)
	}
}
