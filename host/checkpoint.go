package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/partition"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/stream"
)

// pendingCheckpoint is an unaligned checkpoint whose snapshot was taken and
// whose input channel state is still being collected.
type pendingCheckpoint struct {
	snap    *snapshot.Task
	metrics CheckpointMetrics
	inputs  map[int][]stream.Element
	// prioritized marks channels whose queued barrier was turned into a
	// priority element (aligned-checkpoint timeout).
	prioritized map[int]bool
}

func (p *pendingCheckpoint) addInput(ch int, e stream.Element) {
	if e.Kind != stream.KindRecords {
		return
	}
	p.inputs[ch] = append(p.inputs[ch], e)
}

// SnapshotKey returns the storage key of a task's snapshot.
func SnapshotKey(prefix string, id int64, task string) string {
	return fmt.Sprintf("%schk-%d/%s", prefix, id, task)
}

// exec carries out the handler's actions in order. ch and d are the channel
// and delivery of the barrier that produced them, if any.
func (t *Task) exec(acts []barrier.Action, ch int, d *stream.Delivery) error {
	for _, a := range acts {
		switch a.Kind {
		case barrier.Snapshot:
			if err := t.snapshot(a, ch, d); err != nil {
				return err
			}
		case barrier.Abort:
			t.stats.declined.Add(1)
			if t.pending != nil && t.pending.snap.CheckpointID == a.ID {
				t.pending = nil
			}
			t.decline(a.ID, abortKind(a.Abort), a.Reason)
			t.broadcast(stream.Cancel(a.ID))
		case barrier.Release:
			if t.align.empty() {
				t.align.discard()
				t.align = newSpillBuffer(t.cfg.Checkpointing.SpillDir, t.cfg.Checkpointing.AlignmentMemory)
				continue
			}
			q, err := t.align.sequence()
			t.align = newSpillBuffer(t.cfg.Checkpointing.SpillDir, t.cfg.Checkpointing.AlignmentMemory)
			if err != nil {
				return err
			}
			t.replay = append(t.replay, q)
		case barrier.ChannelStateDone:
			p := t.pending
			if p == nil || p.snap.CheckpointID != a.ID {
				continue
			}
			t.pending = nil
			for c := range t.cfg.Inputs {
				if els := p.inputs[c]; len(els) > 0 {
					p.snap.Inputs = append(p.snap.Inputs, snapshot.ChannelState{Channel: c, Elements: els})
				}
			}
			t.write(p.snap, p.metrics)
		}
	}
	return nil
}

func abortKind(k barrier.AbortKind) string {
	switch k {
	case barrier.Subsumed:
		return DeclineSubsumed
	case barrier.Cancelled:
		return DeclineCancelled
	}
	return DeclineRefused
}

func (t *Task) decline(id int64, kind, reason string) {
	if t.cfg.Listener != nil {
		t.cfg.Listener.Decline(t.reportCtx(), t.name, id, kind, reason)
	}
}

