package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// resolveStarts sets the StartSequence of each jetstream source whose
// Start is not the stream's beginning, asking its stream: new is the
// sequence after the stream's last message now; a time, the first message
// stored at or after it (or the one after the last, if none is; a time
// still to come is refused); a sequence, itself, once the stream is seen
// to hold it. Resolving once, when the job starts, makes every subtask and
// every restart before the first checkpoint start at the same message. A
// source resolved before (a job's stored spec, restored) keeps its
// sequence; in a fresh job (fresh: no checkpoint to restore) a sequence the
// spec gives itself (a JSON client's start_sequence) is checked against
// the stream as a start sequence is.
func (m *Manager) resolveStarts(ctx context.Context, spec *jobspec.Spec, fresh bool) error {
	for i := range spec.Sources {
		src := &spec.Sources[i]
		if src.Kind != jobspec.KindJetStream || (src.StartSequence != 0 && !fresh) {
			continue
		}
		sp, err := jobspec.ParseStart(src.Start)
		if err != nil {
			return control.Errorf(control.ErrInvalid, "submit %s: source %s: start: %w", spec.Name, src.Name, err)
		}
		if src.StartSequence != 0 {
			sp = jobspec.StartPoint{Seq: src.StartSequence}
		}
		if !sp.New && sp.Seq == 0 && sp.Time.IsZero() {
			continue // the beginning
		}
		if m.opts.JetStream == nil {
			return control.Errorf(control.ErrUnavailable, "submit %s: source %s: start %s needs stream %s's sequences, and this coordinator has no JetStream connection", spec.Name, src.Name, src.Start, src.Stream)
		}
		c, cancel := context.WithTimeout(ctx, m.opts.RequestTimeout)
		seq, err := resolveStart(c, m.opts.JetStream, src.Stream, sp)
		cancel()
		if err != nil {
			return fmt.Errorf("submit %s: source %s: start %s: %w", spec.Name, src.Name, cmp.Or(src.Start, fmt.Sprint(src.StartSequence)), err)
		}
		src.StartSequence = seq
	}
	return nil
}

// keepResolved gives each jetstream source of spec, about to be restored
// from checkpoint md, the start and stop sequences the run that took md
// resolved (runSources) when the source reads the same stream from the
// same start (to the same stop). A source that had read nothing when the
// checkpoint was taken resumes at its start sequence: the one that run
// started at, not where its start would resolve now ("new": after
// everything stored since, which it would skip). A restored run stops
// where the checkpoint's run was resolved to stop ("end": the stream's end
// when that run started, not at the restore, nor when a later run of the
// job's name started).
//
// given says that spec came with the restore: a sequence it gives itself
// (a JSON client's start_sequence or stop_sequence) stays. Otherwise spec
// is a copy of the job's stored spec, whose sequences are those its latest
// run resolved: where the checkpoint's run is not known, or had another
// start or stop, a start or stop relative to when it is resolved (new,
// end, a time) is resolved anew for this restore.
//
// Except start: new where the checkpoint's run is not known (metadata
// written before it recorded its run's sources, of a run that is not the
// job's latest): resolved now, it would make the source's subtasks that
// had read nothing when the checkpoint was taken (a partition with no
// message yet, say) skip everything stored since that run started. The
// restore is refused, saying so: the spec can give the start as a
// sequence. (A time resolves to the same sequence again, and an end or a
// time to stop at is refused by checkEnded where it would give an ended
// input more records.)
func (m *Manager) keepResolved(spec *jobspec.Spec, md *checkpoint.Metadata, given bool) error {
	run := m.runSources(md)
	if run == nil {
		for _, src := range spec.Sources {
			if src.Kind == jobspec.KindJetStream && (!given || src.StartSequence == 0) && isNew(src.Start) && checkpointHas(md, src.Name) {
				return control.Errorf(control.ErrInvalid, "restore %s from checkpoint %s/%d: source %s has start: new, and the checkpoint (written before checkpoints recorded their run's sources, by an earlier run) does not say where its run started: resolved now, the source's subtasks that had read nothing would skip what was stored since; give the start as a sequence",
					spec.Name, md.Job, md.ID, src.Name)
			}
		}
	}
	for i := range spec.Sources {
		src := &spec.Sources[i]
		if src.Kind != jobspec.KindJetStream {
			continue
		}
		var old *jobspec.Source
		for k := range run {
			if o := &run[k]; o.Name == src.Name && o.Kind == src.Kind && o.Stream == src.Stream {
				old = o
			}
		}
		switch {
		case old != nil && old.Start == src.Start && (!given || src.StartSequence == 0):
			src.StartSequence = old.StartSequence
		case !given && relativeStart(src.Start):
			src.StartSequence = 0
		}
		switch {
		case old != nil && old.Stop == src.Stop && src.Stop != "" && (!given || src.StopSequence == 0):
			src.StopSequence = old.StopSequence
		case !given && relativeStop(src.Stop):
			src.StopSequence = 0
		}
	}
	return nil
}

