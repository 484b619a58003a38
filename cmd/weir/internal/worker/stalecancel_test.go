package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/control"
)

// A worker says, at warn (weir worker's default level shows it), that the
// coordinator canceled a stale attempt of its tasks: tasks it ran on while
// cut off, which the job no longer has. A cancel of the current attempt (a
// stop, a failover it knows of) stays at info.
func TestStaleCancelIsLogged(t *testing.T) {
	var b strings.Builder
	w := &Worker{log: slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), jobs: map[string]*attempt{
		"wc":  {job: "wc", n: 3, cancel: func() {}, taskIDs: []string{"count-0", "in-0"}},
		"now": {job: "now", n: 1, cancel: func() {}, taskIDs: []string{"in-0"}},
	}}
	if err := w.Cancel(context.Background(), control.Cancel{Job: "wc", Attempt: 3, Reason: "attempt 3 is no longer current", Stale: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.Cancel(context.Background(), control.Cancel{Job: "now", Attempt: 1, Reason: "job canceled"}); err != nil {
		t.Fatal(err)
	}
	want := `level=WARN msg="the coordinator canceled a stale attempt: its tasks here stopped" job=wc attempt=3 tasks=2 reason="attempt 3 is no longer current"` + "\n"
	got := b.String()
	if i := strings.Index(got, "level="); i >= 0 {
		got = got[i:] // past the time
	}
	if got != want {
		t.Fatalf("log:\n%s\nwant only:\n%s", got, want)
	}
	if len(w.jobs) != 0 {
		t.Fatalf("attempts left after their cancels: %v", w.jobs)
	}
}
