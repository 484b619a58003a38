package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirhq/weir/coordinator/control"
)

// RemoveJob implements control.API: it removes a job that has ended —
// first every checkpoint and savepoint of its name still stored, newest
// first, as RemoveCheckpoints removes one (its metadata, every task's
// snapshot, the sinks' commit markers), then what its checkpoints that
// never completed left and its stray commit markers (removeEarlier), and
// last the job itself: it is listed no more, and its status and
// checkpoints are not found; in a directory store, the empty directories
// of its checkpoints whose uploads were cut go with it
// (removeEmptyCheckpointDirs). The coordinator keeps its name's numbering,
// as the job's record (record.Removed), so that a job submitted again
// under the name numbers its attempts and checkpoint IDs on past the
// removed run's, as it would past an ended run's: a late task of the
// removed run cannot pass for one of the new run's, and the new run's
// exactly-once sinks give their output other message IDs than the
// removed run's, which a sink stream's duplicate window would drop.
//
// Refused (ErrConflict), before anything is removed: a job that has not
// ended (stop or cancel it first); one a restarted coordinator could not
// resume (cancel gives it up); and one with a checkpoint another job
// needs (neededBy: that job started from it and restores it on a
// failover until it completes a checkpoint of its own). A removal cut
// short (storage failed) leaves the job listed with what is left, and
// weir job rm again goes on.
func (m *Manager) RemoveJob(ctx context.Context, name string) (control.Removed, error) {
	j, err := m.job(name)
	if err != nil {
		return control.Removed{}, err
	}
	m.log.Info("remove requested", "job", name, "reply", control.Requester(ctx))
	st := j.status()
	j.mu.Lock()
	unresumed := j.unresumed
	j.mu.Unlock()
	switch {
	case unresumed:
		return control.Removed{}, control.Errorf(control.ErrConflict,
			"cannot remove job %s: it was not resumed after the coordinator restarted, and the next coordinator resumes it; cancel it first to give it up", name)
	case !st.State.Terminal():
		return control.Removed{}, control.Errorf(control.ErrConflict,
			"cannot remove job %s: it is %s; stop it first (weir job stop keeps a savepoint to restore, weir job cancel does not)", name, st.State)
	}
	ids, err := m.opts.Catalog.IDs(ctx, name)
	if err != nil {
		return control.Removed{}, fmt.Errorf("remove job %s: list its checkpoints: %w", name, err)
	}
	needs := m.needsOf(name) // once, not for each of thousands of checkpoints
	for _, id := range ids {
		if why := needs.why(id); why != "" {
			return control.Removed{}, control.Errorf(control.ErrConflict, "cannot remove job %s: its checkpoint %d must stay: %s", name, id, why)
		}
	}
	var out control.Removed
	for i := len(ids) - 1; i >= 0; i-- {
		rc, err := m.removeChecked(ctx, name, ids[i])
		switch {
		case err == nil:
			out.Checkpoints = append(out.Checkpoints, rc)
		case errors.Is(err, control.ErrNotFound):
			// Removed or discarded meanwhile.
		default:
			return out, fmt.Errorf("remove job %s: %w (%d of its checkpoints removed before it; weir job rm %s again goes on)", name, err, len(out.Checkpoints), name)
		}
	}
	rest, err := m.removeEarlier(ctx, name)
	out.Checkpoints = append(out.Checkpoints, rest.Checkpoints...)
	out.Leftovers, out.LeftoverObjects = rest.Leftovers, rest.LeftoverObjects
	out.StrayMarkers = rest.StrayMarkers
	if err == nil && len(rest.Kept) > 0 {
		err = control.Errorf(control.ErrConflict, "%s", rest.Kept[0])
	}
	if err != nil {
		return out, fmt.Errorf("remove job %s: %w (weir job rm %s again goes on)", name, err, name)
	}
	m.mu.Lock()
	if m.jobs[name] != j {
		m.mu.Unlock()
		return out, control.Errorf(control.ErrConflict,
			"job %s was submitted again while it was removed: the new run stays (the earlier run's checkpoints are gone)", name)
	}
	j.mu.Lock()
	j.gone = true
	j.mu.Unlock()
	m.mu.Unlock()
	if err := j.writeRecord(); err != nil {
		j.mu.Lock()
		j.gone = false
		j.mu.Unlock()
		return out, fmt.Errorf("remove job %s: its checkpoints are removed, but %w; weir job rm %s again goes on", name, err, name)
	}
	// The directories of its checkpoints that never completed whose
	// uploads were cut hold no object, and nothing above found them.
	// Only the removed run's IDs: a run of the name submitted meanwhile, or
	// while the directories are swept, numbers its checkpoints above what
	// the removed run reserved (job.reserved), and an empty directory of
	// its may be one its first snapshot is about to fill.
	j.mu.Lock()
	below := max(j.reserved, j.triggered) + 1
	j.mu.Unlock()
	m.mu.Lock()
	if cur := m.jobs[name]; cur != j && cur != nil {
		cur.mu.Lock()
		below = min(below, max(cur.firstID, 1))
		cur.mu.Unlock()
	}
	m.mu.Unlock()
	dirs := removeEmptyCheckpointDirs(m.opts.Catalog, name, below)
	m.log.Info("job removed", "job", name, "checkpoints", len(out.Checkpoints), "empty_checkpoint_dirs", dirs)
	return out, nil
}

// isGone reports whether the job was removed (RemoveJob).
func (j *job) isGone() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gone
}
