package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// completeNaming is complete with op-0 (the sink) acking a snapshot that
// names output staged in checkpoints from from on
// (control.MetricSinkStateFrom; 0: self-contained).
func completeNaming(t *testing.T, m *Machine, now time.Time, id, from int64) []Action {
	t.Helper()
	expect(t, "ack src", m.Ack(now, "src-0", id, StateKey("j", id, "src-0"), map[string]int64{control.MetricSnapshotBytes: 10}), "")
	mt := map[string]int64{control.MetricSnapshotBytes: 5}
	if from > 0 {
		mt[control.MetricSinkStateFrom] = from
	}
	expect(t, "ack op", m.Ack(now, "op-0", id, StateKey("j", id, "op-0"), mt), fmt.Sprintf("persist(%d)", id))
	return m.Persisted(now, id, nil)
}

// statuses returns the history's status of each of ids, and its reason
// after a colon when it has one.
func statuses(m *Machine, ids ...int64) string {
	var out []string
	for _, id := range ids {
		s := "?"
		for _, h := range m.History() {
			if h.ID == id {
				s = string(h.Status)
				if h.Reason != "" {
					s += ": " + h.Reason
				}
			}
		}
		out = append(out, fmt.Sprintf("%d %s", id, s))
	}
	return strings.Join(out, "\n")
}

// Retention keeps a completed checkpoint past the retained ones while a
// kept checkpoint's sink snapshot names output staged in it (from it on),
// but not what one kept only for that names in turn (a restore of the
// newer one reads only the output staged in it), and a savepoint among
// them; once nothing kept names them, the next completion discards them.
// The history says why each is kept.
func TestRetentionKeepsWhatAKeptCheckpointNames(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 1})
	step := func(id, from int64, want string) {
		t.Helper()
		m.Tick(at(int(id) * 100))
		expect(t, fmt.Sprintf("checkpoint %d naming %d", id, from), completeNaming(t, m, at(int(id)*100), id, from), want)
	}
	step(1, 0, "notify(1)")
	step(2, 0, "notify(2) discard(1)")
	step(3, 2, "notify(3)")
	if got := retainedIDs(m); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("kept %v after 3 named 2; want [2 3]", got)
	}
	// 4 names 3, and 3 names 2: 3 stays, 2 goes.
	step(4, 3, "notify(4) discard(2)")
	if got := retainedIDs(m); !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("kept %v after 4 named 3, which names 2; want [3 4]", got)
	}
	want := "2 discarded\n" +
		"3 completed: kept past checkpointing.retained: checkpoint 4's snapshot of task op-0 names output staged from checkpoint 3 on, which its restore reads\n" +
		"4 completed"
	if got := statuses(m, 2, 3, 4); got != want {
		t.Errorf("history:\n%s\nwant\n%s", got, want)
	}
	// A savepoint among them, self-contained; 6 names 5 and no more.
	id, _, err := m.TriggerSavepoint(at(450))
	if err != nil || id != 5 {
		t.Fatal(id, err)
	}
	expect(t, "savepoint 5", completeNaming(t, m, at(460), 5, 0), "notify(5)")
	step(6, 5, "notify(6) discard(4) discard(3)")
	if got := retainedIDs(m); !slices.Equal(got, []int64{5, 6}) {
		t.Errorf("kept %v after 6 named savepoint 5 only; want [5 6]", got)
	}
	// 7 names 6; once self-contained 8 is the one kept, both go.
	step(7, 6, "notify(7)")
	step(8, 0, "notify(8) discard(7) discard(6)")
	if got := retainedIDs(m); !slices.Equal(got, []int64{5, 8}) {
		t.Errorf("kept %v after self-contained 8; want [5 8] (the savepoint stays)", got)
	}
	want = "2 discarded\n3 discarded\n4 discarded\n5 completed\n6 discarded\n7 discarded\n8 completed"
	if got := statuses(m, 2, 3, 4, 5, 6, 7, 8); got != want {
		t.Errorf("history:\n%s\nwant\n%s", got, want)
	}
}

