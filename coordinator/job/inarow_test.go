package job

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A job's status counts its failures since the latest completed
// checkpoint, as its restart strategy does, and says how many restarts
// the strategy allows: a job failing over in a loop (a record that makes
// an operator trap is read again after every restore) shows how close it
// is to failing. A completed checkpoint (here a savepoint) ends the row.
func TestStatusCountsFailuresInARow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "loop", "checkpointing: {disabled: true}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n")
	st := e.submitRunning(t, ctx, s)
	if st.FailuresInARow != 0 || st.RestartAttempts != 3 {
		t.Fatalf("before a failure: %d failures in a row, %d restart attempts", st.FailuresInARow, st.RestartAttempts)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := w1.client.Failed(ctx, control.TaskRef{Job: "loop", Attempt: attempt, Task: "count-1"}, "trap in weir_process"); err != nil {
			t.Fatal(err)
		}
		st = waitFor(t, ctx, e, "loop", "the next attempt", func(st control.JobStatus) bool {
			return st.Attempt == attempt+1 && st.State == control.JobRunning
		})
		if st.FailuresInARow != attempt || st.RestartAttempts != 3 {
			t.Errorf("after failure %d: %d failures in a row, %d restart attempts", attempt, st.FailuresInARow, st.RestartAttempts)
		}
	}
	if _, err := e.api.Savepoint(ctx, "loop"); err != nil {
		t.Fatal(err)
	}
	if st, err := e.api.Job(ctx, "loop"); err != nil || st.FailuresInARow != 0 {
		t.Errorf("after a savepoint: %d failures in a row (%v)", st.FailuresInARow, err)
	}
}

// A job's status says its checkpointing mode and aligned-timeout, for
// weir job status to give advice for expiring checkpoints that fits how
// the job's barriers travel.
func TestStatusSaysTheCheckpointMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	for _, c := range []struct {
		name, extra, mode string
		aligned           time.Duration
	}{
		{"aligned", "checkpointing: {disabled: true}\n", "exactly-once", 0},
		{"timeout", "checkpointing: {disabled: true, aligned-timeout: 200ms}\n", "exactly-once", 200 * time.Millisecond},
		{"unaligned", "checkpointing: {disabled: true, mode: unaligned}\n", "unaligned", 0},
		{"alo", "checkpointing: {disabled: true, mode: at-least-once}\n", "at-least-once", 0},
	} {
		st := e.submitRunning(t, ctx, spec(t, c.name, c.extra))
		if st.CheckpointMode != c.mode || st.AlignedTimeout != c.aligned {
			t.Errorf("%s: status says mode %q, aligned-timeout %s; want %q, %s", c.name, st.CheckpointMode, st.AlignedTimeout, c.mode, c.aligned)
		}
	}
}
