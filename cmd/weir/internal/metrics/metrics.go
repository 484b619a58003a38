// Package metrics exports a coordinator's jobs and their running tasks to
// Prometheus: job state, attempts, restarts, failures in a row,
// checkpoints completed and failed (in all, and in a row) and the latest
// one's ID, duration, size and time, and
// each task's counters as its worker last reported them in a heartbeat
// (control.TaskStats), so one scrape of the coordinator covers every worker;
// from a lister that can list workers (WorkerLister), the live workers
// with their slots and the tasks placed on them; and, from one that gives
// a job's latest completed checkpoint (LastCheckpointer), each task's
// figures in it (weir_task_last_checkpoint_*: alignment, start delay,
// snapshot durations, state and channel state sizes), as Flink's
// per-subtask checkpoint metrics.
//
// A job's counters (restarts, failures by kind, checkpoints completed,
// failed and aborted, the checkpoint duration histogram) count all the
// runs of its name the collector saw, for the life of the coordinator
// process: a run (JobStatus.Submitted) counts from 0, and a restore or
// a new submit of the name starts another, so the collector adds the
// counts of the earlier runs as it last saw them. A job no longer
// listed (weir job rm) drops its series and those totals.
package metrics

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirhq/weir/coordinator/control"
)

// JobLister lists jobs with their status; job.Manager and
// control.APIClient implement it.
type JobLister interface {
	Jobs(ctx context.Context) ([]control.JobStatus, error)
}

// WorkerLister lists the live workers with their slots; job.Manager and
// control.APIClient implement it. A JobLister that is one too gets the
// worker metrics exported.
type WorkerLister interface {
	Workers(ctx context.Context) ([]control.WorkerStatus, error)
}

// LastCheckpointer returns a job's latest completed checkpoint or
// savepoint, the one its status's Checkpoints describes
// (control.CheckpointStats.LastID), with each task's metrics
// (control.CheckpointInfo.Tasks); ID 0 when it has none. job.Manager
// implements it from memory. A JobLister that is one too gets the
// weir_task_last_checkpoint_* metrics exported; a scrape calls it once for
// each job that completed a checkpoint (control.API's Checkpoints, which
// lists every checkpoint a job has, is not called).
type LastCheckpointer interface {
	LastCheckpoint(ctx context.Context, job string) (control.CheckpointInfo, error)
}

// WorkerLosses counts the workers lost and those that left since the
// coordinator started; job.Manager implements it. A JobLister that is one
// too gets weir_workers_lost_total and weir_workers_left_total exported.
type WorkerLosses interface {
	WorkerLosses() (lost, left uint64)
}

// states are the job states weir_job_state reports, one series each.
var states = []control.JobState{control.JobCreated, control.JobRunning, control.JobRestarting,
	control.JobFailed, control.JobCanceled, control.JobFinished}

// Collector is a prometheus.Collector of the jobs a JobLister returns.
type Collector struct {
	jobs    JobLister
	timeout time.Duration

	jobState, attempt, restarts, checkpoint                      *prometheus.Desc
	cpCompleted, cpFailed, cpAborted, cpDuration, cpSize, cpTime *prometheus.Desc
	cpFailedInARow, failuresInARow                               *prometheus.Desc
	recordsIn, recordsOut, busy, backpressured, cpts             *prometheus.Desc
	memory, memoryLimit, cpHistogram, queued, inputBuffer        *prometheus.Desc
	pending, awaited                                             *prometheus.Desc
	pendingBytes, dropped                                        *prometheus.Desc
	workersLive, slots, slotsUsed, workersLost, workersLeft      *prometheus.Desc
	cordoned                                                     *prometheus.Desc
	failures                                                     *prometheus.Desc
	scrapeErrors                                                 prometheus.Counter
	// lastTask are the weir_task_last_checkpoint_* gauges.
	lastTask []taskFigure

	// mu serializes scrapes: each lists the jobs and updates totals,
	// which keeps, by job name, the counts of its runs (see runTotals).
	mu     sync.Mutex
	totals map[string]*runTotals
}

// taskFigure is a gauge of one figure a task's ack of a checkpoint carried.
type taskFigure struct {
	metric  string // the figure's control.Metric* name
	seconds bool   // the figure is nanoseconds, the gauge seconds
	desc    *prometheus.Desc
}

