package control

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// Phases of a task's part in a checkpoint, as Slowest names them.
const (
	// PhaseQueued: the barrier waited in the task's input channels, behind
	// the records queued there (backpressure: the task is slower than its
	// input), from when the tasks before it forwarded it until it reached
	// the task. Known with the job's topology (CheckpointInfo.Inputs).
	PhaseQueued = "queued"
	// PhaseStartDelay: a source task's time from the trigger until it
	// took the barrier (it was busy handing on a batch).
	PhaseStartDelay = "start delay"
	// PhaseCommitWait: the part of a sink's start delay it spent waiting
	// for the commits of earlier checkpoints (MetricCommitWaitNanos).
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
	// Own is what the task itself spent on the checkpoint: the barrier
	// queued in its input channels (or, of a source, its start delay), a
	// sink's commit wait, its alignment, snapshot and upload — not the
	// time the barrier took to reach the tasks before it, which a start
	// delay counts: the last task of a pipeline has the longest start
	// delay of all, and is seldom what held the checkpoint up.
	Own time.Duration
	// Phase is the longest of the task's own phases and Duration its
	// length.
	Phase    string
	Duration time.Duration
	// Acked is about how long after the trigger the task acknowledged:
	// its start delay, alignment, snapshot and upload.
	Acked time.Duration
}

// String reads e.g. "sum-0 (queued 2.7s of its own 2.75s)".
func (t TaskTime) String() string {
	return fmt.Sprintf("%s (%s %s of its own %s)", t.Task, t.Phase, round(t.Duration), round(t.Own))
}

// Slowest returns the task that itself spent longest on the checkpoint
// (TaskTime.Own), from the metrics the tasks acknowledged with, and the
// phase that took most of that; false when no task reported metrics.
// Ties go to the task named first.
//
// A barrier's start delay at a task counts the time it took to reach
// every task before it: where barriers queue behind backpressured data
// before a slow operator, every task after it has a start delay as long,
// and the sink at the end the longest. With the job's topology (Inputs),
// the part of a task's start delay it accounts for is what it waited in
// the task's own input channels: from when the latest of the tasks
// feeding it forwarded the barrier (their start delay, alignment and
// snapshot) until it reached the task. Without it (a coordinator that
// does not send it), a task's own time counts no part of the start delay
// but a sink's commit wait.
func (c CheckpointInfo) Slowest() (TaskTime, bool) {
	names := make([]string, 0, len(c.Tasks))
	for name := range c.Tasks {
		names = append(names, name)
	}
	sort.Strings(names)
	nonNeg := func(n int64) time.Duration { return time.Duration(max(n, 0)) }
	// forwarded: the latest a task of each vertex forwarded the barrier.
	forwarded := map[string]time.Duration{}
	for name, m := range c.Tasks {
		v := VertexOf(name)
		forwarded[v] = max(forwarded[v], nonNeg(m[MetricStartDelayNanos])+nonNeg(m[MetricAlignmentNanos])+nonNeg(m[MetricSyncNanos]))
	}
	var slowest TaskTime
	found := false
	for _, name := range names {
		m := c.Tasks[name]
		t := TaskTime{Task: name}
		delay := nonNeg(m[MetricStartDelayNanos])
		wait := min(nonNeg(m[MetricCommitWaitNanos]), delay)
		queued, phase := time.Duration(0), PhaseQueued
		if c.Inputs != nil {
			ins, known := c.Inputs[VertexOf(name)]
			var before time.Duration
			for _, in := range ins {
				before = max(before, forwarded[in])
			}
			switch {
			case !known:
				// A vertex the topology does not have (the spec changed
				// since): none of the start delay is known to be its own.
			case len(ins) == 0:
				queued, phase = delay-wait, PhaseStartDelay
			default:
				queued = max(delay-wait-before, 0)
			}
		}
		for _, p := range []struct {
			name string
			d    time.Duration
		}{
			{phase, queued},
			{PhaseCommitWait, wait},
			{PhaseAlignment, nonNeg(m[MetricAlignmentNanos])},
			{PhaseSnapshot, nonNeg(m[MetricSyncNanos])},
			{PhaseUpload, nonNeg(m[MetricAsyncNanos])},
		} {
			t.Own += p.d
			if p.d > t.Duration || t.Phase == "" {
				t.Phase, t.Duration = p.name, p.d
			}
		}
		t.Acked = delay + nonNeg(m[MetricAlignmentNanos]) + nonNeg(m[MetricSyncNanos]) + nonNeg(m[MetricAsyncNanos])
		if !found || t.Own > slowest.Own {
			slowest, found = t, true
		}
	}
	return slowest, found
}

// Topology maps each source, operator and sink of spec to the vertices
// feeding it (none for a source): CheckpointInfo.Inputs.
func Topology(spec *jobspec.Spec) map[string][]string {
	if spec == nil {
		return nil
	}
	inputs := map[string][]string{}
	for _, s := range spec.Sources {
		inputs[s.Name] = nil
	}
	for _, op := range spec.Operators {
		ins := []string{}
		for _, in := range op.Inputs {
			ins = append(ins, in.From)
		}
		inputs[op.Name] = ins
	}
	for _, s := range spec.Sinks {
		inputs[s.Name] = []string{s.Input.From}
	}
	return inputs
}

// VertexOf returns the source, operator or sink of task ID task
// ("count-1": "count"; plan.TaskID).
func VertexOf(task string) string {
	if i := strings.LastIndexByte(task, '-'); i > 0 {
		if _, err := strconv.Atoi(task[i+1:]); err == nil {
			return task[:i]
		}
	}
	return task
}

// round shortens a duration for display: milliseconds from 10ms on,
// microseconds below.
func round(d time.Duration) time.Duration {
	if d >= 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
