package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// listCounter is a store that counts its listings of one prefix, each
// once it returned.
type listCounter struct {
	storage.Store
	prefix string
	n      atomic.Int64
}

func (c *listCounter) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := c.Store.List(ctx, prefix)
	if prefix == c.prefix {
		c.n.Add(1)
	}
	return keys, err
}

// TestRunnerListsStrayMarkersSeldom: a runner lists its job's stray
// commit markers (a listing of every job's state and metadata on
// JetStream) at the first discard of an attempt and then at every
// strayListEvery-th discard, not at each; in between, a discard looks for
// the markers of the checkpoints retention dropped lately by their keys,
// so a sink's commit stored after its checkpoint was discarded leaves no
// marker past the next discard. A stray marker of no checkpoint the
// runner discarded (a previous coordinator's) goes with the next listing.
func TestRunnerListsStrayMarkersSeldom(t *testing.T) {
	ctx := context.Background()
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := &listCounter{Store: st, prefix: "j/chk-"}
	cat := &Catalog{Meta: st, State: state}
	r := NewRunner(NewMachine("j", Config{Retained: 1}, nil, 0), cat, &fakeEffects{}, RunnerOptions{})
	r.Start([]string{"src-0", "sink-0"})
	put := func(key string) {
		t.Helper()
		if err := st.Put(ctx, key, strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
	}
	there := func(key string) bool {
		t.Helper()
		rc, err := st.Get(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		return true
	}
	discard := func(id int64) {
		t.Helper()
		md := &Metadata{Job: "j", ID: id, Handles: map[string]string{}, Metrics: map[string]map[string]int64{
			"src-0":  {control.MetricStateBytes: 1},
			"sink-0": {control.MetricStateBytes: 1, control.MetricCommitReport: 1},
		}}
		for _, task := range []string{"src-0", "sink-0"} {
			md.Handles[task] = StateKey("j", id, task)
			put(md.Handles[task])
		}
		if err := cat.Write(ctx, md); err != nil {
			t.Fatal(err)
		}
		r.discard(ctx, DiscardAction{ID: id, Completed: md})
	}

	discard(1)
	if n := state.n.Load(); n != 1 {
		t.Fatalf("%d listings after the attempt's first discard, want 1", n)
	}
	old := StateKey("j", 999, "sink-0") + CommitMarkerSuffix // of a previous coordinator's run
	put(old)
	for id := int64(2); id <= strayListEvery; id++ {
		late := StateKey("j", id-1, "sink-0") + CommitMarkerSuffix
		put(late) // the sink's commit of the checkpoint just discarded is stored
		discard(id)
		if there(late) {
			t.Fatalf("the marker %s, written after its checkpoint's discard, is there after the next discard", late)
		}
		if !there(old) {
			t.Fatalf("the stray marker %s was found at discard %d, with no listing due", old, id)
		}
	}
	if n := state.n.Load(); n != 1 {
		t.Fatalf("%d listings after %d discards, want 1", n, strayListEvery)
	}
	discard(strayListEvery + 1)
	if there(old) {
		t.Errorf("the stray marker %s is there after the listing at discard %d", old, strayListEvery+1)
	}
	for id := int64(strayListEvery + 2); id <= 2*strayListEvery; id++ {
		discard(id)
	}
	if n := state.n.Load(); n != 2 {
		t.Errorf("%d listings in %d discards, want 2", n, 2*strayListEvery)
	}
	// The markers of a task whose ack said it does not commit (a source)
	// are not looked for: one is a stray marker the next listing finds.
	if got, want := len(r.suspects), suspectChecks; got != want {
		t.Errorf("%d markers looked for, want %d: one sink's of each of the last discarded checkpoints", got, want)
	}
}

// TestRunnerRemovesAStrayMarkerOfAFailedAttempt: a sink of an attempt
// that failed stores its commit of a checkpoint retention discarded long
// before (past the discards that look for its marker) and writes its
// marker; the first discard of the next attempt lists the job's stray
// markers and deletes it.
func TestRunnerRemovesAStrayMarkerOfAFailedAttempt(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: time.Minute, MaxConcurrent: 1, Retained: 1}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go r.Run(ctx)
	defer func() { cancel(); <-r.Done() }()
	complete := func(run int) int64 {
		t.Helper()
		tr := <-eff.trigger
		for tr.Run != run { // sent before the attempt failed
			tr = <-eff.trigger
		}
		key := StateKey("j", tr.ID, "sink-0")
		if err := st.Put(ctx, key, strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
		r.Ack("sink-0", tr.ID, key, map[string]int64{control.MetricStateBytes: 5, control.MetricCommitReport: 1})
		if got := <-eff.notified; got != tr.ID {
			t.Fatalf("notified %d, want %d", got, tr.ID)
		}
		r.Committing("sink-0", tr.ID)
		return tr.ID
	}
	gone := func(key string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			keys, err := st.List(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s left", key)
			}
		}
	}
	run := r.Start([]string{"sink-0"})
	first := complete(run)
	var last int64
	for range suspectChecks + 2 {
		last = complete(run) // retention discards the one before
	}
	gone(StatePrefix("j", last-1))
	r.Stop("task sink-0 failed")
	marker := StateKey("j", first, "sink-0") + CommitMarkerSuffix
	if err := st.Put(ctx, marker, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	complete(r.Start([]string{"sink-0"})) // retention discards the last of the failed attempt
	gone(marker)
}