// lastCheckpointOf ends the help of the weir_task_last_checkpoint_* gauges.
const lastCheckpointOf = " In the job's latest completed checkpoint or savepoint (the one weir_job_last_checkpoint_duration_seconds describes), as the task's acknowledgement reported it; no sample for a task that did not report the figure. The worker label is the task's worker now (the snapshot may be an earlier attempt's, taken on another)."

// taskFigures returns the weir_task_last_checkpoint_* gauges, labelled
// by task (job, task, worker).
func taskFigures(task []string) []taskFigure {
	const ns, one = true, false
	f := func(metric string, seconds bool, name, help string) taskFigure {
		return taskFigure{metric: metric, seconds: seconds,
			desc: prometheus.NewDesc("weir_task_last_checkpoint_"+name, help+lastCheckpointOf, task, nil)}
	}
	return []taskFigure{
		f(control.MetricStartDelayNanos, ns, "start_delay_seconds",
			"Start delay: from the checkpoint's trigger (the timestamp its barrier carries, in milliseconds, by the coordinator's clock) to the first barrier the task received, by its worker's clock (a source task receives the trigger itself); the time the barrier queued behind records in the channels on its way included."),
		f(control.MetricAlignmentNanos, ns, "alignment_seconds",
			"Alignment: from the first barrier the task received to the last of its inputs' (aligned and at-least-once), or to the snapshot of an aligned checkpoint that turned unaligned on its alignment timeout; 0 for a snapshot unaligned from its first barrier, and for a task with one input or none."),
		f(control.MetricSyncNanos, ns, "sync_duration_seconds",
			"The synchronous part of the task's snapshot, while it took no input: the operator's state taken (Snapshot), a sink's pre-commit, the barrier forwarded."),
		f(control.MetricAsyncNanos, ns, "async_duration_seconds",
			"The asynchronous part of the task's snapshot: its write to the checkpoint store, in the background (of an unaligned snapshot, once the input in flight up to the barriers of all its inputs was recorded), until the task acknowledged the checkpoint."),
		f(control.MetricCommitWaitNanos, ns, "commit_wait_seconds",
			"Of a sink task's start delay, the time it spent in its sink's commits of earlier checkpoints after the trigger, before its barrier came; reported only by a sink that waited."),
		f(control.MetricOutputBlockedNanos, ns, "output_blocked_seconds",
			"Of the task's start delay, the time it spent blocked sending its output (backpressured by a task after it, slower than its input) rather than taking input; reported only by a task that was blocked."),
		f(control.MetricStateBytes, one, "state_bytes",
			"The size of the task's state in its snapshot: an operator's state, a sink's pre-commit state (the output it staged); 0 for a source task (its offset is not counted) and a task without state."),
		f(control.MetricChannelStateBytes, one, "channel_state_bytes",
			"In-flight records the task's snapshot holds: input and output channel state, which only an unaligned snapshot persists (0 for an aligned one)."),
		f(control.MetricSnapshotBytes, one, "size_bytes",
			"Bytes of the task's snapshot object in the checkpoint store (state, source offset, channel state, encoded); weir_job_last_checkpoint_size_bytes is the sum over the tasks."),
		f(control.MetricBufferedBytes, one, "alignment_buffered_bytes",
			"Input the task held back during its alignment from the channels whose barrier had come."),
		f(control.MetricSpilledBytes, one, "alignment_spilled_bytes",
			"Of weir_task_last_checkpoint_alignment_buffered_bytes, the bytes spilled to a temporary file once the alignment's memory budget was full."),
		f(control.MetricUnaligned, one, "unaligned",
			"1 when the task's snapshot was unaligned (unaligned mode, or aligned-timeout past its timeout), else 0."),
	}
}

// counts are a job's counters as one run of it counts them, from 0.
type counts struct {
	restarts                   int64
	failures                   map[string]int64 // by kind label
	completed, failed, aborted int64
	buckets                    [len(control.CheckpointDurationBounds)]int64
	sum                        time.Duration
}

func runCounts(j control.JobStatus) counts {
	cp := j.Checkpoints
	c := counts{restarts: int64(j.Restarts), completed: cp.Completed, failed: cp.Failed, aborted: cp.Aborted,
		buckets: cp.DurationBuckets, sum: cp.DurationSum}
	for kind, n := range j.FailureCounts {
		k := string(kind)
		if kind == control.FailureUnknown {
			k = "unknown"
		}
		if c.failures == nil {
			c.failures = map[string]int64{}
		}
		c.failures[k] += int64(n)
	}
	return c
}