// snapshot takes the task's snapshot for a.Barrier and forwards the barrier.
func (t *Task) snapshot(a barrier.Action, ch int, d *stream.Delivery) error {
	if t.rest != nil && !a.Unaligned {
		// An aligned snapshot needs the barriers of every channel, and the
		// one of the channel whose batch is half processed comes after it.
		return fmt.Errorf("checkpoint %d: aligned snapshot in the middle of a batch of input %d", a.ID, t.rest.ch)
	}
	start := t.clock()
	b := a.Barrier
	b.Unaligned = a.Unaligned
	snap := &snapshot.Task{Task: t.name, CheckpointID: a.ID, Timestamp: b.Timestamp, Unaligned: a.Unaligned}
	m := CheckpointMetrics{AlignmentDuration: a.Alignment, StartDelay: a.StartDelay, Unaligned: a.Unaligned,
		BufferedBytes: t.align.total, SpilledBytes: t.align.spilled}
	t.outputBlocked(&m, b)
	if op := t.cfg.Operator; op != nil {
		var buf bytes.Buffer
		t.stats.stateCheckpoint.Store(a.ID)
		err := t.stats.busyFor(func() error { return op.Snapshot(t.ctx, &buf) })
		t.stats.stateCheckpoint.Store(0)
		if err != nil {
			return t.operatorErr(err, fmt.Sprintf("snapshot checkpoint %d", a.ID), fmt.Sprintf("checkpoint %d", a.ID))
		}
		snap.ModuleState = buf.Bytes()
		m.StateBytes = int64(buf.Len())
		if abi.IsKeyedState(snap.ModuleState) {
			// The guest claims the keyed layout: a rescale would split the
			// state by it, so a malformed one is refused now, naming the
			// operator, not at some later restore.
			if err := abi.KeyedEntries(snap.ModuleState, func(_, _ []byte) error { return nil }); err != nil {
				return fmt.Errorf("%s: snapshot checkpoint %d: state starts with %q but is not in the keyed layout: %w", t.operatorName(), a.ID, abi.KeyedStateMagic, err)
			}
			m.KeyedState = true
		}
	}
	if s := t.cfg.Sink; s != nil {
		var st []byte
		var err error
		err = t.stats.busyFor(func() (err error) {
			if is, ok := s.(IncrementalSink); ok {
				st, m.SinkStateFrom, err = is.PreCommitIncremental(t.ctx, a.ID, b.Type == stream.Savepoint)
			} else {
				st, err = s.PreCommit(t.ctx, a.ID)
			}
			return err
		})
		if err != nil {
			return err // the sink names itself and the checkpoint
		}
		snap.SinkState = st
		m.StateBytes += int64(len(st))
		m.CommitReport = t.reportsCommits()
		m.CommitWait = t.commitWait(b, start)
	}
	if t.cfg.Source != nil {
		snap.SourceOffset = t.lastOffset
		t.offsets[a.ID] = t.lastOffset
		m.SourcePosition = SourcePosition(t.lastOffset)
		if u, ok := t.cfg.Source.(UnreadCounter); ok {
			n, known := u.Unread(t.lastOffset)
			m.SourceCaughtUp = known && n == 0
		}
		if b, ok := t.cfg.Source.(BoundedSource); ok {
			m.BoundedSource, m.SourceEnded = true, b.EndsAt(t.lastOffset)
		}
		m.SourceDrained = t.inputDrained
		if q, ok := t.cfg.Source.(SequencedSource); ok {
			m.SourceReadSeq, m.SourceSequenced = q.ReadThrough(t.lastOffset)
		}
		if c, ok := t.cfg.Source.(CoveredSource); ok {
			m.SourceCoveredSeq, m.SourceCovered = c.CoveredThrough(t.lastOffset)
		}
	}
	if t.cfg.Checkpointing.Mode != barrier.AtLeastOnce {
		// Only a consistent snapshot may say which ports ended: under
		// at-least-once a restored upstream may replay records that came
		// before its end-of-data, and the port must take them (and end
		// again: its final output may repeat, as any output may there).
		for p := range t.endedPorts {
			snap.EndedPorts = append(snap.EndedPorts, p)
		}
		slices.Sort(snap.EndedPorts)
		m.EndedPorts = EndedPortsMask(snap.EndedPorts, len(t.portOpen))
	}
	// Forward the barrier.
	if a.Unaligned {
		// It overtakes everything queued: at the channel's sender and in the
		// task's own output queue. Both are output channel state.
		outState := make([][]stream.Element, len(t.outs))
		for i, o := range t.outs {
			over, err := o.sender.SendPriority(t.ctx, stream.BarrierElement(b))
			if err != nil {
				return fmt.Errorf("forward barrier %d: %w", a.ID, channelErr("output", i, err))
			}
			for _, e := range over {
				if e.Kind == stream.KindRecords {
					outState[i] = append(outState[i], e)
				}
			}
		}
		for _, it := range t.outq {
			if it.e.Kind == stream.KindRecords {
				outState[it.ch] = append(outState[it.ch], it.e)
			}
		}
		for i, els := range outState {
			if len(els) > 0 {
				snap.Outputs = append(snap.Outputs, snapshot.ChannelState{Channel: i, Elements: els})
			}
		}
		p := &pendingCheckpoint{snap: snap, inputs: map[int][]stream.Element{}, prioritized: map[int]bool{}}
		if r := t.rest; r != nil {
			// Taken between two pieces of a batch (processInput): the
			// operator has not seen the rest, which comes before anything
			// still queued on its channel.
			p.addInput(r.ch, r.element())
		}
		if d != nil && ch >= 0 && d.Kind == stream.KindBarrier && d.Barrier.ID == a.ID {
			for _, e := range d.Overtaken {
				p.addInput(ch, e)
			}
		}
		m.SyncDuration = t.clock().Sub(start)
		p.metrics = m
		t.pending = p
		return nil
	}
	t.broadcast(stream.BarrierElement(b))
	m.SyncDuration = t.clock().Sub(start)
	t.write(snap, m)
	return nil
}

