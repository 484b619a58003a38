package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/local"
)

// A Rest the task answered succeeds even when Run returned by the time its
// caller looks: the answer wins over runDone. The ordering is forced — the
// task answers a rest, then Run returns, then the caller waits — so both
// are ready when it selects; select picks among ready cases at random, so
// without the answer winning each of the tries fails with probability ½
// (all of them pass with probability 2⁻⁶⁴).
func TestRestAnsweredBeforeRunReturnedSucceeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ri := local.New(local.Options{Name: "up->rest"})
	task, err := New(Config{Name: "rest", Inputs: []Input{{Receiver: ri}}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- task.Run(rctx) }()

	done := make(chan error, 1)
	task.post(ctrlMsg{kind: ctrlRest, done: done})
	select {
	case <-task.runDone:
		t.Fatal("the task ended before it answered the rest")
	case <-ctx.Done():
		t.Fatal("no answer to the rest")
	case err, ok := <-done:
		if ok {
			t.Fatalf("rest: %v", err)
		}
	}
	stop()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want canceled", err)
	}
	for i := range 64 {
		if err := task.await(ctx, "rest", done); err != nil {
			t.Fatalf("try %d: the task answered the rest, then Run returned; await says %v", i, err)
		}
	}
	// Without an answer, a returned Run is what await reports.
	if err := task.Rest(ctx); err == nil {
		t.Fatal("a rest after Run returned succeeded")
	}
}