// plus returns the sum of c and o.
func (c counts) plus(o counts) counts {
	s := c
	s.restarts += o.restarts
	s.completed += o.completed
	s.failed += o.failed
	s.aborted += o.aborted
	for i := range s.buckets {
		s.buckets[i] += o.buckets[i]
	}
	s.sum += o.sum
	s.failures = maps.Clone(c.failures)
	for k, n := range o.failures {
		if s.failures == nil {
			s.failures = map[string]int64{}
		}
		s.failures[k] += n
	}
	return s
}

// runTotals are a job's counts: its run (Submitted) as last scraped,
// and the sum of its earlier runs', each as the last scrape that saw it
// did.
type runTotals struct {
	run     time.Time
	last    counts
	earlier counts
}

// total returns the job's counts of all its runs the collector saw,
// taking j as its run's now: a run of another Submitted than the one
// last seen ends that one, whose counts go to the earlier runs'.
func (c *Collector) total(j control.JobStatus) counts {
	t := c.totals[j.Name]
	switch {
	case t == nil:
		t = &runTotals{run: j.Submitted}
		c.totals[j.Name] = t
	case !t.run.Equal(j.Submitted):
		t.earlier = t.earlier.plus(t.last)
		t.run = j.Submitted
	}
	t.last = runCounts(j)
	return t.earlier.plus(t.last)
}

