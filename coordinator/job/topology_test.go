package job

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

// The checkpoint history carries the job's topology, for Slowest to name
// the task a checkpoint's barriers queued before, not the sink they
// reached last (weir checkpoint ls has no spec of its own).
func TestCheckpointsCarryTheTopology(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	s := spec(t, "topo", "checkpointing: {interval: 20ms}\n")
	e.submitRunning(t, ctx, s)
	waitFor(t, ctx, e, "topo", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
	cps, err := e.api.Checkpoints(ctx, "topo")
	if err != nil || len(cps) == 0 {
		t.Fatalf("checkpoints %+v, %v", cps, err)
	}
	want := map[string][]string{"in": nil, "count": {"in"}, "out": {"count"}}
	for _, c := range cps {
		if !reflect.DeepEqual(c.Inputs, want) {
			t.Fatalf("checkpoint %d: inputs %v, want %v", c.ID, c.Inputs, want)
		}
	}
}
