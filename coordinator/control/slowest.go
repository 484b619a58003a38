package control

import (
	"fmt"
	"sort"
	"time"
)

// Phases of a task's part in a checkpoint, as Slowest names them.
const (
	// PhaseStartDelay: from the trigger until the task saw the first
	// barrier — the barrier queued behind in-flight data (backpressure) or
	// the task was busy — but for the commit wait.
	PhaseStartDelay = "start delay"
	// PhaseCommitWait: the part of the start delay an exactly-once sink
	// spent waiting for the commits of earlier checkpoints
	// (MetricCommitWaitNanos).
	PhaseCommitWait = "commit wait"
	// PhaseAlignment: from the first barrier to the last one of its inputs.
	PhaseAlignment = "alignment"
	// PhaseSnapshot: the task snapshotting its state (it processes nothing
	// meanwhile).
	PhaseSnapshot = "snapshot"
	// PhaseUpload: writing the snapshot to the checkpoint store, in the
	// background.
	PhaseUpload = "upload"
)

// TaskTime is where one task's time in a checkpoint went.
type TaskTime struct {
	Task string
	// Total is the sum of the phases: about how long after the trigger
	// the task acknowledged.
	Total time.Duration
	// Phase is the longest of the task's phases and Duration its length.
	Phase    string
	Duration time.Duration
}

// String reads e.g. "counts-0 (start delay 2.7s of 2.75s)".
func (t TaskTime) String() string {
	return fmt.Sprintf("%s (%s %s of %s)", t.Task, t.Phase, round(t.Duration), round(t.Total))
}

// Slowest returns the task that took longest in the checkpoint, from the
// metrics the tasks acknowledged with, and the phase that took most of its
// time; false when no task reported metrics. Ties go to the task named
// first.
func (c CheckpointInfo) Slowest() (TaskTime, bool) {
	names := make([]string, 0, len(c.Tasks))
	for name := range c.Tasks {
		names = append(names, name)
	}
	sort.Strings(names)
	var slowest TaskTime
	found := false
	for _, name := range names {
		m := c.Tasks[name]
		t := TaskTime{Task: name}
		wait := min(max(m[MetricCommitWaitNanos], 0), max(m[MetricStartDelayNanos], 0))
		for _, p := range []struct {
			name  string
			nanos int64
		}{
			{PhaseStartDelay, m[MetricStartDelayNanos] - wait},
			{PhaseCommitWait, wait},
			{PhaseAlignment, m[MetricAlignmentNanos]},
			{PhaseSnapshot, m[MetricSyncNanos]},
			{PhaseUpload, m[MetricAsyncNanos]},
		} {
			d := time.Duration(max(p.nanos, 0))
			t.Total += d
			if d > t.Duration || t.Phase == "" {
				t.Phase, t.Duration = p.name, d
			}
		}
		if !found || t.Total > slowest.Total {
			slowest, found = t, true
		}
	}
	return slowest, found
}

// round shortens a duration for display: milliseconds from 10ms on,
// microseconds below.
func round(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
