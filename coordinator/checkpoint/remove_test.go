package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
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
	dir, meta, state := removeStores(t, ctx)
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
	history := func(when, status, reason string) {
		t.Helper()
		for _, h := range m.History() {
			if h.ID == 1 && (h.Status != status || h.Reason != reason) {
				t.Errorf("%s: history of 1: %+v; want %s: %s", when, h, status, reason)
			}
		}
	}
	history("removed", control.CheckpointDiscarded, ReasonRemoved)
	// A removal cut short says so; done again, it is removed. It is kept
	// no more meanwhile.
	m.RemovalCut(1, "cut")
	history("cut short", control.CheckpointRemoving, "cut")
	if ids := retainedIDs(m); slices.Contains(ids, 1) {
		t.Errorf("retained after a removal cut short: %v", ids)
	}
	m.Removed(1)
	history("removed again", control.CheckpointDiscarded, ReasonRemoved)
	m.RemovalCut(2, "cut") // not being removed: nothing changes
	for _, h := range m.History() {
		if h.ID == 2 && h.Status != control.CheckpointCompleted {
			t.Errorf("history of 2, not removed: %+v", h)
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

// errCut is the error of a cutStore that fails.
var errCut = errors.New("storage failed (test)")

// cutStore is a Store whose Puts fail while failPuts is set and whose
// Deletes, once cut is set, delete one object at a time and fail when
// left objects went: a storage outage (a timeout, a lost leader) partway
// through a removal. A delete by key (DeleteKey) counts as one object,
// and deletes as the wrapped store does (storage.DeleteKey).
type cutStore struct {
	storage.Store
	mu       sync.Mutex
	failPuts bool
	cut      bool
	left     int
}

func (s *cutStore) set(failPuts, cut bool, left int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failPuts, s.cut, s.left = failPuts, cut, left
}

func (s *cutStore) Put(ctx context.Context, key string, r io.Reader) error {
	s.mu.Lock()
	fail := s.failPuts
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("put %s: %w", key, errCut)
	}
	return s.Store.Put(ctx, key, r)
}

func (s *cutStore) DeleteKey(ctx context.Context, key string) error {
	s.mu.Lock()
	fail := s.cut && s.left <= 0
	s.left--
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("delete %s: %w", key, errCut)
	}
	return storage.DeleteKey(ctx, s.Store, key)
}

func (s *cutStore) Delete(ctx context.Context, prefix string) error {
	s.mu.Lock()
	cut := s.cut
	s.mu.Unlock()
	if !cut {
		return s.Store.Delete(ctx, prefix)
	}
	keys, err := s.Store.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		s.mu.Lock()
		pass := s.left > 0
		s.left--
		s.mu.Unlock()
		if !pass {
			return fmt.Errorf("delete %s: %w", k, errCut)
		}
		if err := storage.DeleteKey(ctx, s.Store, k); err != nil {
			return err
		}
	}
	return nil
}