// prioritizeBarriers turns the barriers of an aligned-with-timeout
// checkpoint that went unaligned into priority elements where they already
// wait in an input queue, so they overtake the data before them (which
// becomes channel state) instead of waiting behind it.
func (t *Task) prioritizeBarriers() error {
	p := t.pending
	if p == nil || t.cfg.Checkpointing.Mode != barrier.AlignedTimeout {
		return nil
	}
	id := p.snap.CheckpointID
	for ch, in := range t.cfg.Inputs {
		if rid, ok := t.handler.Recording(ch); !ok || rid != id || p.prioritized[ch] || len(t.deferred[ch]) > 0 {
			continue
		}
		bp, ok := in.Receiver.(stream.BarrierPrioritizer)
		if !ok {
			continue
		}
		found, err := bp.PrioritizeBarrier(id)
		if err != nil {
			return channelErr("input", ch, err)
		}
		if found {
			p.prioritized[ch] = true
		}
	}
	return nil
}

// prioritizeLate implements the aligned-checkpoint timeout before the first
// barrier is even seen: a barrier queued at an input whose checkpoint was
// triggered longer than AlignmentTimeout ago is turned into a priority
// element, so the checkpoint starts (unaligned) at once instead of after the
// data queued before it. It returns when to look again (zero: no need).
func (t *Task) prioritizeLate() (next time.Time, err error) {
	ck := t.cfg.Checkpointing
	if ck.Mode != barrier.AlignedTimeout || ck.AlignmentTimeout <= 0 {
		return time.Time{}, nil
	}
	defer func() { t.lateDue = next }()
	al, ok := t.handler.(*barrier.Aligner)
	if !ok {
		return time.Time{}, nil
	}
	now := t.clock()
	for ch, in := range t.cfg.Inputs {
		if t.drained[ch] || len(t.deferred[ch]) > 0 || t.handler.Blocked(ch) {
			continue
		}
		bp, ok := in.Receiver.(stream.BarrierPrioritizer)
		if !ok {
			continue
		}
		b, ok := bp.QueuedBarrier()
		if !ok || b.Type == stream.Savepoint || b.Timestamp <= 0 || b.ID < al.Current() {
			continue
		}
		due := time.UnixMilli(b.Timestamp).Add(ck.AlignmentTimeout)
		if now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		if _, err := bp.PrioritizeBarrier(b.ID); err != nil {
			return time.Time{}, channelErr("input", ch, err)
		}
	}
	return next, nil
}

