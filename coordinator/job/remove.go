package job

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
)

// RemoveCheckpoints implements control.API: it deletes a checkpoint or
// savepoint of a job from storage (Catalog.Remove: the metadata marked as
// being removed, every task's snapshot, then the metadata; one cut short is
// listed as removing, never restored, and a removal done again finishes
// it), or with r.Earlier every one the job's earlier runs
// left stored, and the run forgets it (its history lists it as removed).
// It refuses, saying why, one being written (pending), and one that a job
// that has not ended restores on a failover (neededBy): the newest its run
// completed, else the one it started from, of this job or another; and
// any one of the run of a job a restarted coordinator could not resume,
// which the next coordinator resumes from its latest (unresumed).
// A job that has ended needs none: one that its advice names as where it
// goes on (its latest, else another job's it started from) goes, and the
// answer says what each such job's advice names now (Readvised: the
// newest of its run still stored, else the one it started from if that
// is, else none); a job started from it names it no more (startGone).
// It refuses too one that another checkpoint of the job still stored
// names (namedBy: an exactly-once sink's snapshot that names output
// staged in earlier checkpoints, control.MetricSinkStateFrom), until that
// one is removed. Nothing else depends on a checkpoint: no other state
// object is shared between checkpoints (each one's lie under its own
// prefix), and alignment spill files are never stored.
// A submit or restore from a checkpoint being removed is refused, so that
// no job starts from one half gone, and one a job is being started from
// is not removed (startFrom); no removal holds up the submits and
// restores of other checkpoints while it waits for storage.
func (m *Manager) RemoveCheckpoints(ctx context.Context, r control.RemoveRequest) (control.Removed, error) {
	switch {
	case r.Earlier && r.ID != 0:
		return control.Removed{}, control.Errorf(control.ErrInvalid, "remove checkpoints of %s: give a checkpoint ID or earlier, not both", r.Job)
	case !r.Earlier && r.ID <= 0:
		return control.Removed{}, control.Errorf(control.ErrInvalid, "remove a checkpoint of %s: want its ID (a positive number), not %d", r.Job, r.ID)
	}
	if _, err := m.job(r.Job); err != nil {
		return control.Removed{}, err
	}
	m.log.Info("checkpoint removal requested", "job", r.Job, "id", r.ID, "earlier", r.Earlier, "reply", control.Requester(ctx))
	if r.Earlier {
		return m.removeEarlier(ctx, r.Job)
	}
	rc, err := m.removeChecked(ctx, r.Job, r.ID)
	if err != nil {
		return control.Removed{}, err
	}
	return control.Removed{Checkpoints: []control.RemovedCheckpoint{rc}, StrayMarkers: m.removeStrayMarkers(ctx, r.Job)}, nil
}

// removeStrayMarkers deletes the commit markers of job's checkpoints that
// were written after the checkpoint was deleted (Catalog.StrayMarkers: a
// sink's commit stored after retention or a removal took its checkpoint)
// and returns how many. It is best effort: a failure is logged, and the
// next removal or retention pass tries again.
func (m *Manager) removeStrayMarkers(ctx context.Context, job string) int {
	n, err := m.opts.Catalog.RemoveStrayMarkers(ctx, job)
	if err != nil {
		m.log.Warn("removing stray commit markers failed", "job", job, "err", err)
	}
	if n > 0 {
		m.log.Info("stray commit markers removed", "job", job, "markers", n)
	}
	return n
}

