package control

import (
	"fmt"
	"testing"
)

// Failures of a kind are told by it, and kindless ones (an older
// coordinator's record) by their reasons' words: a trap after a refused
// memory.grow is of kind memory-limit, or of no kind both a trap and past
// the memory limit.
func TestFailureIsKind(t *testing.T) {
	const refused = " (memory.grow of 5 pages (320 KiB) refused: the operator's memory limit (limits.memory) is 512 KiB and it had 512 KiB)"
	for _, c := range []struct {
		f          Failure
		trap, oom  bool
		checkpoint bool
	}{
		{Failure{Kind: FailureMemoryLimit, Reason: "task op-0 failed: wordcount: out of memory" + refused}, false, true, false},
		{Failure{Kind: FailureTrap, Reason: "task op-0 failed: trap at record 2 of the batch: unreachable"}, true, false, false},
		{Failure{Reason: "task op-0 failed: trap at record 2 of the batch: unreachable" + refused}, true, true, false},
		{Failure{Reason: "task op-0 failed: trap at record 2 of the batch: unreachable"}, true, false, false},
		{Failure{Kind: FailureDeploy, Reason: "deploy to worker w1: task op-0: operator op[0]: weir_init: trap" + refused}, false, false, false},
		{Failure{Reason: "consecutive checkpoint failures exceed the tolerable 0"}, false, false, true},
	} {
		if got := c.f.IsKind(FailureTrap); got != c.trap {
			t.Errorf("%+v: IsKind(trap) %v, want %v", c.f, got, c.trap)
		}
		if got := c.f.IsKind(FailureMemoryLimit); got != c.oom {
			t.Errorf("%+v: IsKind(memory-limit) %v, want %v", c.f, got, c.oom)
		}
		if got := c.f.IsKind(FailureCheckpointsFailed); got != c.checkpoint {
			t.Errorf("%+v: IsKind(checkpoints-failed) %v, want %v", c.f, got, c.checkpoint)
		}
	}
}

// Failures of one kind in one task failed the same way whatever their
// reasons say; deploy failures, of no task, only when their reasons are
// alike but for their numbers, as a deploy fails for many causes.
func TestFailureSameAs(t *testing.T) {
	for _, c := range []struct {
		f, g Failure
		same bool
	}{
		{Failure{Kind: FailureTrap, Task: "op-0", Reason: "trap at record 2 of the batch"}, Failure{Kind: FailureTrap, Task: "op-0", Reason: "divide by zero"}, true},
		{Failure{Kind: FailureTrap, Task: "op-0"}, Failure{Kind: FailureMemoryLimit, Task: "op-0"}, false},
		{Failure{Kind: FailureMemoryLimit, Task: "op-0"}, Failure{Kind: FailureMemoryLimit, Task: "op-1"}, false},
		{Failure{Kind: FailureDeploy, Reason: "deploy to worker w1: task op-0: module m: missing export weir_process"},
			Failure{Kind: FailureDeploy, Reason: "deploy to worker w2: task op-1: module m: missing export weir_process"}, true},
		{Failure{Kind: FailureDeploy, Reason: "deploy to worker w1: task op-0: module m: missing export weir_process"},
			Failure{Kind: FailureDeploy, Reason: "deploy to worker w1: task in-0: stream IN not found"}, false},
		{Failure{Kind: FailureRestore, Reason: "read the latest checkpoint: store down"},
			Failure{Kind: FailureRestore, Reason: "read the latest checkpoint: no leader"}, true},
		{Failure{Reason: "task op-0 failed: trap at record 2 of the batch"}, Failure{Reason: "task op-0 failed: trap at record 8 of the batch"}, true},
	} {
		if got := c.f.SameAs(c.g); got != c.same {
			t.Errorf("%+v same as %+v: %v, want %v", c.f, c.g, got, c.same)
		}
		if got := c.f.SameKindAs(c.g); got != c.same {
			t.Errorf("%+v same kind as %+v: %v, want %v", c.f, c.g, got, c.same)
		}
	}
}

// Failures alike on different records (a panic at random) did not fail
// the same way; on the same record, wherever it stood in its batch, they
// did; one on a record and one on none (weir_snapshot) did not either.
func TestFailureSameRecord(t *testing.T) {
	trap := func(ix int, record string) Failure {
		return Failure{Kind: FailureTrap, Task: "op-0", Record: record,
			Reason: fmt.Sprintf("task op-0 failed: operator op[0]: weir_process: trap at record %d of the batch (%s): panic", ix, record)}
	}
	for _, c := range []struct {
		f, g Failure
		same bool
	}{
		{trap(3, `key "k99", value "a"`), trap(40, `key "k99", value "a"`), true},
		{trap(3, `key "k99", value "a"`), trap(3, `key "k473", value "a"`), false},
		{trap(3, `key "k99", value "a"`), trap(3, `key "k99", value "b"`), false},
		{trap(3, `key "k99", value "a"`), Failure{Kind: FailureTrap, Task: "op-0", Reason: "task op-0 failed: operator op[0]: weir_snapshot: trap: unreachable"}, false},
	} {
		if got := c.f.SameAs(c.g); got != c.same {
			t.Errorf("%+v same as %+v: %v, want %v", c.f, c.g, got, c.same)
		}
		if !c.f.SameKindAs(c.g) {
			t.Errorf("%+v not the same kind as %+v", c.f, c.g)
		}
	}
}
