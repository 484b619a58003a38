package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/storage"
)

// Retention finishes a removal that storage cut short (RemovalCut), in a
// directory (one store for both) and in JetStream (metadata in KV, state
// in the Object Store): with the next discard, what the removal left goes,
// the metadata last, and the runner logs one line for it. Before, its
// objects stayed until a user ran weir checkpoint rm again. Removing lists
// the partly removed checkpoints a coordinator finds at its start.
func TestRetentionFinishesACutRemoval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
			for id := int64(1); id <= 3; id++ {
				writeCheckpoint(t, cat, id)
			}
			if err := cat.State.Put(ctx, StateKey("j", 2, "op-0")+CommitMarkerSuffix, strings.NewReader("")); err != nil {
				t.Fatal(err)
			}
			for _, s := range c.stores {
				s.set(false, true, 1)
			}
			if _, err := cat.Remove(ctx, "j", 2); err == nil {
				t.Fatal("a removal storage cut short succeeded")
			}
			for _, s := range c.stores {
				s.set(false, false, 0)
			}
			if ids, err := cat.Removing(ctx, "j"); err != nil || !slices.Equal(ids, []int64{2}) {
				t.Fatalf("partly removed: %v, %v; want 2", ids, err)
			}

			var logs lockedBuffer
			r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{},
				RunnerOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
			r.RemovalCut(2, "cut")
			stop, done := make(chan struct{}), make(chan struct{})
			go func() { defer close(done); r.discarder(ctx, stop) }()
			r.queueDiscard(DiscardAction{ID: 1}) // retention drops 1
			close(stop)
			<-done

			for _, s := range []storage.Store{cat.Meta, cat.State} {
				for _, id := range []int64{1, 2} {
					if keys, err := s.List(ctx, StatePrefix("j", id)); err != nil || len(keys) != 0 {
						t.Errorf("left of checkpoint %d: %v, %v", id, keys, err)
					}
				}
			}
			if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{3}) {
				t.Errorf("checkpoints after retention: %v, %v; want 3", ids, err)
			}
			if ids, err := cat.Removing(ctx, "j"); err != nil || len(ids) != 0 {
				t.Errorf("partly removed after retention: %v, %v", ids, err)
			}
			// Two objects of three were left (a snapshot and the
			// marker, or the two snapshots), and the metadata.
			want := `msg="checkpoint removal finished (it was cut short before)" checkpoint=2 objects=3 by=retention`
			if n := strings.Count(logs.String(), want); n != 1 {
				t.Errorf("log has %d lines %s; want 1:\n%s", n, want, logs.String())
			}
		})
	}
}

// A removal cut short that another request is finishing (the coordinator's
// start, or a user's rm) is left to it: retention logged a failure and
// tried again, while the other request finished it and said so.
func TestRetentionLeavesARemovalAnotherRequestFinishes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	var logs lockedBuffer
	var calls int
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{Log: slog.New(slog.NewTextHandler(&logs, nil)),
		FinishRemoval: func(context.Context, int64) (int, error) {
			calls++
			return 0, fmt.Errorf("cannot remove checkpoint 2 of job j: %w", ErrBeingRemoved)
		}})
	r.RemovalCut(2, "cut")
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); r.discarder(ctx, stop) }()
	r.queueDiscard(DiscardAction{ID: 1})
	r.queueDiscard(DiscardAction{ID: 3})
	close(stop)
	<-done
	if calls != 1 {
		t.Errorf("retention tried to finish the removal %d times; want once", calls)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("retention warned of a removal another request finishes:\n%s", logs.String())
	}
}
