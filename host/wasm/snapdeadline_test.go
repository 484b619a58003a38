package wasm

import (
	"bytes"
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"
)

// stateCallPastDeadline runs call, a Snapshot or Restore of inst (of a
// tickedEngine: one call into the guest), and once that call runs ticks
// the watchdog an interval apart until it ends, as processPastDeadline
// does. It returns call's error and the deadline the watchdog held the
// call to while it ran.
func stateCallPastDeadline(t *testing.T, inst *Instance, ticks chan<- time.Time, call func() error) (error, time.Duration) {
	t.Helper()
	inCall := inst.calls.Load() + 1
	done := make(chan error, 1)
	go func() { done <- call() }()
	for inst.calls.Load() < inCall {
		select {
		case err := <-done:
			return err, 0
		default:
			goruntime.Gosched()
		}
	}
	deadline := time.Duration(inst.callTimeout.Load())
	now := time.Now()
	for {
		select {
		case err := <-done:
			return err, deadline
		case ticks <- now:
			now = now.Add(DefaultWatchdogInterval)
		}
	}
}

// TestSnapshotDeadline: weir_snapshot and weir_restore, which take as long
// as the state is large, run under limits.snapshot-timeout, not the call
// deadline; one that loops is still caught, and its message names the
// snapshot deadline and the setting to raise. A trial's keyed aggregation
// over 100 000 users failed over on "weir_snapshot: exceeded the 5s call
// deadline … raise limits.timeout".
func TestSnapshotDeadline(t *testing.T) {
	wasm := sdkTest(t)
	lim := Limits{CallTimeout: 100 * time.Millisecond, SnapshotTimeout: 300 * time.Millisecond, MemoryBytes: 48 << 20}
	for _, c := range []struct {
		mode string
		call func(*Instance) error
		want string
	}{
		{"snaploop", func(i *Instance) error { return i.Snapshot(context.Background(), &bytes.Buffer{}) },
			"operator op: weir_snapshot: exceeded the 300ms snapshot deadline (stuck, or its state is too large to write in time; if merely slow, raise limits.snapshot-timeout)"},
		{"restoreloop", func(i *Instance) error { return i.Restore(context.Background(), bytes.NewReader([]byte("state"))) },
			"operator op: weir_restore: exceeded the 300ms snapshot deadline (stuck, or its state is too large to read in time; if merely slow, raise limits.snapshot-timeout)"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			e, ticks := tickedEngine(t)
			inst := instantiate(t, e, "op", wasm, lim, InstanceConfig{Config: []byte(c.mode)})
			err, deadline := stateCallPastDeadline(t, inst, ticks, func() error { return c.call(inst) })
			if deadline != lim.SnapshotTimeout {
				t.Errorf("the watchdog held the call to %v, want the snapshot deadline %v", deadline, lim.SnapshotTimeout)
			}
			var de *DeadlineError
			if !errors.As(err, &de) || err.Error() != c.want {
				t.Fatalf("got  %v\nwant %s", err, c.want)
			}
			if de.Timeout != lim.SnapshotTimeout {
				t.Errorf("Timeout %v, want %v", de.Timeout, lim.SnapshotTimeout)
			}
		})
	}
	// weir_process keeps the call deadline.
	e, ticks := tickedEngine(t)
	inst := instantiate(t, e, "op", wasm, lim, InstanceConfig{Config: []byte("loop")})
	in := batchOf(kv{"a", "1", 1})
	err := processPastDeadline(t, inst, ticks, in)
	const want = "operator op: weir_process: exceeded the 100ms call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise limits.timeout)"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// TestSnapshotTimeoutDefault: the snapshot deadline is 60s by default, or
// the call deadline when that is longer, and may be set shorter.
func TestSnapshotTimeoutDefault(t *testing.T) {
	for _, c := range []struct {
		in   Limits
		want time.Duration
	}{
		{Limits{}, DefaultSnapshotTimeout},
		{Limits{CallTimeout: time.Second}, DefaultSnapshotTimeout},
		{Limits{CallTimeout: 2 * time.Minute}, 2 * time.Minute},
		{Limits{CallTimeout: 2 * time.Minute, SnapshotTimeout: 10 * time.Second}, 10 * time.Second},
	} {
		if got := c.in.withDefaults().SnapshotTimeout; got != c.want {
			t.Errorf("%+v: snapshot timeout %v, want %v", c.in, got, c.want)
		}
	}
}

// TestInCallExport: an instance says which export the call that runs now
// runs, so that a task long in weir_snapshot is not called stuck on a
// record.
func TestInCallExport(t *testing.T) {
	e, ticks := tickedEngine(t)
	inst := instantiate(t, e, "op", sdkTest(t), Limits{SnapshotTimeout: 100 * time.Millisecond}, InstanceConfig{Config: []byte("snaploop")})
	if got := inst.InCallExport(); got != "" {
		t.Fatalf("between calls: %q", got)
	}
	seen := make(chan string, 1)
	done := make(chan error, 1)
	inCall := inst.calls.Load() + 1
	go func() { done <- inst.Snapshot(context.Background(), &bytes.Buffer{}) }()
	for inst.calls.Load() < inCall {
		goruntime.Gosched()
	}
	seen <- inst.InCallExport()
	now := time.Now()
	for err := error(nil); ; {
		select {
		case err = <-done:
		case ticks <- now:
			now = now.Add(DefaultWatchdogInterval)
			continue
		}
		var de *DeadlineError
		if !errors.As(err, &de) {
			t.Fatalf("got %v", err)
		}
		break
	}
	if got := <-seen; got != "weir_snapshot" {
		t.Errorf("in the call: %q, want weir_snapshot", got)
	}
	if got := inst.InCallExport(); got != "" {
		t.Errorf("after the call: %q", got)
	}
}
