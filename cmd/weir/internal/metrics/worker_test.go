package metrics_test

import (
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/coordinator/control"
)

// busyWorker is a worker whose tasks give every task metric a sample.
type busyWorker struct{}

func (busyWorker) RunningTasks() []control.TaskRef {
	pending := int64(3)
	return []control.TaskRef{
		{Job: "all", Attempt: 2, Task: "in-0", Stats: &control.TaskStats{RecordsIn: 1, SourcePending: &pending, AwaitedStop: 10, StreamLastSeq: 4}},
		{Job: "all", Attempt: 2, Task: "op-0", Stats: &control.TaskStats{RecordsIn: 1, QueuedRecords: 2, InputBufferBytes: 16384, MemoryBytes: 1 << 20, MemoryLimit: 1 << 24}},
		{Job: "all", Attempt: 2, Task: "core-0", Stats: &control.TaskStats{SourcePending: &pending, CoreSubscription: &control.CoreSubscription{Dropped: 1, PendingBytes: 10}}},
	}
}

// weir worker -metrics exposes its own tasks' metrics by the names,
// types and labels of the coordinator's (docs/METRICS.md lists them),
// labelled with the worker's ID, and no job or worker metric, which only
// the coordinator knows.
func TestWorkerMetricsAreTheCoordinatorsTaskMetrics(t *testing.T) {
	table := metricsTable(t)
	srv := httptest.NewServer(metrics.Handler(metrics.NewWorkerCollector("w1", busyWorker{})))
	defer srv.Close()
	got := scrape(t, srv.URL)
	var weir int
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(got, -1) {
		name, typ := m[1], m[2]
		r, ok := listed(table, name)
		switch {
		case !ok:
			t.Errorf("%s is exposed by a worker and docs/METRICS.md does not list it", name)
		case r.typ != "" && r.typ != typ:
			t.Errorf("%s is a %s, docs/METRICS.md says %s", name, typ, r.typ)
		}
		if regexp.MustCompile(`^weir_(job|workers?|scrape)_`).MatchString(name) {
			t.Errorf("%s is exposed by a worker, which knows no job or worker state", name)
		}
		if regexp.MustCompile(`^weir_`).MatchString(name) {
			weir++
		}
	}
	if weir != 13 {
		t.Errorf("%d weir_ metrics exposed by a worker, want the 13 weir_task_* and weir_source_* ones:\n%s", weir, got)
	}
	if want := `weir_task_records_in_total{job="all",task="op-0",worker="w1"} 1`; !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(got) {
		t.Errorf("no %s in:\n%s", want, got)
	}
}
