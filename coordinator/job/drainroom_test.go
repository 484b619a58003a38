package job

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// A drain whose jobs do not all fit on the other workers says what they
// need together against what the others have for them, each worker as
// weir worker ls counts it — not the room the last job would find after
// the others' moves (a trial's refusal said "1 free" where worker ls
// said 3, naming one job).
func TestDrainRefusalCountsAllItsJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.startSlots(ctx, "w1", 3)
	e.fleet.startSlots(ctx, "w2", 3)
	e.fleet.startSlots(ctx, "w3", 2)
	e.waitWorkers(3)
	for _, name := range []string{"a", "b"} {
		st := e.submitRunning(t, ctx, sized(t, name, 1, "checkpointing: {interval: 50ms}\n"))
		if got := perWorker(st); got["w1"] != 1 || got["w2"] != 1 || got["w3"] != 1 {
			t.Fatalf("%s's tasks per worker %v; want one on each", name, got)
		}
	}
	ws, err := e.api.Workers(ctx)
	if err != nil || len(ws) != 3 || ws[1].Used != 2 || ws[2].Used != 2 {
		t.Fatalf("workers %+v (%v); want w2 2 of 3 used, w3 2 of 2", ws, err)
	}
	_, err = e.api.DrainWorker(ctx, control.DrainRequest{Worker: "w1"})
	const want = "drain w1: no room on the other workers for the 2 jobs on w1: they need 6 slots (a 3, b 3); the other workers have 5, " +
		"counting the 4 their own tasks hold on w2, w3 (w2 has 3 slots: 1 free, 2 of theirs; w3 has 2 slots: 0 free, 2 of theirs); nothing was cordoned or stopped"
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("drain: %v\nwant %s", err, want)
	}
}
