package job

import (
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A request for a job that ended says how it ended: a job stopped with a
// savepoint (state canceled) as stopped, with its state, not "already
// canceled", which had weir job stop -drain's user look for a cancel.
func TestAlreadyEndedSaysStopped(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		st   control.JobStatus
		want string
	}{
		{control.JobStatus{Name: "wc", State: control.JobCanceled, StoppedWithSavepoint: 7, Updated: at},
			"job wc already stopped with savepoint 7 at 2026-01-02 15:04:05 UTC (state canceled); nothing to drain"},
		{control.JobStatus{Name: "wc", State: control.JobCanceled, Updated: at},
			"job wc already canceled at 2026-01-02 15:04:05 UTC; nothing to drain"},
		{control.JobStatus{Name: "wc", State: control.JobFinished, Updated: at},
			"job wc already finished at 2026-01-02 15:04:05 UTC; nothing to drain"},
	} {
		if err := alreadyEnded(c.st, "nothing to drain"); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.st.State, err, c.want)
		}
	}
}
