package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// TestLateAcks: an ack that comes after its checkpoint was aborted, or
// from an attempt that ended, discards the checkpoint's state; one for a
// checkpoint that completed, is pending, or was never triggered by the
// machine does not.
func TestLateAcks(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: 10 * time.Second, MaxConcurrent: 1, Retained: 1, TolerableFailures: 10})
	expect(t, "trigger 1", m.Tick(at(1000)), "trigger(1)")
	expect(t, "complete 1", complete(t, m, at(1100), 1), "notify(1)")
	expect(t, "late ack of completed 1", m.Ack(at(1150), "op-0", 1, "j/chk-1/op-0", nil), "")
	expect(t, "ack of completed 1 from an ended attempt", m.Late(1), "")

	expect(t, "trigger 2", m.Tick(at(2000)), "trigger(2)")
	expect(t, "ack src 2", m.Ack(at(2100), "src-0", 2, "j/chk-2/src-0", nil), "")
	expect(t, "decline 2 discards what src wrote", m.Decline(at(2200), "op-0", 2, control.DeclineFailed, "disk"), "abort(2) discard(2)")
	expect(t, "late ack of declined 2", m.Ack(at(2300), "op-0", 2, "j/chk-2/op-0", nil), "discard(2)")
	expect(t, "ack of declined 2 from an ended attempt", m.Late(2), "discard(2)")

	expect(t, "trigger 3", m.Tick(at(3000)), "trigger(3)")
	expect(t, "ack of pending 3 from an ended attempt does not count", m.Late(3), "")
	expect(t, "ack src 3", m.Ack(at(3100), "src-0", 3, "j/chk-3/src-0", nil), "")
	expect(t, "ack op 3", m.Ack(at(3100), "op-0", 3, "j/chk-3/op-0", nil), "persist(3)")
	expect(t, "late ack of persisting 3", m.Late(3), "")
	expect(t, "3 completes, retention discards 1", m.Persisted(at(3200), 3, nil), "notify(3) discard(1)")
	expect(t, "late ack of 1, discarded by retention", m.Late(1), "")

	id, acts, err := m.TriggerSavepoint(at(3300))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "savepoint", acts, fmt.Sprintf("triggersp(%d)", id))
	complete(t, m, at(3400), id)
	expect(t, "late ack of a completed savepoint", m.Ack(at(3500), "op-0", id, "", nil), "")

	expect(t, "trigger 5", m.Tick(at(5000)), "trigger(5)")
	expect(t, "ack src 5", m.Ack(at(5100), "src-0", 5, "j/chk-5/src-0", nil), "")
	expect(t, "stop aborts 5", m.Stop(at(5200), "task failed"), "abort(5) discard(5)")
	expect(t, "ack of 5 from the ended attempt", m.Late(5), "discard(5)")
	expect(t, "ack of an ID never triggered", m.Late(9), "")

	// Checkpoints of an earlier run, never triggered by this machine.
	r := NewMachine("j", Config{}, []*Metadata{{Job: "j", ID: 5, Handles: map[string]string{}}}, 9)
	r.Start(at(0), []string{"src-0", "op-0"})
	for _, id := range []int64{3, 5, 7} {
		expect(t, fmt.Sprintf("late ack of %d of an earlier run", id), r.Ack(at(10), "op-0", id, "", nil), "")
		expect(t, fmt.Sprintf("ack of %d of an earlier run's attempt", id), r.Late(id), "")
	}
}

// TestAbortedIDsBounded: the machine remembers the newest abortedKept
// aborted checkpoints, no more.
func TestAbortedIDsBounded(t *testing.T) {
	m := newM(Config{Interval: time.Second})
	for id := int64(1); id <= 3*abortedKept; id++ {
		m.remember(id)
		if len(m.aborted) > abortedKept {
			t.Fatalf("%d aborted IDs remembered", len(m.aborted))
		}
	}
	expect(t, "newest", m.Late(3*abortedKept), fmt.Sprintf("discard(%d)", 3*abortedKept))
	expect(t, "oldest", m.Late(1), "")
}

