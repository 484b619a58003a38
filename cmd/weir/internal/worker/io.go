package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
)

// DuplicateWindow is how long the stream of exactly-once sink sk must
// deduplicate message ids under checkpointing ck
// (sink.ExactlyOnceDuplicateWindow).
func DuplicateWindow(ck jobspec.Checkpointing, sk jobspec.Sink) time.Duration {
	return sink.ExactlyOnceDuplicateWindow(ck.Interval, ck.Timeout, sk.AckTimeout)
}

// Unrecoverable reports whether err would recur on every restart of the
// job, whatever checkpoint it restores: a source offset the stream no
// longer holds or never held, a sink stream that is not durable or whose
// duplicate window is too short, a module that is gone (ErrModuleNotFound),
// changed since the job was submitted (ErrModuleChanged), over the module
// registry's size limit (registry.ErrTooLarge: its bytes are pinned at
// submit, and a restart within the restart strategy's delays does not
// wait for whoever runs weir to raise weir up -max-module-size; once
// raised, weir job restore goes on from the latest checkpoint) or does
// not load (a *wasm.ValidationError),
// state that cannot be redistributed on a rescale, a record a sink cannot
// publish (sink.ErrBadKey: its key cannot form its keyed sink's subject;
// sink.ErrRecordTooLarge: no message can carry it) — the replay meets it
// again, and the operator, the stream's subjects or the server's
// max_payload need fixing —, an atomic batch of a checkpoint's output
// larger than its sink stream's max_msgs limit (sink.StreamFullError's
// TooLarge: the batches are fixed when the output is staged, and the
// limit needs raising), a checkpoint's staged output for a stream that no
// longer exists (sink.ErrStagedStreamNotFound: below), an exactly-once
// sink's state that is malformed (sink.ErrMalformedState: bytes it cannot
// decode, or output staged on a subject or stream name that is none, such
// as out.{KEY} from before weir refused it — the checkpoint holds it, and
// every restart reads it again), a task snapshot
// that is corrupt (snapshot.ErrCorrupt, control.FailureCheckpointCorrupt:
// every restart would restore the same checkpoint; the coordinator takes
// it for unusable and restores an older one, or, for a checkpoint a
// person chose to restore, fails the job naming the older one), an
// operator that fails or traps restoring its state (weir_restore: every
// restart hands it the same bytes of the same checkpoint; typically a
// module whose state format differs from the one that wrote it, restored
// under a changed spec), or that fails or traps
// in weir_init (every restart hands it the same config of the same
// module: a config it refuses, a memory limit it outgrows) — a deadline is
// not among them, as a loaded machine may meet it once. The job fails at
// once with the reason instead of using up its restart strategy — but for
// a bad record whose sink's input is core NATS subjects alone, which
// replay nothing: the coordinator, which sees the job's graph, restarts
// that job (coordinator/job's lostRecord).
//
// A stream the spec names that does not exist is not among them, nor a
// sink's stream that no longer stores the sink's subject, or the subject
// a checkpoint's output was staged with (sink.ErrSubjectNotStored,
// sink.ErrStagedSubjectNotStored, even where a staged record's subject
// wraps sink.ErrBadKey): its subjects were edited while the job ran, and
// an edit back lets a restart commit the output. The
// coordinator refuses a spec naming a missing stream at submit
// (job.Options.JetStream), so a stream missing at deploy was there when
// the job started: it was deleted, or is being restored or recreated, and
// another attempt may find it again. The restart strategy bounds how long
// the job waits for it; then the job fails with the same reason. A
// module, by contrast, is pinned at submit to the digest of its bytes:
// once those bytes are gone no restart finds them. So is, in effect, the
// stream a checkpoint's output was staged for when a restore moved the
// sink to another one: the spec no longer names it, so nothing checked it
// at submit, it was most likely deleted on purpose after the move, and
// every restart restores the same checkpoint until the job completes one
// of its own.
func Unrecoverable(err error) bool {
	var invalid *wasm.ValidationError
	var full *sink.StreamFullError
	return errors.Is(err, control.ErrUnrecoverable) || errors.As(err, &full) && full.TooLarge() ||
		errors.Is(err, source.ErrOffsetGone) || errors.Is(err, source.ErrOffsetAhead) || errors.Is(err, source.ErrOffsetMismatch) ||
		errors.Is(err, sink.ErrStreamNotDurable) || errors.Is(err, sink.ErrDuplicateWindowTooShort) || errors.Is(err, sink.ErrBadKey) && !errors.Is(err, sink.ErrStagedSubjectNotStored) || errors.Is(err, sink.ErrRecordTooLarge) || errors.Is(err, wasm.ErrRecordTooLarge) ||
		errors.Is(err, sink.ErrStagedStreamNotFound) || errors.Is(err, sink.ErrMalformedState) ||
		errors.Is(err, host.ErrCannotRescale) || errors.Is(err, host.ErrPortEnded) || errors.Is(err, snapshot.ErrCorrupt) ||
		errors.Is(err, ErrModuleNotFound) || errors.Is(err, ErrModuleChanged) || errors.Is(err, registry.ErrTooLarge) ||
		errors.As(err, &invalid) || operatorRefused(err)
}

// operatorRefused reports whether err is an operator's weir_restore or
// weir_init returning an error, trapping or exiting: calls whose input
// every restart hands it again.
func operatorRefused(err error) bool {
	again := func(export string) bool { return export == abi.ExportRestore || export == abi.ExportInit }
	var oe *wasm.OperatorError
	var te *wasm.TrapError
	var ee *wasm.ExitError
	return errors.As(err, &oe) && again(oe.Export) ||
		errors.As(err, &te) && again(te.Export) ||
		errors.As(err, &ee) && again(ee.Export)
}

