package job

import (
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A task's rates cover at least rateWindow once its reports span that
// long, and the reports kept stay few.
func TestLiveTaskWindow(t *testing.T) {
	j := &job{st: control.JobStatus{Attempt: 1}, assign: map[string]string{"op-0": "w1"}}
	report := func(sec int) {
		j.observe("w1", control.TaskRef{Job: "j", Attempt: 1, Task: "op-0", Stats: &control.TaskStats{
			RunningNanos: int64(time.Duration(sec) * time.Second), RecordsIn: int64(sec) * 100}})
	}
	report(1)
	if l := j.live["op-0"]; l.base() != nil {
		t.Fatalf("one report has a base: %+v", l.base())
	}
	report(2)
	if l := j.live["op-0"]; l.base() == nil || l.base().RunningNanos != int64(time.Second) {
		t.Fatalf("base after two reports: %+v", l.base())
	}
	for sec := 3; sec <= 30; sec++ {
		report(sec)
	}
	l := j.live["op-0"]
	if b := l.base(); b == nil || time.Duration(l.latest.RunningNanos-b.RunningNanos) != rateWindow {
		t.Fatalf("base %+v for latest %+v, want %s before", b, l.latest, rateWindow)
	}
	if len(l.earlier) > 6 {
		t.Fatalf("%d earlier reports kept", len(l.earlier))
	}
	// Reports of another worker or attempt are not this task's.
	j.observe("w2", control.TaskRef{Job: "j", Attempt: 1, Task: "op-0", Stats: &control.TaskStats{RunningNanos: 1}})
	j.observe("w1", control.TaskRef{Job: "j", Attempt: 2, Task: "op-0", Stats: &control.TaskStats{RunningNanos: 1}})
	if j.live["op-0"].latest.RunningNanos != l.latest.RunningNanos {
		t.Fatal("a stale report replaced the latest")
	}
}
