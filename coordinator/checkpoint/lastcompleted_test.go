package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// The latest completed checkpoint, with each task's metrics, is there for
// a metrics scrape however many checkpoints failed since (the history no
// longer lists it), and what the caller does to its copy changes nothing.
func TestLastCompleted(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, TolerableFailures: 10, Retained: 1, HistorySize: 2})
	if _, ok := m.LastCompleted(); ok {
		t.Fatal("a last completed checkpoint before any completed")
	}
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	expect(t, "complete 1", complete(t, m, at(400), 1), "notify(1)")
	for id := int64(2); id <= 4; id++ {
		expect(t, "trigger", m.Tick(at(int(id)*1000)), fmt.Sprintf("trigger(%d)", id))
		m.Decline(at(int(id)*1000), "op-0", id, control.DeclineFailed, "disk")
	}
	for _, h := range m.History() {
		if h.ID == 1 {
			t.Fatalf("history still lists 1: %+v", m.History())
		}
	}
	in, ok := m.LastCompleted()
	if !ok || in.ID != 1 || in.Status != control.CheckpointCompleted || in.Duration != 300*time.Millisecond || in.Size != 15 ||
		in.Tasks["op-0"][control.MetricAlignmentNanos] != 7 || in.Tasks["src-0"][control.MetricSnapshotBytes] != 10 {
		t.Fatalf("last completed = %+v, %v", in, ok)
	}
	if in.ID != m.Stats().LastID {
		t.Errorf("last completed %d, stats' last %d", in.ID, m.Stats().LastID)
	}
	in.Tasks["op-0"][control.MetricAlignmentNanos] = 99
	delete(in.Tasks, "src-0")
	if again, _ := m.LastCompleted(); again.Tasks["op-0"][control.MetricAlignmentNanos] != 7 || len(again.Tasks) != 2 {
		t.Errorf("changing a copy changed the machine's: %+v", again.Tasks)
	}

	// A newer one completes: it is the last.
	expect(t, "5", m.Tick(at(5000)), "trigger(5)")
	complete(t, m, at(5100), 5)
	if in, _ := m.LastCompleted(); in.ID != 5 {
		t.Errorf("last completed %d after 5 completed", in.ID)
	}
}
