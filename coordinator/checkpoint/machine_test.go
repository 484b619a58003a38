package checkpoint

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func newM(cfg Config) *Machine {
	m := NewMachine("j", cfg, nil, 0)
	m.Start(at(0), []string{"src-0", "op-0"})
	return m
}

func kinds(acts []Action) string {
	var s []string
	for _, a := range acts {
		switch a := a.(type) {
		case TriggerAction:
			sp := ""
			if a.Savepoint {
				sp = "sp"
			}
			s = append(s, fmt.Sprintf("trigger%s(%d)", sp, a.ID))
		case PersistAction:
			s = append(s, fmt.Sprintf("persist(%d)", a.Metadata.ID))
		case NotifyAction:
			s = append(s, fmt.Sprintf("notify(%d)", a.ID))
		case AbortAction:
			s = append(s, fmt.Sprintf("abort(%d)", a.ID))
		case DiscardAction:
			s = append(s, fmt.Sprintf("discard(%d)", a.ID))
		case FailJobAction:
			s = append(s, "fail")
		}
	}
	return strings.Join(s, " ")
}

func expect(t *testing.T, what string, acts []Action, want string) {
	t.Helper()
	if got := kinds(acts); got != want {
		t.Errorf("%s: actions %q, want %q", what, got, want)
	}
}

// complete acks id from both tasks and persists it successfully.
func complete(t *testing.T, m *Machine, now time.Time, id int64) []Action {
	t.Helper()
	expect(t, "ack src", m.Ack(now, "src-0", id, fmt.Sprintf("j/chk-%d/src-0", id), map[string]int64{control.MetricSnapshotBytes: 10}), "")
	expect(t, "ack op", m.Ack(now, "op-0", id, fmt.Sprintf("j/chk-%d/op-0", id), map[string]int64{control.MetricSnapshotBytes: 5, control.MetricAlignmentNanos: 7, control.MetricUnaligned: 1}), fmt.Sprintf("persist(%d)", id))
	return m.Persisted(now, id, nil)
}

func TestIntervalAndComplete(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: 10 * time.Second, MaxConcurrent: 1, Retained: 2})
	expect(t, "before interval", m.Tick(at(999)), "")
	if w := m.NextWake(); !w.Equal(at(1000)) {
		t.Errorf("next wake %v", w)
	}
	expect(t, "at interval", m.Tick(at(1000)), "trigger(1)")
	expect(t, "max-concurrent blocks", m.Tick(at(2500)), "")
	expect(t, "late ack of unknown id", m.Ack(at(2500), "src-0", 9, "x", nil), "")
	expect(t, "complete", complete(t, m, at(2600), 1), "notify(1)")
	expect(t, "overdue trigger fires at once", m.Tick(at(2600)), "trigger(2)")
	h := m.History()
	if len(h) != 2 || h[1].ID != 1 || h[1].Status != control.CheckpointCompleted || h[1].Size != 15 ||
		h[1].Alignment != 7 || !h[1].Unaligned || h[1].Duration != 1600*time.Millisecond || h[1].Acked != 2 {
		t.Errorf("history = %+v", h)
	}
	if st := m.Stats(); st != (control.CheckpointStats{Completed: 1, LastID: 1, LastDuration: 1600 * time.Millisecond, LastSize: 15, LastCompleted: at(2600),
		DurationBuckets: [12]int64{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, DurationSum: 1600 * time.Millisecond}) {
		t.Errorf("stats = %+v", st)
	}
	if md := m.Latest(); md == nil || md.ID != 1 || md.Handles["op-0"] != "j/chk-1/op-0" {
		t.Errorf("latest = %+v", md)
	}
	expect(t, "duplicate ack after completion", m.Ack(at(2700), "op-0", 1, "x", nil), "")
}

func TestMinPause(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: 10 * time.Second, MinPause: time.Second, MaxConcurrent: 3, Retained: 1})
	expect(t, "first", m.Tick(at(100)), "trigger(1)")
	expect(t, "min-pause implies one at a time", m.Tick(at(300)), "")
	expect(t, "complete", complete(t, m, at(400), 1), "notify(1)")
	expect(t, "within pause", m.Tick(at(1399)), "")
	if w := m.NextWake(); !w.Equal(at(1400)) {
		t.Errorf("next wake %v, want end of pause", w)
	}
	expect(t, "after pause", m.Tick(at(1400)), "trigger(2)")
}

