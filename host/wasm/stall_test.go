package wasm

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"
)

// A process that was not running (SIGSTOP, a frozen VM) while an operator
// call ran does not charge the call for it: on resume the call is not past
// its deadline, and the operator is not named as stuck. Time the process
// runs still counts, so a looping operator is stopped once it ran its
// deadline. The watchdog's ticks are the test's: three gaps of an hour,
// then ticks an interval apart.
func TestDeadlineCountsOnlyTimeTheProcessRan(t *testing.T) {
	ticks := make(chan time.Time)
	e, err := NewEngine(Config{ticks: ticks, WatchdogInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	inst := instantiate(t, e, "loop", misbehave(t), Limits{CallTimeout: 100 * time.Millisecond}, InstanceConfig{Config: []byte("l")})
	// Process makes two calls: weir_input, then weir_process, which loops.
	inProcess := inst.calls.Load() + 3
	done := make(chan error, 1)
	go func() { done <- inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}), newOut().emit) }()
	for inst.calls.Load() != inProcess {
		goruntime.Gosched()
	}
	// A send returns once the watchdog took the tick: it has handled the
	// ones before.
	now := time.Now()
	tick := func(d time.Duration) {
		now = now.Add(d)
		ticks <- now
	}
	tick(0) // the watchdog sees the call
	for range 3 {
		tick(time.Hour) // the process was stopped: counts one interval
	}
	tick(time.Millisecond) // 31ms counted
	if inst.timedOut.Load() {
		t.Fatal("the call was stopped for time the process did not run")
	}
	for range 6 {
		tick(10 * time.Millisecond) // up to 91ms counted once the next is taken
	}
	if inst.timedOut.Load() {
		t.Fatal("the call was stopped before it ran its deadline")
	}
	for {
		select {
		case err := <-done:
			var de *DeadlineError
			if !errors.As(err, &de) || err.Error() != "operator loop: weir_process: exceeded the 100ms call deadline (stuck, or much slower on this record than on earlier ones; if merely slow, raise limits.timeout)" {
				t.Fatalf("got %v", err)
			}
			return
		case ticks <- now.Add(10 * time.Millisecond):
			now = now.Add(10 * time.Millisecond)
		}
	}
}