// removeChecked removes checkpoint id of job name unless it is still
// needed or not stored.
func (m *Manager) removeChecked(ctx context.Context, name string, id int64) (control.RemovedCheckpoint, error) {
	// No job starts from it (Submit, Restore) while the checks hold and
	// the removal deletes it; a submit or restore from it under way
	// refuses the removal, and a job started from it is neededBy's.
	j, done, err := m.removeFrom(ckKey{job: name, id: id}, removerUser)
	if errors.Is(err, errDiscarding) {
		// Its run dropped it (failed, or past the retained ones), and its
		// runner is deleting it: so the removal says, as once it is gone.
		if j, jerr := m.job(name); jerr == nil {
			return control.RemovedCheckpoint{}, m.noSuchCheckpoint(ctx, j, id)
		}
	}
	if err != nil {
		return control.RemovedCheckpoint{}, err
	}
	defer done()
	// Pending first: once ended, a checkpoint stays ended, and its
	// metadata, read next, is final. (A job that ended triggers nothing;
	// one known from its record has a machine that knows no IDs.)
	ended, pending := j.runner.Ended(id)
	switch {
	case pending:
		return control.RemovedCheckpoint{}, control.Errorf(control.ErrConflict,
			"cannot remove checkpoint %d of job %s: it is being written (pending)", id, name)
	case !ended && !j.status().State.Terminal():
		return control.RemovedCheckpoint{}, m.noSuchCheckpoint(ctx, j, id)
	}
	cat := m.opts.Catalog
	info := control.CheckpointInfo{Job: name, ID: id}
	md, err := cat.Read(ctx, name, id)
	var cut *checkpoint.RemovingError
	switch {
	case err == nil:
		info = md.Info()
	case errors.Is(err, fs.ErrNotExist):
		return control.RemovedCheckpoint{}, m.noSuchCheckpoint(ctx, j, id)
	case errors.As(err, &cut):
		// A removal began before and did not finish: this one
		// finishes it.
		info = cut.Metadata.Info()
		info.Status, info.Reason = control.CheckpointRemoving, partlyRemoved(name, id)
	case errors.Is(err, checkpoint.ErrCorrupt):
		// Nothing can restore it; it goes all the same.
		info.Status, info.Reason = control.CheckpointFailed, fmt.Sprintf("stored, but cannot be restored: %v", err)
	default:
		return control.RemovedCheckpoint{}, fmt.Errorf("remove checkpoint %d of job %s: %w", id, name, err)
	}
	j.mu.Lock()
	info.EarlierRun = id < j.firstID && id != j.startID
	j.mu.Unlock()
	kind := "checkpoint"
	if info.Savepoint {
		kind = "savepoint"
	}
	if why := m.neededBy(name, id); why != "" {
		return control.RemovedCheckpoint{}, control.Errorf(control.ErrConflict, "cannot remove %s %d of job %s: %s", kind, id, name, why)
	}
	why, err := m.namedBy(ctx, name, id)
	if err != nil {
		return control.RemovedCheckpoint{}, fmt.Errorf("remove checkpoint %d of job %s: %w", id, name, err)
	}
	if why != "" {
		return control.RemovedCheckpoint{}, control.Errorf(control.ErrConflict, "cannot remove %s %d of job %s: %s", kind, id, name, why)
	}
	advised := m.advisedFrom(name, id)
	// Dropped from the run first: retention and failovers leave it alone.
	j.runner.Removed(id)
	n, err := cat.Remove(ctx, name, id)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) { // retention discarded it meanwhile
			return control.RemovedCheckpoint{}, m.noSuchCheckpoint(ctx, j, id)
		}
		// Cut short: the checkpoint may be partly gone, and storage
		// says so (Catalog.Remove marked it first); so does the job.
		j.removalCut(ctx, id)
		if cur, err := m.job(name); err == nil && cur != j {
			cur.removalCut(ctx, id)
		}
		m.startGone(name, id)
		return control.RemovedCheckpoint{}, fmt.Errorf("%w (removed %d objects; weir checkpoint rm %s %d tries again)", err, n, name, id)
	}
	j.removedCheckpoint(ctx, id)
	if cur, err := m.job(name); err == nil && cur != j {
		// A new run of the name replaced j meanwhile: it must not list
		// the checkpoint either.
		cur.removedCheckpoint(ctx, id)
	}
	m.startGone(name, id)
	m.log.Info("checkpoint removed", "job", name, "checkpoint", id, "objects", n)
	return control.RemovedCheckpoint{CheckpointInfo: info, Objects: n, Readvised: readvised(advised)}, nil
}