// NewCollector returns a collector of jobs's jobs; each scrape lists them
// once, giving up after timeout (0 = 5s).
func NewCollector(jobs JobLister, timeout time.Duration) *Collector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	job := []string{"job"}
	task := []string{"job", "task", "worker"}
	return &Collector{jobs: jobs, timeout: timeout, totals: map[string]*runTotals{},
		jobState: prometheus.NewDesc("weir_job_state", "1 for the job's current state, 0 for the others.", []string{"job", "state"}, nil),
		attempt:  prometheus.NewDesc("weir_job_attempt", "The job's current attempt, from 1.", job, nil),
		restarts: prometheus.NewDesc("weir_job_restarts_total",
			"Failovers of the job, in all the runs of its name since the coordinator started (a restore or a new submit adds on).", job, nil),
		checkpoint: prometheus.NewDesc("weir_job_latest_checkpoint_id",
			"ID of the job's latest completed checkpoint (0: none).", job, nil),
		cpCompleted: prometheus.NewDesc("weir_job_checkpoints_completed_total",
			"Checkpoints and savepoints of the job that completed, in all the runs of its name since the coordinator started (a restore or a new submit adds on).", job, nil),
		cpFailed: prometheus.NewDesc("weir_job_checkpoints_failed_total",
			"Checkpoints and savepoints of the job that failed (expired, declined by a task, or their metadata not written), in all the runs of its name since the coordinator started (a restore or a new submit adds on); those aborted as the job failed over or stopped are not counted.", job, nil),
		cpAborted: prometheus.NewDesc("weir_job_checkpoints_aborted_total",
			"Checkpoints aborted that are no failure: cut by a failover or a stop, or as a newer one completed, in all the runs of the job's name since the coordinator started (a restore or a new submit adds on).", job, nil),
		cpFailedInARow: prometheus.NewDesc("weir_job_checkpoints_failed_in_a_row",
			"Checkpoints and savepoints of the job that failed (as weir_job_checkpoints_failed_total counts them) since its latest completed one: above 0, its checkpoints fail now.", job, nil),
		failuresInARow: prometheus.NewDesc("weir_job_failures_in_a_row",
			"Failures of the job since its latest completed checkpoint, as its restart strategy counts them: one more than restart.attempts fails the job.", job, nil),
		cpDuration: prometheus.NewDesc("weir_job_last_checkpoint_duration_seconds",
			"Trigger to completion of the job's latest completed checkpoint or savepoint.", job, nil),
		cpSize: prometheus.NewDesc("weir_job_last_checkpoint_size_bytes",
			"Snapshot bytes of the job's latest completed checkpoint or savepoint, all tasks.", job, nil),
		cpTime: prometheus.NewDesc("weir_job_last_checkpoint_timestamp_seconds",
			"When the job's latest completed checkpoint or savepoint completed (Unix time).", job, nil),
		recordsIn:  prometheus.NewDesc("weir_task_records_in_total", "Records the task took from its inputs or source.", task, nil),
		recordsOut: prometheus.NewDesc("weir_task_records_out_total", "Records the task emitted to its outputs or sink.", task, nil),
		busy: prometheus.NewDesc("weir_task_busy_seconds_total",
			"Time the task spent processing input (its operator; a sink task's writes) and taking snapshots.", task, nil),
		backpressured: prometheus.NewDesc("weir_task_backpressured_seconds_total",
			"Time the task was blocked on its output (a channel without credit, a sink's commit).", task, nil),
		cpts: prometheus.NewDesc("weir_task_checkpoints_total", "Snapshots the task took.", task, nil),
		cpHistogram: prometheus.NewDesc("weir_job_checkpoint_duration_seconds",
			"Durations of the job's completed checkpoints and savepoints, trigger to completion, in all the runs of its name since the coordinator started (a restore or a new submit adds on).", job, nil),
		queued: prometheus.NewDesc("weir_task_queued_records",
			"Records a task's input channels hold that it has not processed (with weir_source_pending_messages: the job's backlog, task by task).", task, nil),
		inputBuffer: prometheus.NewDesc("weir_task_input_buffer_bytes",
			"The sum of a task's input channels' buffer sizes in effect, as buffer debloating (channels.debloat) sized them to what the task takes in the target time; absent when it does not debloat.", task, nil),
		memory: prometheus.NewDesc("weir_task_memory_bytes",
			"An operator task's linear memory after its latest call (its limit: weir_task_memory_limit_bytes).", task, nil),
		memoryLimit: prometheus.NewDesc("weir_task_memory_limit_bytes",
			"An operator task's memory limit (limits.memory).", task, nil),
		pending: prometheus.NewDesc("weir_source_pending_messages",
			"Messages of the source task's input it has not processed yet: for a JetStream source, what its stream holds past what it handed on to the job's channels, records it fetched and holds included; for a core NATS source, what its subscription buffers and the batch it gathers (up to its pending limit; a cancel, stop or failure loses them).", task, nil),
		pendingBytes: prometheus.NewDesc("weir_source_pending_bytes",
			"Bytes a core NATS source task's subscription buffers that the task has not taken (its limit: the source's pending-bytes); core NATS sources only.", task, nil),
		dropped: prometheus.NewDesc("weir_source_dropped_messages_total",
			"Messages a core NATS source task's subscription dropped, in the task's attempt: they came while the job fell behind its input past the source's pending limit (pending-messages, pending-bytes), and are lost; core NATS sources only.", task, nil),
		awaited: prometheus.NewDesc("weir_source_awaited_messages",
			"Sequences a bounded source task's stream lacks before the source's stop (its stop minus the stream's last sequence), while it waits for them.", task, nil),
		workersLive: prometheus.NewDesc("weir_workers_live", "Workers whose heartbeats the coordinator hears.", nil, nil),
		workersLost: prometheus.NewDesc("weir_workers_lost_total",
			"Workers declared lost (heartbeats stopped: killed, cut off) since the coordinator started.", nil, nil),
		workersLeft: prometheus.NewDesc("weir_workers_left_total",
			"Workers that stopped and said goodbye (SIGTERM, Ctrl-C) since the coordinator started.", nil, nil),
		failures: prometheus.NewDesc("weir_job_failures_total",
			"Failures of the job by kind (trap, memory-limit, deadline, worker-lost, stream, ...; unknown for one of none), in all the runs of its name since the coordinator started (a restore or a new submit adds on).",
			[]string{"job", "kind"}, nil),
		slots: prometheus.NewDesc("weir_worker_slots",
			"The most tasks the worker takes at a time (weir worker -slots); 0 means no limit.", []string{"worker", "host"}, nil),
		slotsUsed: prometheus.NewDesc("weir_worker_slots_used",
			"Tasks placed on the worker of the jobs that have not ended: what placement counts against its slots.", []string{"worker", "host"}, nil),
		cordoned: prometheus.NewDesc("weir_worker_cordoned",
			"1 while the worker is cordoned (weir worker drain, until weir worker uncordon): no task is placed on it; draining while its slots used are above 0.", []string{"worker", "host"}, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "weir_scrape_errors_total",
			Help: "Scrapes that could not list the jobs or the workers (such a scrape has no job series)."}),
		lastTask: taskFigures(task),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobState, c.attempt, c.restarts, c.checkpoint,
		c.cpCompleted, c.cpFailed, c.cpAborted, c.cpDuration, c.cpSize, c.cpTime, c.cpFailedInARow, c.failuresInARow,
		c.recordsIn, c.recordsOut, c.busy, c.backpressured, c.cpts, c.memory, c.memoryLimit, c.cpHistogram, c.queued, c.inputBuffer, c.pending, c.awaited, c.pendingBytes, c.dropped,
		c.workersLive, c.slots, c.slotsUsed, c.workersLost, c.workersLeft, c.cordoned, c.failures} {
		ch <- d
	}
	for _, f := range c.lastTask {
		ch <- f.desc
	}
	c.scrapeErrors.Describe(ch)
}

