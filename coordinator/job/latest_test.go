package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A restored job's latest checkpoint is the one it started from until its
// own complete: a restore whose job then failed showed checkpoint 0 in
// weir job ls, though the job had checkpoints, and the one it restored.
func TestRestoredJobsLatestCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	w := e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "rs", "checkpointing: {interval: 20ms, retained: 5}\nrestart: {strategy: none}\n"))
	before := waitFor(t, ctx, e, "rs", "three checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 3 })
	if _, err := e.api.CancelJob(ctx, "rs"); err != nil {
		t.Fatal(err)
	}
	from := before.LatestCheckpoint - 1
	w.mu.Lock()
	w.deployErr = errors.New("injected: the worker refuses the deploy")
	w.mu.Unlock()
	st, err := e.api.Restore(ctx, control.RestoreRequest{Job: "rs", From: fmt.Sprint(from)})
	if err != nil {
		t.Fatal(err)
	}
	if st.LatestCheckpoint != from {
		t.Errorf("restored job's latest checkpoint %d at once, want %d (the one it starts from)", st.LatestCheckpoint, from)
	}
	st = waitFor(t, ctx, e, "rs", "failed", func(s control.JobStatus) bool { return s.State.Terminal() })
	if st.State != control.JobFailed || st.LatestCheckpoint != from {
		t.Errorf("restored job that failed: %s, latest checkpoint %d, want failed with %d", st.State, st.LatestCheckpoint, from)
	}
	// The listing says the same.
	jobs, err := e.api.Jobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].LatestCheckpoint != from {
		t.Errorf("jobs %+v, %v", jobs, err)
	}
}

// A job a restarted coordinator resumes keeps its latest checkpoint from
// the moment it is listed again, not 0 until a new one completes; and a
// resumed job that ends before one does records it, so that the next
// coordinator lists it too.
func TestResumedJobsLatestCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	f.start(ctx, "w1")
	defer f.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 20ms}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ha", "two checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 2 })
	stop()
	// The manager stopped: the newest checkpoint in storage is the
	// job's latest.
	ids, err := e.catalogIDs(ctx, "ha")
	if err != nil || len(ids) == 0 {
		t.Fatalf("checkpoints in storage: %v, %v", ids, err)
	}
	latest := ids[len(ids)-1]

	stop = startManager()
	st, err := e.api.Job(ctx, "ha")
	if err != nil || st.LatestCheckpoint != latest || st.State == control.JobRunning {
		t.Fatalf("resumed job before its attempt runs: %+v, %v; want latest checkpoint %d", st, err, latest)
	}
	// Canceled before a checkpoint of its own completes (the resumed
	// attempt waits a heartbeat timeout before it deploys).
	if _, err := e.api.CancelJob(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	stop()
	stop = startManager()
	defer stop()
	st, err = e.api.Job(ctx, "ha")
	if err != nil || st.State != control.JobCanceled || st.LatestCheckpoint != latest {
		t.Fatalf("after another restart: %+v, %v; want canceled with latest checkpoint %d", st, err, latest)
	}
}

// A job that fails over is logged at warn, one that fails at error: a log
// kept at warnings and up (weir up's default) shows both, and a job that
// runs at info (an SRE trial's weir up said nothing of failing jobs).
func TestJobStateLogLevels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs lockedLog
	e := setupWith(t, ctx, Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	w := e.fleet.start(ctx, "w1")
	w.mu.Lock()
	w.deployErr = errors.New("injected: the worker refuses the deploy")
	w.mu.Unlock()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "lv", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 1}\n")}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "lv", "failed", func(s control.JobStatus) bool { return s.State == control.JobFailed })
	if n := st.FailureCounts[control.FailureDeploy]; n != 2 || len(st.FailureCounts) != 1 {
		t.Errorf("failure counts %v; want the deploy refusal twice (the first attempt and its one restart)", st.FailureCounts)
	}
	got := logs.String()
	for _, want := range []string{`level=WARN msg="job state" job=lv state=restarting`, `level=ERROR msg="job state" job=lv state=failed`} {
		if !strings.Contains(got, want) {
			t.Errorf("log:\n%s\nwant a line with %s", got, want)
		}
	}
	if strings.Contains(got, "state=created") {
		t.Errorf("log at warn has the created state:\n%s", got)
	}
}

// lockedLog is a log destination safe for concurrent use.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
