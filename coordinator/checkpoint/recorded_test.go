package checkpoint

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/storage"
)

// The metadata a completed checkpoint keeps in memory (LatestMetadata,
// which the job status reads for its warning of keyed state behind an
// input not partitioned by key) records the run's sources, inputs and
// edges as the metadata written to storage does: a trial's status never
// warned, as the one in memory had no inputs.
func TestLatestMetadataRecordsTheRun(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 20 * time.Millisecond, Timeout: 5 * time.Second}, nil, 0)
	sources := []jobspec.Source{{Name: "in", Kind: jobspec.KindNATS, Subject: "in", Key: jobspec.KeyFromHeader}}
	inputs := map[string][]jobspec.Input{"sum": {{From: "in", Partition: jobspec.RoundRobin}}}
	edges := []plan.Edge{{From: "in", To: "sum", Partition: jobspec.RoundRobin}}
	r := NewRunner(m, cat, eff, RunnerOptions{Sources: sources, Inputs: inputs, Edges: edges})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r.Start([]string{"sum-0"})

	tr := <-eff.trigger
	key := StateKey("j", tr.ID, "sum-0")
	if err := st.Put(ctx, key, strings.NewReader("s")); err != nil {
		t.Fatal(err)
	}
	r.Ack("sum-0", tr.ID, key, map[string]int64{control.MetricSnapshotBytes: 1})
	if id := <-eff.notified; id != tr.ID {
		t.Fatalf("notified %d, want %d", id, tr.ID)
	}
	stored, err := cat.Read(ctx, "j", tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	for what, md := range map[string]*Metadata{"in memory": r.LatestMetadata(), "stored": stored} {
		if md == nil || md.ID != tr.ID || !reflect.DeepEqual(md.Sources, sources) || !reflect.DeepEqual(md.Inputs, inputs) || !reflect.DeepEqual(md.Edges, edges) {
			t.Errorf("%s: checkpoint %d's metadata %+v; want sources %v, inputs %v, edges %v", what, tr.ID, md, sources, inputs, edges)
		}
	}
}
