package checkpoint

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
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

// stoppedClock is a runner's clock (RunnerOptions.Now) that stands still
// until the test moves it.
type stoppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stoppedClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A checkpoint every task acked does not expire while its metadata is
// written; a write that does not come back fails it after a checkpoint
// timeout, as a failure (here the one that fails the job over), instead of
// holding up every checkpoint after it for good.
//
// The runner's clock moves once, to the first trigger, and then stands
// still: the checkpoint cannot expire before the test acks it (with the
// wall clock, a loaded machine took more than the 50ms timeout to write
// the state and ack, the checkpoint expired, and its discard removed the
// directory under the test's write). The metadata write's wait is the
// wall clock's.
func TestHungMetadataWriteFailsTheCheckpoint(t *testing.T) {
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: hungPut{dir}, State: dir}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	const interval = 10 * time.Millisecond
	m := NewMachine("j", Config{Interval: interval, Timeout: 50 * time.Millisecond, MaxConcurrent: 1}, nil, 0)
	clock := &stoppedClock{now: time.Now()}
	r := NewRunner(m, cat, eff, RunnerOptions{Now: clock.Now})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go r.Run(ctx)
	r.Start([]string{"a-0"})
	clock.add(interval)
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

// refusingEffects is fakeEffects whose triggers never reach the tasks: a
// worker that no longer runs the attempt refuses each.
type refusingEffects struct{ *fakeEffects }

func (refusingEffects) Trigger(_ context.Context, t TriggerAction) error {
	return fmt.Errorf("trigger checkpoint %d on worker w1: job j attempt %d is not running here", t.ID, t.Run)
}

// Triggers that fail in a row for a checkpoint timeout fail the attempt
// over, naming what the worker answered: a failed trigger alone is no
// checkpoint failure (a NATS blip may lose one), and an attempt whose
// worker refused every trigger ran on without a checkpoint and without a
// failure.
func TestTriggersFailingForATimeoutFailTheJob(t *testing.T) {
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eff := refusingEffects{&fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16)}}
	m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, MaxConcurrent: 1}, nil, 0)
	r := NewRunner(m, &Catalog{Meta: dir, State: dir}, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go r.Run(ctx)
	r.Start([]string{"a-0"})
	select {
	case reason := <-eff.failed:
		const want = "trigger failed: triggers failed in a row for 50ms; the last: trigger checkpoint "
		if !strings.Contains(reason, want) || !strings.HasSuffix(reason, "on worker w1: job j attempt 1 is not running here") {
			t.Errorf("failure %q; want it to say %q and what the worker answered", reason, want)
		}
	case <-ctx.Done():
		t.Fatal("triggers refused for good failed nothing")
	}
}

// The rule by itself: a failed trigger is no failure until triggers have
// failed in a row for Timeout; one that reaches its tasks starts the count
// over, and so does the next attempt; a failure of an attempt that ended
// changes nothing.
func TestTriggerFailuresCountAfterATimeout(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: 10 * time.Second, MaxConcurrent: 1})
	failAt := func(ms int) []Action {
		t.Helper()
		acts := m.Tick(at(ms))
		if kinds(acts) == "" {
			t.Fatalf("no trigger at %dms", ms)
		}
		tr := acts[len(acts)-1].(TriggerAction)
		return m.TriggerFailed(at(ms+100), tr.Run, tr.ID, "no answer")
	}
	expect(t, "first failed trigger", failAt(1000), "abort(1) discard(1)")
	expect(t, "failing for 9s", failAt(10000), "abort(2) discard(2)")
	expect(t, "failing for 10s", failAt(11000), "abort(3) discard(3) fail")
	if st := m.Stats(); st.LastFailedID != 3 || st.LastFailureCause != control.CheckpointTriggerFailed {
		t.Errorf("stats after triggers failed for the timeout: %+v; want cause %q", st, control.CheckpointTriggerFailed)
	}
	expect(t, "the count starts over", failAt(12000), "abort(4) discard(4)")
	tr := m.Tick(at(13000))[0].(TriggerAction)
	m.Triggered(tr.Run)
	expect(t, "complete", complete(t, m, at(13100), tr.ID), "notify(5)")
	expect(t, "failed after one that went out", failAt(23000), "abort(6) discard(6)")
	expect(t, "10s after that", failAt(33000), "abort(7) discard(7) fail")
	m.Start(at(40000), []string{"src-0", "op-0"})
	expect(t, "next attempt", failAt(41000), "abort(8) discard(8)")
	expect(t, "an ended attempt's", m.TriggerFailed(at(45000), m.Run()-1, 8, "late"), "")
	expect(t, "still counting from the next attempt's first", failAt(51000), "abort(9) discard(9) fail")
}