// isNew reports whether a source's start is new.
func isNew(start string) bool {
	sp, err := jobspec.ParseStart(start)
	return err == nil && sp.New
}

// checkpointHas reports whether checkpoint md holds a task of vertex.
func checkpointHas(md *checkpoint.Metadata, vertex string) bool {
	for id := range md.Handles {
		if v, _, ok := splitTaskID(id); ok && v == vertex {
			return true
		}
	}
	return false
}

// runSources returns the sources of the run that took checkpoint md, as
// that run resolved them: those md records, else (metadata written before
// they were recorded) those of the job's stored spec if md is of its
// latest run (taken by it, or the one it started from), else nil: not
// known.
func (m *Manager) runSources(md *checkpoint.Metadata) []jobspec.Source {
	if md.Sources != nil {
		return md.Sources
	}
	j, err := m.job(md.Job)
	if err != nil {
		return nil
	}
	j.mu.Lock()
	own := md.ID >= j.firstID || md.ID == j.startID
	j.mu.Unlock()
	if !own {
		return nil
	}
	return j.spec.Sources
}

// relativeStart reports whether a source's start names a point relative to
// when it is resolved: new, or a time (a sequence and the beginning do
// not).
func relativeStart(start string) bool {
	sp, err := jobspec.ParseStart(start)
	return err == nil && (sp.New || !sp.Time.IsZero())
}

// relativeStop is relativeStart for a stop: end, or a time.
func relativeStop(stop string) bool {
	sp, err := jobspec.ParseStop(stop)
	return err == nil && (sp.End || !sp.Time.IsZero())
}

// stopsResolvedNow returns the jetstream sources of spec (after
// keepResolved) whose stop resolves to a sequence at this restore: a stop
// relative to when it is resolved that keeps no sequence.
func stopsResolvedNow(spec *jobspec.Spec) map[string]bool {
	now := map[string]bool{}
	for _, src := range spec.Sources {
		if src.Kind == jobspec.KindJetStream && src.StopSequence == 0 && relativeStop(src.Stop) {
			now[src.Name] = true
		}
	}
	return now
}

// resolveStops sets the StopSequence of each jetstream source with a Stop,
// asking its stream (after resolveStarts): end is the stream's last
// sequence now; a time, the last message stored at or before it (a time
// still to come is refused); a sequence, itself, which the stream may not
// have reached yet (the source then waits for it). A source resolved
// before (a job's stored spec, restored) keeps its sequence. A stop that
// reads nothing because the stream holds nothing up to it is refused,
// and so is one before the source's start (start: new, stop: end, say).
func (m *Manager) resolveStops(ctx context.Context, spec *jobspec.Spec, fresh bool) error {
	for i := range spec.Sources {
		src := &spec.Sources[i]
		if src.Kind != jobspec.KindJetStream || (src.StopSequence != 0 && !fresh) {
			continue
		}
		sp, err := jobspec.ParseStop(src.Stop)
		if err != nil {
			return control.Errorf(control.ErrInvalid, "submit %s: source %s: stop: %w", spec.Name, src.Name, err)
		}
		if src.StopSequence == 0 && (sp.End || !sp.Time.IsZero()) {
			if m.opts.JetStream == nil {
				return control.Errorf(control.ErrUnavailable, "submit %s: source %s: stop %s needs stream %s's sequences, and this coordinator has no JetStream connection", spec.Name, src.Name, src.Stop, src.Stream)
			}
			c, cancel := context.WithTimeout(ctx, m.opts.RequestTimeout)
			seq, err := resolveStop(c, m.opts.JetStream, src.Stream, sp)
			cancel()
			if err != nil {
				return fmt.Errorf("submit %s: source %s: stop %s: %w", spec.Name, src.Name, src.Stop, err)
			}
			src.StopSequence = seq
		} else if src.StopSequence == 0 {
			src.StopSequence = sp.Seq
		}
		if src.StopSequence != 0 && src.StartSequence > src.StopSequence {
			return control.Errorf(control.ErrInvalid, "submit %s: source %s: stop %s is before its start %s: the source would read nothing",
				spec.Name, src.Name, seqOf(src.Stop, src.StopSequence), seqOf(src.Start, src.StartSequence))
		}
	}
	return nil
}

