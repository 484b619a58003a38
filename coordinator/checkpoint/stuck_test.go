package checkpoint

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// stuckStore is a real directory store whose Delete waits until release
// is closed or its context ends: a storage call that does not come back,
// as JetStream's may not while the server is away.
type stuckStore struct {
	storage.Store
	deleting chan string
	release  chan struct{}
}

func (s *stuckStore) Delete(ctx context.Context, prefix string) error {
	s.deleting <- prefix
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Delete(ctx, prefix)
}

// A discard that hangs in storage holds up no checkpoint: the next one is
// triggered and completes while it hangs (the runner used to carry
// discards out between triggers, and a job whose storage call never came
// back ran on with no checkpoint, no expiry and no failure). The discard
// is carried out once storage answers, before Run returns.
func TestStuckDiscardHoldsUpNoCheckpoint(t *testing.T) {
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &stuckStore{Store: dir, deleting: make(chan string, 16), release: make(chan struct{})}
	cat := &Catalog{Meta: st, State: st}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: time.Hour, MaxConcurrent: 1, Retained: 5, TolerableFailures: 10}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go r.Run(ctx)
	r.Start([]string{"a-0"})

	next := func(what string) TriggerAction {
		t.Helper()
		select {
		case tr := <-eff.trigger:
			return tr
		case <-ctx.Done():
			t.Fatalf("no trigger %s", what)
		}
		return TriggerAction{}
	}
	// The first is declined: its discard hangs.
	first := next("at all")
	key := StateKey("j", first.ID, "a-0")
	if err := dir.Put(ctx, key, strings.NewReader("state")); err != nil {
		t.Fatal(err)
	}
	r.Ack("a-0", first.ID, key, nil) // the only task: this completes it
	if id := <-eff.notified; id != first.ID {
		t.Fatalf("notified %d, want %d", id, first.ID)
	}
	second := next("after the first")
	if err := dir.Put(ctx, StateKey("j", second.ID, "a-0"), strings.NewReader("state")); err != nil {
		t.Fatal(err)
	}
	r.Decline("a-0", second.ID, control.DeclineFailed, "disk full")
	select {
	case <-st.deleting:
	case <-ctx.Done():
		t.Fatal("the declined checkpoint was never discarded")
	}
	// While that discard hangs, the next checkpoint goes through.
	third := next("while a discard hangs")
	key = StateKey("j", third.ID, "a-0")
	if err := dir.Put(ctx, key, strings.NewReader("state")); err != nil {
		t.Fatal(err)
	}
	r.Ack("a-0", third.ID, key, nil)
	select {
	case id := <-eff.notified:
		if id != third.ID {
			t.Fatalf("notified %d, want %d", id, third.ID)
		}
	case <-ctx.Done():
		t.Fatal("no checkpoint completed while a discard hung")
	}
	// Storage answers; the job ends: what was queued is discarded first.
	close(st.release)
	cancel()
	<-r.Done()
	if keys, err := dir.List(context.Background(), StatePrefix("j", second.ID)); err != nil || len(keys) > 0 {
		t.Errorf("declined checkpoint %d left %v (%v)", second.ID, keys, err)
	}
}

// hungPut is a real directory store whose Put of checkpoint metadata
// does not come back until its context ends.
type hungPut struct{ storage.Store }

func (s hungPut) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasSuffix(key, "/_metadata") {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Put(ctx, key, r)
}

// A checkpoint every task acked does not expire while its metadata is
// written; a write that does not come back fails it after a checkpoint
// timeout, as a failure (here the one that fails the job over), instead of
// holding up every checkpoint after it for good.
func TestHungMetadataWriteFailsTheCheckpoint(t *testing.T) {
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: hungPut{dir}, State: dir}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, MaxConcurrent: 1}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go r.Run(ctx)
	r.Start([]string{"a-0"})
	var tr TriggerAction
	select {
	case tr = <-eff.trigger:
	case <-ctx.Done():
		t.Fatal("no trigger")
	}
	key := StateKey("j", tr.ID, "a-0")
	if err := dir.Put(ctx, key, strings.NewReader("state")); err != nil {
		t.Fatal(err)
	}
	r.Ack("a-0", tr.ID, key, nil)
	select {
	case reason := <-eff.failed:
		if want := fmt.Sprintf("checkpoint %d: writing metadata failed", tr.ID); !strings.Contains(reason, want) {
			t.Errorf("failure %q; want it to say %q", reason, want)
		}
	case id := <-eff.notified:
		t.Fatalf("checkpoint %d completed with its metadata unwritten", id)
	case <-ctx.Done():
		t.Fatal("a metadata write that never came back failed nothing")
	}
}
