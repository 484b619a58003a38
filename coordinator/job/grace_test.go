package job

import (
	"context"
	"testing"
	"time"
)

// A secondary failure's grace that runs out while the primary failure is
// already queued (its wake and the grace ready at once: the select may
// pick either) fails the attempt over with the primary cause, not the
// secondary one. The primary is queued here without a wake, as when the
// select picks the grace.
func TestGraceRunningOutTakesTheQueuedPrimaryFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j := &job{m: &Manager{opts: Options{secondaryGrace: 200 * time.Millisecond}}, ctx: ctx, wake: make(chan struct{}, 1)}
	j.st.Attempt = 1
	j.queue = []jobEvent{{kind: evFailure, attempt: 1, reason: "channel closed", secondary: true}}
	j.wake <- struct{}{}
	go func() {
		// Queued once wait took the secondary failure, well within its grace.
		for {
			j.mu.Lock()
			if len(j.queue) == 0 {
				j.queue = append(j.queue, jobEvent{kind: evFailure, attempt: 1, reason: "operator trapped"})
				j.mu.Unlock()
				return
			}
			j.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	done, f := j.wait()
	if done || f.reason != "operator trapped" {
		t.Errorf("wait: done %v, failure %q; want the primary failure %q", done, f.reason, "operator trapped")
	}
}
