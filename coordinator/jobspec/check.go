package jobspec

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/transport/subject"
)

// Check validates a spec that did not come from Parse — the job API takes
// specs as JSON from any client — by the rules Parse applies, and returns
// an Errors value naming each field at fault by its path (the YAML names
// of coordinator/README.md; there are no lines). A spec Parse returned
// passes unchanged.
//
// Check fills the defaults Parse fills where the zero value is not itself
// a setting: the checkpointing mode, interval, timeout, max-concurrent and
// retained; the restart strategy, and exponential backoff's initial, max
// and multiplier; a sink's guarantee, an input's partition, a source's
// key and a jetstream source's filter (from its subject). A zero
// parallelism is an error, as in a spec that writes one. The defaults of
// fields whose zero value is a setting (restart.attempts, a parallelism,
// a fixed delay) are filled where the spec is decoded from JSON
// (Spec.UnmarshalJSON), where a field left out still shows.
//
// Check refuses sources and sinks that reach weir's or NATS's own
// subjects and streams with their defaults (Reserved{}); CheckReserved
// takes the coordinator's.
func Check(s *Spec) error { return CheckReserved(s, Reserved{}) }

// CheckReserved is Check with reserved as what the spec's sources and sinks may
// not reach: the coordinator's control prefix, or the deployment
// operator's leave to reach it all.
func CheckReserved(s *Spec, reserved Reserved) error {
	if s == nil {
		return Errors{{Msg: "no job spec"}}
	}
	p := &parser{reservedFor: reserved}
	bad := func(path, format string, args ...any) { p.errf(nil, path, format, args...) }
	oneOf := func(path, v string, allowed ...string) {
		if v != "" && !slices.Contains(allowed, v) {
			bad(path, "unknown value %q (%swant %s)", v, meant(v, allowed), strings.Join(allowed, ", "))
		}
	}
	subjectOK := func(path, v string) {
		if v == "" {
			return
		}
		if msg := subjectProblem(v); msg != "" {
			bad(path, "%s", msg)
		}
	}
	stream := func(path, v string) {
		if v == "" {
			return
		}
		if msg := streamProblem(v); msg != "" {
			bad(path, "%s", msg)
		}
	}
	parallelism := func(path string, n int) {
		if n < 1 || n > MaxParallelism {
			bad(path, "must be from 1 to %d, got %d", MaxParallelism, n)
		}
	}
	nonNegative := func(path string, d time.Duration) {
		if d < 0 {
			bad(path, "bad duration %s (negative)", d)
		}
	}

	for i := range s.Sources {
		src := &s.Sources[i]
		path := fmt.Sprintf("sources[%d]", i)
		oneOf(path+".kind", src.Kind, KindNATS, KindJetStream)
		subjectOK(path+".subject", src.Subject)
		stream(path+".stream", src.Stream)
		subjectOK(path+".filter", src.Filter)
		parallelism(path+".parallelism", src.Parallelism)
		if src.Partitions < 0 || src.Partitions > MaxPartitions {
			bad(path+".partitions", "must be from 1 to %d, got %d", MaxPartitions, src.Partitions)
		}
		if src.Key == "" {
			src.Key = KeyFromHeader
		}
		oneOf(path+".key", src.Key, KeyFromHeader, KeyFromSubject)
		if _, err := ParseStart(src.Start); err != nil {
			bad(path+".start", "%v", err)
		}
		if _, err := ParseStop(src.Stop); err != nil {
			bad(path+".stop", "%v", err)
		}
		if src.PendingMessages < 0 || src.PendingMessages > MaxPendingMessages {
			bad(path+".pending-messages", "must be from 1 to %d, got %d", MaxPendingMessages, src.PendingMessages)
		}
		if err := CheckPendingBytes(src.PendingBytes); err != nil {
			bad(path+".pending-bytes", "%v", err)
		}
		if src.StopSequence != 0 && src.StartSequence > src.StopSequence {
			bad(path+".stop_sequence", "%d is before start_sequence %d: the source would read nothing", src.StopSequence, src.StartSequence)
		}
	}
	for i := range s.Operators {
		op := &s.Operators[i]
		path := fmt.Sprintf("operators[%d]", i)
		parallelism(path+".parallelism", op.Parallelism)
		if op.Limits.Memory != 0 {
			if err := CheckMemory(op.Limits.Memory); err != nil {
				bad(path+".limits.memory", "%v", err)
			}
		}
		if op.Limits.Timeout != 0 {
			if err := CheckTimeout(op.Limits.Timeout); err != nil {
				bad(path+".limits.timeout", "%v", err)
			}
		}
		if op.Limits.SnapshotTimeout != 0 {
			if err := CheckTimeout(op.Limits.SnapshotTimeout); err != nil {
				bad(path+".limits.snapshot-timeout", "%v", err)
			}
		}
		for j, in := range op.Inputs {
			oneOf(fmt.Sprintf("%s.inputs[%d].partition", path, j), in.Partition, Forward, KeyHash, Broadcast, RoundRobin)
		}
	}
	for i := range s.Sinks {
		sk := &s.Sinks[i]
		path := fmt.Sprintf("sinks[%d]", i)
		oneOf(path+".kind", sk.Kind, KindNATS, KindJetStream)
		if sk.Subject != "" {
			if _, err := subject.Parse(sk.Subject); err != nil {
				bad(path+".subject", "%v", err)
			}
		}
		stream(path+".stream", sk.Stream)
		parallelism(path+".parallelism", sk.Parallelism)
		oneOf(path+".guarantee", sk.Guarantee, AtMostOnce, AtLeastOnce, ExactlyOnce)
		oneOf(path+".publish", sk.Publish, PublishAuto, PublishFast, PublishAtomic, PublishAsync)
		nonNegative(path+".ack-timeout", sk.AckTimeout)
		oneOf(path+".input.partition", sk.Input.Partition, Forward, KeyHash, Broadcast, RoundRobin)
	}

	if err := CheckChannelBuffer(s.Channels.Buffer); err != nil {
		bad("channels.buffer", "%v", err)
	}
	if d := s.Channels.Debloat; d != DebloatOff && d != 0 && d < MinDebloat {
		bad("channels.debloat", "%s is less than %s (or off)", d, MinDebloat)
	}
	c := &s.Checkpointing
	if c.Mode == "" {
		c.Mode = ModeExactlyOnce
	}
	oneOf("checkpointing.mode", c.Mode, ModeExactlyOnce, ModeAtLeastOnce, ModeUnaligned)
	nonNegative("checkpointing.aligned-timeout", c.AlignedTimeout)
	if c.AlignedTimeout > 0 && c.Mode != ModeExactlyOnce {
		bad("checkpointing.aligned-timeout", "applies to mode exactly-once only (mode is %s)", c.Mode)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < MinCheckpointInterval {
		bad("checkpointing.interval", "%s is less than %s, the shortest %s", c.Interval, MinCheckpointInterval, intervalHint)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Timeout < MinCheckpointTimeout {
		bad("checkpointing.timeout", "%s is less than %s, the shortest %s", c.Timeout, MinCheckpointTimeout, timeoutHint)
	}
	nonNegative("checkpointing.min-pause", c.MinPause)
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.MaxConcurrent < 0 {
		bad("checkpointing.max-concurrent", "must be at least 1, got %d", c.MaxConcurrent)
	}
	for _, e := range checkpointingConflicts(*c) {
		if !p.refused(e.path) {
			bad(e.path, "%s", e.msg)
		}
	}
	if c.TolerableFailures < 0 {
		bad("checkpointing.tolerable-failures", "must be at least 0, got %d", c.TolerableFailures)
	}
	if c.Retained == 0 {
		c.Retained = DefaultRetained
	}
	if c.Retained < 0 {
		bad("checkpointing.retained", "must be at least 1, got %d", c.Retained)
	}
	if c.Retained > MaxRetained {
		bad("checkpointing.retained", "must be at most %d, got %d", MaxRetained, c.Retained)
	}

	r := &s.Restart
	if r.Strategy == "" {
		// As Parse: exponential backoff, or fixed-delay where a delay is
		// given.
		r.Strategy = RestartExponentialBackoff
		if r.Delay != 0 {
			r.Strategy = RestartFixedDelay
		}
	}
	oneOf("restart.strategy", r.Strategy, RestartFixedDelay, RestartExponentialBackoff, RestartNone)
	nonNegative("restart.delay", r.Delay)
	nonNegative("restart.initial", r.Initial)
	nonNegative("restart.max", r.Max)
	if r.Attempts < 0 {
		bad("restart.attempts", "must be at least 0, got %d", r.Attempts)
	}
	switch r.Strategy {
	case RestartFixedDelay:
		if r.Initial != 0 || r.Max != 0 || r.Multiplier != 0 {
			bad("restart", "initial, max and multiplier apply to exponential-backoff only")
		}
	case RestartExponentialBackoff:
		if r.Initial == 0 {
			r.Initial = DefaultBackoffInitial
		}
		if r.Max == 0 {
			r.Max = DefaultBackoffMax
		}
		if r.Multiplier == 0 {
			r.Multiplier = DefaultBackoffMultiplier
		}
		if r.Multiplier < 1 || math.IsInf(r.Multiplier, 0) || math.IsNaN(r.Multiplier) {
			bad("restart.multiplier", "want a number >= 1, got %v", r.Multiplier)
		}
		if r.Delay != 0 {
			bad("restart.delay", "delay applies to fixed-delay only (use initial)")
		}
		if r.Max < r.Initial {
			bad("restart.max", "max (%s) is less than initial (%s)", r.Max, r.Initial)
		}
	case RestartNone:
		r.Attempts = 0
	}

	p.validate(s, nil, nil)
	if len(p.errs) > 0 {
		for _, e := range p.errs {
			e.Line = 0 // a line of a file the caller may not have
		}
		return p.errs
	}
	return nil
}