// A removal that storage cuts short leaves no checkpoint that looks
// restorable, in a directory (one store for both) and in JetStream
// (metadata in KV, state in the Object Store). Cut short as it marks the
// metadata, nothing is deleted and the checkpoint is whole; cut short
// after it deleted some of the state, Read refuses the checkpoint with a
// RemovingError (an ErrCorrupt) that says to run weir checkpoint rm
// again, Latest passes over it to the newest whole one, and IDs still
// lists it; Remove done again deletes what is left and counts it.
func TestRemoveCutShort(t *testing.T) {
	ctx := context.Background()
	dir, meta, state := removeStores(t, ctx)
	cd := &cutStore{Store: dir}
	cm, cs := &cutStore{Store: meta}, &cutStore{Store: state}
	for _, c := range []struct {
		name   string
		cat    *Catalog
		stores []*cutStore
	}{{"dir", &Catalog{Meta: cd, State: cd}, []*cutStore{cd}}, {"jetstream", &Catalog{Meta: cm, State: cs}, []*cutStore{cm, cs}}} {
		t.Run(c.name, func(t *testing.T) {
			cat := c.cat
			set := func(failPuts, cut bool, left int) {
				for _, s := range c.stores {
					s.set(failPuts, cut, left)
				}
			}
			for id := int64(1); id <= 3; id++ {
				writeCheckpoint(t, cat, id)
			}
			if err := cat.State.Put(ctx, StateKey("j", 3, "op-0")+CommitMarkerSuffix, strings.NewReader("")); err != nil {
				t.Fatal(err)
			}

			// The mark is not written: nothing is deleted.
			set(true, false, 0)
			if n, err := cat.Remove(ctx, "j", 3); !errors.Is(err, errCut) || n != 0 {
				t.Fatalf("remove with the metadata write failing = %d, %v", n, err)
			}
			set(false, false, 0)
			if _, err := cat.Read(ctx, "j", 3); err != nil {
				t.Fatalf("checkpoint 3 after a removal that deleted nothing: %v", err)
			}

			// One state object goes, then storage fails: the error counts
			// it, and the two left (a snapshot, the marker).
			set(false, true, 1)
			if n, err := cat.Remove(ctx, "j", 3); !errors.Is(err, errCut) || n != 1 ||
				!strings.Contains(err.Error(), "remove checkpoint j/3: deleted 1 of its 3 state objects, 2 left: ") {
				t.Fatalf("remove cut short = %d, %v; want 1 object deleted, 2 left", n, err)
			}
			set(false, false, 0)
			left, err := cat.State.List(ctx, StatePrefix("j", 3))
			if err != nil {
				t.Fatal(err)
			}
			left = slices.DeleteFunc(left, func(k string) bool { return k == MetadataKey("j", 3) })
			if len(left) == 0 || len(left) >= 3 {
				t.Fatalf("state of checkpoint 3 after the cut: %v; want some of its 3 objects", left)
			}
			_, err = cat.Read(ctx, "j", 3)
			var re *RemovingError
			if !errors.As(err, &re) || !errors.Is(err, ErrCorrupt) || re.Metadata.ID != 3 || len(re.Metadata.Handles) != 2 ||
				err.Error() != "checkpoint j/3 is partly removed (a removal began and did not finish), so it cannot be restored: run weir checkpoint rm j 3 again to finish the removal" {
				t.Errorf("read of the partly removed checkpoint = %v", err)
			}
			if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{1, 2, 3}) {
				t.Errorf("checkpoints listed: %v, %v; want 1, 2, 3", ids, err)
			}
			if md, skipped, err := cat.Latest(ctx, "j", []int64{1, 2, 3}); err != nil || md == nil || md.ID != 2 || !slices.Equal(skipped, []int64{3}) {
				t.Errorf("latest = %+v, skipped %v, %v; want 2, skipping 3", md, skipped, err)
			}

			// Done again, the removal deletes the rest: what was left,
			// and the metadata.
			n, err := cat.Remove(ctx, "j", 3)
			if err != nil || n != len(left)+1 {
				t.Fatalf("remove again = %d, %v; want %d (%v and the metadata)", n, err, len(left)+1, left)
			}
			for _, s := range []storage.Store{cat.Meta, cat.State} {
				if keys, err := s.List(ctx, StatePrefix("j", 3)); err != nil || len(keys) != 0 {
					t.Errorf("left of checkpoint 3: %v, %v", keys, err)
				}
			}
			if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{1, 2}) {
				t.Errorf("checkpoints after the removal: %v, %v", ids, err)
			}
			if _, err := cat.Remove(ctx, "j", 3); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove once more = %v, want not exist", err)
			}
		})
	}
}

// removeStores returns the stores the removal tests run on: a directory
// (one store for both), and a fresh embedded server's metadata KV and
// state Object Store.
func removeStores(t *testing.T, ctx context.Context) (dir *storage.Dir, meta *storage.KV, state *storage.ObjectStore) {
	t.Helper()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, nc := embeddedtest.Start(t, embedded.Config{})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if meta, err = storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0); err != nil {
		t.Fatal(err)
	}
	if state, err = storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0); err != nil {
		t.Fatal(err)
	}
	return dir, meta, state
}
