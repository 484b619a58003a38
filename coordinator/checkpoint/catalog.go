package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// StatePrefix is the key prefix under which every object of checkpoint id
// of job lives; discarding the checkpoint deletes the prefix.
func StatePrefix(job string, id int64) string { return fmt.Sprintf("%s/chk-%d/", job, id) }

// StateKey is the key a task's snapshot of checkpoint id should be written
// under (the handle it acks).
func StateKey(job string, id int64, task string) string { return StatePrefix(job, id) + task }

// MetadataKey is the key of checkpoint id's metadata.
func MetadataKey(job string, id int64) string { return StatePrefix(job, id) + "_metadata" }

// ErrCorrupt is wrapped by errors about metadata whose checksum does not
// match or that cannot be decoded, or whose state objects are missing —
// a checkpoint whose removal began among them (RemovingError): every
// reader that skips or refuses a corrupt checkpoint skips or refuses it.
var ErrCorrupt = errors.New("checkpoint corrupt")

// RemovingError is Read's error for a checkpoint whose removal began and
// did not finish (Metadata.Removing): storage failed, or the coordinator
// went away, while Catalog.Remove deleted its objects. Some of its state
// may be gone, so it is never restored; errors.Is(err, ErrCorrupt) holds
// for it. Its message names the checkpoint and the command that finishes
// the removal.
type RemovingError struct {
	// Metadata is the checkpoint's metadata as it was completed, with
	// the mark.
	Metadata *Metadata
}

func (e *RemovingError) Error() string {
	md := e.Metadata
	return fmt.Sprintf("checkpoint %s/%d is partly removed (a removal began and did not finish), so it cannot be restored: "+
		"run weir checkpoint rm %s %d again to finish the removal", md.Job, md.ID, md.Job, md.ID)
}

// Is makes a RemovingError an ErrCorrupt: nothing may restore it.
func (e *RemovingError) Is(target error) bool { return target == ErrCorrupt }

// envelope is the stored form of metadata: the metadata's JSON bytes and
// their sha256.
type envelope struct {
	Checksum string          `json:"checksum"`
	Metadata json.RawMessage `json:"metadata"`
}

// Catalog stores checkpoint metadata in Meta and discards checkpoints from
// Meta and State (which may be the same store).
type Catalog struct {
	Meta  storage.Store
	State storage.Store
	// Log receives warnings about corrupt or missing checkpoints; nil
	// discards them.
	Log *slog.Logger
}

func (c *Catalog) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

// Encode returns the stored, checksummed form of md.
func Encode(md *Metadata) ([]byte, error) {
	raw, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint %d metadata: %w", md.ID, err)
	}
	sum := sha256.Sum256(raw)
	return json.Marshal(envelope{Checksum: "sha256:" + hex.EncodeToString(sum[:]), Metadata: raw})
}

// Decode verifies and decodes stored metadata.
func Decode(data []byte) (*Metadata, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	sum := sha256.Sum256(env.Metadata)
	if env.Checksum != "sha256:"+hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	var md Metadata
	if err := json.Unmarshal(env.Metadata, &md); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return &md, nil
}

// Write stores md's metadata atomically.
func (c *Catalog) Write(ctx context.Context, md *Metadata) error {
	data, err := Encode(md)
	if err != nil {
		return err
	}
	if err := c.Meta.Put(ctx, MetadataKey(md.Job, md.ID), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("write checkpoint %d metadata: %w", md.ID, err)
	}
	return nil
}

// Read loads and verifies checkpoint id's metadata and checks that its
// state objects exist. A missing checkpoint wraps fs.ErrNotExist, a bad one
// (its state gone among them) ErrCorrupt, one whose removal began a
// *RemovingError (an ErrCorrupt too); any other error (the store
// unreachable for now) is none of them, and says nothing of the checkpoint.
// A checkpoint whose sink snapshots name output staged in an earlier one
// (control.MetricSinkStateFrom) is corrupt too when that one is, or is
// gone: its restore reads that one's snapshots (checkNamed).
func (c *Catalog) Read(ctx context.Context, job string, id int64) (*Metadata, error) {
	md, err := c.read(ctx, job, id)
	if err != nil {
		return nil, err
	}
	if err := c.checkNamed(ctx, md); err != nil {
		return nil, err
	}
	return md, nil
}