// Collect implements prometheus.Collector. The task counters restart
// from 0 with each attempt, which Prometheus takes as a counter reset;
// the job counters do not (see the package doc).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	defer c.scrapeErrors.Collect(ch)
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	if wl, ok := c.jobs.(WorkerLosses); ok {
		lost, left := wl.WorkerLosses()
		ch <- prometheus.MustNewConstMetric(c.workersLost, counter, float64(lost))
		ch <- prometheus.MustNewConstMetric(c.workersLeft, counter, float64(left))
	}
	if wl, ok := c.jobs.(WorkerLister); ok {
		workers, err := wl.Workers(ctx)
		if err != nil {
			c.scrapeErrors.Inc()
			return
		}
		live := 0
		for _, w := range workers {
			if w.Down {
				continue // a cordoned worker that stopped: no slots, no gauge of a live one
			}
			live++
			ch <- prometheus.MustNewConstMetric(c.slots, gauge, float64(w.Slots), w.ID, w.Host)
			ch <- prometheus.MustNewConstMetric(c.slotsUsed, gauge, float64(w.Used), w.ID, w.Host)
			cordoned := 0.0
			if w.Cordoned {
				cordoned = 1
			}
			ch <- prometheus.MustNewConstMetric(c.cordoned, gauge, cordoned, w.ID, w.Host)
		}
		ch <- prometheus.MustNewConstMetric(c.workersLive, gauge, float64(live))
	}
	jobs, err := c.jobs.Jobs(ctx)
	if err != nil {
		c.scrapeErrors.Inc()
		return
	}
	// A job no longer listed was removed: its totals go with it.
	listed := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		listed[j.Name] = true
	}
	maps.DeleteFunc(c.totals, func(name string, _ *runTotals) bool { return !listed[name] })
	for _, j := range jobs {
		for _, s := range states {
			v := 0.0
			if j.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.jobState, gauge, v, j.Name, string(s))
		}
		ch <- prometheus.MustNewConstMetric(c.attempt, gauge, float64(j.Attempt), j.Name)
		tot := c.total(j)
		ch <- prometheus.MustNewConstMetric(c.restarts, counter, float64(tot.restarts), j.Name)
		ch <- prometheus.MustNewConstMetric(c.checkpoint, gauge, float64(j.LatestCheckpoint), j.Name)
		cp := j.Checkpoints
		ch <- prometheus.MustNewConstMetric(c.cpCompleted, counter, float64(tot.completed), j.Name)
		ch <- prometheus.MustNewConstMetric(c.cpFailed, counter, float64(tot.failed), j.Name)
		ch <- prometheus.MustNewConstMetric(c.cpAborted, counter, float64(tot.aborted), j.Name)
		buckets := make(map[float64]uint64, len(control.CheckpointDurationBounds))
		for i, b := range control.CheckpointDurationBounds {
			buckets[b.Seconds()] = uint64(tot.buckets[i])
		}
		ch <- prometheus.MustNewConstHistogram(c.cpHistogram, uint64(tot.completed), tot.sum.Seconds(), buckets, j.Name)
		ch <- prometheus.MustNewConstMetric(c.cpFailedInARow, gauge, float64(cp.FailedInARow), j.Name)
		ch <- prometheus.MustNewConstMetric(c.failuresInARow, gauge, float64(j.FailuresInARow), j.Name)
		for k, n := range tot.failures {
			ch <- prometheus.MustNewConstMetric(c.failures, counter, float64(n), j.Name, k)
		}
		if cp.LastID > 0 {
			ch <- prometheus.MustNewConstMetric(c.cpDuration, gauge, cp.LastDuration.Seconds(), j.Name)
			ch <- prometheus.MustNewConstMetric(c.cpSize, gauge, float64(cp.LastSize), j.Name)
			ch <- prometheus.MustNewConstMetric(c.cpTime, gauge, float64(cp.LastCompleted.UnixNano())/1e9, j.Name)
			if lc, ok := c.jobs.(LastCheckpointer); ok {
				c.collectLastCheckpoint(ctx, ch, lc, j)
			}
		}
		for _, t := range j.Tasks {
			c.collectTask(ch, t.Stats, j.Name, t.Task, t.Worker)
		}
	}
}

