package job

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A savepoint whose metadata is in the shape written before metadata
// recorded the run's sources (no "sources"), of a run that is not the
// job's latest: where its run's start: new was resolved is not known.
// Resolved at the restore, the source's subtasks that had read nothing
// when it was taken would skip what was stored since, so the restore is
// refused, saying so; with the start given as a sequence it restores,
// also rescaled (the source 2 → 3: what a rescale needs, the tasks'
// handles and metrics, old metadata has). The latest run's own savepoint
// keeps the start its run resolved.
func TestRestoreFromMetadataWithoutSources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, publish := streamsEnv(t, ctx)
	newSpec := func(parallelism int, start string) *jobspec.Spec {
		s := spec(t, "nw", "checkpointing: {disabled: true}\n")
		s.Sources[0].Parallelism, s.Sources[0].Start = parallelism, start
		return s
	}

	// Savepoint 6 of an earlier run, which started at sequence 4 (start:
	// new after 3 messages), in the old shape, written as it was stored.
	publish(3)
	handles := map[string]string{}
	metrics := map[string]map[string]int64{}
	for _, task := range []string{"in-0", "in-1", "count-0", "count-1", "out-0"} {
		handles[task] = checkpoint.StateKey("nw", 6, task)
		if err := e.fleet.store.Put(ctx, handles[task], strings.NewReader("state")); err != nil {
			t.Fatal(err)
		}
		metrics[task] = map[string]int64{control.MetricStateBytes: 0, control.MetricChannelStateBytes: 0}
	}
	raw := fmt.Appendf(nil, `{"job":"nw","id":6,"savepoint":true,"triggered":"2025-01-02T03:04:05Z","completed":"2025-01-02T03:04:06Z","handles":%s,"metrics":%s}`,
		mustJSON(t, handles), mustJSON(t, metrics))
	sum := sha256.Sum256(raw)
	stored := fmt.Appendf(nil, `{"checksum":"sha256:%s","metadata":%s}`, hex.EncodeToString(sum[:]), raw)
	if err := e.mgr.opts.Catalog.Meta.Put(ctx, checkpoint.MetadataKey("nw", 6), bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	if md, err := e.mgr.opts.Catalog.Read(ctx, "nw", 6); err != nil || md.Sources != nil {
		t.Fatalf("savepoint 6: %+v, %v; want it read, without sources", md, err)
	}

	// The latest run starts at sequence 6.
	publish(2)
	e.submitRunning(t, ctx, newSpec(2, "new"))
	latest := e.savepoint(t, ctx, "nw")
	if _, err := e.api.CancelJob(ctx, "nw"); err != nil {
		t.Fatal(err)
	}
	publish(1)

	starts := func(want string) {
		t.Helper()
		st := waitFor(t, ctx, e, "nw", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
		if g := fmt.Sprint(st.Guarantees); !strings.Contains(g, want) {
			t.Errorf("guarantees %q, want %q", g, want)
		}
		if _, err := e.api.CancelJob(ctx, "nw"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "nw", From: fmt.Sprint(latest)}); err != nil {
		t.Fatalf("restore of the latest run's savepoint %d: %v", latest, err)
	}
	starts("reads from sequence 6 (start: new)")

	for _, req := range []control.RestoreRequest{
		{Job: "nw", From: "6"},                          // the job's spec
		{Job: "nw", From: "6", Spec: newSpec(2, "new")}, // a spec with start: new
	} {
		_, err := e.api.Restore(ctx, req)
		want := "restore nw from checkpoint nw/6: source in has start: new, and the checkpoint (written before checkpoints recorded their run's sources, by an earlier run) does not say where its run started"
		if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("restore of savepoint 6 (spec given: %v): %v; want ErrInvalid saying %q", req.Spec != nil, err, want)
		}
	}

	if _, err := e.api.Restore(ctx, control.RestoreRequest{Job: "nw", From: "6", Spec: newSpec(3, "4")}); err != nil {
		t.Fatalf("restore of savepoint 6, start 4, rescaled: %v", err)
	}
	starts("reads from sequence 4 (start: 4)")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
