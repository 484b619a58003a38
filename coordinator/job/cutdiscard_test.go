package job

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// What a retention discard cut short by kill -9 left before retention
// discarded newest first (the trial of wordcount): a checkpoint stored
// whose sink snapshot names output staged in one gone, older than the
// checkpoints that restore. A restarted coordinator said only "checkpoint
// unusable", at every restart, as nothing discarded it. Now it says that
// a newer one restores (the job resumes from the newest, as it would
// have), and discards it.
func TestResumeDiscardsAnUnusableCheckpointANewerOneSupersedes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logs := &logBuffer{}
	e, startManager := restartableWith(t, nil, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	stop := startManager()
	defer func() { stop() }()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "uc", "checkpointing: {interval: 20ms, retained: 3}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "uc", "checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 5 })
	stop()

	ids, err := e.catalogIDs(ctx, "uc")
	if err != nil || len(ids) < 3 {
		t.Fatalf("stored: %v, %v; want 3", ids, err)
	}
	named, namer := ids[0], ids[1]
	e.nameFrom(t, ctx, "uc", namer, named)
	st, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	cat := &checkpoint.Catalog{Meta: st, State: st}
	if err := cat.Discard(ctx, "uc", named); err != nil {
		t.Fatal(err)
	}

	stop = startManager()
	before := waitFor(t, ctx, e, "uc", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if before.LatestCheckpoint < ids[len(ids)-1] {
		t.Errorf("resumed with latest %d; want %d, the newest", before.LatestCheckpoint, ids[len(ids)-1])
	}
	want := fmt.Sprintf(`msg="checkpoint unusable, and not needed: a newer one restores; discarding it" job=uc checkpoint=%d newer=%d err="checkpoint uc/%d: checkpoint corrupt: its snapshot of out-0 names output staged in checkpoint %d, which cannot be restored`,
		namer, ids[len(ids)-1], namer, named)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant a line with\n%s", logs.String(), want)
	}
	e.waitIDs(t, ctx, "uc", fmt.Sprintf("%d discarded", namer), func(got []int64) bool { return !slices.Contains(got, namer) })
	if _, err := e.api.CancelJob(ctx, "uc"); err != nil {
		t.Fatal(err)
	}
}

// Retention keeps a checkpoint that a kept one names without what that
// one names in turn, so the checkpoint kept is unusable itself, and the
// newer one's restore still reads the output staged in it. A resume
// discarded it as superseded; the next start found the newer one
// unusable, discarded it too, and so on until the job restored nothing
// and committed all its output again (a trial with kill -9 at random
// moments). It stays now, and the job resumes from the newest every time.
func TestResumeKeepsAnUnusableCheckpointANewerOneNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logs := &logBuffer{}
	e, startManager := restartableWith(t, nil, Options{HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	stop := startManager()
	defer func() { stop() }()
	e.fleet.start(ctx, "w1")
	defer e.fleet.wait()
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "kc", "checkpointing: {interval: 20ms, retained: 50}\n")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "kc", "checkpoints", func(s control.JobStatus) bool { return s.LatestCheckpoint >= 5 })
	stop()

	// retained 50: the checkpoints named here stay through the test (c
	// discarded by retention, nothing would name b any more).
	ids, err := e.catalogIDs(ctx, "kc")
	if err != nil || len(ids) < 3 {
		t.Fatalf("stored: %v, %v; want 3", ids, err)
	}
	a, b, c := ids[len(ids)-3], ids[len(ids)-2], ids[len(ids)-1]
	e.nameFrom(t, ctx, "kc", c, b) // c's restore reads b's staged output
	e.nameFrom(t, ctx, "kc", b, a) // and b's, a's: gone, as retention leaves it
	st, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	cat := &checkpoint.Catalog{Meta: st, State: st}
	if err := cat.Discard(ctx, "kc", a); err != nil {
		t.Fatal(err)
	}

	for restart := 1; restart <= 2; restart++ {
		stop = startManager()
		st := waitFor(t, ctx, e, "kc", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning })
		if st.RestoredFrom != c && st.LatestCheckpoint < c {
			t.Errorf("restart %d: restored from %d (latest %d); want %d, the newest", restart, st.RestoredFrom, st.LatestCheckpoint, c)
		}
		// Its discards done (the job checkpoints on), b is stored still.
		waitFor(t, ctx, e, "kc", "checkpoints after the resume", func(s control.JobStatus) bool { return s.LatestCheckpoint >= st.LatestCheckpoint+2 })
		if got, err := e.catalogIDs(ctx, "kc"); err != nil || !slices.Contains(got, b) {
			t.Fatalf("restart %d: stored %v, %v; want %d kept (%d names it)\nlog:\n%s", restart, got, err, b, c, logs.String())
		}
		stop()
		if _, err := cat.Read(ctx, "kc", c); err != nil {
			t.Fatalf("restart %d: checkpoint %d: %v; want it usable", restart, c, err)
		}
	}
	want := fmt.Sprintf(`msg="checkpoint unusable, and kept: a newer one's restore reads the output staged in it" job=kc checkpoint=%d named_by=%d`, b, c)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant a line with\n%s", logs.String(), want)
	}
	if strings.Contains(logs.String(), "discarding it") || strings.Contains(logs.String(), "falling back") {
		t.Errorf("log:\n%s\nwant nothing discarded, no fallback", logs.String())
	}
	stop = startManager()
	if _, err := e.api.CancelJob(ctx, "kc"); err != nil {
		t.Fatal(err)
	}
}

// A resume from an older checkpoint than the run's newest, which is
// unusable, is said in the job's status, not only in the log: the
// exactly-once sinks commit again what they committed after it.
func TestResumeNoteSaysTheNewestIsUnusable(t *testing.T) {
	errCut := fmt.Errorf("checkpoint j/7: %w: state of out-0 missing", checkpoint.ErrCorrupt)
	md := func(id int64) *checkpoint.Metadata { return &checkpoint.Metadata{Job: "j", ID: id} }
	for _, c := range []struct {
		restored []*checkpoint.Metadata
		unusable []unusableCheckpoint
		started  *checkpoint.Metadata
		want     string
	}{
		{[]*checkpoint.Metadata{md(5)}, []unusableCheckpoint{{3, errCut}}, nil, ""},
		{[]*checkpoint.Metadata{md(3)}, []unusableCheckpoint{{5, errCut}, {7, errCut}}, nil,
			"resumed after a coordinator restart from checkpoint 3, as its newer checkpoints 5, 7 are unusable (" + errCut.Error() + "): what its exactly-once sinks committed after that is committed again, under new message IDs"},
		{nil, []unusableCheckpoint{{7, errCut}}, nil,
			"resumed after a coordinator restart from no checkpoint: its sources start over, as its newer checkpoint 7 is unusable ("},
		{nil, []unusableCheckpoint{{7, errCut}}, &checkpoint.Metadata{Job: "old", ID: 40},
			"from checkpoint 40 of job old, which it started from, as its newer checkpoint 7 is unusable"},
	} {
		got := resumeNote(c.restored, c.unusable, c.started)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("resumeNote(%v, %v) = %q; want %q", c.restored, c.unusable, got, c.want)
		}
	}
}
