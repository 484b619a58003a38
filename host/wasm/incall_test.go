package wasm

import (
	"context"
	"testing"
	"time"
)

// InCall says how long the call that runs now has run, and 0 between
// calls: a task reports it, so that an operator stuck in a call shows as
// that rather than as busy.
func TestInCall(t *testing.T) {
	e := newEngine(t)
	inst := instantiate(t, e, "spin", misbehave(t), Limits{CallTimeout: 2 * time.Second}, InstanceConfig{Config: []byte("l")})
	if d := inst.InCall(); d != 0 {
		t.Fatalf("InCall before a call: %s, want 0", d)
	}
	done := make(chan error, 1)
	go func() { done <- inst.Process(context.Background(), 0, batchOf(kv{"a", "1", 1}), newOut().emit) }()
	for inst.InCall() < 300*time.Millisecond {
		select {
		case err := <-done:
			t.Fatalf("the looping call ended (%v) before InCall said 300ms", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	<-done // the deadline ends it
	if d := inst.InCall(); d != 0 {
		t.Errorf("InCall after the call: %s, want 0", d)
	}
}
