package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// BenchmarkRunnerDiscard measures a runner's discards (DiscardAction) of
// one job on JetStream storage (metadata in KV, state in the object
// store, a real embedded server) while the buckets hold the checkpoints
// of other jobs: each keeps two, of a source, an operator and a sink
// task, the sink's commit marker among them. It reports the discards a
// second.
func BenchmarkRunnerDiscard(b *testing.B) {
	for _, c := range []struct {
		jobs  int
		every bool
	}{{1, true}, {1, false}, {10, true}, {10, false}, {100, true}, {100, false}} {
		jobs, every := c.jobs, c.every
		name := "runner"
		if every {
			name = "list-each"
		}
		b.Run(fmt.Sprintf("jobs=%d/%s", jobs, name), func(b *testing.B) {
			ctx := context.Background()
			_, js := embeddedtest.JetStream(b)
			meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0)
			if err != nil {
				b.Fatal(err)
			}
			state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
			if err != nil {
				b.Fatal(err)
			}
			cat := &Catalog{Meta: meta, State: state}
			put := func(job string, id int64) *Metadata {
				md := &Metadata{Job: job, ID: id, Handles: map[string]string{},
					Metrics: map[string]map[string]int64{"sink-0": {control.MetricCommitReport: 1}}}
				for _, task := range []string{"src-0", "op-0", "sink-0"} {
					k := StateKey(job, id, task)
					if err := state.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
						b.Fatal(err)
					}
					md.Handles[task] = k
				}
				if err := cat.Write(ctx, md); err != nil {
					b.Fatal(err)
				}
				if err := state.Put(ctx, StateKey(job, id, "sink-0")+CommitMarkerSuffix, bytes.NewReader(nil)); err != nil {
					b.Fatal(err)
				}
				return md
			}
			for j := 1; j < jobs; j++ {
				for id := int64(1); id <= 2; id++ {
					put(fmt.Sprintf("job-%d", j), id)
				}
			}
			r := NewRunner(NewMachine("job-0", Config{}, nil, 0), cat, &fakeEffects{}, RunnerOptions{})
			r.Start([]string{"src-0", "op-0", "sink-0"})
			prev := put("job-0", 1)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				md := put("job-0", int64(i+2))
				b.StartTimer()
				if every {
					// What a discard did before: a listing each.
					_ = cat.Discard(ctx, "job-0", prev.ID)
					_, _ = cat.RemoveStrayMarkers(ctx, "job-0")
				} else {
					r.discard(ctx, DiscardAction{ID: prev.ID, Completed: prev}) // retention keeps one
				}
				prev = md
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "discards/s")
		})
	}
}
