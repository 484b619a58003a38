package control

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
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
	// PhaseBlocked: the part of the barrier's wait (queued, or a source's
	// start delay) the task spent blocked sending its output: the time
	// went to the task it sent to (TaskTime.BlockedOn), slower than its
	// input, not to this one (MetricOutputBlockedNanos).
	PhaseBlocked = "blocked"
)

// Metric names of an ack (the host's) that say where a task's start delay
// went when it was blocked sending its output.
const (
	// MetricOutputBlockedNanos is how much of the task's start delay, from
	// the trigger to its first barrier, it spent blocked sending its
	// output (host.MetricOutputBlockedNanos). Absent when none.
	MetricOutputBlockedNanos = "output_blocked_ns"
	// MetricBlockedPort and MetricBlockedChannel name the output channel
	// the task was blocked on longest, with MetricOutputBlockedNanos: its
	// output port and its index among the port's channels (the consuming
	// task's subtask; 0 on a forward edge).
	MetricBlockedPort    = "blocked_port"
	MetricBlockedChannel = "blocked_channel"
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
	// BlockedOn, with Phase PhaseBlocked, is the task the output was
	// blocked on ("" when not known: no output topology), and Behind the
	// task whose slowness held it: BlockedOn, or the task further down
	// that BlockedOn was itself blocked sending to most of its start delay.
	BlockedOn, Behind string
}

// String reads e.g. "sum-0 (queued 2.7s of its own 2.75s)", or, for a
// task blocked sending its output, "keyer-0 (blocked 8.7s of its own
// 8.787s sending to slow-0: slow-0 is slower than its input)".
func (t TaskTime) String() string {
	head := fmt.Sprintf("%s (%s %s of its own %s", t.Task, t.Phase, round(t.Duration), round(t.Own))
	switch {
	case t.Phase != PhaseBlocked:
		return head + ")"
	case t.BlockedOn == "":
		return head + " sending its output: a task after it is slower than its input)"
	case t.Behind != "" && t.Behind != t.BlockedOn:
		return fmt.Sprintf("%s sending to %s, itself blocked sending to %s: %s is slower than its input)", head, t.BlockedOn, t.Behind, t.Behind)
	}
	return fmt.Sprintf("%s sending to %s: %s is slower than its input)", head, t.BlockedOn, t.BlockedOn)
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
//
// A task takes no input while it is blocked sending its output: the
// barrier queued before it then waited for the task it sends to, slower
// than its input. Of its queued time (a source's start delay), what the
// task reported blocked (MetricOutputBlockedNanos, over its whole start
// delay) beyond the time before the barrier reached its input is
// PhaseBlocked, and names the task downstream (with Outputs, the job's
// output topology) rather than the task's input.
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
		queued, phase, before := time.Duration(0), PhaseQueued, time.Duration(0)
		if c.Inputs != nil {
			ins, known := c.Inputs[VertexOf(name)]
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
		// The blocked time within the queued one: at least what the task
		// was blocked beyond the rest of its start delay.
		blocked := min(queued, max(nonNeg(m[MetricOutputBlockedNanos])-(delay-queued), 0))
		for _, p := range []struct {
			name string
			d    time.Duration
		}{
			{phase, queued - blocked},
			{PhaseBlocked, blocked},
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
	if found && slowest.Phase == PhaseBlocked {
		slowest.BlockedOn = c.blockedOn(slowest.Task)
		slowest.Behind = slowest.BlockedOn
		// Down the tasks that were themselves blocked most of their start
		// delay, to the one that was not.
		for seen := map[string]bool{slowest.Task: true}; slowest.Behind != "" && !seen[slowest.Behind]; {
			seen[slowest.Behind] = true
			m := c.Tasks[slowest.Behind]
			next := c.blockedOn(slowest.Behind)
			if next == "" || 2*m[MetricOutputBlockedNanos] <= m[MetricStartDelayNanos] {
				break
			}
			slowest.Behind = next
		}
	}
	return slowest, found
}

// blockedOn returns the task that task's output was blocked on longest
// (MetricBlockedPort, MetricBlockedChannel, resolved with Outputs), ""
// when it did not report one or the topology does not say.
func (c CheckpointInfo) blockedOn(task string) string {
	m := c.Tasks[task]
	if m[MetricOutputBlockedNanos] <= 0 {
		return ""
	}
	ports := c.Outputs[VertexOf(task)]
	p, ch := m[MetricBlockedPort], m[MetricBlockedChannel]
	if p < 0 || p >= int64(len(ports)) || ch < 0 {
		return ""
	}
	to := ports[p]
	if to.Forward {
		// One channel, to the task of the same index.
		i := strings.LastIndexByte(task, '-')
		if i < 0 {
			return ""
		}
		return to.To + task[i:]
	}
	return plan.TaskID(to.To, int(ch))
}

// OutputPort is one output port of a vertex in a job's topology: the
// vertex it feeds and whether the edge is forward (task i sends only to
// task i).
type OutputPort struct {
	To      string `json:"to"`
	Forward bool   `json:"forward,omitempty"`
}

// OutputTopology maps each source and operator of spec to the vertices it
// feeds, by output port (plan.Build's port numbering):
// CheckpointInfo.Outputs. Nil for a spec that does not plan.
func OutputTopology(spec *jobspec.Spec) map[string][]OutputPort {
	if spec == nil {
		return nil
	}
	p, err := plan.Build(spec)
	if err != nil {
		return nil
	}
	outs := map[string][]OutputPort{}
	for _, v := range p.Vertices {
		for _, e := range v.Outputs {
			outs[v.Name] = append(outs[v.Name], OutputPort{To: e.To, Forward: e.Partition == jobspec.Forward})
		}
	}
	return outs
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