// advisedFrom returns the jobs that have ended whose advice names
// checkpoint id of job name as where each goes on, by name: its latest
// checkpoint, else the checkpoint of another job it started from
// (control.JobStatus.LatestCheckpoint, StartedFrom), which weir job
// status, ls and cancel print. The caller removes the checkpoint and says
// what their advice names then (readvised).
func (m *Manager) advisedFrom(name string, id int64) []*job {
	var advised []*job
	for _, k := range m.allJobs() {
		// What status says of these, without the rest of it, which
		// costs far more (a removal of many checkpoints asks of each).
		latest := k.runner.Latest() // before k.mu: the runner calls the job holding its lock
		k.mu.Lock()
		ended, latest := k.st.State.Terminal(), k.latestLocked(latest)
		in, gone := k.initial, k.fromGone
		k.mu.Unlock()
		if !ended {
			continue
		}
		startedFrom := in != nil && in.Job != k.spec.Name && !gone && in.Job == name && in.ID == id
		if k.spec.Name == name && latest == id || latest == 0 && startedFrom {
			advised = append(advised, k)
		}
	}
	slices.SortFunc(advised, func(a, b *job) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	return advised
}

// readvised says what the advice of each of jobs names now (advisedFrom).
func readvised(jobs []*job) []control.Readvised {
	var out []control.Readvised
	for _, k := range jobs {
		st := k.status()
		out = append(out, control.Readvised{Job: st.Name, State: st.State, LatestCheckpoint: st.LatestCheckpoint, StartedFrom: st.StartedFrom})
	}
	return out
}

// allJobs returns the jobs the manager knows, in no order.
func (m *Manager) allJobs() []*job {
	m.mu.Lock()
	defer m.mu.Unlock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	return jobs
}

// startedFrom returns the jobs of other names whose run started from
// checkpoint id of job name and that still name it (fromGone unset).
func (m *Manager) startedFrom(name string, id int64) []*job {
	var out []*job
	for _, k := range m.allJobs() {
		k.mu.Lock()
		in, gone := k.initial, k.fromGone
		k.mu.Unlock()
		if in != nil && in.Job == name && in.ID == id && k.spec.Name != name && !gone {
			out = append(out, k)
		}
	}
	return out
}

// startGone notes that checkpoint id of job name is no longer stored
// whole — removed, partly removed, or discarded by retention — in every
// job of another name that started from it (fromGone): its status names
// it no more (control.JobStatus.StartedFrom), so that no advice for it
// names a checkpoint that cannot be restored; an ended one writes its
// record, which says so after a coordinator restart too. (A job that has
// not ended and still needs it keeps it: neededBy, claimDiscard.)
func (m *Manager) startGone(name string, id int64) {
	for _, k := range m.startedFrom(name, id) {
		k.mu.Lock()
		k.fromGone = true
		ended := k.st.State.Terminal()
		k.mu.Unlock()
		if ended {
			k.persist()
		}
	}
}

// startGoneIfNotStored is startGone for checkpoint id of job name if that
// is not stored whole (it reads the metadata, when a job started from it:
// one whose discard failed stays). A read that fails otherwise leaves the
// jobs as they are.
func (m *Manager) startGoneIfNotStored(ctx context.Context, name string, id int64) {
	if len(m.startedFrom(name, id)) == 0 {
		return
	}
	_, err := m.opts.Catalog.Read(ctx, name, id)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, checkpoint.ErrCorrupt) {
		m.startGone(name, id)
	}
}

// finishRemoval finishes the removal of checkpoint id of job j that was
// cut short (Catalog.Remove goes on from the mark it wrote), as weir
// checkpoint rm done again does: the run forgets it, and an ended job's
// latest, if it was that one, becomes the newest still stored whole
// (removedCheckpoint). It returns how many objects it deleted; one gone
// meanwhile counts as finished. It is left for now (an error) while
// another request removes it or a job is being started from it, and
// while something needs it (neededBy: a job a restarted coordinator
// could not resume keeps its run's checkpoints; nothing else needs one
// marked as being removed, which no job restores).
func (m *Manager) finishRemoval(ctx context.Context, j *job, id int64) (int, error) {
	name := j.spec.Name
	_, done, err := m.removeFrom(ckKey{job: name, id: id}, removerFinish)
	if err != nil {
		return 0, err
	}
	defer done()
	if why := m.neededBy(name, id); why != "" {
		return 0, control.Errorf(control.ErrConflict, "cannot finish the removal of checkpoint %d of job %s: %s", id, name, why)
	}
	j.runner.Removed(id)
	n, err := m.opts.Catalog.Remove(ctx, name, id)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	j.removedCheckpoint(ctx, id)
	if cur, err := m.job(name); err == nil && cur != j {
		cur.removedCheckpoint(ctx, id)
	}
	m.startGone(name, id)
	return n, nil
}