// write stores a finished snapshot in the background and acknowledges it.
func (t *Task) write(snap *snapshot.Task, m CheckpointMetrics) {
	t.stats.checkpoints.Add(1)
	m.ChannelStateBytes = snap.ChannelStateBytes()
	if t.cfg.Store == nil {
		t.decline(snap.CheckpointID, DeclineFailed, "no checkpoint storage configured")
		return
	}
	key := SnapshotKey(t.cfg.KeyPrefix, snap.CheckpointID, t.name)
	ctx := t.ctx
	t.writes.Add(1)
	go func() {
		defer t.writes.Done()
		start := t.clock()
		// Stream the encoding into the store: no second copy of the state.
		pr, pw := io.Pipe()
		var size int64
		encoded := make(chan struct{})
		go func() {
			defer close(encoded)
			n, err := snapshot.WriteTo(pw, snap)
			size = n
			pw.CloseWithError(err)
		}()
		err := t.cfg.Store.Put(ctx, key, pr)
		pr.CloseWithError(errors.New("store stopped reading"))
		<-encoded
		if err != nil {
			if ctx.Err() == nil {
				t.decline(snap.CheckpointID, DeclineFailed, oneLine(fmt.Sprintf("write snapshot: %v", err))) // err names the key
			}
			return
		}
		m.AsyncDuration = t.clock().Sub(start)
		m.SnapshotBytes = size
		if t.cfg.Listener != nil {
			t.cfg.Listener.Acknowledge(t.reportCtx(), t.name, snap.CheckpointID, key, m.Map())
		}
	}()
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// restore loads the snapshot named by cfg.Restore: operator state first,
// sink and source positions, then queues the recovered output channel state
// to be sent before any new output and the input channel state to be
// processed before any new input — under cfg.ChannelPlan, the channel
// state cfg.RestoreChannels lists instead (restoreChannels).
//
// Its errors name the snapshot once: the store's own name the key it was
// asked for, the others are prefixed with it.
func (t *Task) restore(ctx context.Context) error {
	if err := t.restoreState(ctx); err != nil {
		return err
	}
	if err := t.restoreChannels(ctx); err != nil {
		return fmt.Errorf("restore redistributed channel state: %w", err)
	}
	return nil
}

// restoreState is restore but for the channel state of a ChannelPlan.
func (t *Task) restoreState(ctx context.Context) error {
	if len(t.cfg.RestoreMerged) > 0 {
		if err := t.restoreMerged(ctx); err != nil {
			return fmt.Errorf("restore from %d merged snapshots: %w", len(t.cfg.RestoreMerged), err)
		}
		return nil
	}
	if t.cfg.Restore == "" {
		return nil
	}
	if t.cfg.Store == nil {
		return fmt.Errorf("restore %s: no checkpoint storage configured", t.cfg.Restore)
	}
	rc, err := t.cfg.Store.Get(ctx, t.cfg.Restore)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	snap, err := snapshot.Read(rc)
	rc.Close()
	if err == nil {
		err = t.restoreSnapshot(ctx, snap)
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", t.cfg.Restore, err)
	}
	return nil
}

// restoreSnapshot is restore once snap, the snapshot named by cfg.Restore,
// is read.
func (t *Task) restoreSnapshot(ctx context.Context, snap *snapshot.Task) error {
	if op := t.cfg.Operator; op != nil {
		t.stats.stateCheckpoint.Store(snap.CheckpointID)
		err := op.Restore(ctx, bytes.NewReader(snap.ModuleState))
		t.stats.stateCheckpoint.Store(0)
		if err != nil {
			return t.operatorErr(err, "restore", "")
		}
	}
	for _, p := range snap.EndedPorts {
		t.endedPorts[p] = true
	}
	if s := t.cfg.Sink; s != nil {
		state := snap.SinkState
		if t.committed(ctx, t.cfg.Restore, snap) {
			state = nil // stored already: nothing to commit again
		}
		state, err := t.inlineSinkState(ctx, t.cfg.Restore, snap, state)
		if err != nil {
			return err
		}
		if t.cfg.Restore != SnapshotKey(t.cfg.KeyPrefix, snap.CheckpointID, snap.Task) {
			t.foreignID.Store(snap.CheckpointID)
		}
		// The sink names itself and the checkpoint it recovers.
		if err := s.Recover(ctx, snap.CheckpointID, state); err != nil {
			return err
		}
	}
	if s := t.cfg.Source; s != nil {
		if err := s.Seek(ctx, snap.SourceOffset); err != nil {
			return err // the source names itself
		}
		t.setOffset(snap.SourceOffset)
	}
	t.restoredID = snap.CheckpointID
	if t.cfg.ChannelPlan {
		return nil // restoreChannels replays what of it comes here
	}
	for _, cs := range snap.Outputs {
		if cs.Channel < 0 || cs.Channel >= len(t.outs) {
			return fmt.Errorf("snapshot has output channel %d, the task has %d", cs.Channel, len(t.outs))
		}
		for _, e := range cs.Elements {
			t.outq = append(t.outq, outItem{ch: cs.Channel, e: e})
		}
	}
	q := &sequence{}
	for _, cs := range snap.Inputs {
		if cs.Channel < 0 || cs.Channel >= len(t.cfg.Inputs) {
			return fmt.Errorf("snapshot has input channel %d, the task has %d", cs.Channel, len(t.cfg.Inputs))
		}
		for _, e := range cs.Elements {
			q.mem = append(q.mem, tagged{ch: cs.Channel, e: e})
		}
	}
	if len(q.mem) > 0 {
		t.replay = append(t.replay, q)
	}
	return nil
}

// inlineSinkState returns state, the sink state of snap, stored under
// handle, whole: with what it names of the task's snapshots of earlier
// checkpoints (IncrementalSink), read from next to handle, put in.
func (t *Task) inlineSinkState(ctx context.Context, handle string, snap *snapshot.Task, state []byte) ([]byte, error) {
	is, ok := t.cfg.Sink.(IncrementalSink)
	if !ok || len(state) == 0 {
		return state, nil
	}
	return is.InlineState(ctx, state, func(ctx context.Context, id int64) ([]byte, error) {
		own := fmt.Sprintf("chk-%d/%s", snap.CheckpointID, snap.Task)
		if id <= 0 || id >= snap.CheckpointID {
			return nil, fmt.Errorf("the sink state of checkpoint %d names checkpoint %d, not an earlier one: %w", snap.CheckpointID, id, snapshot.ErrCorrupt)
		}
		if !strings.HasSuffix(handle, own) {
			return nil, fmt.Errorf("the sink state of checkpoint %d names checkpoint %d's, but %s is not stored as …/%s, where that would be next to it", snap.CheckpointID, id, handle, own)
		}
		key := strings.TrimSuffix(handle, own) + fmt.Sprintf("chk-%d/%s", id, snap.Task)
		rc, err := t.cfg.Store.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d's snapshot, which the restored sink state names: %w", id, err)
		}
		named, err := snapshot.Read(rc)
		rc.Close()
		if err == nil && (named.CheckpointID != id || named.Task != snap.Task) {
			err = fmt.Errorf("it is task %s's snapshot of checkpoint %d: %w", named.Task, named.CheckpointID, snapshot.ErrCorrupt)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s, which the restored sink state names: %w", key, err)
		}
		return named.SinkState, nil
	})
}