func TestMaxConcurrentAndSubsumed(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: 10 * time.Second, MaxConcurrent: 2, Retained: 5})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	expect(t, "2", m.Tick(at(200)), "trigger(2)")
	expect(t, "third blocked", m.Tick(at(300)), "")
	m.Ack(at(300), "src-0", 1, "h", nil) // 1 half acked
	expect(t, "2 completes, subsumes 1", complete(t, m, at(350), 2), "notify(2) abort(1) discard(1)")
	if h := m.History(); h[1].Status != control.CheckpointFailed || !strings.Contains(h[1].Reason, "subsumed") || !h[1].Aborted {
		t.Errorf("history of 1 = %+v; want it failed, subsumed, as an abort (no failure of its own)", h[1])
	}
	expect(t, "late ack of subsumed 1 discards its state", m.Ack(at(360), "op-0", 1, "h", nil), "discard(1)")
	expect(t, "3", m.Tick(at(360)), "trigger(3)")
}

func TestTimeoutAndTolerableFailures(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, TolerableFailures: 1, Retained: 1})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	if w := m.NextWake(); !w.Equal(at(1100)) {
		t.Errorf("next wake %v, want the timeout", w)
	}
	expect(t, "expire 1, trigger 2", m.Tick(at(1100)), "abort(1) discard(1) trigger(2)")
	if h := m.History(); h[1].ID != 1 || h[1].Aborted {
		t.Errorf("history of the expired 1 = %+v; want a failure, not an abort", h[1])
	}
	if st := m.Stats(); st.LastFailedID != 1 || st.LastFailureCause != control.CheckpointExpired {
		t.Errorf("stats after an expiry: %+v; want its cause %q", st, control.CheckpointExpired)
	}
	expect(t, "decline 2: second failure exceeds", m.Decline(at(1200), "op-0", 2, control.DeclineRefused, "too big"), "abort(2) discard(2) fail")
	expect(t, "3", m.Tick(at(1300)), "trigger(3)")
	expect(t, "decline subsumed is not counted", m.Decline(at(1300), "op-0", 3, control.DeclineSubsumed, ""), "abort(3) discard(3)")
	expect(t, "4", m.Tick(at(1400)), "trigger(4)")
	expect(t, "decline 4 counts once", m.Decline(at(1400), "op-0", 4, control.DeclineFailed, "disk"), "abort(4) discard(4)")
	if st := m.Stats(); st.FailedInARow != 3 || st.LastFailedID != 4 || !st.LastFailed.Equal(at(1400)) || st.LastFailure != "declined by op-0 (failed): disk" ||
		st.LastFailureCause != control.CheckpointDeclined {
		t.Errorf("stats after 3 failures in a row (the subsumed one not counted): %+v", st)
	}
	expect(t, "5", m.Tick(at(1500)), "trigger(5)")
	expect(t, "complete resets the count", complete(t, m, at(1500), 5), "notify(5)")
	expect(t, "6", m.Tick(at(1600)), "trigger(6)")
	expect(t, "one failure tolerated again", m.Decline(at(1600), "op-0", 6, control.DeclineFailed, "disk"), "abort(6) discard(6)")
	expect(t, "7", m.Tick(at(1700)), "trigger(7)")
	m.Ack(at(1700), "src-0", 7, "h", nil)
	m.Ack(at(1700), "op-0", 7, "h", nil)
	expect(t, "metadata write failure counts", m.Persisted(at(1700), 7, fmt.Errorf("disk full")), "abort(7) discard(7) fail")
	// Failures as the tolerance counts them, the subsumed one as aborted;
	// the latest completed checkpoint with its duration, size and time;
	// the failures since it, and the newest with its time, reason and
	// cause.
	want := control.CheckpointStats{Completed: 1, Failed: 5, Aborted: 1, LastID: 5, DurationBuckets: [12]int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, LastDuration: 0, LastSize: 15, LastCompleted: at(1500),
		FailedInARow: 2, LastFailedID: 7, LastFailed: at(1700), LastFailure: "writing metadata failed: disk full",
		LastFailureCause: control.CheckpointMetadataFailed}
	if got := m.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

// An expired checkpoint's reason names the tasks it still waited for: the
// ones holding it up (a sink still recovering a large commit, say), in plan
// order, so that when more than three wait the first named is the one the
// others wait behind (a slow operator's barrier stuck behind its input).
func TestExpiryNamesTheTasksNotAcked(t *testing.T) {
	m := NewMachine("j", Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, TolerableFailures: 5}, nil, 0)
	m.Start(at(0), []string{"src-0", "op-0", "op-1", "sink-0", "sink-1"})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	m.Ack(at(200), "src-0", 1, "h", nil)
	m.Ack(at(200), "op-1", 1, "h", nil)
	reason := func(acts []Action) string {
		for _, a := range acts {
			if a, ok := a.(AbortAction); ok {
				return a.Reason
			}
		}
		return ""
	}
	acts := m.Tick(at(1100))
	expect(t, "expire 1, trigger 2", acts, "abort(1) discard(1) trigger(2)")
	if got, want := reason(acts), "expired after 1s; no snapshot from op-0, sink-0, sink-1"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if got, want := reason(m.Tick(at(2100))), "expired after 1s; no snapshot from src-0, op-0, op-1 and 2 more"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
}