// finishRemovals finishes, as the coordinator starts, the removals of
// job j's checkpoints that were cut short (Catalog.Removing: marked as
// being removed) — by storage, or by the coordinator before going away —
// logging one line for each, and corrects the latest checkpoint of an
// ended job: a coordinator that went away while it removed the latest
// left the record naming it (relatest, as for a removal that finished
// or was cut short while it ran) and, if it names one no longer stored
// whole, the checkpoint of another job it started from
// (startGoneIfEnded). One that fails again stays listed as
// being removed, and the job's retention, if it runs, tries again
// (removalCut). A job that could not be resumed (unresumed) is left as
// it is: its record and its run's checkpoints are the next coordinator's.
func (m *Manager) finishRemovals(ctx context.Context, j *job) {
	name := j.spec.Name
	j.mu.Lock()
	unresumed := j.unresumed
	j.mu.Unlock()
	if unresumed {
		return
	}
	ids, err := m.opts.Catalog.Removing(ctx, name)
	if err != nil {
		m.log.Warn("listing the checkpoints whose removal was cut short failed", "job", name, "err", err)
	}
	// All of them first: an ended job's latest, set anew as each one
	// goes, is never one of the others.
	for _, id := range ids {
		j.noteCut(id)
	}
	for _, id := range ids {
		n, err := m.finishRemoval(ctx, j, id)
		if errors.Is(err, checkpoint.ErrBeingRemoved) {
			continue // the other request finishes it, and says so
		}
		if err != nil {
			m.log.Warn("finishing a checkpoint removal cut short failed: weir checkpoint rm finishes it", "job", name, "checkpoint", id, "err", err)
			j.removalCut(ctx, id)
			continue
		}
		m.log.Info("checkpoint removal finished (it was cut short before)", "job", name, "checkpoint", id, "objects", n, "by", "coordinator start")
	}
	j.relatestIfGone(ctx)
	m.startGoneIfEnded(ctx, j)
}

// startGoneIfEnded notes, as the coordinator starts, that the checkpoint
// of another job that ended job j started from is not stored whole any
// more (startGone), when the record still names it: the coordinator
// before went away after that checkpoint was removed, or its retention
// discarded it, before it wrote j's record.
func (m *Manager) startGoneIfEnded(ctx context.Context, j *job) {
	j.mu.Lock()
	in, ended := j.initial, j.st.State.Terminal()
	j.mu.Unlock()
	if ended && in != nil && in.Job != j.spec.Name {
		m.startGoneIfNotStored(ctx, in.Job, in.ID)
	}
}

// What removes a checkpoint, as a restore refused meanwhile says it
// (startFrom): a user's request (weir checkpoint rm, or rm -earlier), the
// coordinator finishing a removal cut short (finishRemoval: as it
// starts, or as retention goes on), or the job's retention discarding it
// (claimDiscard).
const (
	removerUser      = "weir checkpoint rm"
	removerFinish    = "the coordinator finishes a removal of it that was cut short"
	removerRetention = "the job's retention discards it, as checkpointing.retained keeps only the newest"
)

// claimDiscard is the claim of a discard of checkpoint id of job name by
// its run's checkpoint runner (checkpoint.RunnerOptions.Claim), which
// deletes it in the background — retention dropping an old completed
// checkpoint, or what a failed one wrote — even after the job ended, as
// its runner ends. Like a removal (removeFrom) it marks the checkpoint
// as being removed until done is called, so a submit or restore from it
// meanwhile is refused (startFrom) rather than deployed with snapshots
// that are being deleted; and it refuses one a submit or restore is
// starting from, or that a job that has not ended restores on a failover
// (neededBy: one started from it, of another name or a new run of this
// one), which the runner keeps and tries again later. One that another
// request removes is refused with checkpoint.ErrBeingRemoved: that one
// deletes it. Once the discard is done, a job started from the
// checkpoint names it no more if it went (startGoneIfNotStored).
func (m *Manager) claimDiscard(name string, id int64) (done func(), err error) {
	k := ckKey{job: name, id: id}
	m.mu.Lock()
	switch {
	case m.starting[k] > 0:
		m.mu.Unlock()
		return nil, fmt.Errorf("checkpoint %d of job %s: a job is being started from it (a submit or restore under way)", id, name)
	case m.removing[k] != "":
		m.mu.Unlock()
		return nil, fmt.Errorf("checkpoint %d of job %s: %w", id, name, checkpoint.ErrBeingRemoved)
	}
	m.removing[k] = removerRetention
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		delete(m.removing, k)
		m.mu.Unlock()
	}
	if why := m.neededBy(name, id); why != "" {
		release()
		return nil, fmt.Errorf("checkpoint %d of job %s: %s", id, name, why)
	}
	return func() {
		release()
		// A job started from it names it no more, once it went.
		m.startGoneIfNotStored(m.ctx, name, id)
	}, nil
}

