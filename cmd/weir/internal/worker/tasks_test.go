package worker

import "testing"

// Tasks counts what the worker holds: the tasks it runs and those of the
// deploys it sets up, which weir worker names as it stops.
func TestTasksCountsRunningAndClaimed(t *testing.T) {
	w := &Worker{jobs: map[string]*attempt{}, claims: map[string]int{}}
	if n := w.Tasks(); n != 0 {
		t.Errorf("an idle worker holds %d tasks", n)
	}
	w.jobs["a"] = &attempt{taskIDs: []string{"in-0", "out-0"}}
	w.claims["b"] = 3
	if n := w.Tasks(); n != 5 {
		t.Errorf("Tasks() = %d; want 2 running and 3 being set up", n)
	}
}