func (b *builder) source(pt plan.Task) (host.Source, error) {
	spec := find(b.d.Spec.Sources, func(s jobspec.Source) string { return s.Name }, pt.Vertex)
	if spec == nil {
		return nil, fmt.Errorf("source %s is not in the spec", pt.Vertex)
	}
	key, err := keyFrom(spec)
	if err != nil {
		return nil, err
	}
	switch spec.Kind {
	case jobspec.KindNATS:
		cfg := source.CoreConfig{Subject: spec.Subject, Key: key, PendingMsgs: spec.PendingMessages, PendingBytes: int(spec.PendingBytes),
			Job: b.d.Job, Task: pt.ID}
		if pt.Parallelism > 1 {
			cfg.Queue = "weir." + b.d.Job + "." + pt.Vertex
		}
		return source.NewCore(b.w.cfg.Conn, cfg)
	case jobspec.KindJetStream:
		if sp, err := jobspec.ParseStart(spec.Start); err != nil || ((sp.New || sp.Seq != 0 || !sp.Time.IsZero()) && spec.StartSequence == 0) {
			// The coordinator resolves these to a sequence when it starts
			// the job: read from the beginning instead, and the job would
			// take in what its start left out.
			return nil, control.Unrecoverable(fmt.Errorf("source %s: start %q was not resolved to a stream sequence", spec.Name, spec.Start))
		}
		if sp, err := jobspec.ParseStop(spec.Stop); err != nil || (sp.Bounded() && spec.StopSequence == 0) {
			// Unbounded, the job would never finish.
			return nil, control.Unrecoverable(fmt.Errorf("source %s: stop %q was not resolved to a stream sequence", spec.Name, spec.Stop))
		}
		cfg := source.JetStreamConfig{Stream: spec.Stream, Parallelism: pt.Parallelism, Index: pt.Index,
			Partitions: spec.Partitions, PartitionFilter: spec.PartitionFilter, Key: key, StartSeq: spec.StartSequence,
			StopSeq: spec.StopSequence}
		filter := spec.Filter
		if filter == "" {
			filter = spec.Subject
		}
		if filter != "" {
			cfg.FilterSubjects = []string{filter}
		}
		return source.NewJetStream(b.w.js, cfg)
	}
	return nil, fmt.Errorf("source %s: unknown kind %q", spec.Name, spec.Kind)
}

// keyFrom is where source spec takes its records' keys from. A spec
// without a key (stored before the option existed) reads the header, as
// every source did then.
func keyFrom(spec *jobspec.Source) (source.KeyFrom, error) {
	switch spec.Key {
	case "", jobspec.KeyFromHeader:
		return source.KeyFromHeader, nil
	case jobspec.KeyFromSubject:
		return source.KeyFromSubject, nil
	}
	return 0, fmt.Errorf("source %s: unknown key %q (want %s or %s)", spec.Name, spec.Key, jobspec.KeyFromHeader, jobspec.KeyFromSubject)
}

func (b *builder) sink(ctx context.Context, pt plan.Task) (host.Sink, error) {
	spec := find(b.d.Spec.Sinks, func(s jobspec.Sink) string { return s.Name }, pt.Vertex)
	if spec == nil {
		return nil, fmt.Errorf("sink %s is not in the spec", pt.Vertex)
	}
	if spec.Kind == jobspec.KindNATS || spec.Guarantee == jobspec.AtMostOnce {
		c, err := sink.NewCore(b.w.cfg.Conn, spec.Subject)
		if err != nil {
			return nil, err
		}
		c.Timestamps = spec.Timestamps
		return c, nil
	}
	if spec.Guarantee == jobspec.AtLeastOnce {
		return sink.NewAtLeastOnce(ctx, b.w.cfg.Conn, sink.AtLeastOnceConfig{Name: spec.Name, Stream: spec.Stream, Subject: spec.Subject,
			Publish: sink.PublishMode(spec.Publish), Timeout: spec.AckTimeout,
			BatchSize: b.w.cfg.AtomicBatch, FsyncEachWrite: b.d.FsyncEachWrite, Timestamps: spec.Timestamps})
	}
	return sink.NewExactlyOnce(ctx, b.w.cfg.Conn, sink.ExactlyOnceConfig{
		Name:               spec.Name,
		Stream:             spec.Stream,
		Subject:            spec.Subject,
		Job:                b.d.Job,
		Task:               pt.ID,
		Publish:            sink.PublishMode(spec.Publish),
		BatchSize:          b.w.cfg.AtomicBatch,
		Timeout:            spec.AckTimeout,
		MinDuplicateWindow: DuplicateWindow(b.d.Spec.Checkpointing, *spec),
		Timestamps:         spec.Timestamps,
		MaxStagedBytes:     maxStaged(b.d.Spec.Checkpointing),
	})
}

// maxStaged is the bound of an exactly-once sink's output staged since its
// last checkpoint: the sink's default, or none for a job that takes no
// periodic checkpoints (its output waits for its end of input, or a
// savepoint, by design).
func maxStaged(ck jobspec.Checkpointing) int {
	if ck.Disabled || ck.Interval <= 0 {
		return -1
	}
	return 0
}

// find returns the element of items whose name is want, or nil.
func find[T any](items []T, name func(T) string, want string) *T {
	for i := range items {
		if name(items[i]) == want {
			return &items[i]
		}
	}
	return nil
}