// seqOf names a start or stop as the spec gave it and, when that is not
// the sequence itself, the sequence it was resolved to: "4", "end
// (sequence 25)".
func seqOf(given string, seq uint64) string {
	if given == "" || given == fmt.Sprint(seq) {
		return fmt.Sprint(seq)
	}
	return fmt.Sprintf("%s (sequence %d)", given, seq)
}

// resolveStop is the last stream sequence sp (end or a time) names in
// stream.
func resolveStop(ctx context.Context, js jetstream.JetStream, stream string, sp jobspec.StopPoint) (uint64, error) {
	var seq uint64
	if sp.End {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
		}
		info := st.CachedInfo() // js.Stream has just asked for it
		seq = info.State.LastSeq
	} else {
		if sp.Time.After(time.Now().Add(startClockSkew)) {
			return 0, control.Errorf(control.ErrInvalid, "the time is in the future (this coordinator's clock says %s): which message it stops at is not known yet; give a sequence, or submit the job then",
				time.Now().UTC().Format(time.RFC3339))
		}
		// The message before the first one stored after the time.
		next, err := resolveStart(ctx, js, stream, jobspec.StartPoint{Time: sp.Time.Add(time.Nanosecond)})
		if err != nil {
			return 0, err
		}
		seq = next - 1
	}
	if seq == 0 {
		return 0, noMessageUpTo(stream)
	}
	return seq, nil
}

// noMessageUpTo refuses a stop (end, a time) of a source on stream, which
// holds no message up to it.
func noMessageUpTo(stream string) error {
	return control.Errorf(control.ErrInvalid, "stream %s holds no message up to it: the source would read nothing (give a sequence to wait for)", stream)
}

// startClockSkew is how far ahead of the coordinator's clock a start time
// may be (the clock of the machine that wrote it may be ahead).
const startClockSkew = 5 * time.Second

// resolveStart is the stream sequence sp names in stream.
func resolveStart(ctx context.Context, js jetstream.JetStream, stream string, sp jobspec.StartPoint) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
	}
	info := st.CachedInfo() // js.Stream has just asked for it
	first, last := max(info.State.FirstSeq, 1), info.State.LastSeq
	switch {
	case sp.New:
		return last + 1, nil
	case sp.Seq > last+1:
		return 0, control.Errorf(control.ErrInvalid, "stream %s's last sequence is %d: the source would wait for a sequence the stream may never reach", stream, last)
	case sp.Seq != 0 && sp.Seq < first:
		return 0, control.Errorf(control.ErrInvalid, "stream %s's first sequence is %d: the messages before it are gone", stream, first)
	case sp.Seq != 0:
		return sp.Seq, nil
	case sp.Time.After(time.Now().Add(startClockSkew)):
		// Resolved now, it would be the next message stored, and every
		// message stored until then would be read.
		return 0, control.Errorf(control.ErrInvalid, "the time is in the future (this coordinator's clock says %s): messages stored before it would be read; submit the job then, or start at new",
			time.Now().UTC().Format(time.RFC3339))
	case info.State.Msgs == 0 || sp.Time.After(info.State.LastTime):
		return last + 1, nil
	}
	// The first message stored at or after the time, by a consumer that
	// starts there.
	start := sp.Time
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &start, HeadersOnly: true})
	if err != nil {
		return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
	}
	defer func() {
		// Left alone it would stay until it expired, counting against
		// the stream's consumer limit (max_consumers) meanwhile: the
		// job's source could not start.
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = st.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	wait := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d), time.Millisecond)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
	}
	for msg := range batch.Messages() {
		md, err := msg.Metadata()
		if err != nil {
			return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
		}
		return md.Sequence.Stream, nil
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return 0, control.Errorf(control.ErrUnavailable, "stream %s: %w", stream, err)
	}
	// Stored before the time after all (the last message was removed
	// meanwhile): what comes next.
	return last + 1, nil
}
