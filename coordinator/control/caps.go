package control

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// The host's defaults for an operator's limits left unset in its spec
// (host/wasm.DefaultMemoryBytes, DefaultCallTimeout,
// DefaultSnapshotTimeout, DefaultLogRate): what a worker's caps compare
// an unset limit with.
const (
	DefaultOperatorMemory          = 64 << 20
	DefaultOperatorTimeout         = 5 * time.Second
	DefaultOperatorSnapshotTimeout = 60 * time.Second
	DefaultOperatorLogRate         = 100
)

// Caps are a worker's bounds on what a job's operators may ask of it,
// set by whoever runs the worker (weir up and weir worker flags), not by
// the job's author. Zero fields bound nothing.
type Caps struct {
	// Memory is the worker's memory budget: the sum of the memory limits
	// (limits.memory) of the operator tasks placed on it may not exceed
	// it. Placement counts it as it counts slots.
	Memory int64 `json:"memory,omitempty"`
	// MaxTaskMemory, MaxCallTimeout and MaxLogRate are the most one
	// operator instance may ask for as limits.memory, limits.timeout (and
	// limits.snapshot-timeout, where set: see SnapshotTimeout) and
	// limits.log-rate.
	MaxTaskMemory  int64         `json:"max_task_memory,omitempty"`
	MaxCallTimeout time.Duration `json:"max_call_timeout,omitempty"`
	MaxLogRate     int           `json:"max_log_rate,omitempty"`
}

// OperatorMemory returns the memory limit an operator's instances run
// under: its limits.memory, or the host's default.
func OperatorMemory(op jobspec.Operator) int64 {
	if op.Limits.Memory > 0 {
		return op.Limits.Memory
	}
	return DefaultOperatorMemory
}

// Refuse returns why worker (named in the message) does not run the
// operators of spec, one line naming the job, the operator, the setting,
// what it asks and the worker's cap; or nil. An operator that does not
// set a limit asks for the host's default.
func (c Caps) Refuse(worker string, spec *jobspec.Spec) error {
	for _, op := range spec.Operators {
		asked := func(set bool) string {
			if set {
				return ""
			}
			return " (the default)"
		}
		if m := OperatorMemory(op); c.MaxTaskMemory > 0 && m > c.MaxTaskMemory {
			return fmt.Errorf("job %s operator %s: limits.memory %s%s is over worker %s's cap of %s (-max-task-memory): ask for less, or run the job where the cap is higher",
				spec.Name, op.Name, jobspec.FormatSize(m), asked(op.Limits.Memory > 0), worker, jobspec.FormatSize(c.MaxTaskMemory))
		}
		if m := OperatorMemory(op); c.Memory > 0 && m > c.Memory {
			return fmt.Errorf("job %s operator %s: limits.memory %s%s is over worker %s's whole memory budget of %s (-memory): ask for less, or run the job where the budget is larger",
				spec.Name, op.Name, jobspec.FormatSize(m), asked(op.Limits.Memory > 0), worker, jobspec.FormatSize(c.Memory))
		}
		t := op.Limits.Timeout
		if t <= 0 {
			t = DefaultOperatorTimeout
		}
		if c.MaxCallTimeout > 0 && t > c.MaxCallTimeout {
			return fmt.Errorf("job %s operator %s: limits.timeout %s%s is over worker %s's cap of %s (-max-call-timeout): ask for less, or run the job where the cap is higher",
				spec.Name, op.Name, t, asked(op.Limits.Timeout > 0), worker, c.MaxCallTimeout)
		}
		if st := op.Limits.SnapshotTimeout; c.MaxCallTimeout > 0 && st > c.MaxCallTimeout {
			return fmt.Errorf("job %s operator %s: limits.snapshot-timeout %s is over worker %s's cap of %s (-max-call-timeout): ask for less, or run the job where the cap is higher",
				spec.Name, op.Name, st, worker, c.MaxCallTimeout)
		}
		r := op.Limits.LogRate
		if r <= 0 {
			r = DefaultOperatorLogRate
		}
		if c.MaxLogRate > 0 && r > c.MaxLogRate {
			return fmt.Errorf("job %s operator %s: limits.log-rate %d%s is over worker %s's cap of %d (-max-log-rate): ask for less, or run the job where the cap is higher",
				spec.Name, op.Name, r, asked(op.Limits.LogRate > 0), worker, c.MaxLogRate)
		}
	}
	return nil
}

// SnapshotTimeout returns the limit on one weir_snapshot or weir_restore
// call that op's instances run under on a worker with caps c: its
// limits.snapshot-timeout (which Refuse holds to MaxCallTimeout), or, left
// unset, the host's default (DefaultOperatorSnapshotTimeout, or
// limits.timeout where longer) lowered to MaxCallTimeout: no call into a
// guest runs longer than the cap, while a job that sets no snapshot
// timeout still runs there. 0 stands for the host's default.
func (c Caps) SnapshotTimeout(op jobspec.Operator) time.Duration {
	if op.Limits.SnapshotTimeout > 0 || c.MaxCallTimeout <= 0 {
		return op.Limits.SnapshotTimeout
	}
	def := max(DefaultOperatorSnapshotTimeout, op.Limits.Timeout)
	if def > c.MaxCallTimeout {
		return c.MaxCallTimeout
	}
	return 0
}

// TaskMemory returns the memory limit of each operator task of spec's
// (vertex name → bytes): what a task counts against a worker's Memory.
// Sources and sinks run no wasm and count nothing.
func TaskMemory(spec *jobspec.Spec) map[string]int64 {
	m := make(map[string]int64, len(spec.Operators))
	for _, op := range spec.Operators {
		m[op.Name] = OperatorMemory(op)
	}
	return m
}

// DeployMemory returns the memory limits of d's operator tasks, added up:
// what they take of the worker's memory budget (Caps.Memory); 0 for a
// deploy without its spec or plan.
func DeployMemory(d Deploy) int64 {
	if d.Spec == nil || d.Plan == nil {
		return 0
	}
	mem := TaskMemory(d.Spec)
	var n int64
	for _, id := range d.Tasks {
		if t, ok := d.Plan.Task(id); ok {
			n += mem[t.Vertex]
		}
	}
	return n
}