// keptFor returns the checkpoints of job name that its retention keeps
// although they are past checkpointing.retained (claimDiscard refuses
// their discards), each with why: another job that has not ended started
// from it and restores it on a failover until it completes a checkpoint
// of its own (neededBy's case for another name). weir checkpoint ls lists
// them as completed, with that reason, not as discarded.
func (m *Manager) keptFor(name string) map[int64]string {
	m.mu.Lock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	var kept map[int64]string
	for _, k := range jobs {
		if k.spec.Name == name {
			continue
		}
		k.mu.Lock()
		in := k.initial
		k.mu.Unlock()
		if in == nil || in.Job != name {
			continue
		}
		st := k.status()
		if st.State.Terminal() || k.runner.Latest() > 0 {
			continue
		}
		if kept == nil {
			kept = map[int64]string{}
		}
		kept[in.ID] = fmt.Sprintf("kept past checkpointing.retained: job %s started from it and restores it on a failover until it completes a checkpoint of its own", k.spec.Name)
	}
	return kept
}

// errDiscarding is wrapped by removeFrom's refusal of a checkpoint that a
// job's runner is discarding (claimDiscard).
var errDiscarding = errors.New("its job's runner is discarding it")

// removeFrom notes that checkpoint k is being removed by by (removerUser,
// removerFinish), until done is called, and returns the job of its name.
// A checkpoint that a submit or restore is starting a job from is refused
// (control.ErrConflict), as is one another request is removing (wrapping
// checkpoint.ErrBeingRemoved; errDiscarding too when that is a runner's
// discard).
func (m *Manager) removeFrom(k ckKey, by string) (j *job, done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j = m.jobs[k.job]; j == nil {
		return nil, nil, control.Errorf(control.ErrNotFound, "no job %q", k.job)
	}
	switch {
	case m.removing[k] == removerRetention:
		return nil, nil, control.Errorf(control.ErrConflict,
			"cannot remove checkpoint %d of job %s: %w: %w", k.id, k.job, errDiscarding, checkpoint.ErrBeingRemoved)
	case m.starting[k] > 0:
		return nil, nil, control.Errorf(control.ErrConflict,
			"cannot remove checkpoint %d of job %s: a job is being started from it (a submit or restore under way)", k.id, k.job)
	case m.removing[k] != "":
		return nil, nil, control.Errorf(control.ErrConflict,
			"cannot remove checkpoint %d of job %s: %w", k.id, k.job, checkpoint.ErrBeingRemoved)
	}
	m.removing[k] = by
	return j, func() {
		m.mu.Lock()
		delete(m.removing, k)
		m.mu.Unlock()
	}, nil
}

// neededBy says why checkpoint id of job name must stay, or "": a job
// that has not ended restores it on a failover, and the next coordinator
// may resume one that a restarted coordinator could not (unresumed) from
// any checkpoint of its run. The caller marked it as being removed
// (removeFrom): no job starts from it meanwhile.
func (m *Manager) neededBy(name string, id int64) string {
	return m.needsOf(name).why(id)
}

// needs is what the jobs need of the checkpoints of one name (needsOf),
// read once: a removal of many checkpoints asks it of each without
// looking at every job again.
type needs struct {
	name string
	jobs []jobNeed // name's own job first
}

// jobNeed is what one job needs of the checkpoints of needs.name.
type jobNeed struct {
	name             string
	state            control.JobState
	unresumed        bool
	firstID, startID int64
	initial          *checkpoint.Metadata
	latest           int64 // the runner's (Latest)
}

