package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// namingRun completes checkpoints of machine m, storing their snapshots
// and metadata in st as a job's tasks and Runner do, op-0's snapshot
// naming output staged from from on (0: self-contained), and returns
// the discards retention queues.
func namingRun(t *testing.T, ctx context.Context, st storage.Store, cat *Catalog, m *Machine, id, from int64) []DiscardAction {
	t.Helper()
	now := at(int(id) * 100)
	m.Tick(now)
	mt := map[string]int64{}
	if from > 0 {
		mt[control.MetricSinkStateFrom] = from
	}
	for _, task := range []string{"src-0", "op-0"} {
		metrics := map[string]int64{}
		if task == "op-0" {
			metrics = mt
		}
		if err := st.Put(ctx, StateKey("j", id, task), strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
		for _, a := range m.Ack(now, task, id, StateKey("j", id, task), metrics) {
			if err := cat.Write(ctx, a.(PersistAction).Metadata); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out []DiscardAction
	for _, a := range m.Persisted(now, id, nil) {
		if d, ok := a.(DiscardAction); ok {
			out = append(out, d)
		}
	}
	return out
}

// restorable checks what a restarted coordinator reads (resumeOne): every
// checkpoint stored must read, none be corrupt for naming one gone.
func restorable(t *testing.T, ctx context.Context, cat *Catalog, what string) []int64 {
	t.Helper()
	ids, err := cat.IDs(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := cat.Read(ctx, "j", id); err != nil {
			t.Errorf("%s: checkpoint %d stored, and unusable: %v", what, id, err)
		}
	}
	return ids
}

// The trial's sequence (wordcount, retained 3, a burst of input whose
// commits lag): 74 and 75 name output staged in 73; once the burst is
// committed, self-contained 76, 77 and 78 leave nothing kept naming them,
// and 78's completion discards 73, 74 and 75 at once. A coordinator killed
// (kill -9) between those discards left 74 and 75 stored without 73: the
// restart warned "checkpoint unusable … names output staged in checkpoint
// 73, which cannot be restored" for both, and every restart after it, as
// nothing discarded them any more. Retention discards newest first now: a
// cut after any discard leaves only checkpoints that restore.
func TestRetentionDiscardsCutShortLeaveNoCheckpointNamingOneGone(t *testing.T) {
	for cut := 0; cut <= 3; cut++ {
		t.Run(fmt.Sprintf("killed after %d discards", cut), func(t *testing.T) {
			ctx := context.Background()
			st, err := storage.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cat := &Catalog{Meta: st, State: st}
			cfg := Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 3}
			m := newMachineOf(cfg, nil, 71)
			carry := func(ds []DiscardAction) {
				t.Helper()
				for _, d := range ds {
					if err := cat.DiscardCompleted(ctx, d.Completed); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, c := range [][2]int64{{71, 0}, {72, 0}, {73, 0}, {74, 73}, {75, 73}, {76, 0}, {77, 0}} {
				carry(namingRun(t, ctx, st, cat, m, c[0], c[1]))
			}
			if ids := restorable(t, ctx, cat, "before 78"); !slices.Equal(ids, []int64{73, 74, 75, 76, 77}) {
				t.Fatalf("stored before 78: %v; want 73 to 77", ids)
			}
			ds := namingRun(t, ctx, st, cat, m, 78, 0)
			var got []int64
			for _, d := range ds {
				got = append(got, d.ID)
			}
			if !slices.Equal(got, []int64{75, 74, 73}) {
				t.Errorf("78 discards %v; want 75, 74, 73 (newest first)", got)
			}
			carry(ds[:cut]) // then the coordinator is killed
			ids := restorable(t, ctx, cat, "after the kill")
			if want := slices.Concat([]int64{73, 74, 75}[:3-cut], []int64{76, 77, 78}); !slices.Equal(ids, want) {
				t.Errorf("stored after the kill: %v; want %v", ids, want)
			}
			// The restarted coordinator's machine keeps what it reads
			// and discards it as its retention says.
			restored, err := cat.LoadAll(ctx, "j")
			if err != nil || len(restored) != len(ids) {
				t.Fatalf("restored %d of %v: %v", len(restored), ids, err)
			}
			m = newMachineOf(cfg, restored, 79)
			carry(namingRun(t, ctx, st, cat, m, 79, 0))
			if ids := restorable(t, ctx, cat, "after 79"); !slices.Equal(ids, []int64{77, 78, 79}) {
				t.Errorf("stored after 79: %v; want 77 to 79", ids)
			}
		})
	}
}

// failingCheckpoint is a store whose deletes of one checkpoint's objects
// fail while left says so, as a store failing for a while fails them.
type failingCheckpoint struct {
	storage.Store
	prefix string
	left   atomic.Int32
}

func (s *failingCheckpoint) Delete(ctx context.Context, prefix string) error {
	if strings.HasPrefix(prefix, s.prefix) && s.left.Add(-1) >= 0 {
		return errors.New("injected: store unavailable for now")
	}
	return s.Store.Delete(ctx, prefix)
}

// A checkpoint whose discard fails (tried again with the next discards)
// keeps the ones it names stored with it, whatever order the discards
// come in: discarded, they would leave it stored, and unusable, until the
// retry — for good if the coordinator stops first. Once its discard goes
// through, theirs do.
func TestDiscardOfANamedCheckpointWaitsForItsNamer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &failingCheckpoint{Store: dir, prefix: MetadataKey("j", 74)}
	cat := &Catalog{Meta: st, State: st}
	cfg := Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 3}
	m := newMachineOf(cfg, nil, 73)
	for _, c := range [][2]int64{{73, 0}, {74, 73}, {75, 0}, {76, 0}} {
		if ds := namingRun(t, ctx, st, cat, m, c[0], c[1]); len(ds) > 0 {
			t.Fatalf("discards before 77: %v", ds)
		}
	}
	ds := namingRun(t, ctx, st, cat, m, 77, 0) // discards 74, 73
	if len(ds) != 2 {
		t.Fatalf("77 discards %v; want 74 and 73", ds)
	}
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); r.discarder(ctx, stop) }()
	st.left.Store(1)
	// Oldest first, in one round of the discarder (as the queue holds
	// them when it looks): it takes them newest first. (Queued one by one,
	// 73 alone could make a round of its own before 74 is queued; the
	// runner queues retention's discards newest first, and a failed one
	// is retried, and stays, in the next round.)
	r.mu.Lock()
	r.discards = append(r.discards, ds[1], ds[0])
	r.mu.Unlock()
	select {
	case r.dkick <- struct{}{}:
	default:
	}
	for st.left.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	// 74's discard failed: 73 stays with it.
	for ctx.Err() == nil {
		r.mu.Lock()
		queued := len(r.discards)
		r.mu.Unlock()
		if queued == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the discarder's round ends
	if ids := restorable(t, ctx, cat, "74's discard failed"); !slices.Equal(ids, []int64{73, 74, 75, 76, 77}) {
		t.Errorf("stored after 74's discard failed: %v; want 73 to 77", ids)
	}
	// The next discard (an aborted checkpoint's) tries both again.
	r.queueDiscard(DiscardAction{ID: 78})
	close(stop)
	<-done
	if ids := restorable(t, ctx, cat, "retried"); !slices.Equal(ids, []int64{75, 76, 77}) {
		t.Errorf("stored after the retry: %v; want 75 to 77", ids)
	}
}

// A checkpoint whose discard failed every time (given up, left for weir
// checkpoint rm) keeps the one it names stored too: it stays restorable,
// and the log says what removes both.
func TestDiscardGivenUpKeepsWhatItNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &failingCheckpoint{Store: dir, prefix: MetadataKey("j", 74)}
	cat := &Catalog{Meta: st, State: st}
	cfg := Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 3}
	m := newMachineOf(cfg, nil, 73)
	for _, c := range [][2]int64{{73, 0}, {74, 73}, {75, 0}, {76, 0}} {
		namingRun(t, ctx, st, cat, m, c[0], c[1])
	}
	ds := namingRun(t, ctx, st, cat, m, 77, 0) // discards 74, 73
	var logs strings.Builder
	r := NewRunner(NewMachine("j", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); r.discarder(ctx, stop) }()
	st.left.Store(1000) // 74's discard fails every time
	tried := func(n int32) {
		t.Helper()
		for st.left.Load() > 1000-n {
			if ctx.Err() != nil {
				t.Fatalf("74 tried %d times; want %d", 1000-st.left.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, d := range ds {
		r.queueDiscard(d)
	}
	tried(1)
	for i := int32(1); i < failedDiscardTries; i++ {
		r.queueDiscard(DiscardAction{ID: 90 + int64(i)}) // aborted ones: each round tries 74 again
		tried(i + 1)
	}
	r.queueDiscard(DiscardAction{ID: 99}) // 74 given up: and 73?
	close(stop)
	<-done
	if ids := restorable(t, ctx, cat, "74 given up"); !slices.Equal(ids, []int64{73, 74, 75, 76, 77}) {
		t.Errorf("stored with 74 given up: %v; want 73 to 77", ids)
	}
	if !strings.Contains(logs.String(), "checkpoint 74, whose discard failed every time, names output staged in it; weir checkpoint rm j 74, then 73, removes them") {
		t.Errorf("log:\n%s", logs.String())
	}
}
