package checkpoint

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// blockingAbort is fakeEffects whose Abort waits for release: a worker
// that does not answer.
type blockingAbort struct {
	*fakeEffects
	aborting chan int64
	release  chan struct{}
}

func (b *blockingAbort) Abort(ctx context.Context, id int64, reason string) {
	b.aborting <- id
	<-b.release
}

// Checkpoint failures beyond tolerance fail over the attempt they happened
// in, never the one that replaced it while the runner was busy.
func TestFailJobOfAnEndedAttemptIsDropped(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eff := &blockingAbort{fakeEffects: &fakeEffects{failed: make(chan string, 4), notified: make(chan int64, 16),
		trigger: make(chan TriggerAction, 16)}, aborting: make(chan int64, 4), release: make(chan struct{})}
	m := NewMachine("j", Config{Interval: time.Hour, Timeout: time.Hour, TolerableFailures: 0}, nil, 0)
	r := NewRunner(m, &Catalog{Meta: st, State: st}, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	r.Start([]string{"a-0"})
	r.mu.Lock()
	tr := m.trigger(r.now(), false).(TriggerAction)
	r.push([]Action{tr})
	r.mu.Unlock()
	id := tr.ID
	<-eff.trigger
	// The decline counts: the runner tells the tasks (blocked), then is to
	// fail the attempt over.
	r.Decline("a-0", id, control.DeclineFailed, "disk full")
	<-eff.aborting
	// Meanwhile the attempt failed over for another reason, and the next
	// one started.
	r.Stop("task a-0 failed")
	r.Start([]string{"a-0"})
	close(eff.release)
	select {
	case reason := <-eff.failed:
		t.Errorf("the next attempt was failed over for the last one's checkpoint: %s", reason)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	<-done
}

// With max-concurrent 2, checkpoint 2 may have all its acks before 1
// (snapshots are uploaded in the background): both are then persisted, 2
// first. Once 2 completed — its output committed by exactly-once sinks —
// checkpoint 1 is subsumed: it must neither complete after it nor push 2
// out of retention.
func TestOlderCheckpointPersistedAfterNewerIsSubsumed(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: 10 * time.Second, MaxConcurrent: 2, Retained: 1})
	expect(t, "trigger 1", m.Tick(at(1000)), "trigger(1)")
	expect(t, "trigger 2", m.Tick(at(2000)), "trigger(2)")
	ack := func(task string, id int64) []Action {
		return m.Ack(at(2100), task, id, fmt.Sprintf("j/chk-%d/%s", id, task), nil)
	}
	expect(t, "ack 1 src", ack("src-0", 1), "")
	expect(t, "ack 2 src", ack("src-0", 2), "")
	expect(t, "ack 2 op", ack("op-0", 2), "persist(2)")
	expect(t, "ack 1 op", ack("op-0", 1), "persist(1)")
	// The runner writes 2's metadata first (queued first), then 1's.
	acts := m.Persisted(at(2200), 2, nil)
	if k := kinds(acts); !strings.HasPrefix(k, "notify(2)") {
		t.Fatalf("persisted 2: %q", k)
	}
	acts = append(acts, m.Persisted(at(2300), 1, nil)...)
	for _, a := range acts {
		switch a := a.(type) {
		case DiscardAction:
			if a.ID == 2 {
				t.Errorf("checkpoint 2, the newest, discarded: %s", kinds(acts))
			}
		case NotifyAction:
			if a.ID == 1 {
				t.Errorf("checkpoint 1 completed after 2: %s", kinds(acts))
			}
		}
	}
	if md := m.Latest(); md == nil || md.ID != 2 {
		t.Errorf("latest = %+v, want checkpoint 2 (its output is committed)", md)
	}
}

// A checkpoint whose attempt ended before the runner got to send its
// trigger (the runner was held up by a worker that does not answer) is
// not triggered at all: the trigger would reach the tasks of the next
// attempt (the job sends it to the attempt running then), whose sources
// would inject a barrier of a checkpoint no one completes — for a stop
// savepoint, one after which they take no input.
func TestTriggerOfAnEndedAttemptIsNotSent(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eff := &blockingAbort{fakeEffects: &fakeEffects{failed: make(chan string, 4), notified: make(chan int64, 16),
		trigger: make(chan TriggerAction, 16)}, aborting: make(chan int64, 4), release: make(chan struct{})}
	m := NewMachine("j", Config{Interval: time.Hour, Timeout: time.Hour}, nil, 0)
	r := NewRunner(m, &Catalog{Meta: st, State: st}, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	r.Start([]string{"a-0"})
	trigger := func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		tr := m.trigger(r.now(), false).(TriggerAction)
		r.push([]Action{tr})
		return tr.ID
	}
	first := trigger()
	<-eff.trigger
	// The runner tells the tasks that the first was declined, and waits
	// for a worker that does not answer.
	r.Decline("a-0", first, control.DeclineSubsumed, "a newer one")
	<-eff.aborting
	// Meanwhile a stop savepoint is triggered, the attempt fails over and
	// the next one starts.
	r.mu.Lock()
	stop, acts, err := m.TriggerStop(r.now())
	if err != nil {
		t.Fatal(err)
	}
	r.push(acts)
	r.mu.Unlock()
	r.Stop("task a-0 failed")
	r.Start([]string{"a-0"})
	close(eff.release)
	// The stop savepoint's abort follows its trigger.
	if id := <-eff.aborting; id != stop {
		t.Fatalf("abort of %d, want the stop savepoint %d", id, stop)
	}
	select {
	case tr := <-eff.trigger:
		t.Errorf("trigger of checkpoint %d (stop %v) sent after its attempt ended", tr.ID, tr.Stop)
	default:
	}
	cancel()
	<-done
}
