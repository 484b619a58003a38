package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// A checkpoint whose sink snapshot names output staged in a checkpoint
// that is gone, partly removed or corrupt, or that has no snapshot of the
// task, cannot be restored: Read says it is corrupt (not missing, not
// itself partly removed), naming the one it names, and Latest passes over
// it to an older one with a warning.
func TestReadRefusesACheckpointNamingOneGone(t *testing.T) {
	ctx := context.Background()
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	put := func(id int64, metrics map[string]map[string]int64, tasks ...string) {
		t.Helper()
		md := &Metadata{Job: "j", ID: id, Handles: map[string]string{}, Metrics: metrics}
		for _, task := range tasks {
			k := StateKey("j", id, task)
			if err := st.Put(ctx, k, strings.NewReader("state")); err != nil {
				t.Fatal(err)
			}
			md.Handles[task] = k
		}
		if err := cat.Write(ctx, md); err != nil {
			t.Fatal(err)
		}
	}
	names := func(from int64) map[string]map[string]int64 {
		return map[string]map[string]int64{"sink-0": {control.MetricSinkStateFrom: from}}
	}
	put(1, nil, "src-0", "sink-0")
	put(2, nil, "src-0") // no snapshot of sink-0
	put(3, names(1), "src-0", "sink-0")
	put(4, names(3), "src-0", "sink-0") // 3 names 1 in turn
	put(5, names(2), "src-0", "sink-0")
	put(6, names(6), "src-0", "sink-0") // not an earlier one
	for _, id := range []int64{1, 3, 4} {
		if _, err := cat.Read(ctx, "j", id); err != nil {
			t.Errorf("read %d: %v", id, err)
		}
	}
	for id, want := range map[int64]string{
		5: "checkpoint j/5: checkpoint corrupt: its snapshot of sink-0 names output staged in checkpoint 2, which has no snapshot of sink-0",
		6: "checkpoint j/6: checkpoint corrupt: its snapshot of sink-0 names checkpoint 6, not an earlier one",
	} {
		if _, err := cat.Read(ctx, "j", id); !errors.Is(err, ErrCorrupt) || err.Error() != want {
			t.Errorf("read %d: %v; want %s", id, err, want)
		}
	}

	// 1 partly removed: 3, which names it, is corrupt; 4, which names 3
	// (its restore reads only the output staged in 3), is not.
	md, err := cat.Read(ctx, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	md.Removing = true
	if err := cat.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
	_, err = cat.Read(ctx, "j", 3)
	var cut *RemovingError
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) || errors.As(err, &cut) ||
		!strings.HasPrefix(err.Error(), "checkpoint j/3: checkpoint corrupt: its snapshot of sink-0 names output staged in checkpoint 1, which cannot be restored (checkpoint j/1 is partly removed") {
		t.Errorf("read 3 with 1 partly removed: %v", err)
	}
	if _, err := cat.Read(ctx, "j", 4); err != nil {
		t.Errorf("read 4 with 1 partly removed: %v", err)
	}
	// 1 gone.
	if err := cat.Discard(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
	_, err = cat.Read(ctx, "j", 3)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) ||
		!strings.HasPrefix(err.Error(), "checkpoint j/3: checkpoint corrupt: its snapshot of sink-0 names output staged in checkpoint 1, which cannot be restored (checkpoint j/1: ") {
		t.Errorf("read 3 with 1 gone: %v", err)
	}
	latest, skipped, err := cat.Latest(ctx, "j", []int64{2, 3, 5, 6})
	if err != nil || latest == nil || latest.ID != 2 || !slices.Equal(skipped, []int64{6, 5, 3}) {
		t.Errorf("latest = %v, skipped %v, %v; want 2, skipping 6, 5, 3", latest, skipped, err)
	}
}
