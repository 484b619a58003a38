package job

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
)

// Guarantees says what each source and sink of spec promises about
// delivery, and what its checkpointing mode adds: a core-NATS source is
// at-most-once whatever the sinks do (and says its pending limit, past
// which it drops what comes while the job falls behind), a JetStream
// source with several
// subtasks is split by subject hash or by server-side partitions.
//
// A bounded source (stop) says what follows its stop: the job finishes with
// a final savepoint once every source stopped, or, while some source has
// no stop, never by itself — that source's input has no end.
//
// An exactly-once sink of a job checkpointing at-least-once says that the
// job's output is at-least-once nonetheless.
//
// An at-least-once sink says when it publishes in atomic batches: in
// publish mode atomic, or, on a server that fsyncs every write
// (fsyncEachWrite), in publish mode auto where its stream allows atomic
// publish (sink.ResolveAtLeastOnceMode).
func Guarantees(spec *jobspec.Spec, fsyncEachWrite bool) []control.Guarantee {
	var out []control.Guarantee
	var unbounded []string
	for _, s := range spec.Sources {
		if s.Kind != jobspec.KindJetStream || s.StopSequence == 0 {
			unbounded = append(unbounded, s.Name)
		}
	}
	afterStop := "then the job finishes with a final savepoint"
	switch len(unbounded) {
	case 0:
	case 1:
		afterStop = fmt.Sprintf("then it waits: source %s has no stop, so the job does not finish by itself", unbounded[0])
	default:
		afterStop = fmt.Sprintf("then it waits: sources %s have no stop, so the job does not finish by itself", strings.Join(unbounded, ", "))
	}
	for _, s := range spec.Sources {
		g := source.JetStreamGuarantee
		switch {
		case s.Kind == jobspec.KindNATS:
			g = source.CoreGuarantee + "; " + CorePendingLimit(s)
		case s.Partitions > 0:
			g += fmt.Sprintf("; %d partitions (%s) split among %d subtask(s) by the server", s.Partitions, s.PartitionFilter, s.Parallelism)
		case s.Parallelism > 1:
			g += fmt.Sprintf("; %d subtasks each read the whole stream and keep their share by subject hash (set partitions to split on the server)", s.Parallelism)
		}
		if s.Kind == jobspec.KindJetStream && s.StartSequence > 0 {
			g += fmt.Sprintf("; without a checkpoint, reads from sequence %d (start: %s)", s.StartSequence, cmp.Or(s.Start, fmt.Sprint(s.StartSequence)))
		}
		if s.Kind == jobspec.KindJetStream && s.StopSequence > 0 {
			g += fmt.Sprintf("; stops after sequence %d (stop: %s), %s", s.StopSequence, cmp.Or(s.Stop, fmt.Sprint(s.StopSequence)), afterStop)
		}
		out = append(out, control.Guarantee{Role: "source", Name: s.Name, Text: g})
	}
	var exactlyOnce []string // the exactly-once sinks of a job checkpointing at-least-once
	for _, s := range spec.Sinks {
		g := sink.ExactlyOnceGuarantee
		switch {
		case s.Kind == jobspec.KindNATS || s.Guarantee == jobspec.AtMostOnce:
			g = sink.CoreGuarantee
		case s.Guarantee == jobspec.AtLeastOnce:
			g = sink.AtLeastOnceGuarantee
			switch s.Publish {
			case jobspec.PublishAtomic:
				g += sink.AtomicBatchesNote
			case "", jobspec.PublishAuto:
				if fsyncEachWrite {
					g += fmt.Sprintf("; the server fsyncs every write, so published in atomic batches if stream %s allows atomic publish", s.Stream)
				}
			}
		}
		if g == sink.ExactlyOnceGuarantee && spec.Checkpointing.Mode == jobspec.ModeAtLeastOnce {
			exactlyOnce = append(exactlyOnce, s.Name)
			g += "; but checkpointing at-least-once makes it at-least-once end to end: a record processed twice after a failure is published twice"
		}
		out = append(out, control.Guarantee{Role: "sink", Name: s.Name, Text: g})
	}
	if spec.Checkpointing.Mode == jobspec.ModeAtLeastOnce {
		text := "after a failure, records may be processed twice"
		if len(exactlyOnce) > 0 {
			text += " (mode exactly-once or unaligned would make the output of sink " + strings.Join(exactlyOnce, ", ") + " exactly-once)"
		}
		out = append(out, control.Guarantee{Role: "checkpointing", Name: spec.Checkpointing.Mode, Text: text})
	}
	return out
}

// CorePendingLimit says a nats source's pending limit, per subtask: what
// its subscription buffers at most while the job falls behind its input,
// past which the NATS client drops what comes.
func CorePendingLimit(s jobspec.Source) string {
	msgs, bytes := int64(s.PendingMessages), s.PendingBytes
	if msgs == 0 {
		msgs = jobspec.DefaultPendingMessages
	}
	if bytes == 0 {
		bytes = jobspec.DefaultPendingBytes
	}
	return fmt.Sprintf("pending limit %d messages or %s per subtask (pending-messages, pending-bytes)", msgs, jobspec.FormatSize(bytes))
}