// restoreMerged restores a task of a rescaled vertex from the snapshots
// of several of the vertex's old subtasks: a source merges their offsets,
// an operator takes the entries of their keyed state whose key routes to
// it, a sink re-commits what each of them staged (SinkMerger).
func (t *Task) restoreMerged(ctx context.Context) error {
	if t.cfg.Store == nil {
		return errors.New("no checkpoint storage configured")
	}
	var snaps []*snapshot.Task
	var stored []bool // the commit of each one's sink state is known to be stored
	for _, h := range t.cfg.RestoreMerged {
		rc, err := t.cfg.Store.Get(ctx, h)
		if err != nil {
			return err
		}
		snap, err := snapshot.Read(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", h, err)
		}
		if (!t.cfg.ChannelPlan && (len(snap.Outputs) > 0 || len(snap.Inputs) > 0)) ||
			(t.cfg.Sink == nil && len(snap.SinkState) > 0) || (t.cfg.Operator == nil && len(snap.ModuleState) > 0) ||
			(t.cfg.Source == nil && len(snap.SourceOffset) > 0) {
			return fmt.Errorf("%s holds channel state, or state of another kind of task, which cannot be merged: %w", h, ErrCannotRescale)
		}
		if len(snaps) > 0 && snap.CheckpointID != snaps[0].CheckpointID {
			return fmt.Errorf("%s is of checkpoint %d, the others of %d: %w", h, snap.CheckpointID, snaps[0].CheckpointID, ErrCannotRescale)
		}
		snaps = append(snaps, snap)
		stored = append(stored, t.cfg.Sink != nil && t.committed(ctx, h, snap))
		if h != SnapshotKey(t.cfg.KeyPrefix, snap.CheckpointID, snap.Task) {
			t.foreignID.Store(snap.CheckpointID)
		}
	}
	t.restoredID = snaps[0].CheckpointID
	// A port ended in every old subtask stays ended. One that ended in
	// some only cannot be merged: ending it again would have the operator
	// give the final output of the ended ones' state once more (it was
	// committed with the checkpoint), and not ending it would lose the
	// others'.
	ended := map[int]int{}
	for _, s := range snaps {
		for _, p := range s.EndedPorts {
			ended[p]++
		}
	}
	for p, n := range ended {
		if n < len(snaps) {
			return fmt.Errorf("input port %d had ended in %d of the %d old subtasks of checkpoint %d (their final output is committed) and not in the others: restore with the old parallelism and let the job finish: %w",
				p, n, len(snaps), snaps[0].CheckpointID, ErrCannotRescale)
		}
		t.endedPorts[p] = true
	}
	// Each part the task has is restored from its share of the snapshots:
	// a task may chain a source, an operator and a sink.
	if t.cfg.Sink == nil && t.cfg.Operator == nil && t.cfg.Source == nil {
		return fmt.Errorf("restoring from several snapshots needs keyed operator state, a source whose offsets merge or a sink: %w", ErrCannotRescale)
	}
	if err := t.mergeSink(ctx, snaps, stored); err != nil {
		return err
	}
	if err := t.mergeOperator(ctx, snaps); err != nil {
		return err
	}
	return t.mergeSource(ctx, snaps)
}