// needsOf reads what the jobs the manager knows need of the checkpoints
// of job name: only what neededBy looks at (a job's state, not its whole
// status, which costs far more), and the runner's latest only of name's
// own job and of a job started from one of name's.
func (m *Manager) needsOf(name string) needs {
	m.mu.Lock()
	jobs := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	n := needs{name: name}
	for _, k := range jobs {
		k.mu.Lock()
		jn := jobNeed{name: k.spec.Name, state: k.st.State, unresumed: k.unresumed, firstID: k.firstID, startID: k.startID, initial: k.initial}
		k.mu.Unlock()
		if jn.name != name && !jn.unresumed && (jn.initial == nil || jn.initial.Job != name) {
			continue // it needs none of name's
		}
		jn.latest = k.runner.Latest() // without k.mu: the runner calls the job holding its lock
		n.jobs = append(n.jobs, jn)
	}
	slices.SortFunc(n.jobs, func(a, b jobNeed) int { // name's own job first
		return boolInt(b.name == name) - boolInt(a.name == name)
	})
	return n
}

// why says why checkpoint id of n.name must stay, or "" (neededBy).
func (n needs) why(id int64) string {
	name := n.name
	for _, k := range n.jobs {
		if k.unresumed && (k.name == name && (id >= k.firstID || id == k.startID) ||
			k.initial != nil && k.initial.Job == name && k.initial.ID == id) {
			// Which one the next coordinator resumes it from is what
			// this one could not read: every checkpoint of its run.
			return fmt.Sprintf("job %s was not resumed after the coordinator restarted, and the next coordinator resumes it from its latest checkpoint (cancel the job first to give it up)", k.name)
		}
		if k.state.Terminal() {
			continue
		}
		// What k.latest restores: the newest its machine keeps (of its
		// own name), else the checkpoint it started from.
		if k.latest > 0 {
			if k.name != name || k.latest != id {
				continue
			}
			if id == k.startID {
				return fmt.Sprintf("job %s is %s, and a failover restores it (the job started from it and has completed no checkpoint of its own since)", k.name, k.state)
			}
			return fmt.Sprintf("job %s is %s, and a failover restores it (its latest completed checkpoint)", k.name, k.state)
		}
		if in := k.initial; in != nil && in.Job == name && in.ID == id {
			return fmt.Sprintf("job %s is %s, and a failover restores it (the job started from it and has completed no checkpoint of its own since)", k.name, k.state)
		}
	}
	return ""
}

