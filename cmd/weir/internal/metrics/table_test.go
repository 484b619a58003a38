package metrics_test

import (
	"context"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/coordinator/control"
)

// everything is a coordinator whose jobs, tasks and workers give every
// metric a sample: a job with a checkpoint and failures, an operator
// task that debloats, a JetStream source waiting for its stop, a core
// NATS source, a cordoned worker.
type everything struct{}

func (everything) Jobs(context.Context) ([]control.JobStatus, error) {
	pending := int64(3)
	cp := control.CheckpointStats{Completed: 1, Failed: 1, Aborted: 1, FailedInARow: 1, LastID: 2,
		LastDuration: 8 * time.Millisecond, LastSize: 100, LastCompleted: time.Unix(1e9, 0)}
	cp.Observe(8 * time.Millisecond)
	return []control.JobStatus{{Name: "all", State: control.JobRunning, Attempt: 2, Restarts: 1, FailuresInARow: 1,
		FailureCounts: map[control.FailureKind]int{control.FailureWorkerLost: 1}, LatestCheckpoint: 2, Checkpoints: cp,
		Assignment: map[string]string{"in-0": "w1", "op-0": "w1", "core-0": "w1"},
		Tasks: []control.TaskStatus{
			{Task: "in-0", Worker: "w1", Stats: control.TaskStats{RecordsIn: 1, SourcePending: &pending, AwaitedStop: 10, StreamLastSeq: 4}},
			{Task: "op-0", Worker: "w1", Stats: control.TaskStats{RecordsIn: 1, QueuedRecords: 2, InputBufferBytes: 16384, MemoryBytes: 1 << 20, MemoryLimit: 1 << 24}},
			{Task: "core-0", Worker: "w1", Stats: control.TaskStats{SourcePending: &pending, CoreSubscription: &control.CoreSubscription{Dropped: 1, PendingBytes: 10}}},
		}}}, nil
}

func (everything) Workers(context.Context) ([]control.WorkerStatus, error) {
	return []control.WorkerStatus{{ID: "w1", Host: "h", Slots: 4, Used: 3, Cordoned: true}}, nil
}

func (everything) WorkerLosses() (lost, left uint64) { return 1, 1 }

func (everything) LastCheckpoint(context.Context, string) (control.CheckpointInfo, error) {
	m := map[string]int64{}
	for _, k := range []string{control.MetricStartDelayNanos, control.MetricAlignmentNanos, control.MetricSyncNanos,
		control.MetricAsyncNanos, control.MetricCommitWaitNanos, control.MetricOutputBlockedNanos, control.MetricStateBytes,
		control.MetricChannelStateBytes, control.MetricSnapshotBytes, control.MetricBufferedBytes, control.MetricSpilledBytes,
		control.MetricUnaligned} {
		m[k] = 1
	}
	return control.CheckpointInfo{ID: 2, Tasks: map[string]map[string]int64{"op-0": m}}, nil
}

// row is a metric of the table in docs/METRICS.md.
type row struct {
	typ    string
	labels []string
}

// metricsTable reads the table of docs/METRICS.md, by metric name ("go_*"
// for a family of names).
func metricsTable(t *testing.T) map[string]row {
	t.Helper()
	doc, err := os.ReadFile("../../../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("^\\| `([a-z_*]+)` \\|\\s*([a-z]*)\\s*\\|([^|]*)\\|")
	table := map[string]row{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		if _, dup := table[m[1]]; dup {
			t.Errorf("docs/METRICS.md lists %s twice", m[1])
		}
		table[m[1]] = row{typ: m[2], labels: labels}
	}
	if len(table) < 40 {
		t.Fatalf("docs/METRICS.md: %d metrics read from its table; has its layout changed?", len(table))
	}
	return table
}

// listed returns the table's row of name: its own, or a family's
// ("go_*") it is of.
func listed(table map[string]row, name string) (row, bool) {
	if r, ok := table[name]; ok {
		return r, true
	}
	for n, r := range table {
		if prefix, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, prefix) {
			return r, true
		}
	}
	return row{}, false
}

// docs/METRICS.md lists every metric weir exposes, with its type and
// labels, and none it does not: every metric the collector describes, and
// every family a scrape of the handler exposes (the Go runtime's and the
// process's by their families, go_* and process_*).
func TestMetricsTableListsEveryMetric(t *testing.T) {
	table := metricsTable(t)

	// The collector's descriptions: names and labels, whatever the jobs.
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		metrics.NewCollector(everything{}, 0).Describe(ch)
		close(ch)
	}()
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("description %s not understood", d)
		}
		name, labels := m[1], strings.Split(m[2], ",")
		if m[2] == "" {
			labels = nil
		}
		slices.Sort(labels)
		described[name] = true
		r, ok := table[name]
		switch {
		case !ok:
			t.Errorf("%s is exposed and docs/METRICS.md does not list it: add a row (name, type, labels, meaning)", name)
		case !slices.Equal(r.labels, labels):
			t.Errorf("%s: labels %v, docs/METRICS.md says %v", name, labels, r.labels)
		}
	}

	// A scrape of a coordinator whose jobs give every metric a sample:
	// the types, and nothing registered beside the collector unlisted.
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(everything{}, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(got, -1) {
		name, typ := m[1], m[2]
		exposed[name] = true
		r, ok := listed(table, name)
		switch {
		case !ok:
			t.Errorf("%s is exposed and docs/METRICS.md does not list it: add a row (name, type, labels, meaning)", name)
		case r.typ != "" && r.typ != typ:
			t.Errorf("%s is a %s, docs/METRICS.md says %s", name, typ, r.typ)
		}
	}
	for name := range table {
		if strings.HasSuffix(name, "*") {
			continue
		}
		if !exposed[name] {
			t.Errorf("docs/METRICS.md lists %s, which a scrape of every kind of job, task and worker does not expose", name)
		}
		if strings.HasPrefix(name, "weir_") && !described[name] {
			t.Errorf("docs/METRICS.md lists %s, which the collector does not describe", name)
		}
	}
}
