package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s %v", resp.StatusCode, b, err)
	}
	return string(b)
}

// One scrape of the coordinator shows every job's state and each running
// task's counters, as the workers' heartbeats carried them.
func TestScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {interval: 20ms}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(n.Manager, 0)))
	defer srv.Close()
	out := regexp.MustCompile(`\nweir_task_records_out_total\{job="tap",task="out-0",worker="w1"\} (\d+)\n`)
	for {
		got := scrape(t, srv.URL)
		if m := out.FindStringSubmatch(got); m != nil && len(m[1]) >= 2 && strings.Contains(got, "\nweir_job_last_checkpoint_duration_seconds{") {
			for _, line := range []string{
				`weir_job_state{job="tap",state="running"} 1`,
				`weir_job_state{job="tap",state="failed"} 0`,
				`weir_job_attempt{job="tap"} 1`,
				`weir_job_restarts_total{job="tap"} 0`,
				`weir_job_checkpoints_completed_total{job="tap"} `,
				`weir_job_checkpoints_failed_total{job="tap"} 0`,
				`weir_job_checkpoints_aborted_total{job="tap"} `,
				`weir_job_checkpoint_duration_seconds_bucket{job="tap",le="0.1"} `,
				`weir_job_checkpoint_duration_seconds_count{job="tap"} `,
				`go_build_info{`,
				`weir_job_last_checkpoint_duration_seconds{job="tap"} `,
				`weir_job_last_checkpoint_size_bytes{job="tap"} `,
				`weir_job_last_checkpoint_timestamp_seconds{job="tap"} `,
				`weir_task_records_in_total{job="tap",task="in-0",worker="w1"} `,
				`weir_task_busy_seconds_total{job="tap",task="in-0",worker="w1"} `,
				`weir_task_backpressured_seconds_total{job="tap",task="out-0",worker="w1"} `,
				`weir_task_checkpoints_total{job="tap",task="in-0",worker="w1"} `,
				`weir_source_pending_messages{job="tap",task="in-0",worker="w1"} `,
				// The tasks' figures in the latest completed checkpoint.
				`weir_task_last_checkpoint_start_delay_seconds{job="tap",task="in-0",worker="w1"} `,
				`weir_task_last_checkpoint_alignment_seconds{job="tap",task="out-0",worker="w1"} `,
				`weir_task_last_checkpoint_sync_duration_seconds{job="tap",task="out-0",worker="w1"} `,
				`weir_task_last_checkpoint_async_duration_seconds{job="tap",task="in-0",worker="w1"} `,
				`weir_task_last_checkpoint_state_bytes{job="tap",task="in-0",worker="w1"} 0`,
				`weir_task_last_checkpoint_channel_state_bytes{job="tap",task="out-0",worker="w1"} 0`,
				`weir_task_last_checkpoint_unaligned{job="tap",task="out-0",worker="w1"} 0`,
				`weir_workers_live 1`,
				`weir_workers_lost_total 0`,
				`weir_workers_left_total 0`,
				`weir_scrape_errors_total 0`,
				`go_goroutines `,
			} {
				if !strings.Contains(got, "\n"+line) {
					t.Errorf("scrape lacks %q", line)
				}
			}
			// A snapshot is bytes in the store: every task's, and the job's
			// size is their sum.
			size := regexp.MustCompile(`(?m)^weir_task_last_checkpoint_size_bytes\{job="tap",task="(in|out)-0",worker="w1"\} [1-9]\d*$`)
			if n := len(size.FindAllString(got, -1)); n != 2 {
				t.Errorf("%d tasks with a snapshot size above 0 in:\n%s", n, got)
			}
			// The worker takes any number of tasks; the job's two are on it.
			for _, re := range []string{`\nweir_worker_slots\{host="[^"]*",worker="w1"\} 0\n`, `\nweir_worker_slots_used\{host="[^"]*",worker="w1"\} 2\n`,
				`\nweir_worker_cordoned\{host="[^"]*",worker="w1"\} 0\n`} {
				if !regexp.MustCompile(re).MatchString(got) {
					t.Errorf("scrape lacks %s", re)
				}
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the sink's records never reached 10, or no checkpoint completed, in:\n%s", got)
		}
		for range 10 {
			if err := n.Conn.Publish("in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type failing struct{}

func (failing) Jobs(context.Context) ([]control.JobStatus, error) {
	return nil, errors.New("coordinator unreachable")
}

// A scrape that cannot list the jobs still answers, and counts the error.
func TestScrapeError(t *testing.T) {
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(failing{}, 0)))
	defer srv.Close()
	if got := scrape(t, srv.URL); !strings.Contains(got, "weir_scrape_errors_total 1\n") || strings.Contains(got, "weir_job_state") {
		t.Fatalf("scrape:\n%s", got)
	}
}

type fixed []control.JobStatus

func (f fixed) Jobs(context.Context) ([]control.JobStatus, error) { return f, nil }

// A scrape says how many checkpoints of a job failed since its latest
// completed one, and how many failures in a row it had, as its restart
// strategy counts them: what an alert on checkpoints failing now, or a
// job failing over in a loop, needs (the totals grow for good).
func TestScrapeInARow(t *testing.T) {
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(fixed{
		{Name: "loop", State: control.JobRunning, Attempt: 3, Restarts: 2, FailuresInARow: 2, RestartAttempts: 3,
			Checkpoints: control.CheckpointStats{Completed: 1, Failed: 4, LastID: 1, FailedInARow: 3}},
	}, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, line := range []string{
		`weir_job_checkpoints_failed_in_a_row{job="loop"} 3`,
		`weir_job_failures_in_a_row{job="loop"} 2`,
	} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
}

// A job's failures are counted by kind, one of none as unknown: alerts
// tell a trap from a lost worker.
func TestScrapeFailuresByKind(t *testing.T) {
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(fixed{{Name: "j", State: control.JobRunning, Attempt: 4,
		FailureCounts: map[control.FailureKind]int{control.FailureTrap: 2, control.FailureWorkerLost: 1, control.FailureUnknown: 1}}}, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, line := range []string{`weir_job_failures_total{job="j",kind="trap"} 2`, `weir_job_failures_total{job="j",kind="worker-lost"} 1`,
		`weir_job_failures_total{job="j",kind="unknown"} 1`} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
}

// An operator task's memory and its limit are gauges; other tasks have
// none.
func TestScrapeOperatorMemory(t *testing.T) {
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(fixed{{Name: "j", State: control.JobRunning, Attempt: 1,
		Tasks: []control.TaskStatus{{Task: "op-0", Worker: "w1", Stats: control.TaskStats{MemoryBytes: 3 << 20, MemoryLimit: 64 << 20, QueuedRecords: 42, InputBufferBytes: 48 << 10}},
			{Task: "in-0", Worker: "w1"}}}}, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, line := range []string{`weir_task_memory_bytes{job="j",task="op-0",worker="w1"} 3.145728e+06`,
		`weir_task_memory_limit_bytes{job="j",task="op-0",worker="w1"} 6.7108864e+07`,
		`weir_task_queued_records{job="j",task="op-0",worker="w1"} 42`,
		`weir_task_input_buffer_bytes{job="j",task="op-0",worker="w1"} 49152`} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if strings.Contains(got, `weir_task_memory_bytes{job="j",task="in-0"`) {
		t.Error("a source task has a memory gauge")
	}
	if strings.Contains(got, `weir_task_input_buffer_bytes{job="j",task="in-0"`) {
		t.Error("a task that does not debloat has an input buffer gauge")
	}
}

// A core NATS source task's backlog is its pending messages and bytes,
// and the messages its subscription dropped a counter; a JetStream
// source task has neither of the core source's series.
func TestScrapeCoreSourceDrops(t *testing.T) {
	pending := func(n int64) *int64 { return &n }
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(fixed{{Name: "j", State: control.JobRunning, Attempt: 1,
		Tasks: []control.TaskStatus{{Task: "in-0", Worker: "w1", Stats: control.TaskStats{SourcePending: pending(5096),
			CoreSubscription: &control.CoreSubscription{Dropped: 42999, PendingBytes: 600000, LimitMessages: 1000, LimitBytes: 64 << 20}}},
			{Task: "orders-0", Worker: "w1", Stats: control.TaskStats{SourcePending: pending(7)}}}}}, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, line := range []string{`weir_source_dropped_messages_total{job="j",task="in-0",worker="w1"} 42999`,
		`weir_source_pending_messages{job="j",task="in-0",worker="w1"} 5096`,
		`weir_source_pending_bytes{job="j",task="in-0",worker="w1"} 600000`,
		`weir_source_pending_messages{job="j",task="orders-0",worker="w1"} 7`,
		`# TYPE weir_source_dropped_messages_total counter`} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if strings.Contains(got, `weir_source_dropped_messages_total{job="j",task="orders-0"`) || strings.Contains(got, `weir_source_pending_bytes{job="j",task="orders-0"`) {
		t.Error("a JetStream source task has a core source's series")
	}
}

// runs is a JobLister whose jobs the test changes between scrapes.
type runs struct {
	mu   sync.Mutex
	jobs []control.JobStatus
}

func (r *runs) Jobs(context.Context) ([]control.JobStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.jobs), nil
}

func (r *runs) set(jobs ...control.JobStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = jobs
}

// A job's counters grow for the life of the coordinator across its runs:
// a restore (a new run, counting from 0) adds to what the runs before
// counted, also when the new run's counts passed the old ones before a
// scrape saw it; a removed job drops its series, and one submitted again
// counts from 0.
func TestScrapeRunsAddUp(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)
	run := func(submitted time.Time, restarts int, failures map[control.FailureKind]int, completed, failed, aborted int64, durations ...time.Duration) control.JobStatus {
		cp := control.CheckpointStats{Completed: completed, Failed: failed, Aborted: aborted, FailedInARow: failed}
		for _, d := range durations {
			cp.Observe(d)
		}
		return control.JobStatus{Name: "dk", State: control.JobRunning, Attempt: 1 + restarts, Restarts: restarts, Submitted: submitted,
			FailureCounts: failures, FailuresInARow: restarts, Checkpoints: cp}
	}
	l := &runs{}
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(l, 0)))
	defer srv.Close()
	expect := func(step string, lines ...string) {
		t.Helper()
		got := scrape(t, srv.URL)
		for _, line := range lines {
			if strings.HasPrefix(line, "!") {
				if strings.Contains(got, "\n"+line[1:]) {
					t.Errorf("%s: scrape has %q", step, line[1:])
				}
			} else if !strings.Contains(got, "\n"+line+"\n") {
				t.Errorf("%s: scrape lacks %q", step, line)
			}
		}
	}

	l.set(run(t0, 1, map[control.FailureKind]int{control.FailureWorkerLost: 1}, 2, 1, 1, 50*time.Millisecond, 2*time.Second))
	expect("first run",
		`weir_job_restarts_total{job="dk"} 1`,
		`weir_job_failures_total{job="dk",kind="worker-lost"} 1`,
		`weir_job_checkpoints_completed_total{job="dk"} 2`,
		`weir_job_checkpoints_failed_total{job="dk"} 1`,
		`weir_job_checkpoints_aborted_total{job="dk"} 1`,
		// Buckets from 5ms: a checkpoint of 50ms is in le="0.05", not in
		// le="0.025".
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.005"} 0`,
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.025"} 0`,
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.05"} 1`,
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.1"} 1`,
		`weir_job_checkpoint_duration_seconds_count{job="dk"} 2`)

	// Restored (weir job restore): a new run, from 0. Its failures series
	// of the first run stays, the counters do not go back.
	t1 := t0.Add(time.Minute)
	l.set(run(t1, 0, nil, 1, 0, 0, 200*time.Millisecond))
	expect("restored",
		`weir_job_restarts_total{job="dk"} 1`,
		`weir_job_failures_total{job="dk",kind="worker-lost"} 1`,
		`weir_job_checkpoints_completed_total{job="dk"} 3`,
		`weir_job_checkpoints_failed_total{job="dk"} 1`,
		`weir_job_checkpoints_aborted_total{job="dk"} 1`,
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.1"} 1`,
		`weir_job_checkpoint_duration_seconds_bucket{job="dk",le="0.5"} 2`,
		`weir_job_checkpoint_duration_seconds_count{job="dk"} 3`,
		`weir_job_checkpoint_duration_seconds_sum{job="dk"} 2.25`,
		// The gauges are the run's.
		`weir_job_attempt{job="dk"} 1`,
		`weir_job_failures_in_a_row{job="dk"} 0`,
		`weir_job_checkpoints_failed_in_a_row{job="dk"} 0`)

	// The run goes on: its own counts grow, added to the first run's.
	l.set(run(t1, 1, map[control.FailureKind]int{control.FailureTrap: 1}, 3, 0, 2, 200*time.Millisecond, time.Second, time.Second))
	expect("restored, on",
		`weir_job_restarts_total{job="dk"} 2`,
		`weir_job_failures_total{job="dk",kind="worker-lost"} 1`,
		`weir_job_failures_total{job="dk",kind="trap"} 1`,
		`weir_job_checkpoints_completed_total{job="dk"} 5`,
		`weir_job_checkpoints_aborted_total{job="dk"} 3`)

	// Restored again, and the third run's counts passed the second's
	// before a scrape saw it: still a new run, added on.
	t2 := t1.Add(time.Minute)
	l.set(run(t2, 3, map[control.FailureKind]int{control.FailureWorkerLost: 3}, 7, 2, 4))
	expect("restored again",
		`weir_job_restarts_total{job="dk"} 5`,
		`weir_job_failures_total{job="dk",kind="worker-lost"} 4`,
		`weir_job_failures_total{job="dk",kind="trap"} 1`,
		`weir_job_checkpoints_completed_total{job="dk"} 12`,
		`weir_job_checkpoints_failed_total{job="dk"} 3`,
		`weir_job_checkpoints_aborted_total{job="dk"} 7`,
		`weir_job_checkpoint_duration_seconds_count{job="dk"} 12`)

	// Removed (weir job rm): its series go, and a job of its name
	// submitted later counts from 0.
	l.set()
	expect("removed", `!weir_job_restarts_total{job="dk"}`, `!weir_job_failures_total{job="dk"`)
	l.set(run(t2.Add(time.Minute), 0, nil, 1, 0, 0))
	expect("submitted again",
		`weir_job_restarts_total{job="dk"} 0`,
		`weir_job_checkpoints_completed_total{job="dk"} 1`,
		`!weir_job_failures_total{job="dk"`)
}

// lastCheckpoint is a JobLister that gives each job's latest completed
// checkpoint too (metrics.LastCheckpointer), as job.Manager does, and
// counts the calls.
type lastCheckpoint struct {
	fixed
	cps   map[string]control.CheckpointInfo
	mu    sync.Mutex
	calls []string
}

func (l *lastCheckpoint) LastCheckpoint(_ context.Context, job string) (control.CheckpointInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, job)
	return l.cps[job], nil
}

// Each task's figures in its job's latest completed checkpoint are gauges
// (Flink's per-subtask checkpoint metrics), in seconds and bytes, labelled
// as the task's other series; a figure a task did not report has no
// sample, and a job that completed no checkpoint is not asked for one.
func TestScrapeLastCheckpointTasks(t *testing.T) {
	ns := func(d time.Duration) int64 { return int64(d) }
	l := &lastCheckpoint{
		fixed: fixed{
			{Name: "j", State: control.JobRunning, Attempt: 2, Assignment: map[string]string{"in-0": "w1", "op-0": "w1", "op-1": "w2", "out-0": "w2"},
				Checkpoints: control.CheckpointStats{Completed: 7, LastID: 7, LastDuration: 2 * time.Second, LastSize: 5 << 20}},
			{Name: "fresh", State: control.JobRunning, Attempt: 1},
		},
		cps: map[string]control.CheckpointInfo{"j": {Job: "j", ID: 7, Status: control.CheckpointCompleted, Unaligned: true, Tasks: map[string]map[string]int64{
			"in-0": {control.MetricStartDelayNanos: ns(3 * time.Millisecond), control.MetricAlignmentNanos: 0, control.MetricSyncNanos: ns(150 * time.Microsecond),
				control.MetricAsyncNanos: ns(12 * time.Millisecond), control.MetricStateBytes: 0, control.MetricChannelStateBytes: 0,
				control.MetricSnapshotBytes: 96, control.MetricUnaligned: 0, control.MetricSourcePosition: 12345},
			"op-0": {control.MetricStartDelayNanos: ns(1250 * time.Millisecond), control.MetricAlignmentNanos: ns(400 * time.Millisecond),
				control.MetricSyncNanos: ns(25 * time.Millisecond), control.MetricAsyncNanos: ns(300 * time.Millisecond),
				control.MetricStateBytes: 4 << 20, control.MetricChannelStateBytes: 0, control.MetricSnapshotBytes: 4<<20 + 200,
				control.MetricBufferedBytes: 65536, control.MetricSpilledBytes: 0, control.MetricUnaligned: 0},
			"op-1": {control.MetricStartDelayNanos: ns(2 * time.Second), control.MetricAlignmentNanos: ns(1500 * time.Millisecond),
				control.MetricStateBytes: 1000, control.MetricChannelStateBytes: 750000, control.MetricSnapshotBytes: 751300, control.MetricUnaligned: 1},
			// An exactly-once sink whose barrier waited for its commits.
			"out-0": {control.MetricStartDelayNanos: ns(1800 * time.Millisecond), control.MetricCommitWaitNanos: ns(900 * time.Millisecond),
				control.MetricStateBytes: 2048, control.MetricSnapshotBytes: 2100, control.MetricCommitReport: 1},
		}}},
	}
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(l, 0)))
	defer srv.Close()
	got := scrape(t, srv.URL)
	for _, line := range []string{
		`weir_task_last_checkpoint_start_delay_seconds{job="j",task="in-0",worker="w1"} 0.003`,
		`weir_task_last_checkpoint_start_delay_seconds{job="j",task="op-0",worker="w1"} 1.25`,
		`weir_task_last_checkpoint_start_delay_seconds{job="j",task="op-1",worker="w2"} 2`,
		`weir_task_last_checkpoint_start_delay_seconds{job="j",task="out-0",worker="w2"} 1.8`,
		`weir_task_last_checkpoint_alignment_seconds{job="j",task="in-0",worker="w1"} 0`,
		`weir_task_last_checkpoint_alignment_seconds{job="j",task="op-0",worker="w1"} 0.4`,
		`weir_task_last_checkpoint_alignment_seconds{job="j",task="op-1",worker="w2"} 1.5`,
		`weir_task_last_checkpoint_sync_duration_seconds{job="j",task="in-0",worker="w1"} 0.00015`,
		`weir_task_last_checkpoint_sync_duration_seconds{job="j",task="op-0",worker="w1"} 0.025`,
		`weir_task_last_checkpoint_async_duration_seconds{job="j",task="in-0",worker="w1"} 0.012`,
		`weir_task_last_checkpoint_async_duration_seconds{job="j",task="op-0",worker="w1"} 0.3`,
		`weir_task_last_checkpoint_commit_wait_seconds{job="j",task="out-0",worker="w2"} 0.9`,
		`weir_task_last_checkpoint_state_bytes{job="j",task="in-0",worker="w1"} 0`,
		`weir_task_last_checkpoint_state_bytes{job="j",task="op-0",worker="w1"} 4.194304e+06`,
		`weir_task_last_checkpoint_state_bytes{job="j",task="out-0",worker="w2"} 2048`,
		`weir_task_last_checkpoint_channel_state_bytes{job="j",task="op-0",worker="w1"} 0`,
		`weir_task_last_checkpoint_channel_state_bytes{job="j",task="op-1",worker="w2"} 750000`,
		`weir_task_last_checkpoint_size_bytes{job="j",task="in-0",worker="w1"} 96`,
		`weir_task_last_checkpoint_size_bytes{job="j",task="op-0",worker="w1"} 4.194504e+06`,
		`weir_task_last_checkpoint_size_bytes{job="j",task="op-1",worker="w2"} 751300`,
		`weir_task_last_checkpoint_alignment_buffered_bytes{job="j",task="op-0",worker="w1"} 65536`,
		`weir_task_last_checkpoint_alignment_spilled_bytes{job="j",task="op-0",worker="w1"} 0`,
		`weir_task_last_checkpoint_unaligned{job="j",task="op-0",worker="w1"} 0`,
		`weir_task_last_checkpoint_unaligned{job="j",task="op-1",worker="w2"} 1`,
	} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	// Not reported, no sample (not 0).
	for _, series := range []string{
		`weir_task_last_checkpoint_commit_wait_seconds{job="j",task="op-0",`,
		`weir_task_last_checkpoint_sync_duration_seconds{job="j",task="out-0",`,
		`weir_task_last_checkpoint_channel_state_bytes{job="j",task="out-0",`,
		`weir_task_last_checkpoint_alignment_buffered_bytes{job="j",task="in-0",`,
		`weir_task_last_checkpoint_unaligned{job="j",task="out-0",`,
		`weir_task_last_checkpoint_start_delay_seconds{job="fresh",`,
	} {
		if strings.Contains(got, "\n"+series) {
			t.Errorf("scrape has %s…", series)
		}
	}
	// The help says which checkpoint.
	if !strings.Contains(got, "\n# HELP weir_task_last_checkpoint_alignment_seconds Alignment: ") ||
		!strings.Contains(got, "latest completed checkpoint or savepoint (the one weir_job_last_checkpoint_duration_seconds describes)") {
		t.Errorf("scrape's help of the task checkpoint gauges:\n%s", got)
	}
	// One call for the one job with a completed checkpoint.
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Equal(l.calls, []string{"j"}) {
		t.Errorf("LastCheckpoint called for %q, want only j", l.calls)
	}
}