// namedBy says why checkpoint id of job name must stay because another
// checkpoint of the job still stored names output staged in it — its
// sink's snapshot holds that output no more, and its restore reads id's
// (checkpoint.Catalog.NamedBy) — or "". A running job's retention keeps
// such a checkpoint too; removing the one that names it first lets it go.
func (m *Manager) namedBy(ctx context.Context, name string, id int64) (string, error) {
	refs, err := m.opts.Catalog.NamedBy(ctx, name, id)
	if err != nil || len(refs) == 0 {
		return "", err
	}
	r := refs[len(refs)-1] // the newest: a removal newest first goes on to the others
	what := "names output staged in it"
	if r.From < id {
		what = fmt.Sprintf("names output staged in checkpoints from %d on, which may be in it", r.From)
	}
	others := ""
	switch n := len(refs) - 1; {
	case n == 1:
		others = fmt.Sprintf(" and checkpoint %d, which names it too,", refs[0].ID)
	case n > 1:
		others = fmt.Sprintf(" and the %d other checkpoints after %d that name it", n, id)
	}
	return fmt.Sprintf("checkpoint %d's snapshot of task %s %s (remove %d%s first)", r.ID, r.Task, what, r.ID, others), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// noSuchCheckpoint is the error for checkpoint id of j that is not
// stored: removed or discarded, as far as the job knows, else never taken
// (or discarded by an earlier run), with the ones that are stored.
func (m *Manager) noSuchCheckpoint(ctx context.Context, j *job, id int64) error {
	name := j.spec.Name
	j.mu.Lock()
	removed := j.removed[id]
	j.mu.Unlock()
	if removed {
		return control.Errorf(control.ErrNotFound, "checkpoint %d of job %s is gone: it was removed already", id, name)
	}
	for _, h := range j.runner.History() {
		if h.ID != id {
			continue
		}
		switch h.Status {
		case control.CheckpointDiscarded:
			return control.Errorf(control.ErrNotFound, "checkpoint %d of job %s is gone: retention discarded it (checkpointing.retained)", id, name)
		case control.CheckpointFailed:
			return control.Errorf(control.ErrNotFound, "there is no checkpoint %d of job %s to remove: it failed (%s)", id, name, h.Reason)
		}
	}
	return control.Errorf(control.ErrNotFound, "there is no checkpoint %d of job %s to remove%s", id, name, m.restorable(ctx, name))
}

// removeEarlier removes every checkpoint and savepoint of job name's
// earlier runs (those weir checkpoint ls marks so: older than the run's
// first, other than the one it started from) that nothing needs, the
// objects of their checkpoints that never completed — and of the
// run's own, once the job has ended (a snapshot its tasks finished after
// the end) — and the job's stray commit markers (removeStrayMarkers).
func (m *Manager) removeEarlier(ctx context.Context, name string) (control.Removed, error) {
	j, err := m.job(name)
	if err != nil {
		return control.Removed{}, err
	}
	j.mu.Lock()
	firstID, startID := j.firstID, j.startID
	j.mu.Unlock()
	earlier := func(id int64) bool { return id < firstID && id != startID }
	var out control.Removed
	ids, err := m.opts.Catalog.IDs(ctx, name)
	if err != nil {
		return out, fmt.Errorf("remove the checkpoints of earlier runs of %s: %w", name, err)
	}
	for i := len(ids) - 1; i >= 0; i-- {
		if !earlier(ids[i]) {
			continue
		}
		rc, err := m.removeChecked(ctx, name, ids[i])
		switch {
		case err == nil:
			out.Checkpoints = append(out.Checkpoints, rc)
		case errors.Is(err, control.ErrConflict):
			out.Kept = append(out.Kept, err.Error())
		case errors.Is(err, control.ErrNotFound):
			// Removed or discarded meanwhile.
		default:
			return out, fmt.Errorf("%w (%d removed before)", err, len(out.Checkpoints))
		}
	}
	// Objects of earlier runs' checkpoints without metadata: none of them
	// can complete any more (a run's IDs number on above the last one the
	// earlier runs triggered); nor can those of an ended run.
	if j, err = m.job(name); err != nil {
		return out, err
	}
	ended := j.status().State.Terminal()
	j.mu.Lock()
	firstID, startID = j.firstID, j.startID
	j.mu.Unlock()
	left, err := m.opts.Catalog.Leftovers(ctx, name)
	if err != nil {
		return out, fmt.Errorf("remove the checkpoints of earlier runs of %s: %w", name, err)
	}
	// A new run of the name may have started since the job was looked up:
	// its checkpoints that have not completed are leftovers too, from its
	// first ID on. One that starts from now on numbers its checkpoints
	// above those deleted here (clearing).
	m.mu.Lock()
	below := int64(-1) // none: j is the name's run
	if cur := m.jobs[name]; cur != j && cur != nil {
		cur.mu.Lock()
		below = cur.firstID
		cur.mu.Unlock()
	}
	for id, keys := range left {
		if (earlier(id) || ended) && (below < 0 || id < below) {
			out.Leftovers = append(out.Leftovers, id)
			out.LeftoverObjects += len(keys)
		}
	}
	slices.Sort(out.Leftovers)
	if n := len(out.Leftovers); n > 0 {
		c := m.clearing[name]
		c.n++
		c.ceiling = max(c.ceiling, out.Leftovers[n-1])
		m.clearing[name] = c
		defer func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if c := m.clearing[name]; c.n > 1 {
				c.n--
				m.clearing[name] = c
			} else {
				delete(m.clearing, name)
			}
		}()
	}
	m.mu.Unlock()
	for _, id := range out.Leftovers {
		if err := m.opts.Catalog.State.Delete(ctx, checkpoint.StatePrefix(name, id)); err != nil {
			return out, fmt.Errorf("remove the objects of checkpoint %d of %s, which never completed: %w", id, name, err)
		}
	}
	if len(out.Leftovers) > 0 {
		m.log.Info("objects of checkpoints that never completed removed", "job", name, "checkpoints", out.Leftovers, "objects", out.LeftoverObjects)
	}
	out.StrayMarkers = m.removeStrayMarkers(ctx, name)
	return out, nil
}

