package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/storage"
)

// record is what the manager keeps of a job in Options.Jobs, so that a
// restarted coordinator resumes the jobs that were running.
type record struct {
	Spec  *jobspec.Spec    `json:"spec"`
	State control.JobState `json:"state"`
	// FirstID is the first checkpoint ID of this run: older checkpoints in
	// storage belong to earlier runs of the same name.
	FirstID int64 `json:"first_id"`
	// From is the checkpoint the run was started from (0: none), of job
	// FromJob ("": this job).
	From    int64  `json:"from,omitempty"`
	FromJob string `json:"from_job,omitempty"`
	// FromGone says that From, of another job, is no longer stored whole
	// (job.fromGone): the status names it no more. Kept apart from From,
	// which still says where the run began.
	FromGone bool `json:"from_gone,omitempty"`
	// FromWithout are the vertices that start without their state in
	// From, and RestoreNotes say why (job.fromWithout, restoreNotes).
	FromWithout  []string `json:"from_without,omitempty"`
	RestoreNotes []string `json:"restore_notes,omitempty"`
	// Reserved is the highest checkpoint ID that may have been triggered:
	// IDs number on above it (job.reserved).
	Reserved int64 `json:"reserved,omitempty"`
	Attempt  int   `json:"attempt"`
	Restarts int   `json:"restarts"`
	// FailureCounts is the status's: weir_job_failures_total goes on
	// from it after a coordinator restart, as weir_job_restarts_total
	// does from Restarts. Records written before it was kept have none;
	// a resume counts their Failures instead (failureCounts).
	FailureCounts map[control.FailureKind]int `json:"failure_counts,omitempty"`
	// Replacements and Resumes are the status's: attempts that were no
	// restart (control.JobStatus.Replacements).
	Replacements int       `json:"replacements,omitempty"`
	Resumes      int       `json:"resumes,omitempty"`
	Submitted    time.Time `json:"submitted"`
	// Reason and Updated are the status's: why a job failed stays known
	// across a coordinator restart.
	Reason  string    `json:"reason,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
	// Latest is the latest completed checkpoint of the run.
	Latest int64 `json:"latest,omitempty"`
	// StoppedWithSavepoint is the status's: a stopped job is still told
	// from a canceled one after a coordinator restart. Records written
	// before it was kept have none (0).
	StoppedWithSavepoint int64 `json:"stopped_with_savepoint,omitempty"`
	// Drained and DrainedWithSavepoint are the status's: a job being
	// drained that a restarted coordinator resumes ends its input again
	// (control.Deploy.EndInput), and a drained job is still told as one.
	Drained              bool  `json:"drained,omitempty"`
	DrainedWithSavepoint int64 `json:"drained_with_savepoint,omitempty"`
	// DrainAt is job.drainAt: the sequence each source task of a job
	// being drained ends at, for its later attempts. DrainedAt is the
	// status's: where a drained job's sources ended.
	DrainAt   map[string]uint64   `json:"drain_at,omitempty"`
	DrainedAt []control.SourceEnd `json:"drained_at,omitempty"`
	// FailuresInARow is the status's (job.consecutive): a coordinator
	// restart does not give a job restarting in a loop its
	// restart.attempts again. Records written before it was kept have
	// none (0).
	FailuresInARow int `json:"failures_in_a_row,omitempty"`
	// NextRestart says that the job's next attempt, not begun, is a
	// restart after failures (job.next): "due" while its restart delay
	// runs, not counted in Restarts yet, "counted" once the delay ended
	// (the attempt waits to be placed). A coordinator that resumes the
	// job begins that restart, counted once (the delay's rest skipped),
	// rather than a resume: a coordinator restart does not take a
	// restart's place, so Restarts stays the restarts restart.attempts
	// counts. Records written before it was kept have none: the attempt
	// is a resume.
	NextRestart string `json:"next_restart,omitempty"`
	// Failures are the status's failure history.
	Failures []control.Failure `json:"failures,omitempty"`
	// Skipped are the status's attempts that were not started.
	Skipped []control.SkippedAttempt `json:"skipped,omitempty"`
	// Modules are the operators' modules as resolved at submit (by
	// operator): a resumed job runs the code it was submitted with, not
	// what its references name now. Records written before they were kept
	// have none; their references are resolved again.
	Modules map[string]control.Module `json:"modules,omitempty"`
	// Assignment is where the job's latest attempt was placed (task →
	// worker) while it holds those slots (job.holds): a resumed job holds
	// them again until it is placed anew, so that no job submitted
	// meanwhile takes them from it.
	Assignment map[string]string `json:"assignment,omitempty"`
	// Unusable are the run's checkpoints a restore found damaged, with
	// why (job.unusable): a resume takes them for unusable without
	// reading them, as it does those it finds so itself.
	Unusable map[int64]string `json:"unusable,omitempty"`
	// Removed says the job was removed (Manager.RemoveJob): the record is
	// kept for its numbering (Attempt, Reserved), and the job is not
	// listed.
	Removed bool `json:"removed,omitempty"`
}

const recordPrefix = "jobs/"

func recordKey(name string) string { return recordPrefix + name }

// persist writes the job's record, if the manager keeps records. Writes
// of the record of one job name are ordered: each takes the record as it
// is when the write before it is stored (recordMu, shared by every run of
// the name), so a write never replaces the record with an older one — an
// earlier state, reservation or latest checkpoint, from which a restarted
// coordinator would resume. A run that a new run of its name replaced
// writes its record no more. j.mu is not held while the store writes.
func (j *job) persist() {
	if err := j.writeRecord(); err != nil {
		j.m.log.Warn("persisting job record failed", "job", j.spec.Name, "err", err)
	}
}

// writeRecord is persist, returning the error instead of logging it, for
// a caller that must not go on without the record stored (a reservation
// of checkpoint IDs).
func (j *job) writeRecord() error {
	store := j.m.opts.Jobs
	if store == nil {
		return nil
	}
	j.recordMu.Lock()
	defer j.recordMu.Unlock()
	rec, ok := j.record()
	if !ok {
		return nil
	}
	data, err := json.Marshal(rec)
	if err == nil {
		err = store.Put(context.WithoutCancel(j.ctx), recordKey(j.spec.Name), bytes.NewReader(data))
	}
	if err != nil {
		return fmt.Errorf("job %s: write its record: %w", j.spec.Name, err)
	}
	return nil
}

// record returns the job's record as it is now; ok is false once a new
// run of the job's name replaced the job (superseded), and for a job a
// restarted coordinator could not resume (unresumed), whose record is the
// one the next coordinator resumes it from.
func (j *job) record() (rec record, ok bool) {
	latest := j.runner.Latest() // before j.mu: the runner calls the job holding its lock
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.superseded || j.unresumed {
		return record{}, false
	}
	rec = record{Spec: j.spec, State: j.st.State, FirstID: j.firstID, Attempt: j.st.Attempt,
		Restarts: j.st.Restarts, Replacements: j.st.Replacements, Resumes: j.st.Resumes, Submitted: j.st.Submitted, Reason: j.st.Reason, Updated: j.st.Updated,
		Latest: j.latestLocked(latest), StoppedWithSavepoint: j.st.StoppedWithSavepoint, Drained: j.st.Drained, DrainedWithSavepoint: j.st.DrainedWithSavepoint, DrainAt: maps.Clone(j.drainAt), DrainedAt: slices.Clone(j.st.DrainedAt), FailuresInARow: j.consecutive, FailureCounts: maps.Clone(j.st.FailureCounts), Failures: slices.Clone(j.st.Failures), Skipped: slices.Clone(j.st.Skipped), Reserved: j.reserved, Modules: j.modules, Removed: j.gone}
	if j.holds && !j.st.State.Terminal() {
		rec.Assignment = maps.Clone(j.assign)
	}
	if !j.st.State.Terminal() {
		rec.Unusable = maps.Clone(j.unusable)
	}
	if !j.st.State.Terminal() {
		switch j.next {
		case causeRestartDue:
			rec.NextRestart = restartDue
		case causeRestart:
			rec.NextRestart = restartCounted
		}
	}
	if j.initial != nil {
		rec.From = j.initial.ID
		rec.FromWithout, rec.RestoreNotes = j.fromWithout, j.restoreNotes
		if j.initial.Job != j.spec.Name {
			rec.FromJob, rec.FromGone = j.initial.Job, j.fromGone
		}
	}
	return rec, true
}

// failureCounts returns the job's failures by kind as the record keeps
// them; of a record written before they were kept, those its failure
// history lists, each once (a repeated one is counted once, as
// control.Failure.Repeats says).
func (rec record) failureCounts() map[control.FailureKind]int {
	if rec.FailureCounts != nil {
		return maps.Clone(rec.FailureCounts)
	}
	var c map[control.FailureKind]int
	for _, f := range rec.Failures {
		if c == nil {
			c = map[control.FailureKind]int{}
		}
		c[f.Kind]++
	}
	return c
}

// The values of record.NextRestart.
const (
	restartDue     = "due"
	restartCounted = "counted"
)

// ReasonCoordinatorRestarted is the reason of a job a restarted
// coordinator resumes: it is restarting until its next attempt runs.
const ReasonCoordinatorRestarted = "coordinator restarted"

// resume restarts the jobs a previous coordinator left running: each one
// restores from its latest valid checkpoint of its run, as attempt
// previous+1, after telling live workers to drop the previous attempt.
func (m *Manager) resume(ctx context.Context) error {
	store := m.opts.Jobs
	if store == nil {
		return nil
	}
	// A listing that missed a record would leave its job unresumed, its
	// workers running an attempt nobody follows: the JetStream stores
	// list from the bucket's stream leader (storage), never a replica
	// that may lag.
	// Neither is a record given up while storage fails: a job left out
	// would not be listed, and its workers' tasks would be canceled as
	// those of a job nobody knows. The coordinator serves once it knows
	// every job (each failure is logged with its cause meanwhile).
	var keys []string
	err := retryRead(ctx, m, "list job records", "", func() (err error) {
		keys, err = store.List(ctx, recordPrefix)
		return err
	})
	if err != nil {
		return fmt.Errorf("list job records: %w", err)
	}
	// The jobs are resumed side by side, resumeParallel at a time: each
	// reads its checkpoints from the buckets' stream leaders, which wait
	// while a stream has none (up to leaderWait, 30 s, a request), and
	// one after the other the coordinator would serve nothing for that
	// long a job.
	sem := make(chan struct{}, resumeParallel)
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.resumeKey(ctx, store, k)
		}()
	}
	wg.Wait()
	return nil
}

// retryRead calls read until it succeeds or ctx ends, pausing between
// attempts (resumeRetry, doubling up to resumeRetryMax) and logging each
// failure with what ("list job records") and the job it is for, if any.
// It returns ctx's error, or nil.
func retryRead(ctx context.Context, m *Manager, what, job string, read func() error) error {
	pause := resumeRetry
	for {
		err := read()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		args := []any{"err", err, "retry in", pause}
		if job != "" {
			args = append([]any{"job", job}, args...)
		}
		m.log.Warn(what+" failed; the coordinator serves once it knows every job", args...)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		pause = min(2*pause, resumeRetryMax)
	}
}

// resumeRetry and resumeRetryMax pace retryRead.
const (
	resumeRetry    = 100 * time.Millisecond
	resumeRetryMax = 5 * time.Second
)

// resumeParallel is how many jobs a restarted coordinator resumes at once.
const resumeParallel = 8

// resumeKey resumes the job whose record is under key k of store, lists
// it as it ended, or, when it cannot be resumed now, as failed with why
// (unresumed).
func (m *Manager) resumeKey(ctx context.Context, store storage.Store, k string) {
	name := strings.TrimPrefix(k, recordPrefix)
	var data []byte
	err := retryRead(ctx, m, "read job record", name, func() (err error) {
		data, err = storage.ReadAll(ctx, store, k)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since the listing: data is nil
		}
		return err
	})
	if err != nil || data == nil {
		return // the coordinator stops, or the job was removed
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil || rec.Spec == nil {
		m.log.Warn("skipping corrupt job record", "job", name, "err", err)
		return
	}
	if rec.State.Terminal() {
		j := terminalJob(m, rec)
		m.mu.Lock()
		m.jobs[name] = j
		m.mu.Unlock()
		m.finishRemovalsLater(ctx, j)
		return
	}
	if err := m.resumeOne(ctx, rec); err != nil {
		// Listed as failed, with why, rather than gone: its record
		// stays as it was, so the next coordinator tries again, and
		// the job can be restored from a checkpoint meanwhile, or
		// canceled (unresumed).
		m.log.Warn("resuming job failed", "job", name, "err", err)
		rec.State, rec.Updated = control.JobFailed, time.Now()
		rec.Reason = fmt.Sprintf("not resumed after the coordinator restarted: %v (a coordinator restart tries again; or restore the job from a checkpoint, or cancel it)", err)
		j := terminalJob(m, rec)
		j.unresumed = true
		m.mu.Lock()
		m.jobs[name] = j
		m.mu.Unlock()
	}
}

// resumeNote says, when the run's newest stored checkpoint is unusable,
// which one the job resumes from instead — the newest that restores, else
// the one of another job it started from (started), else none — and what
// that means for its output; "" when the newest restores.
func resumeNote(restored []*checkpoint.Metadata, unusable []unusableCheckpoint, started *checkpoint.Metadata) string {
	var newest int64
	for _, md := range restored {
		newest = max(newest, md.ID)
	}
	var skipped []string
	var why error
	for _, u := range unusable {
		if u.id > newest {
			skipped = append(skipped, strconv.FormatInt(u.id, 10))
			why = u.err
		}
	}
	if len(skipped) == 0 {
		return ""
	}
	from := "no checkpoint: its sources start over"
	switch {
	case newest > 0:
		from = fmt.Sprintf("checkpoint %d", newest)
	case started != nil:
		from = fmt.Sprintf("checkpoint %d of job %s, which it started from", started.ID, started.Job)
	}
	newer := "its newer checkpoint " + skipped[0] + " is"
	if len(skipped) > 1 {
		newer = "its newer checkpoints " + strings.Join(skipped, ", ") + " are"
	}
	return fmt.Sprintf("resumed after a coordinator restart from %s, as %s unusable (%v): what its exactly-once sinks committed after that is committed again, under new message IDs",
		from, newer, why)
}

// supersededUnusable returns, of the run's unusable checkpoints, those to
// discard, and logs each unusable one: one older than a checkpoint that
// restores is not what the job resumes from, nor what a failover
// restores. (A retention discard cut short — the coordinator killed —
// left such ones before retention discarded newest first.) A newer one
// stays, and so does one partly removed, which finishRemovals finishes —
// and one that a stored checkpoint it does not discard names
// (Metadata.SinkStateFrom): retention keeps a checkpoint a kept one
// names without what that one names in turn, so it is unusable itself
// and still read by the newer one's restore, of the output staged in it.
// Discarding it made the newer one unusable at the next start, and so on
// down to a restore of none (a trial: every output committed again).
func (m *Manager) supersededUnusable(ctx context.Context, rec record, restored []*checkpoint.Metadata, unusable []unusableCheckpoint) []int64 {
	name := rec.Spec.Name
	var newest int64
	for _, md := range restored {
		newest = max(newest, md.ID)
	}
	discard := map[int64]bool{}
	var superseded []int64
	// Newest first: a checkpoint discarded here names none older for good.
	for _, u := range slices.Backward(unusable) {
		var cut *checkpoint.RemovingError
		if u.id < rec.FirstID || u.id >= newest || errors.As(u.err, &cut) {
			m.log.Warn("checkpoint unusable", "job", name, "checkpoint", u.id, "err", u.err)
			continue
		}
		refs, err := m.opts.Catalog.NamedBy(ctx, name, u.id)
		if err != nil {
			m.log.Warn("checkpoint unusable; kept, as what names it could not be read", "job", name, "checkpoint", u.id, "err", u.err, "names_err", err)
			continue
		}
		refs = slices.DeleteFunc(refs, func(r checkpoint.Referrer) bool { return discard[r.ID] })
		if len(refs) > 0 {
			m.log.Warn("checkpoint unusable, and kept: a newer one's restore reads the output staged in it", "job", name, "checkpoint", u.id, "named_by", refs[0].ID, "err", u.err)
			continue
		}
		m.log.Warn("checkpoint unusable, and not needed: a newer one restores; discarding it", "job", name, "checkpoint", u.id, "newer", newest, "err", u.err)
		discard[u.id] = true
		superseded = append(superseded, u.id)
	}
	return superseded
}

// unreadable reports whether err, from Catalog.Read, says that the
// checkpoint could not be read now (storage unavailable), not that it is
// missing or corrupt.
func unreadable(err error) bool {
	return err != nil && !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, fs.ErrNotExist)
}

func (m *Manager) resumeOne(ctx context.Context, rec record) error {
	name := rec.Spec.Name
	ids, err := m.opts.Catalog.IDs(ctx, name)
	if err != nil {
		return err
	}
	next := rec.FirstID
	var restored []*checkpoint.Metadata
	var unusable []unusableCheckpoint
	kept := map[int64]string{} // rec.Unusable that are still stored
	own := rec.FromJob == "" || rec.FromJob == name
	for _, id := range ids {
		if id >= next {
			next = id + 1
		}
		if id < rec.FirstID && (id != rec.From || !own) {
			continue
		}
		if why, ok := rec.Unusable[id]; ok {
			// Its metadata checks out, but a restore found a task's
			// snapshot damaged.
			unusable = append(unusable, unusableCheckpoint{id, fmt.Errorf("%w: %s", checkpoint.ErrCorrupt, why)})
			kept[id] = why
			continue
		}
		md, err := m.opts.Catalog.Read(ctx, name, id)
		if unreadable(err) {
			// Not known to be unusable, only not read now: resumed
			// without it, the job would restore from an older
			// checkpoint, or none, and an exactly-once sink commit
			// again what it committed after that.
			return err
		}
		if err != nil {
			unusable = append(unusable, unusableCheckpoint{id, err})
			continue
		}
		restored = append(restored, md)
	}
	superseded := m.supersededUnusable(ctx, rec, restored, unusable)
	if rec.Reserved >= next {
		// A checkpoint may have been in flight when the coordinator went
		// away, with no metadata written: its ID is not used again.
		next = rec.Reserved + 1
	}
	machine := checkpoint.NewMachine(name, checkpoint.ConfigFromSpec(rec.Spec.Checkpointing), restored, next)
	var from *checkpoint.Metadata
	if own {
		for _, md := range restored {
			if md.ID == rec.From {
				from = md
			}
		}
	} else if rec.From > 0 {
		// Started from another job's checkpoint: the machine does not
		// keep it (see Manager.start), the job does, as its initial one.
		md, err := m.opts.Catalog.Read(ctx, rec.FromJob, rec.From)
		if unreadable(err) {
			return err
		}
		if err != nil {
			m.log.Warn("checkpoint unusable", "job", name, "from", fmt.Sprintf("%s/%d", rec.FromJob, rec.From), "err", err)
		} else {
			from = md
		}
	}
	// Not prepare: the spec was accepted at submit. Its modules stay the
	// ones resolved then, and a stream it names that is missing now was
	// deleted since, which the restart strategy bounds (as without a
	// coordinator restart); refusing it here dropped the job.
	p, err := plan.Build(rec.Spec)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	mods := rec.Modules
	if mods == nil {
		if mods, err = m.resolveModules(ctx, rec.Spec); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j := newJob(m, rec.Spec, p, mods, machine, from)
	j.firstID = rec.FirstID
	if own {
		j.startID = rec.From
	}
	j.reserved, j.idFloor = rec.Reserved, next-1
	j.st.Attempt = rec.Attempt
	j.st.Restarts = rec.Restarts
	j.st.Replacements, j.st.Resumes = rec.Replacements, rec.Resumes
	j.st.Submitted = rec.Submitted
	j.st.Failures = rec.Failures
	j.st.FailureCounts = rec.failureCounts()
	j.st.Skipped = rec.Skipped
	j.st.Drained = rec.Drained
	j.drainAt = rec.DrainAt
	j.st.DrainedAt = rec.DrainedAt
	j.consecutive = rec.FailuresInARow
	// The attempt it begins is a resume, or the restart after failures
	// the coordinator before had decided on, counted once.
	j.next = causeResume
	switch rec.NextRestart {
	case restartDue:
		j.st.Restarts++
		j.next = causeRestart
	case restartCounted:
		j.next = causeRestart
	}
	// The slots its attempt was placed in stay its own until it is placed
	// again: its tasks may still run there (a crashed coordinator stopped
	// none), and a job submitted before it is placed must not take them.
	j.assign, j.holds = rec.Assignment, len(rec.Assignment) > 0
	// Until its next attempt runs, the job is restarting, as after a
	// failure, for the cause: it ran already (listed as created, it
	// seemed to go back to the start, its previous attempt's number with
	// it).
	j.st.State, j.st.Reason = control.JobRestarting, ReasonCoordinatorRestarted
	j.resumed = true
	j.resumeNote = resumeNote(restored, unusable, from)
	for _, id := range superseded {
		delete(kept, id)
	}
	if len(kept) > 0 {
		j.unusable = kept
	}
	j.fromWithout, j.restoreNotes = rec.FromWithout, rec.RestoreNotes
	// The run's checkpoints that never completed under the coordinator
	// before — aborted as it stopped, their discards left undone when it
	// could not reach the store then, or cut short by a crash — complete
	// no more: their objects go.
	j.runner.SweepLeftovers(rec.FirstID, next)
	j.runner.DiscardUnusable(superseded...)
	m.jobs[name] = j
	// Resumed, the job writes its sinks again: its warnings, and the
	// others' (the jobs resumed before it).
	m.refreshSharedSinksLocked()
	m.wg.Add(2)
	go func() { defer m.wg.Done(); j.runner.Run(j.ctx) }()
	go func() { defer m.wg.Done(); j.run() }()
	m.log.Info("resuming job", "job", name, "attempt", rec.Attempt+1)
	m.finishRemovalsLater(ctx, j)
	return nil
}

// unusableCheckpoint is a stored checkpoint a resume found unusable, and
// why (Catalog.Read).
type unusableCheckpoint struct {
	id  int64
	err error
}

// finishRemovalsLater finishes the removals of j's checkpoints that were
// cut short (finishRemovals) on a goroutine of its own: a removal's
// deletes hold up no job's resume, and the coordinator serves meanwhile.
// resumeParallel jobs' at most go at once (m.finishing).
func (m *Manager) finishRemovalsLater(ctx context.Context, j *job) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case m.finishing <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-m.finishing }()
		m.finishRemovals(ctx, j)
	}()
}

// cancelUnresumed cancels a job a restarted coordinator could not resume
// (unresumed): its record says canceled from now on, so that no
// coordinator resumes it. ok is false for any other job. Its tasks that
// workers still run are canceled as any stale attempt's are
// (Manager.WorkerTasks).
func (j *job) cancelUnresumed() (st control.JobStatus, ok bool) {
	j.mu.Lock()
	if !j.unresumed {
		j.mu.Unlock()
		return control.JobStatus{}, false
	}
	j.unresumed = false
	j.st.State, j.st.Updated = control.JobCanceled, time.Now().UTC()
	j.st.Reason = "canceled after the coordinator restarted, which did not resume it"
	j.mu.Unlock()
	j.persist()
	j.m.log.Info("job state", "job", j.spec.Name, "state", control.JobCanceled, "reason", "not resumed, canceled")
	return j.status(), true
}

// terminalJob is a finished, failed or canceled job known from its record:
// listed, and restorable by name.
func terminalJob(m *Manager, rec record) *job {
	ctx, cancel := context.WithCancel(m.ctx)
	cancel()
	// consecutive: the failures in a row it ended with, by which weir job
	// status says how a job that failed in a loop goes on.
	j := &job{m: m, spec: rec.Spec, ctx: ctx, cancel: cancel, done: make(chan struct{}), firstID: rec.FirstID, reserved: rec.Reserved, recordMu: new(sync.Mutex),
		consecutive: rec.FailuresInARow, fromGone: rec.FromGone, gone: rec.Removed,
		st: control.JobStatus{Name: rec.Spec.Name, State: rec.State, Attempt: rec.Attempt, Restarts: rec.Restarts,
			Replacements: rec.Replacements, Resumes: rec.Resumes,
			Submitted: rec.Submitted, Updated: rec.Updated, Reason: rec.Reason, LatestCheckpoint: rec.Latest,
			StoppedWithSavepoint: rec.StoppedWithSavepoint, Drained: rec.Drained, DrainedWithSavepoint: rec.DrainedWithSavepoint, DrainedAt: rec.DrainedAt,
			Failures: rec.Failures, FailureCounts: rec.failureCounts(), Skipped: rec.Skipped}}
	if rec.FromJob == "" || rec.FromJob == rec.Spec.Name {
		j.startID = rec.From
	}
	// Kept so that its record is written again as it was (persist, when
	// a checkpoint of it is removed). An ended job deploys nothing: the
	// checkpoint it started from is known by name only.
	j.modules = rec.Modules
	if rec.From > 0 {
		from := rec.FromJob
		if from == "" {
			from = rec.Spec.Name
		}
		j.initial = &checkpoint.Metadata{Job: from, ID: rec.From}
	}
	if j.st.Updated.IsZero() { // a record written before Updated was kept
		j.st.Updated = rec.Submitted
	}
	close(j.done)
	j.runner = checkpoint.NewRunner(checkpoint.NewMachine(rec.Spec.Name, checkpoint.Config{}, nil, 0), m.opts.Catalog, j, checkpoint.RunnerOptions{})
	return j
}
