package job

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// The end of an incident is logged at the level of its start, so that a
// log kept at warnings (weir up's default) shows both halves: an SRE
// trial's showed a worker lost and a job failing over, and nothing of the
// worker joining again or the job running again. A first run's start
// stays at info.
func TestIncidentEndsAreLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs lockedLog
	e := setupWith(t, ctx, Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	w1 := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "ie", "checkpointing: {interval: 20ms}\nrestart: {strategy: fixed-delay, delay: 10ms, attempts: 3}\n"))
	waitFor(t, ctx, e, "ie", "a checkpoint", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 1 })
	if got := logs.String(); regexp.MustCompile(`every task runs|running again`).MatchString(got) {
		t.Errorf("log at warn has the first run's start:\n%s", got)
	}

	e.fleet.start(ctx, "w2")
	e.waitWorkers(2)
	e.lose(w1)
	st := waitFor(t, ctx, e, "ie", "attempt 2 running", func(s control.JobStatus) bool {
		return s.Attempt == 2 && s.State == control.JobRunning && s.LatestCheckpoint > s.RestoredFrom
	})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(2)
	running := regexp.MustCompile(`level=WARN msg="job running again: every task runs, checkpointing starts" job=ie attempt=2 restored_checkpoint=` +
		strconv.FormatInt(st.RestoredFrom, 10) + `\n`)
	joined := regexp.MustCompile(`level=WARN msg="worker joined again" worker=w1 .*lost_for=`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := logs.String()
		if running.MatchString(got) && joined.MatchString(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log:\n%s\nwant the job running again (attempt 2, from checkpoint %d, the one it restored) and w1 joined again, at warn", got, st.RestoredFrom)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