// read is Read without checkNamed.
func (c *Catalog) read(ctx context.Context, job string, id int64) (*Metadata, error) {
	data, err := storage.ReadAll(ctx, c.Meta, MetadataKey(job, id))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s/%d: %w", job, id, err)
	}
	md, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s/%d: %w", job, id, err)
	}
	if md.Job != job || md.ID != id {
		return nil, fmt.Errorf("checkpoint %s/%d: %w: metadata names %s/%d", job, id, ErrCorrupt, md.Job, md.ID)
	}
	if md.Removing {
		return nil, &RemovingError{Metadata: md}
	}
	if c.State != nil {
		prefix := StatePrefix(job, id)
		have, err := c.State.List(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s/%d: list state: %w", job, id, err)
		}
		set := map[string]bool{}
		for _, k := range have {
			set[k] = true
		}
		for task, h := range md.Handles {
			if h == "" {
				continue
			}
			if strings.HasPrefix(h, prefix) {
				if !set[h] {
					return nil, fmt.Errorf("checkpoint %s/%d: %w: state of %s missing (%s)", job, id, ErrCorrupt, task, h)
				}
				continue
			}
			// Another checkpoint's object: gone, the checkpoint is
			// corrupt; unreadable for now (an outage, a stream without
			// a leader), it is not — Latest would skip it for an older
			// one, whose restore exactly-once sinks commit again.
			rc, err := c.State.Get(ctx, h)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("checkpoint %s/%d: %w: state of %s: %v", job, id, ErrCorrupt, task, err)
			}
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s/%d: state of %s: %w", job, id, task, err)
			}
			_ = rc.Close()
		}
	}
	return md, nil
}