func TestRetention(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 2})
	var out []string
	for i := int64(1); i <= 4; i++ {
		m.Tick(at(int(i) * 100))
		out = append(out, kinds(complete(t, m, at(int(i)*100), i)))
	}
	if got := strings.Join(out, ";"); got != "notify(1);notify(2);notify(3) discard(1);notify(4) discard(2)" {
		t.Errorf("retention: %s", got)
	}
	ret := m.Retained()
	if len(ret) != 2 || ret[0].ID != 4 || ret[1].ID != 3 {
		t.Errorf("retained %d", len(ret))
	}
	if h := m.History(); h[3].Status != control.CheckpointDiscarded {
		t.Errorf("history of 1 = %+v", h[3])
	}
}

func TestSavepoint(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 1})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	id, acts, err := m.TriggerSavepoint(at(150))
	if err != nil || id != 2 {
		t.Fatal(id, err)
	}
	expect(t, "savepoint ignores max-concurrent", acts, "triggersp(2)")
	expect(t, "savepoint completes", complete(t, m, at(200), 2), "notify(2)")
	expect(t, "checkpoint 1 not subsumed by a savepoint", complete(t, m, at(210), 1), "notify(1)")
	m.Tick(at(300))
	expect(t, "checkpoint 3 completes; savepoint not subject to retention", complete(t, m, at(310), 3), "notify(3) discard(1)")
	if ret := m.Retained(); len(ret) != 2 || ret[1].ID != 2 || !ret[1].Savepoint {
		t.Errorf("retained %+v", ret)
	}
	// A failing savepoint does not count towards failures.
	m.cfg.TolerableFailures = 0
	id, _, _ = m.TriggerSavepoint(at(320))
	expect(t, "savepoint declined", m.Decline(at(320), "op-0", id, control.DeclineFailed, "x"), fmt.Sprintf("abort(%d) discard(%d)", id, id))
	expect(t, "stop aborts pending", append(m.Tick(at(400)), m.Stop(at(401), "task failed")...), "trigger(5) abort(5) discard(5)")
	if _, _, err := m.TriggerSavepoint(at(500)); err == nil {
		t.Error("savepoint of a stopped job")
	}
	expect(t, "no triggers when stopped", m.Tick(at(5000)), "")
}

func TestRestoredNumbering(t *testing.T) {
	m := NewMachine("j", Config{Interval: time.Second, Timeout: time.Second}, []*Metadata{{Job: "j", ID: 7}, {Job: "j", ID: 3, Savepoint: true}}, 0)
	if m.NextID() != 8 || m.Latest().ID != 7 {
		t.Errorf("next %d latest %d", m.NextID(), m.Latest().ID)
	}
	m.Forget(7)
	if m.Latest().ID != 3 {
		t.Errorf("after forget latest %d", m.Latest().ID)
	}
}

func TestFinishedTask(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 2, Retained: 1})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	expect(t, "2", m.Tick(at(200)), "trigger(2)")
	m.Ack(at(200), "src-0", 1, "h", nil)
	expect(t, "src finishes: 2 (not acked by src) aborted, 1 (acked) kept", m.Finished(at(250), "src-0"), "abort(2) discard(2)")
	expect(t, "1 still completes", append(m.Ack(at(260), "op-0", 1, "h", nil), m.Persisted(at(260), 1, nil)...), "persist(1) notify(1)")
	expect(t, "no more triggers", m.Tick(at(5000)), "")
	if _, _, err := m.TriggerSavepoint(at(5000)); err == nil {
		t.Error("savepoint after a task finished")
	}
	m.Start(at(6000), []string{"src-0", "op-0"})
	expect(t, "a new attempt checkpoints again", m.Tick(at(6100)), "trigger(3)")
}

