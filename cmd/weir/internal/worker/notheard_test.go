package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A task whose report to the coordinator goes unanswered — its running
// event timed out, or nobody listened — fails as a lost connection: a
// trial's "task store-0 failed: report running: send running event of
// store-0: weir.ctl.event: context deadline exceeded" had no kind. One
// the coordinator answered with an error is not that.
func TestUnheardReportIsAConnectionFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := control.TaskRef{Job: "j", Attempt: 1, Task: "store-0"}
	running := func(answer func(int) *control.Reply, within time.Duration) error {
		nc := embeddedtest.Conn(t)
		if answer != nil {
			fakeCoordinator(t, nc, answer)
		}
		tctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		err := control.NewWorker(nc, "w1", nil, control.WorkerOptions{}).Running(tctx, ref)
		if err == nil {
			t.Fatal("the running event was heard")
		}
		return fmt.Errorf("report running: %w", err)
	}
	for _, c := range []struct {
		what string
		err  error
		kind control.FailureKind
	}{
		{"never answered", running(func(int) *control.Reply { return nil }, 200*time.Millisecond), control.FailureConnection},
		{"nobody listening", running(nil, time.Minute), control.FailureConnection},
		{"answered with an error", running(func(int) *control.Reply { return &control.Reply{Error: "unknown attempt"} }, time.Minute), control.FailureUnknown},
	} {
		if got := failureKind(c.err); got != c.kind {
			t.Errorf("%s: %v: kind %q, want %q", c.what, c.err, got, c.kind)
		}
		heard := !errors.Is(c.err, control.ErrNotHeard)
		if heard != (c.kind == control.FailureUnknown) || !strings.HasPrefix(c.err.Error(), "report running: send running event of store-0: ") {
			t.Errorf("%s: %v", c.what, c.err)
		}
		t.Logf("%s: %v", c.what, c.err)
	}
}