// TestRunnerDiscardsFailedCheckpoints runs a runner on directory storage:
// what the tasks of an aborted checkpoint wrote is deleted at the abort,
// and what they ack later (in the attempt or from one that ended) at the
// ack; a completed checkpoint keeps its objects, its sink's commit marker
// included, whatever acks come for it.
func TestRunnerDiscardsFailedCheckpoints(t *testing.T) {
	root := t.TempDir()
	st, err := storage.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 20 * time.Millisecond, Timeout: time.Minute, MaxConcurrent: 1, Retained: 3, TolerableFailures: 10}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r.Start([]string{"a-0", "b-0"})

	write := func(id int64, task string) string {
		t.Helper()
		key := StateKey("j", id, task)
		if err := st.Put(ctx, key, strings.NewReader("state of "+task)); err != nil {
			t.Fatal(err)
		}
		return key
	}
	list := func(id int64) []string {
		t.Helper()
		keys, err := st.List(ctx, StatePrefix("j", id))
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	// A discard is done once the checkpoint's directory is gone too: the
	// directory store removes it after the objects, and a write into it
	// before then (a late ack's) fails when it goes.
	gone := func(what string, id int64) {
		t.Helper()
		dirGone := func() bool {
			_, err := os.Stat(filepath.Join(root, "j", fmt.Sprintf("chk-%d", id)))
			return errors.Is(err, fs.ErrNotExist)
		}
		for deadline := time.Now().Add(10 * time.Second); len(list(id)) > 0 || !dirGone(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: checkpoint %d left %v", what, id, list(id))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// 1 completes; b-0 is a sink that committed it.
	tr := <-eff.trigger
	c := tr.ID
	r.Ack("a-0", c, write(c, "a-0"), nil)
	r.Ack("b-0", c, write(c, "b-0"), nil)
	if id := <-eff.notified; id != c {
		t.Fatalf("notified %d, want %d", id, c)
	}
	if err := st.Put(ctx, StateKey("j", c, "b-0")+".committed", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	kept := list(c)

	// 2: a-0 acks, b-0 declines; b-0's snapshot is acked after the abort.
	tr = <-eff.trigger
	d := tr.ID
	r.Ack("a-0", d, write(d, "a-0"), nil)
	r.Decline("b-0", d, control.DeclineFailed, "disk")
	gone("abort", d)
	r.Ack("b-0", d, write(d, "b-0"), nil)
	gone("late ack", d)

	// 3: the attempt ends while b-0 writes; its ack comes from the ended
	// attempt.
	tr = <-eff.trigger
	s := tr.ID
	r.Ack("a-0", s, write(s, "a-0"), nil)
	r.Stop("failover")
	gone("stop", s)
	// Acks of the completed checkpoint (a duplicate, one from the ended
	// attempt) come before: the runner carries them out first.
	r.Ack("a-0", c, StateKey("j", c, "a-0"), nil)
	r.Late(c)
	write(s, "b-0")
	r.Late(s)
	gone("ack from an ended attempt", s)

	if got := list(c); !slices.Equal(got, kept) || len(got) != 4 {
		t.Errorf("completed checkpoint %d: objects %v, want %v", c, got, kept)
	}
	if _, err := cat.Read(ctx, "j", c); err != nil {
		t.Errorf("completed checkpoint: %v", err)
	}
	if left, err := cat.Leftovers(ctx, "j"); err != nil || len(left) != 0 {
		t.Errorf("leftovers %v %v", left, err)
	}
}

// holdingEffects is fakeEffects whose Abort waits until release is closed.
type holdingEffects struct {
	fakeEffects
	aborting chan int64
	release  chan struct{}
}

func (h *holdingEffects) Abort(ctx context.Context, id int64, reason string) {
	h.aborting <- id
	<-h.release
}

// TestRunnerDiscardsAsTheJobEnds: the discards queued as the job ends (its
// runner's context canceled right after Stop, while the runner is still
// busy with the aborts) are carried out before Run returns, on a context
// that outlives the job's; so is the discard of a checkpoint still
// pending then. Nothing of either stays in storage.
func TestRunnerDiscardsAsTheJobEnds(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	for _, stop := range []bool{true, false} {
		eff := &holdingEffects{fakeEffects: fakeEffects{trigger: make(chan TriggerAction, 16)},
			aborting: make(chan int64, 16), release: make(chan struct{})}
		job := fmt.Sprintf("j%v", stop)
		m := NewMachine(job, Config{Interval: 10 * time.Millisecond, Timeout: time.Minute, MaxConcurrent: 1, Retained: 1}, nil, 0)
		r := NewRunner(m, cat, eff, RunnerOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		go r.Run(ctx)
		r.Start([]string{"a-0", "b-0"})
		id := (<-eff.trigger).ID
		key := StateKey(job, id, "a-0")
		if err := st.Put(context.Background(), key, strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
		r.Ack("a-0", id, key, nil)
		if stop {
			// The job ends: the attempt's checkpoints are aborted, then
			// its context is canceled while the runner tells the tasks.
			r.Stop("job canceled")
			if got := <-eff.aborting; got != id {
				t.Fatalf("aborting %d, want %d", got, id)
			}
			cancel()
			close(eff.release)
		} else {
			// The coordinator stops: the checkpoint is still pending.
			cancel()
			close(eff.release)
		}
		<-r.Done()
		keys, err := st.List(context.Background(), StatePrefix(job, id))
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("stop %v: checkpoint %d, aborted as the job ended, left %v", stop, id, keys)
		}
		if h := r.History(); len(h) == 0 || h[0].Status != control.CheckpointFailed {
			t.Errorf("stop %v: history %+v, want checkpoint %d failed", stop, h, id)
		}
		// An ack after the end is not carried out (nor kept queued).
		r.Ack("b-0", id, StateKey(job, id, "b-0"), nil)
		r.mu.Lock()
		queued := len(r.queue)
		r.mu.Unlock()
		if queued > 0 {
			t.Errorf("stop %v: %d actions queued after the runner ended", stop, queued)
		}
	}
}

// TestRunnerRemovesStrayMarkers: a sink's commit marker written after
// retention discarded its checkpoint (the commit was stored late) is a
// stray marker, not a leftover of a checkpoint that never completed, and
// the next discard deletes it.
func TestRunnerRemovesStrayMarkers(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := &listCounter{Store: st, prefix: "j/chk-"}
	cat := &Catalog{Meta: st, State: state}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: time.Minute, MaxConcurrent: 1, Retained: 1}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go r.Run(ctx)
	defer func() { cancel(); <-r.Done() }()
	r.Start([]string{"a-0"})
	complete := func() int64 {
		t.Helper()
		id := (<-eff.trigger).ID
		key := StateKey("j", id, "a-0")
		if err := st.Put(ctx, key, strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
		r.Ack("a-0", id, key, nil)
		if got := <-eff.notified; got != id {
			t.Fatalf("notified %d, want %d", got, id)
		}
		return id
	}
	gone := func(id int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			keys, err := st.List(ctx, StatePrefix("j", id))
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("checkpoint %d left %v", id, keys)
			}
		}
	}
	one := complete()
	complete() // retention discards one
	gone(one)
	// The attempt's first discard also lists the job's stray markers,
	// after the checkpoint's state is gone: a marker written before that
	// listing returned would go with it, not with the next discard.
	for state.n.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the first discard did not list the stray markers")
		case <-time.After(5 * time.Millisecond):
		}
	}
	marker := StateKey("j", one, "a-0") + CommitMarkerSuffix
	if err := st.Put(ctx, marker, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if left, err := cat.Leftovers(ctx, "j"); err != nil || len(left) != 0 {
		t.Errorf("leftovers %v, %v; want none: the marker's checkpoint completed", left, err)
	}
	if stray, err := cat.StrayMarkers(ctx, "j"); err != nil || !slices.Equal(stray, []string{marker}) {
		t.Errorf("stray markers %v, %v; want %s", stray, err, marker)
	}
	complete() // retention discards two, and the stray marker goes
	gone(one)
}