// A periodic checkpoint is not triggered while a savepoint is pending: its
// barrier would subsume the savepoint at every task (a task aligns one
// checkpoint at a time), failing the savepoint.
func TestNoPeriodicTriggerDuringSavepoint(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: 10 * time.Second, MaxConcurrent: 1, Retained: 1})
	id, acts, err := m.TriggerSavepoint(at(50))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "savepoint", acts, fmt.Sprintf("triggersp(%d)", id))
	expect(t, "interval passed, savepoint pending", m.Tick(at(100)), "")
	if w := m.NextWake(); !w.Equal(at(50).Add(10 * time.Second)) {
		t.Errorf("next wake %v, want only the savepoint's timeout", w)
	}
	expect(t, "savepoint completes", complete(t, m, at(150), id), fmt.Sprintf("notify(%d)", id))
	expect(t, "periodic checkpoint after it", m.Tick(at(150)), "trigger(2)")
}

// Once a stop savepoint completed, the attempt triggers nothing more: its
// sources take no input, and the sinks commit it before the attempt ends
// (a job stopped, or a bounded job finishing), which may take longer than
// an interval. A periodic checkpoint triggered meanwhile would stay
// pending until the end and be listed as failed ("job finished").
func TestNothingTriggeredAfterAStopSavepoint(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: 10 * time.Second, MaxConcurrent: 1, Retained: 1})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	expect(t, "1 completes", complete(t, m, at(110), 1), "notify(1)")
	id, acts, err := m.TriggerStop(at(150))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "stop savepoint", acts, fmt.Sprintf("triggersp(%d)", id))
	// A stop savepoint that fails leaves the job running: it checkpoints on.
	expect(t, "stop savepoint declined", m.Decline(at(160), "op-0", id, control.DeclineFailed, "x"), fmt.Sprintf("abort(%d) discard(%d)", id, id))
	expect(t, "periodic checkpoint after a failed stop", m.Tick(at(200)), "trigger(3)")
	expect(t, "3 completes", complete(t, m, at(210), 3), "notify(3) discard(1)")

	id, _, err = m.TriggerStop(at(250))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "stop savepoint completes", complete(t, m, at(260), id), fmt.Sprintf("notify(%d)", id))
	expect(t, "no periodic checkpoint while the sinks commit it", m.Tick(at(5000)), "")
	if w := m.NextWake(); !w.IsZero() {
		t.Errorf("next wake %v, want none", w)
	}
	if _, _, err := m.TriggerSavepoint(at(5000)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("stopping with savepoint %d", id)) {
		t.Errorf("savepoint after the stop savepoint: %v", err)
	}
	m.Start(at(6000), []string{"src-0", "op-0"})
	expect(t, "a new attempt checkpoints again", m.Tick(at(6100)), fmt.Sprintf("trigger(%d)", id+1))
}

// A checkpoint every task acked is being persisted: the timeout no longer
// aborts it (neither do declines or a finished task).
func TestTimeoutSparesAPersistingCheckpoint(t *testing.T) {
	m := newM(Config{Interval: 100 * time.Millisecond, Timeout: time.Second, MaxConcurrent: 1, Retained: 1})
	expect(t, "1", m.Tick(at(100)), "trigger(1)")
	m.Ack(at(500), "src-0", 1, "h", nil)
	expect(t, "all acked", m.Ack(at(1099), "op-0", 1, "h", nil), "persist(1)")
	expect(t, "timeout while persisting", m.Tick(at(1100)), "")
	expect(t, "persisted", m.Persisted(at(1200), 1, nil), "notify(1)")
}