// removedCheckpoint notes that checkpoint id of the job was removed: the
// listing of stored checkpoints drops it, and an ended job's latest
// checkpoint, if it was that one, becomes the newest of the run still
// stored, in its record too (relatest). (A job that has not ended keeps
// its latest: that one is never removed.)
func (j *job) removedCheckpoint(ctx context.Context, id int64) {
	j.mu.Lock()
	if j.removed == nil {
		j.removed = map[int64]bool{}
	}
	j.removed[id] = true
	j.stored = slices.DeleteFunc(j.stored, func(c control.CheckpointInfo) bool { return c.ID == id })
	j.mu.Unlock()
	j.relatest(ctx)
}

// removalCut notes that the removal of checkpoint id of the job was cut
// short (Catalog.Remove failed after it began): the run's history and the
// listing of stored checkpoints say that it is being removed, and an
// ended job's latest checkpoint, if it was that one, becomes the newest
// of the run still stored whole (relatest), as for one removed.
func (j *job) removalCut(ctx context.Context, id int64) {
	j.noteCut(id)
	j.relatest(ctx)
}

// noteCut is removalCut but for the ended job's latest (relatest).
func (j *job) noteCut(id int64) {
	reason := partlyRemoved(j.spec.Name, id)
	j.runner.RemovalCut(id, reason)
	j.mu.Lock()
	if j.cut == nil {
		j.cut = map[int64]bool{}
	}
	j.cut[id] = true
	for i := range j.stored {
		if j.stored[i].ID == id {
			j.stored[i].Status, j.stored[i].Reason = control.CheckpointRemoving, reason
		}
	}
	j.mu.Unlock()
}

// partlyRemoved is the reason weir checkpoint ls gives for checkpoint id
// of job, whose removal began and did not finish.
func partlyRemoved(job string, id int64) string {
	return fmt.Sprintf("partly removed: a removal began and did not finish, so it is not restored; weir checkpoint rm %s %d finishes it", job, id)
}

// relatestIfGone sets an ended job's latest checkpoint anew (relatest)
// when the one it names is not stored: a coordinator that went away
// after it removed that one, before it wrote the job's record.
func (j *job) relatestIfGone(ctx context.Context) {
	j.mu.Lock()
	ended, latest := j.st.State.Terminal(), j.st.LatestCheckpoint
	j.mu.Unlock()
	if !ended || latest == 0 {
		return
	}
	ids, err := j.m.opts.Catalog.IDs(ctx, j.spec.Name)
	if err != nil {
		j.m.log.Warn("listing checkpoints failed", "job", j.spec.Name, "err", err)
		return
	}
	if !slices.Contains(ids, latest) {
		j.relatest(ctx)
	}
}

// relatest sets an ended job's latest checkpoint to the newest of its run
// in storage that was neither removed nor partly removed, and writes its
// record; a job stopped with a savepoint that was removed no longer says
// it was stopped with one (control.JobStatus.StoppedWithSavepoint), and
// its reason says the savepoint was removed. A job that has not ended keeps its latest: that one is never
// removed. A job that a new run of its name replaced meanwhile writes no
// record (superseded).
func (j *job) relatest(ctx context.Context) {
	j.mu.Lock()
	ended, firstID, startID := j.st.State.Terminal(), j.firstID, j.startID
	j.mu.Unlock()
	if !ended {
		return
	}
	ids, err := j.m.opts.Catalog.IDs(ctx, j.spec.Name)
	if err != nil {
		j.m.log.Warn("listing checkpoints failed", "job", j.spec.Name, "err", err)
		return
	}
	// Every removal noted so far is left out, under the same lock as the
	// result is set: of two removals side by side, the one that sets it
	// last knows of the other's.
	j.mu.Lock()
	latest := int64(0)
	for _, c := range ids {
		if !j.removed[c] && !j.cut[c] && (c >= firstID || c == startID) {
			latest = c
		}
	}
	j.st.LatestCheckpoint = latest
	if sp := j.st.StoppedWithSavepoint; sp != 0 && (j.removed[sp] || j.cut[sp]) {
		// Stopped with a savepoint that is gone: nothing restores it, and
		// weir run must not send the user to it. The job is a canceled
		// one now, restored from its latest (or started afresh).
		j.st.StoppedWithSavepoint = 0
		j.st.Reason = fmt.Sprintf("stopped with savepoint %d, removed since", sp)
	}
	j.mu.Unlock()
	j.persist()
}