// mergeSink re-commits every snapshot's sink state whose commit is not
// known to be stored (stored[i]); it does nothing for a task without a
// sink.
func (t *Task) mergeSink(ctx context.Context, snaps []*snapshot.Task, stored []bool) error {
	sk := t.cfg.Sink
	if sk == nil {
		return nil
	}
	m, ok := sk.(SinkMerger)
	if !ok {
		return fmt.Errorf("restoring a sink from several snapshots needs a sink that re-commits another task's state: %w", ErrCannotRescale)
	}
	for i, s := range snaps {
		state := s.SinkState
		if stored[i] {
			state = nil
		}
		state, err := t.inlineSinkState(ctx, t.cfg.RestoreMerged[i], s, state)
		if err != nil {
			return fmt.Errorf("%s: %w", t.cfg.RestoreMerged[i], err)
		}
		// The sink names itself and the checkpoint it recovers; the
		// snapshot names the task it is of.
		if err := m.RecoverTask(ctx, s.Task, s.CheckpointID, state); err != nil {
			return fmt.Errorf("%s: %w", t.cfg.RestoreMerged[i], err)
		}
	}
	return nil
}

// mergeOperator restores the operator with the keys of the snapshots'
// keyed states that belong to this subtask; it does nothing for a task
// without an operator.
func (t *Task) mergeOperator(ctx context.Context, snaps []*snapshot.Task) error {
	op := t.cfg.Operator
	if op == nil {
		return nil
	}
	if t.cfg.Parallelism < 1 || t.cfg.Subtask < 0 || t.cfg.Subtask >= t.cfg.Parallelism {
		return fmt.Errorf("restoring keyed state needs the task's place: subtask %d of %d", t.cfg.Subtask, t.cfg.Parallelism)
	}
	states := make([][]byte, len(snaps))
	for i, s := range snaps {
		states[i] = s.ModuleState
	}
	st, err := abi.MergeKeyedState(states, func(key []byte) bool {
		return partition.KeyChannel(key, t.cfg.Parallelism) == t.cfg.Subtask
	})
	if err != nil {
		return fmt.Errorf("%s: split keyed state: %w (%w)", t.operatorName(), err, ErrCannotRescale)
	}
	if len(snaps) > 0 {
		t.stats.stateCheckpoint.Store(snaps[0].CheckpointID)
	}
	err = op.Restore(ctx, bytes.NewReader(st))
	t.stats.stateCheckpoint.Store(0)
	if err != nil {
		return t.operatorErr(err, "restore", "")
	}
	return nil
}

// mergeSource seeks the source to the merge of the snapshots' offsets; it
// does nothing for a task without a source.
func (t *Task) mergeSource(ctx context.Context, snaps []*snapshot.Task) error {
	if t.cfg.Source == nil {
		return nil
	}
	m, ok := t.cfg.Source.(OffsetMerger)
	if !ok {
		return fmt.Errorf("restoring a source from several snapshots needs a source whose offsets merge: %w", ErrCannotRescale)
	}
	offsets := make([][]byte, len(snaps))
	for i, s := range snaps {
		offsets[i] = s.SourceOffset
	}
	off, err := m.MergeOffsets(offsets)
	if err != nil {
		return err // the source names itself
	}
	if err := t.cfg.Source.Seek(ctx, off); err != nil {
		return err // the source names itself
	}
	t.setOffset(off)
	return nil
}