// With Retained 2, the checkpoints between the oldest one a kept
// checkpoint names and the retained ones stay too (its snapshot may name
// any of them), until neither retained one names any.
func TestRetentionKeepsEverythingFromTheOneNamedOn(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 2})
	for id := int64(1); id <= 4; id++ {
		m.Tick(at(int(id) * 100))
		acts := completeNaming(t, m, at(int(id)*100), id, 0)
		if id == 4 {
			expect(t, "4", acts, "notify(4) discard(2)")
		}
	}
	m.Tick(at(500))
	expect(t, "5 names 3 on", completeNaming(t, m, at(500), 5, 3), "notify(5)")
	m.Tick(at(600))
	expect(t, "6 names 3 on", completeNaming(t, m, at(600), 6, 3), "notify(6)")
	if got := retainedIDs(m); !slices.Equal(got, []int64{3, 4, 5, 6}) {
		t.Errorf("kept %v; want [3 4 5 6]", got)
	}
	m.Tick(at(700))
	expect(t, "self-contained 7, 6 still kept", completeNaming(t, m, at(700), 7, 0), "notify(7)")
	m.Tick(at(800))
	expect(t, "self-contained 8", completeNaming(t, m, at(800), 8, 0), "notify(8) discard(6) discard(5) discard(4) discard(3)")
}

// The rule holds after a coordinator restart, whose machine is rebuilt
// from the checkpoints in storage (NewMachine with what the catalog
// reads): those a stored checkpoint names stay, listed with why, and go
// once nothing kept names them, from storage too.
func TestRetentionKeepsWhatIsNamedAfterARestart(t *testing.T) {
	ctx := context.Background()
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	// carry out does what a Runner does with the persists and discards.
	carry := func(acts []Action) {
		t.Helper()
		for _, a := range acts {
			switch a := a.(type) {
			case DiscardAction:
				if err := cat.DiscardCompleted(ctx, a.Completed); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	run := func(m *Machine, id, from int64, now time.Time) {
		t.Helper()
		m.Tick(now)
		mt := map[string]int64{}
		if from > 0 {
			mt[control.MetricSinkStateFrom] = from
		}
		for task, metrics := range map[string]map[string]int64{"src-0": {}, "op-0": mt} {
			if err := st.Put(ctx, StateKey("j", id, task), strings.NewReader("state")); err != nil {
				t.Fatal(err)
			}
			for _, a := range m.Ack(now, task, id, StateKey("j", id, task), metrics) {
				if err := cat.Write(ctx, a.(PersistAction).Metadata); err != nil {
					t.Fatal(err)
				}
			}
		}
		carry(m.Persisted(now, id, nil))
	}
	cfg := Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 1}
	m := newMachineOf(cfg, nil, 0)
	run(m, 1, 0, at(100))
	run(m, 2, 0, at(200))
	run(m, 3, 2, at(300))
	if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{2, 3}) {
		t.Fatalf("stored before the restart: %v, %v; want [2 3]", ids, err)
	}

	restored, err := cat.LoadAll(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	m = newMachineOf(cfg, restored, 0)
	if got := retainedIDs(m); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("kept after the restart %v; want [2 3]", got)
	}
	if got, want := statuses(m, 2), "2 completed: kept past checkpointing.retained: checkpoint 3's snapshot of task op-0 names output staged from checkpoint 2 on, which its restore reads"; got != want {
		t.Errorf("history after the restart: %s; want %s", got, want)
	}
	run(m, 4, 3, at(400)) // 3 names 2 in turn, which 4's restore does not read
	if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{3, 4}) {
		t.Errorf("stored after 4 named 3: %v, %v; want [3 4]", ids, err)
	}
	run(m, 5, 0, at(500))
	if ids, err := cat.IDs(ctx, "j"); err != nil || !slices.Equal(ids, []int64{5}) {
		t.Errorf("stored after self-contained 5: %v, %v; want [5]", ids, err)
	}
	if keys, err := st.List(ctx, "j/"); err != nil || len(keys) != 3 {
		t.Errorf("objects left: %v, %v; want 5's metadata and two snapshots", keys, err)
	}
}

// newMachineOf is a started machine of job j, tasks src-0 and op-0,
// rebuilt from restored.
func newMachineOf(cfg Config, restored []*Metadata, next int64) *Machine {
	m := NewMachine("j", cfg, restored, next)
	m.Start(at(0), []string{"src-0", "op-0"})
	return m
}