// A task whose ack says it reports its sink's commits (an exactly-once
// sink) holds the next periodic trigger after a completion until it
// reported handing the checkpoint's output to its commits: a sink waiting
// for room among its commits takes no input, and a barrier sent meanwhile
// would wait behind the commit of an earlier checkpoint.
func TestTriggerWaitsForSinkCommits(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: 10 * time.Second, MaxConcurrent: 1, Retained: 2})
	ackReporting := func(now time.Time, id int64) []Action {
		t.Helper()
		expect(t, "ack src", m.Ack(now, "src-0", id, "h", nil), "")
		expect(t, "ack sink", m.Ack(now, "op-0", id, "h", map[string]int64{control.MetricCommitReport: 1}), fmt.Sprintf("persist(%d)", id))
		return m.Persisted(now, id, nil)
	}
	expect(t, "first", m.Tick(at(1000)), "trigger(1)")
	expect(t, "complete 1", ackReporting(at(2500), 1), "notify(1)")
	expect(t, "due, the sink has not reported", m.Tick(at(2500)), "")
	if w := m.NextWake(); !w.Equal(at(12500)) {
		t.Errorf("next wake %v, want the end of the wait for reports %v", w, at(12500))
	}
	if m.Committing("src-0", 1) {
		t.Error("a report of a task that need not report ended the wait")
	}
	if m.Committing("op-0", 0) {
		t.Error("a report of an earlier checkpoint ended the wait")
	}
	expect(t, "still waiting", m.Tick(at(3000)), "")
	if !m.Committing("op-0", 1) {
		t.Error("the sink's report did not end the wait")
	}
	expect(t, "reported", m.Tick(at(3000)), "trigger(2)")

	// Savepoints are not held.
	expect(t, "complete 2", ackReporting(at(3500), 2), "notify(2)")
	id, acts, err := m.TriggerSavepoint(at(3600))
	if err != nil || id != 3 {
		t.Fatalf("savepoint %d: %v", id, err)
	}
	expect(t, "savepoint", acts, "triggersp(3)")
	expect(t, "complete savepoint", ackReporting(at(3700), 3), "notify(3)")

	// A report that never comes holds the trigger for a checkpoint
	// timeout at most: the task fails on its own if its commits are stuck.
	expect(t, "due, waiting", m.Tick(at(13699)), "")
	expect(t, "the wait ended", m.Tick(at(13700)), "trigger(4)")

	// An ack without the metric holds nothing; a new attempt forgets the
	// wait of the one before.
	expect(t, "complete 4", complete(t, m, at(14000), 4), "notify(4) discard(1)")
	expect(t, "nobody reports", m.Tick(at(14700)), "trigger(5)")
	expect(t, "complete 5", ackReporting(at(15000), 5), "notify(5) discard(2)")
	m.Stop(at(15000), "failover")
	m.Start(at(15000), []string{"src-0", "op-0"})
	expect(t, "new attempt", m.Tick(at(16000)), "trigger(6)")
}

// Without a checkpoint timeout a commit report that never comes holds
// the trigger for DefaultCommitReportWait, not for good.
func TestCommitReportWaitWithoutTimeout(t *testing.T) {
	m := newM(Config{Interval: time.Second, MaxConcurrent: 1, Retained: 2})
	expect(t, "first", m.Tick(at(1000)), "trigger(1)")
	expect(t, "ack src", m.Ack(at(1500), "src-0", 1, "h", nil), "")
	expect(t, "ack sink", m.Ack(at(1500), "op-0", 1, "h", map[string]int64{control.MetricCommitReport: 1}), "persist(1)")
	expect(t, "complete", m.Persisted(at(1500), 1, nil), "notify(1)")
	end := at(1500).Add(DefaultCommitReportWait)
	if w := m.NextWake(); !w.Equal(end) {
		t.Errorf("next wake %v, want %v", w, end)
	}
	expect(t, "waiting", m.Tick(end.Add(-time.Millisecond)), "")
	expect(t, "the wait ended", m.Tick(end), "trigger(2)")
}

// A checkpoint that completes after a newer savepoint (a savepoint is
// triggered while a periodic checkpoint is pending, and its acks came
// first) holds no trigger: the savepoint's completion reached the tasks
// first and covered it, so a worker passes the older completion on to
// nobody (it tells its tasks of a checkpoint's completion once, and not
// of one older than the last), and no sink reports its commits. Waiting
// for that report stopped periodic checkpoints for a checkpoint timeout.
func TestOlderCompletionAfterASavepointHoldsNoTrigger(t *testing.T) {
	m := newM(Config{Interval: time.Second, Timeout: time.Hour, MaxConcurrent: 1, Retained: 2})
	expect(t, "first", m.Tick(at(1000)), "trigger(1)")
	id, acts, err := m.TriggerSavepoint(at(1100))
	if err != nil || id != 2 {
		t.Fatalf("savepoint %d: %v", id, err)
	}
	expect(t, "savepoint", acts, "triggersp(2)")
	reporting := map[string]int64{control.MetricCommitReport: 1}
	expect(t, "ack src 2", m.Ack(at(1200), "src-0", 2, "h", nil), "")
	expect(t, "ack sink 2", m.Ack(at(1200), "op-0", 2, "h", reporting), "persist(2)")
	expect(t, "savepoint completes", m.Persisted(at(1200), 2, nil), "notify(2)")
	if !m.Committing("op-0", 2) {
		t.Error("the sink's report of the savepoint did not end the wait")
	}
	expect(t, "ack src 1", m.Ack(at(1300), "src-0", 1, "h", nil), "")
	expect(t, "ack sink 1", m.Ack(at(1300), "op-0", 1, "h", reporting), "persist(1)")
	expect(t, "checkpoint 1 completes", m.Persisted(at(1300), 1, nil), "notify(1)")
	expect(t, "due", m.Tick(at(2000)), "trigger(3)")
}
