package worker

import (
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// A sink's longer ack timeout lengthens the duplicate window its stream
// needs: a commit may wait that long before recovery re-commits.
func TestDuplicateWindow(t *testing.T) {
	ck := jobspec.Checkpointing{Interval: 10 * time.Second, Timeout: time.Minute}
	for _, c := range []struct {
		ack  time.Duration
		want time.Duration
	}{
		{0, 10*time.Second + time.Minute + RecoveryAllowance},
		{5 * time.Second, 10*time.Second + time.Minute + RecoveryAllowance},
		{45 * time.Second, 10*time.Second + time.Minute + RecoveryAllowance + 35*time.Second},
	} {
		if got := DuplicateWindow(ck, jobspec.Sink{AckTimeout: c.ack}); got != c.want {
			t.Errorf("ack timeout %v: window %v, want %v", c.ack, got, c.want)
		}
	}
}
