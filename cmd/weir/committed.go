package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// inputCommit tells when the output of what weir run's -input published to
// an unbounded job is complete: stored by its sinks, as no failover can
// take back. It holds once, in one attempt of the job,
//
//  1. every task of every source the input went to reported
//     (control.TaskStats.SourceReadSeq) that it processed everything its
//     stream held up to where it stood after the input was published;
//  2. a checkpoint triggered after that report completed holding no
//     in-flight channel data (clean) — its barrier left each source after
//     that input and passed no record on the way, so the checkpoint covers
//     the output of all of it; a restore starts from it or a later one;
//     and
//  3. every sink task that reports its commits (an exactly-once JetStream
//     sink, control.TaskStats.SinkCommitted) stored the output of such a
//     checkpoint. Other sinks store theirs before their task acks a
//     checkpoint.
//
// A failover before that starts over in the next attempt: the sources
// report again from where they restored, and a checkpoint of the new
// attempt must complete and be committed. Only JetStream sources can tell
// what they read; with input to a core NATS source, weir run falls back to
// quiet output (sound reports false), as it does once a source task's
// worker turns out not to report what it read (blind: a worker older than
// control.TaskStats.SourceReadSeq).
type inputCommit struct {
	plan *plan.Plan
	// sources are the JetStream sources -input published to, by name;
	// their values the streams' last sequences after it (0 until read).
	sources map[string]uint64
	known   bool // the streams' last sequences were read
	// attempt is the attempt in which every source reported reading past
	// its stream's last sequence (0: none yet), after the newest
	// checkpoint ID the job had then: a later one covers the input.
	attempt int
	after   int64
	// blind says that a task of such a source reported no read sequence:
	// its worker predates the report, and the input's end cannot be told.
	blind bool
}

// newInputCommit returns the tracker of the input that the -input flags
// publish to the unbounded sources of spec, and whether it can tell (every
// such source reads JetStream; the plan builds).
func newInputCommit(spec *jobspec.Spec, inputs inputFlags) (*inputCommit, bool) {
	p, err := plan.Build(spec)
	if err != nil {
		return nil, false
	}
	c := &inputCommit{plan: p, sources: map[string]uint64{}}
	for _, in := range inputs {
		name, _, named := strings.Cut(in, "=")
		for _, s := range spec.Sources {
			if named && s.Name != name {
				continue
			}
			if s.Stop != "" || s.StopSequence != 0 {
				break // a bounded source's input: the job ends when it is read
			}
			if s.Kind != jobspec.KindJetStream {
				return nil, false
			}
			c.sources[s.Name] = 0
			break
		}
	}
	return c, len(c.sources) > 0
}

// readEnds reads, once the input is published, where each source's stream
// stands: everything the input published is at or before it.
func (c *inputCommit) readEnds(ctx context.Context, js jetstream.JetStream, spec *jobspec.Spec) error {
	if c.known {
		return nil
	}
	for _, s := range spec.Sources {
		if _, ok := c.sources[s.Name]; !ok {
			continue
		}
		st, err := js.Stream(ctx, s.Stream)
		if err != nil {
			return fmt.Errorf("source %s: stream %s: %w", s.Name, s.Stream, err)
		}
		c.sources[s.Name] = st.CachedInfo().State.LastSeq
	}
	c.known = true
	return nil
}

// done reports whether the output of the input is committed, given the
// job's status st and the checkpoints listed after it (cps; listed is
// false when the listing failed).
func (c *inputCommit) done(st control.JobStatus, cps []control.CheckpointInfo, listed bool) bool {
	if !c.known || st.State != control.JobRunning {
		return false
	}
	tasks := make(map[string]control.TaskStats, len(st.Tasks))
	for _, t := range st.Tasks {
		tasks[t.Task] = t.Stats
	}
	if c.attempt != st.Attempt {
		c.attempt = 0
		if !listed || !c.readAll(tasks) {
			return false
		}
		// Every checkpoint triggered before the reports came is listed
		// (the coordinator numbers and lists a checkpoint before it sends
		// its trigger), so a checkpoint numbered after these was
		// triggered after the sources had read the input.
		c.attempt, c.after = st.Attempt, st.LatestCheckpoint
		for _, cp := range cps {
			c.after = max(c.after, cp.ID)
		}
		return false
	}
	if st.LatestCheckpoint <= c.after || !listed {
		return false
	}
	clean := c.clean(cps)
	if clean == 0 {
		return false
	}
	for _, v := range c.plan.Vertices {
		if v.Kind != plan.Sink {
			continue
		}
		for _, id := range v.Tasks {
			t, ok := tasks[id]
			if !ok || (t.SinkCommitted != nil && *t.SinkCommitted < clean) {
				return false
			}
		}
	}
	return true
}

// clean returns the first checkpoint of cps after c.after that completed
// holding no in-flight channel data (0: none yet). Its barriers passed no
// record at any task — an aligned checkpoint, or an unaligned one whose
// barriers found the channels empty —, so the output of everything the
// sources read before it is in its sinks' part. An unaligned barrier that
// overtook records leaves their output to a later checkpoint: weir run
// said a job's output was complete while the only record a slow filter let
// through was still in a channel.
func (c *inputCommit) clean(cps []control.CheckpointInfo) int64 {
	var clean int64
	for _, cp := range cps {
		if cp.ID <= c.after || cp.Status != control.CheckpointCompleted || (clean != 0 && cp.ID >= clean) {
			continue
		}
		var inFlight int64
		for _, m := range cp.Tasks {
			inFlight += m[control.MetricChannelStateBytes]
		}
		if inFlight == 0 {
			clean = cp.ID
		}
	}
	return clean
}

// readAll reports whether every task of every source the input went to
// has processed its stream up to where the input left it, and notes a
// task that cannot tell (blind).
func (c *inputCommit) readAll(tasks map[string]control.TaskStats) bool {
	for _, v := range c.plan.Vertices {
		end, ok := c.sources[v.Name]
		if !ok || v.Kind != plan.Source {
			continue
		}
		for _, id := range v.Tasks {
			t, ok := tasks[id]
			if ok && t.SourceReadSeq == nil {
				c.blind = true
			}
			if !ok || t.SourceReadSeq == nil || *t.SourceReadSeq < end {
				return false
			}
		}
	}
	return true
}