// collectTask sends the weir_task_* and weir_source_* metrics of a task's
// counters s, labelled l (job, task, worker).
func (c *Collector) collectTask(ch chan<- prometheus.Metric, s control.TaskStats, l ...string) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(c.recordsIn, counter, float64(s.RecordsIn), l...)
	ch <- prometheus.MustNewConstMetric(c.recordsOut, counter, float64(s.RecordsOut), l...)
	ch <- prometheus.MustNewConstMetric(c.busy, counter, time.Duration(s.BusyNanos).Seconds(), l...)
	ch <- prometheus.MustNewConstMetric(c.backpressured, counter, time.Duration(s.BackpressuredNanos).Seconds(), l...)
	ch <- prometheus.MustNewConstMetric(c.cpts, counter, float64(s.Checkpoints), l...)
	if s.SourcePending == nil {
		ch <- prometheus.MustNewConstMetric(c.queued, gauge, float64(s.QueuedRecords), l...)
	}
	if b := s.InputBufferBytes; b > 0 {
		ch <- prometheus.MustNewConstMetric(c.inputBuffer, gauge, float64(b), l...)
	}
	if s.MemoryLimit > 0 {
		ch <- prometheus.MustNewConstMetric(c.memory, gauge, float64(s.MemoryBytes), l...)
		ch <- prometheus.MustNewConstMetric(c.memoryLimit, gauge, float64(s.MemoryLimit), l...)
	}
	if p := s.SourcePending; p != nil {
		ch <- prometheus.MustNewConstMetric(c.pending, gauge, float64(*p), l...)
	}
	if cs := s.CoreSubscription; cs != nil {
		ch <- prometheus.MustNewConstMetric(c.pendingBytes, gauge, float64(cs.PendingBytes), l...)
		ch <- prometheus.MustNewConstMetric(c.dropped, counter, float64(cs.Dropped), l...)
	}
	if a := s.AwaitedStop; a > s.StreamLastSeq {
		ch <- prometheus.MustNewConstMetric(c.awaited, gauge, float64(a-s.StreamLastSeq), l...)
	}
}

// collectLastCheckpoint sends the weir_task_last_checkpoint_* gauges of
// job j's latest completed checkpoint: a sample for each figure each task
// reported. A job whose checkpoint cannot be had (removed since it was
// listed) has none.
func (c *Collector) collectLastCheckpoint(ctx context.Context, ch chan<- prometheus.Metric, lc LastCheckpointer, j control.JobStatus) {
	in, err := lc.LastCheckpoint(ctx, j.Name)
	if err != nil || in.ID == 0 {
		return
	}
	for task, m := range in.Tasks {
		l := []string{j.Name, task, j.Assignment[task]}
		for _, f := range c.lastTask {
			v, ok := m[f.metric]
			if !ok {
				continue
			}
			x := float64(v)
			if f.seconds {
				x = time.Duration(v).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, x, l...)
		}
	}
}

// Handler serves c, with the Go runtime's and the process's metrics, in
// the Prometheus exposition formats.
func Handler(c prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector()) // go_build_info: the binary's module version and checksum
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// TaskLister lists a worker's running tasks with their counters, as its
// heartbeats carry them; worker.Worker implements it.
type TaskLister interface {
	RunningTasks() []control.TaskRef
}

// WorkerCollector is a prometheus.Collector of one worker's own tasks
// (weir worker -metrics): the weir_task_* and weir_source_* metrics a
// coordinator's Collector exports of them from heartbeats, by the same
// names and labels, read from the worker itself, so that they are there
// while no coordinator is.
type WorkerCollector struct {
	c      *Collector
	tasks  TaskLister
	worker string
}

// NewWorkerCollector returns a collector of the tasks of worker (its ID,
// the worker label) that tasks lists.
func NewWorkerCollector(worker string, tasks TaskLister) *WorkerCollector {
	return &WorkerCollector{c: NewCollector(nil, 0), tasks: tasks, worker: worker}
}

// Describe implements prometheus.Collector.
func (w *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	c := w.c
	for _, d := range []*prometheus.Desc{c.recordsIn, c.recordsOut, c.busy, c.backpressured, c.cpts, c.memory, c.memoryLimit,
		c.queued, c.inputBuffer, c.pending, c.awaited, c.pendingBytes, c.dropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (w *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range w.tasks.RunningTasks() {
		if t.Stats != nil {
			w.c.collectTask(ch, *t.Stats, t.Job, t.Task, w.worker)
		}
	}
}
