package job

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
)

// maxStoredListed bounds how many checkpoints storedCheckpoints reads from
// storage: as many as the history keeps.
const maxStoredListed = 100

// storedCheckpoints returns the completed checkpoints of the job in
// storage that hist (the runner's history) does not hold, newest first:
// those of earlier runs of the job's name (control.CheckpointInfo.
// EarlierRun) — a run's checkpoint machine keeps its own checkpoints and
// the one it was restored from, but not the rest its predecessor left
// stored, which a restore can start from all the same and no retention
// discards — and, for a job that has ended (one a restarted coordinator
// knows from its record has no history), its run's. One that does not
// check out is listed as failed, with why; one whose removal began and
// did not finish (checkpoint.RemovingError) as being removed, also one of
// a run that goes on (its machine does not keep it), which is read for it.
//
// They are read once per job: nothing else changes them while the job is
// known under its name (its retention discards only checkpoints its
// machine keeps, a new run of the name is a new job). Storage that cannot
// be read leaves them out, and the next listing tries again.
func (j *job) storedCheckpoints(ctx context.Context, hist []control.CheckpointInfo) []control.CheckpointInfo {
	listed := make(map[int64]bool, len(hist))
	for _, h := range hist {
		listed[h.ID] = true
	}
	j.mu.Lock()
	if j.storedRead {
		out := make([]control.CheckpointInfo, 0, len(j.stored))
		for _, c := range j.stored {
			if !listed[c.ID] {
				out = append(out, c)
			}
		}
		j.mu.Unlock()
		return out
	}
	ended, firstID, startID := j.st.State.Terminal(), j.firstID, j.startID
	j.mu.Unlock()

	cat, name := j.m.opts.Catalog, j.spec.Name
	ids, err := cat.IDs(ctx, name)
	if err != nil {
		j.m.log.Warn("listing stored checkpoints failed", "job", name, "err", err)
		return nil
	}
	var out []control.CheckpointInfo
	for i := len(ids) - 1; i >= 0 && len(out) < maxStoredListed; i-- {
		id := ids[i]
		if listed[id] {
			continue
		}
		// This run's, of a job that runs on: its history lists it (or
		// did, before it kept only the latest), and its retention may
		// discard it — unless it is partly removed (a removal cut short
		// before the coordinator restarted), which the run does not keep.
		run := id >= firstID && !ended
		md, err := cat.Read(ctx, name, id)
		var in control.CheckpointInfo
		var cut *checkpoint.RemovingError
		switch {
		case errors.As(err, &cut):
			in = cut.Metadata.Info()
			in.Status, in.Reason = control.CheckpointRemoving, partlyRemoved(name, id)
		case run:
			continue
		case err == nil:
			in = md.Info()
		case errors.Is(err, fs.ErrNotExist):
			continue // deleted since it was listed
		case errors.Is(err, checkpoint.ErrCorrupt):
			in = control.CheckpointInfo{Job: name, ID: id, Status: control.CheckpointFailed,
				Reason: fmt.Sprintf("stored, but cannot be restored: %v", err)}
		default:
			j.m.log.Warn("reading a stored checkpoint failed", "job", name, "checkpoint", id, "err", err)
			return out
		}
		in.EarlierRun = id < firstID && id != startID // the run's start is the run's
		out = append(out, in)
	}
	// The job keeps a copy of its own: a removal changes its entries in
	// place (noteCut, removedCheckpoint) while the caller still reads out.
	j.mu.Lock()
	j.stored, j.storedRead = slices.Clone(out), true
	j.mu.Unlock()
	return out
}