// ChannelPiece is one channel of an old subtask's snapshot whose in-flight
// records a task replays as input after a rescale (Config.ChannelPlan).
type ChannelPiece struct {
	// Handle is the snapshot that holds the channel state.
	Handle string
	// Output selects the snapshot's output channel state (records its
	// task had not sent) instead of its input channel state.
	Output bool
	// Channel is the channel's index among the snapshot's input or output
	// channels.
	Channel int
	// Port is the task's input port that takes the records.
	Port int
	// ByKey keeps only the records whose key routes to the task
	// (partition.KeyChannel(key, Parallelism) == Subtask).
	ByKey bool
}

// restoreChannels queues the records of cfg.RestoreChannels, in order, to
// be processed before any new input, each piece on the first channel of
// its port (only the port tells the operator where a record came from).
// A snapshot named by several pieces is read once.
func (t *Task) restoreChannels(ctx context.Context) error {
	if !t.cfg.ChannelPlan || len(t.cfg.RestoreChannels) == 0 {
		return nil
	}
	if t.cfg.Store == nil {
		return errors.New("no checkpoint storage configured")
	}
	first := map[int]int{} // input port -> its first channel
	for c, in := range t.cfg.Inputs {
		if _, ok := first[in.Port]; !ok {
			first[in.Port] = c
		}
	}
	type channels struct{ in, out []snapshot.ChannelState }
	read := map[string]channels{}
	q := &sequence{}
	for _, pc := range t.cfg.RestoreChannels {
		cs, ok := read[pc.Handle]
		if !ok {
			rc, err := t.cfg.Store.Get(ctx, pc.Handle)
			if err != nil {
				return err // the store names the key
			}
			snap, err := snapshot.Read(rc)
			rc.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", pc.Handle, err)
			}
			cs = channels{in: snap.Inputs, out: snap.Outputs}
			read[pc.Handle] = cs
		}
		ch, ok := first[pc.Port]
		if !ok {
			return fmt.Errorf("%s: its channel state is for input port %d, and the task has %d input channels, none on that port: %w", pc.Handle, pc.Port, len(t.cfg.Inputs), ErrCannotRescale)
		}
		states, what := cs.in, "input"
		if pc.Output {
			states, what = cs.out, "output"
		}
		for _, st := range states {
			if st.Channel != pc.Channel {
				continue
			}
			for _, e := range st.Elements {
				if e.Kind != stream.KindRecords {
					// Snapshots hold records only (pendingCheckpoint.addInput,
					// the output state of snapshot): a control element would
					// belong to the old channel alone.
					return fmt.Errorf("%s: %s channel %d holds a %s element, which cannot be moved to another channel: %w", pc.Handle, what, pc.Channel, e.Kind, ErrCannotRescale)
				}
				b := e.Batch
				if pc.ByKey {
					var err error
					if b, err = t.ownKeys(b); err != nil {
						return fmt.Errorf("%s: %s channel %d: %w", pc.Handle, what, pc.Channel, err)
					}
				}
				if n, _ := abi.BatchCount(b); n > 0 {
					q.mem = append(q.mem, tagged{ch: ch, e: stream.Records(b)})
				}
			}
		}
	}
	if len(q.mem) > 0 {
		t.replay = append(t.replay, q)
	}
	return nil
}

// ownKeys returns the records of batch whose key routes to this subtask,
// in order, as a new batch.
func (t *Task) ownKeys(batch []byte) ([]byte, error) {
	if t.cfg.Parallelism < 1 || t.cfg.Subtask < 0 || t.cfg.Subtask >= t.cfg.Parallelism {
		return nil, fmt.Errorf("keeping the records of its keys needs the task's place: subtask %d of %d", t.cfg.Subtask, t.cfg.Parallelism)
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return nil, err
	}
	var b abi.Builder
	for it.Next() {
		if r := it.Record(); partition.KeyChannel(r.Key, t.cfg.Parallelism) == t.cfg.Subtask {
			b.AddRecord(r)
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return slices.Clone(b.Bytes()), nil
}
