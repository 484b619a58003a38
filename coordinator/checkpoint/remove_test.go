package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// Remove deletes a checkpoint's every object — its metadata, each task's
// snapshot, a sink's commit marker — from a directory (one store for both)
// and from JetStream (metadata in KV, state in the Object Store), and
// leaves the others; a second Remove finds nothing. Leftovers finds the
// objects of a checkpoint that has none.
func TestRemove(t *testing.T) {
	ctx := context.Background()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, nc := embeddedtest.Start(t, embedded.Config{})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cat  *Catalog
	}{{"dir", &Catalog{Meta: dir, State: dir}}, {"jetstream", &Catalog{Meta: meta, State: state}}} {
		t.Run(c.name, func(t *testing.T) {
			cat := c.cat
			for id := int64(1); id <= 3; id++ {
				writeCheckpoint(t, cat, id)
			}
			// A sink's commit marker, and a snapshot of checkpoint 4 that
			// never completed.
			for _, k := range []string{StateKey("j", 2, "op-0") + ".committed", StateKey("j", 4, "src-0")} {
				if err := cat.State.Put(ctx, k, strings.NewReader("")); err != nil {
					t.Fatal(err)
				}
			}
			n, err := cat.Remove(ctx, "j", 2)
			if err != nil || n != 4 {
				t.Fatalf("remove = %d objects, %v; want 4 (metadata, two snapshots, a marker)", n, err)
			}
			for _, s := range []storage.Store{cat.Meta, cat.State} {
				if keys, err := s.List(ctx, StatePrefix("j", 2)); err != nil || len(keys) != 0 {
					t.Errorf("left of checkpoint 2: %v, %v", keys, err)
				}
			}
			if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{1, 3}) {
				t.Errorf("checkpoints after the removal: %v, %v", ids, err)
			}
			if _, err := cat.Read(ctx, "j", 3); err != nil {
				t.Errorf("checkpoint 3 after removing 2: %v", err)
			}
			if _, err := cat.Remove(ctx, "j", 2); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("second remove = %v, want not exist", err)
			}
			left, err := cat.Leftovers(ctx, "j")
			if err != nil || len(left) != 1 || !slices.Equal(left[4], []string{StateKey("j", 4, "src-0")}) {
				t.Errorf("leftovers = %v, %v; want checkpoint 4's snapshot", left, err)
			}
		})
	}
}

// A removed checkpoint is no longer kept (no failover restores it,
// retention does not count it) and its history says it was removed; a
// checkpoint has ended once it is no longer pending.
func TestMachineRemoved(t *testing.T) {
	m := newM(Config{Interval: 10 * time.Millisecond, Retained: 2})
	for _, id := range []int64{1, 2} {
		now := at(10 * int(id))
		expect(t, "tick", m.Tick(now), fmt.Sprintf("trigger(%d)", id))
		if m.Ended(id) {
			t.Errorf("checkpoint %d ended while pending", id)
		}
		complete(t, m, now, id)
		if !m.Ended(id) {
			t.Errorf("checkpoint %d not ended once complete", id)
		}
	}
	if m.Ended(3) {
		t.Error("checkpoint 3, not triggered, has ended")
	}
	m.Removed(1)
	if ids := retainedIDs(m); !slices.Equal(ids, []int64{2}) {
		t.Errorf("retained after removing 1: %v", ids)
	}
	// Retention keeps 2 again before it discards: 1 is not counted.
	expect(t, "tick", m.Tick(at(30)), "trigger(3)")
	expect(t, "complete 3", complete(t, m, at(30), 3), "notify(3)")
	for _, h := range m.History() {
		if h.ID == 1 && (h.Status != control.CheckpointDiscarded || h.Reason != ReasonRemoved) {
			t.Errorf("history of 1: %+v", h)
		}
	}
}

func retainedIDs(m *Machine) []int64 {
	var ids []int64
	for _, md := range m.Retained() {
		ids = append(ids, md.ID)
	}
	slices.Reverse(ids)
	return ids
}