// checkNamed checks the earlier checkpoints that md's sink snapshots name
// (control.MetricSinkStateFrom), which a restore of md reads too: one
// that is gone, corrupt or partly removed, or has no snapshot of the task
// that names it, makes md corrupt (ErrCorrupt, never fs.ErrNotExist nor a
// RemovingError: md itself is stored). What those name in turn is not
// checked: md's restore reads only the output staged in them, which they
// hold themselves (a checkpoint kept only because a newer one names it
// may itself no longer restore, and Read says so when asked for it).
func (c *Catalog) checkNamed(ctx context.Context, md *Metadata) error {
	named := map[int64]string{} // checkpoint -> the first task, by name, that names it
	for task, mt := range md.Metrics {
		if k := mt[control.MetricSinkStateFrom]; k > 0 {
			if t, ok := named[k]; !ok || task < t {
				named[k] = task
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(named)) {
		task := named[k]
		if k >= md.ID {
			return fmt.Errorf("checkpoint %s/%d: %w: its snapshot of %s names checkpoint %d, not an earlier one", md.Job, md.ID, ErrCorrupt, task, k)
		}
		km, err := c.read(ctx, md.Job, k)
		switch {
		case errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("checkpoint %s/%d: %w: its snapshot of %s names output staged in checkpoint %d, which cannot be restored (%v)",
				md.Job, md.ID, ErrCorrupt, task, k, err)
		case err != nil:
			return fmt.Errorf("checkpoint %s/%d: the checkpoint %d its snapshot of %s names: %w", md.Job, md.ID, k, task, err)
		case km.Handles[task] == "":
			return fmt.Errorf("checkpoint %s/%d: %w: its snapshot of %s names output staged in checkpoint %d, which has no snapshot of %s",
				md.Job, md.ID, ErrCorrupt, task, k, task)
		}
	}
	return nil
}

// Referrer is a stored checkpoint whose snapshot of Task names output
// staged in earlier checkpoints, from From on (NamedBy).
type Referrer struct {
	ID   int64
	Task string
	From int64
}

// NamedBy returns the stored checkpoints of job after id, ascending,
// whose sink snapshots may name output staged in checkpoint id: a task's
// control.MetricSinkStateFrom is id or earlier, and a restore of them
// reads the snapshots of every checkpoint from that one on. It reads
// their metadata only. One whose removal began, or whose metadata does
// not decode, is passed over: nothing restores it.
func (c *Catalog) NamedBy(ctx context.Context, job string, id int64) ([]Referrer, error) {
	ids, err := c.IDs(ctx, job)
	if err != nil {
		return nil, err
	}
	var out []Referrer
	for _, n := range ids {
		if n <= id {
			continue
		}
		data, err := storage.ReadAll(ctx, c.Meta, MetadataKey(job, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s/%d: %w", job, n, err)
		}
		md, err := Decode(data)
		if err != nil || md.Job != job || md.ID != n || md.Removing {
			continue
		}
		if from, task := md.SinkStateFrom(); from > 0 && from <= id {
			out = append(out, Referrer{ID: n, Task: task, From: from})
		}
	}
	return out, nil
}

// IDs lists the IDs of the checkpoints of job that have metadata,
// ascending. A listing that missed the newest would restore an older one
// (its sources go back; what exactly-once sinks committed after it is
// committed again, under other message ids): the JetStream stores list
// from the bucket's stream leader, never a replica that may lag.
func (c *Catalog) IDs(ctx context.Context, job string) ([]int64, error) {
	keys, err := c.Meta.List(ctx, job+"/chk-")
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", job, err)
	}
	var ids []int64
	for _, k := range keys {
		rest := strings.TrimPrefix(k, job+"/chk-")
		num, tail, ok := strings.Cut(rest, "/")
		if !ok || tail != "_metadata" {
			continue
		}
		if id, err := strconv.ParseInt(num, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// LoadAll reads every valid checkpoint of job, oldest first, warning about
// and skipping corrupt ones.
func (c *Catalog) LoadAll(ctx context.Context, job string) ([]*Metadata, error) {
	ids, err := c.IDs(ctx, job)
	if err != nil {
		return nil, err
	}
	var out []*Metadata
	for _, id := range ids {
		md, err := c.Read(ctx, job, id)
		if err != nil {
			c.log().Warn("skipping checkpoint", "job", job, "checkpoint", id, "err", err)
			continue
		}
		out = append(out, md)
	}
	return out, nil
}

// Latest returns the newest valid checkpoint among candidates (tried newest
// first). A corrupt or missing one is skipped with a warning, and its ID is
// returned in skipped. It returns nil, nil when none is valid.
func (c *Catalog) Latest(ctx context.Context, job string, candidates []int64) (md *Metadata, skipped []int64, err error) {
	ids := append([]int64(nil), candidates...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	for _, id := range ids {
		md, err := c.Read(ctx, job, id)
		if err == nil {
			return md, skipped, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, fs.ErrNotExist) {
			return nil, skipped, err
		}
		// Its output may already be committed by exactly-once sinks; the
		// records after the older checkpoint are then processed and
		// committed again, under new ids. Say so.
		c.log().Warn("checkpoint unusable, falling back to the previous one; output an exactly-once sink committed for it will be repeated", "job", job, "checkpoint", id, "err", err)
		skipped = append(skipped, id)
	}
	return nil, skipped, nil
}

// Reachable returns nil when Meta and State can be reached now
// (storage.Reachable: a store on a NATS connection that is down cannot),
// else the error of one that cannot.
func (c *Catalog) Reachable() error {
	if c == nil {
		return nil
	}
	if err := storage.Reachable(c.Meta); err != nil {
		return err
	}
	return storage.Reachable(c.State)
}

// Discard deletes checkpoint id: its metadata first, then its state,
// every object under its prefix. On JetStream, finding those lists the
// whole state bucket (storage.KeyDeleter): DiscardCompleted does without.
func (c *Catalog) Discard(ctx context.Context, job string, id int64) error {
	if err := storage.DeleteKey(ctx, c.Meta, MetadataKey(job, id)); err != nil {
		return fmt.Errorf("discard checkpoint %s/%d: %w", job, id, err)
	}
	if c.State != nil {
		if err := c.State.Delete(ctx, StatePrefix(job, id)); err != nil {
			return fmt.Errorf("discard checkpoint %s/%d: %w", job, id, err)
		}
	}
	return nil
}

// DiscardCompleted deletes completed checkpoint md, as retention drops
// it: its metadata first, then its state. Where State deletes by key
// (storage.KeyDeleter: the JetStream object store), its state is what md
// names under the checkpoint's prefix — each task's snapshot, and the
// commit marker a sink may have written next to it (mayMark) — deleted
// key by key, at a cost in proportion to the job's tasks; a listing of
// the prefix (Discard) lists the whole bucket, at a cost in proportion to
// every job's checkpoints. A completed checkpoint has no other objects
// (each task acked its snapshot's key); a marker its sink writes after
// this is looked for later (Runner), and anything else would be found by
// Leftovers. Elsewhere (a directory) it is Discard.
func (c *Catalog) DiscardCompleted(ctx context.Context, md *Metadata) error {
	kd, ok := c.State.(storage.KeyDeleter)
	if !ok {
		return c.Discard(ctx, md.Job, md.ID)
	}
	if err := storage.DeleteKey(ctx, c.Meta, MetadataKey(md.Job, md.ID)); err != nil {
		return fmt.Errorf("discard checkpoint %s/%d: %w", md.Job, md.ID, err)
	}
	prefix := StatePrefix(md.Job, md.ID)
	for task, h := range md.Handles {
		if !strings.HasPrefix(h, prefix) {
			continue // none, or not this checkpoint's (nothing writes one)
		}
		keys := []string{h}
		if mayMark(md, task, h) {
			keys = append(keys, h+CommitMarkerSuffix)
		}
		for _, k := range keys {
			if err := kd.DeleteKey(ctx, k); err != nil {
				return fmt.Errorf("discard checkpoint %s/%d: %w", md.Job, md.ID, err)
			}
		}
	}
	return nil
}

// Remove deletes checkpoint id for good, as a user asked, in three
// steps, each of which may be the last one a failure (storage, or the
// coordinator going away) lets through:
//
//  1. It rewrites the metadata with the Removing mark (one atomic Put
//     over the same key). From then on Read returns a RemovingError: no
//     restore, failover or resume — of this coordinator or the next one,
//     which reads the catalog from storage — uses the checkpoint, and
//     weir checkpoint ls lists it as being removed.
//  2. It deletes every object under the checkpoint's prefix in State but
//     the metadata: each task's snapshot (which holds the task's in-flight
//     channel data too) and a sink's commit marker.
//  3. It deletes the metadata, and the checkpoint is gone.
//
// A removal cut short after step 1 leaves the marked metadata, so the
// checkpoint is still listed, as partly removed, and Remove done again
// (weir checkpoint rm) finishes it from step 1 (the mark is there
// already). Cut short in step 1, nothing was deleted. A handle outside the
// prefix (nothing writes one) belongs to another checkpoint or to nobody,
// and is left. Metadata that does not decode is not marked: no reader
// restores it anyway.
//
// It returns how many objects it deleted (the metadata included), also
// with an error, which says how many of the state objects it deleted
// and how many are left. A checkpoint without metadata is not removed: the error
// wraps fs.ErrNotExist.
func (c *Catalog) Remove(ctx context.Context, job string, id int64) (int, error) {
	meta := MetadataKey(job, id)
	data, err := storage.ReadAll(ctx, c.Meta, meta)
	if err != nil {
		return 0, fmt.Errorf("remove checkpoint %s/%d: %w", job, id, err)
	}
	if md, err := Decode(data); err == nil && md.Job == job && md.ID == id && !md.Removing {
		md.Removing = true
		if err := c.Write(ctx, md); err != nil {
			return 0, fmt.Errorf("remove checkpoint %s/%d: mark it as being removed: %w", job, id, err)
		}
	}
	n := 0
	if c.State != nil {
		prefix := StatePrefix(job, id)
		keys, err := c.State.List(ctx, prefix)
		if err != nil {
			return 0, fmt.Errorf("remove checkpoint %s/%d: list state: %w", job, id, err)
		}
		// The state objects one by one, as listed (the metadata, where
		// one store holds both, as a directory does, comes last): a
		// delete that fails says how many went and how many are left.
		// A JetStream bucket deletes them by key, with no second
		// listing of the whole bucket that a Delete of the prefix does.
		// Last key first: a directory deletes a key as a prefix, and a
		// snapshot's key is the start of its commit marker's, which
		// would go uncounted with it.
		state := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == meta })
		slices.Reverse(state)
		for _, k := range state {
			if err := storage.DeleteKey(ctx, c.State, k); err != nil {
				return n, fmt.Errorf("remove checkpoint %s/%d: deleted %d of its %d state objects, %d left: %w",
					job, id, n, len(state), len(state)-n, err)
			}
			n++
		}
		if len(state) < len(keys) {
			// Then what is left of the prefix in the directory (a Put's
			// temporary file, the directory itself).
			defer func() { _ = c.State.Delete(ctx, prefix) }()
		}
	}
	if err := storage.DeleteKey(ctx, c.Meta, meta); err != nil {
		return n, fmt.Errorf("remove checkpoint %s/%d: metadata: %w", job, id, err)
	}
	return n + 1, nil
}

// Removing returns the IDs of job's checkpoints whose removal began and
// did not finish (their metadata carries the Removing mark, Read returns
// a RemovingError), ascending: what Remove done again finishes. It reads
// their metadata only, not their state.
func (c *Catalog) Removing(ctx context.Context, job string) ([]int64, error) {
	ids, err := c.IDs(ctx, job)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, id := range ids {
		data, err := storage.ReadAll(ctx, c.Meta, MetadataKey(job, id))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if err != nil {
			return out, fmt.Errorf("checkpoint %s/%d: %w", job, id, err)
		}
		if md, err := Decode(data); err == nil && md.Job == job && md.ID == id && md.Removing {
			out = append(out, id)
		}
	}
	return out, nil
}

// CommitMarkerSuffix ends the key of a commit marker: the empty object an
// exactly-once sink task writes next to its snapshot (the key plus this
// suffix) once the checkpoint's commit is stored (host.CommittedMarker).
const CommitMarkerSuffix = ".committed"

// Leftovers returns, by checkpoint ID, the keys of the objects in State
// under job's checkpoint prefixes whose checkpoint has no metadata: the
// snapshots of checkpoints that never completed that no run discarded
// (acked after the job ended or its coordinator restarted, or never acked:
// a running job discards the others, see Machine.Late), or what a removal
// cut short left. Commit markers are not counted (StrayMarkers).
func (c *Catalog) Leftovers(ctx context.Context, job string) (map[int64][]string, error) {
	out := map[int64][]string{}
	err := c.orphans(ctx, job, func(id int64, key string) {
		if !strings.HasSuffix(key, CommitMarkerSuffix) {
			out[id] = append(out[id], key)
		}
	})
	return out, err
}

// StrayMarkers returns the keys of the commit markers in State under
// job's checkpoint prefixes whose checkpoint has no metadata. A marker is
// written once its checkpoint's commit is stored, after the checkpoint
// completed (its metadata written), so each of them was written after its
// checkpoint was discarded (retention) or removed: it belongs to nothing,
// and can be deleted at any time (RemoveStrayMarkers).
func (c *Catalog) StrayMarkers(ctx context.Context, job string) ([]string, error) {
	var out []string
	err := c.orphans(ctx, job, func(_ int64, key string) {
		if strings.HasSuffix(key, CommitMarkerSuffix) {
			out = append(out, key)
		}
	})
	return out, err
}

// RemoveStrayMarkers deletes job's stray commit markers (StrayMarkers)
// and returns how many it deleted.
func (c *Catalog) RemoveStrayMarkers(ctx context.Context, job string) (int, error) {
	keys, err := c.StrayMarkers(ctx, job)
	if err != nil {
		return 0, err
	}
	for i, k := range keys {
		if err := storage.DeleteKey(ctx, c.State, k); err != nil {
			return i, fmt.Errorf("remove stray commit marker %s: %w", k, err)
		}
	}
	return len(keys), nil
}

// RemoveLeftovers deletes the objects (commit markers too) of job's
// checkpoints numbered from up to below (excluded) that have no metadata
// (Leftovers): the caller knows none of them can complete any more. It
// returns the IDs whose objects it deleted.
func (c *Catalog) RemoveLeftovers(ctx context.Context, job string, from, below int64) ([]int64, error) {
	ids := map[int64]bool{}
	err := c.orphans(ctx, job, func(id int64, _ string) {
		if id >= from && id < below {
			ids[id] = true
		}
	})
	if err != nil {
		return nil, err
	}
	out := slices.Sorted(maps.Keys(ids))
	for i, id := range out {
		if err := c.State.Delete(ctx, StatePrefix(job, id)); err != nil {
			return out[:i], fmt.Errorf("remove the objects of checkpoint %s/%d, which never completed: %w", job, id, err)
		}
	}
	return out, nil
}

// orphans calls fn with every object in State under job's checkpoint
// prefixes whose checkpoint has no metadata, and its checkpoint's ID.
func (c *Catalog) orphans(ctx context.Context, job string, fn func(id int64, key string)) error {
	if c.State == nil {
		return nil
	}
	// The objects first, then the metadata: a checkpoint whose metadata
	// is written between the two listings (and a marker of it next to
	// it) is not taken for an orphan. Both are the leader's (storage): a
	// metadata listing that lagged the objects' would take a completed
	// checkpoint's marker for stray, and delete it.
	keys, err := c.State.List(ctx, job+"/chk-")
	if err != nil {
		return fmt.Errorf("list state of %s: %w", job, err)
	}
	ids, err := c.IDs(ctx, job)
	if err != nil {
		return err
	}
	for _, k := range keys {
		num, _, ok := strings.Cut(strings.TrimPrefix(k, job+"/chk-"), "/")
		id, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			continue
		}
		if _, has := slices.BinarySearch(ids, id); !has {
			fn(id, k)
		}
	}
	return nil
}
