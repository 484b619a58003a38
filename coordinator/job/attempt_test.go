package job

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// A job's record names an attempt before any worker hears of it, so a
// coordinator that goes away while the attempt deploys is followed by one
// that cancels that attempt and deploys the next number: a worker keeps an
// attempt it runs when asked to deploy it again (the coordinator sends a
// deploy again when its answer may have been lost), so a number deployed
// again by the next coordinator would keep the first one's tasks, restored
// from another checkpoint, wired to the new one's.
func TestAttemptRecordedBeforeItsDeploy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, startManager := restartable(t, nil)
	f := e.fleet
	stop := startManager()
	w := f.start(ctx, "w1")
	defer f.wait()
	held, release := w.holdFirst(t, control.OpDeploy)
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "ha", "checkpointing: {interval: 1h}\n")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no deploy came")
	}
	// The deploy being held is the job's current attempt (the worker
	// records a deploy only once its gate let it pass).
	cur, err := e.api.Job(ctx, "ha")
	if err != nil {
		t.Fatal(err)
	}
	deployed := cur.Attempt
	st, err := storage.NewDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(storedRecord(t, ctx, st, "ha"), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Attempt != deployed {
		t.Errorf("while attempt %d deploys, the job's record names attempt %d", deployed, rec.Attempt)
	}
	// The coordinator goes away while the deploy is held at the worker.
	stop()
	release()

	stop = startManager()
	defer stop()
	waitFor(t, ctx, e, "ha", "resumed", func(s control.JobStatus) bool { return s.State == control.JobRunning })
	if again := w.lastDeploy("ha").Attempt; again <= deployed {
		t.Errorf("the restarted coordinator deployed attempt %d; its predecessor had deployed attempt %d", again, deployed)
	}
	if _, err := e.api.CancelJob(ctx, "ha"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "ha", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })
}
