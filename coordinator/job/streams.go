package job

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/subject"
)

// CheckStreams refuses spec, as the submit does (control.ErrInvalid, in
// the submit's words), when its JetStream sources or sinks name a stream
// that does not exist, a sink's subject its stream does not store, or a
// source's filter that matches none of its stream's subjects. Each is a
// mistake in the spec or a step left out (a typo, a stream not created
// yet): refusing the submit says so at once, where the job would
// otherwise fail every attempt the same way (a sink's commits find no
// stream to store them) or run on reading nothing (a filter outside the
// stream). It refuses an exactly-once sink's stream whose duplicate window
// is shorter than the job's checkpointing needs
// (sink.ExactlyOnceDuplicateWindow) too: every deploy would fail on it (a
// restore under a spec that checkpoints less often, say). Any other answer
// (JetStream slow or unavailable) lets the spec through: the deploy meets
// it, and restarts.
//
// Each stream is asked for once, the question bounded by timeout.
// creating (nil for none) holds, by name, the streams the caller creates
// before it submits spec where they do not exist (weir run
// -create-streams): one of them that is not there is checked with that
// configuration, as the submit will find it. A caller that checks before
// the submit (weir run, before it builds modules) refuses early what the
// submit would refuse; the submit checks again what changed since.
func CheckStreams(ctx context.Context, js jetstream.JetStream, spec *jobspec.Spec, timeout time.Duration,
	creating map[string]jetstream.StreamConfig) error {
	type found struct {
		ok  bool
		cfg *jetstream.StreamConfig // nil when the stream did not answer
	}
	streams := map[string]found{}
	var bad []string
	// meant says which stream a name that is not there most likely
	// misspells ("EVENT" for EVENTS), or a stream the caller creates;
	// the names are listed once, at the first such name.
	var names []string
	listed := false
	meant := func(stream string) string {
		if !listed {
			listed = true
			names = slices.Collect(maps.Keys(creating))
			c, cancel := context.WithTimeout(ctx, timeout)
			for n := range js.StreamNames(c).Name() {
				names = append(names, n)
			}
			cancel()
		}
		if m := spell.Closest(stream, names); m != "" {
			return fmt.Sprintf(" (did you mean %s?)", m)
		}
		return ""
	}
	lookup := func(what, name, stream string) *jetstream.StreamConfig {
		f, seen := streams[stream]
		if !seen {
			c, cancel := context.WithTimeout(ctx, timeout)
			st, err := js.Stream(c, stream)
			switch {
			case err == nil:
				// The lookup asked for the stream's info already.
				f.ok = true
				if info := st.CachedInfo(); info != nil {
					f.cfg = &info.Config
				}
			case errors.Is(err, jetstream.ErrStreamNotFound):
				if cfg, ok := creating[stream]; ok {
					f.ok, f.cfg = true, &cfg
				}
			default:
				f.ok = true // not known: the deploy meets it
			}
			cancel()
			streams[stream] = f
		}
		if !f.ok {
			bad = append(bad, fmt.Sprintf("%s %s: stream %s does not exist%s", what, name, stream, meant(stream)))
		}
		return f.cfg
	}
	for _, s := range spec.Sources {
		if s.Kind != jobspec.KindJetStream || s.Stream == "" {
			continue
		}
		cfg := lookup("source", s.Name, s.Stream)
		filter := s.Filter
		if filter == "" {
			filter = s.Subject
		}
		// A subject transform, a mirror or sources store subjects other
		// than the ones the stream listens on: no check then.
		if cfg == nil || filter == "" || len(cfg.Subjects) == 0 || cfg.SubjectTransform != nil ||
			cfg.Mirror != nil || len(cfg.Sources) > 0 {
			continue
		}
		if !slices.ContainsFunc(cfg.Subjects, func(sub string) bool { return subject.Overlap(sub, filter) }) {
			bad = append(bad, fmt.Sprintf("source %s: filter %s matches none of stream %s's subjects (%s)",
				s.Name, filter, s.Stream, strings.Join(cfg.Subjects, ", ")))
		}
	}
	for _, s := range spec.Sinks {
		if s.Kind != jobspec.KindJetStream || s.Stream == "" {
			continue
		}
		cfg := lookup("sink", s.Name, s.Stream)
		if cfg == nil {
			continue
		}
		if s.Guarantee != jobspec.AtLeastOnce {
			ck := spec.Checkpointing
			if need := sink.ExactlyOnceDuplicateWindow(ck.Interval, ck.Timeout, s.AckTimeout); cfg.Duplicates < need {
				// A window past the stream's max age JetStream refuses:
				// the edit said raises both.
				age := ""
				if cfg.MaxAge > 0 && cfg.MaxAge < need {
					age = " -max-age " + need.String()
				}
				bad = append(bad, fmt.Sprintf("sink %s: stream %s deduplicates message ids for %s, but exactly-once with checkpoints every %s (timeout %s) needs %s: raise the stream's duplicate window to %s (weir stream edit %s -dupe-window %s%s)%s",
					s.Name, s.Stream, cfg.Duplicates, ck.Interval, ck.Timeout, need, need, s.Stream, need, age, shorterCheckpointing(ck, cfg.Duplicates, need)))
			}
		}
		if len(cfg.Subjects) == 0 || s.Subject == "" {
			continue
		}
		// A keyed sink ("out.{key}") publishes on subjects under its
		// filter ("out.>"): the stream must store some of them; each
		// record's own subject is checked when the sink writes it.
		tmpl, err := subject.Parse(s.Subject)
		if err != nil {
			bad = append(bad, fmt.Sprintf("sink %s: %v", s.Name, err))
			continue
		}
		if !slices.ContainsFunc(cfg.Subjects, func(sub string) bool { return subject.Overlap(sub, tmpl.Filter()) }) {
			what := "subject " + s.Subject
			if tmpl.Keyed() {
				what = fmt.Sprintf("any subject of %s (%s)", s.Subject, tmpl.Filter())
			}
			bad = append(bad, fmt.Sprintf("sink %s: stream %s does not store %s (its subjects: %s)",
				s.Name, s.Stream, what, strings.Join(cfg.Subjects, ", ")))
		}
	}
	switch {
	case len(bad) == 1:
		return control.Errorf(control.ErrInvalid, "submit %s: %s (fix the spec, or create or change the stream, before submitting the job)",
			spec.Name, bad[0])
	case len(bad) > 1:
		// One line each, as the spec's own errors are (weir indents an
		// error's further lines).
		return control.Errorf(control.ErrInvalid, "submit %s: %d problems with the job's streams (fix the spec, or create or change the streams, before submitting the job):\n%s",
			spec.Name, len(bad), strings.Join(bad, "\n"))
	}
	return nil
}

// shorterCheckpointing says the other way to fit an exactly-once sink
// into a stream that deduplicates message ids for window, where the job's
// checkpointing needs need (sink.ExactlyOnceDuplicateWindow: interval,
// timeout and a recovery allowance): an interval and timeout that sum to
// what the window leaves past the allowance — "checkpoint more often"
// helps little where the timeout dominates. "" where the allowance alone
// is over the window.
func shorterCheckpointing(ck jobspec.Checkpointing, window, need time.Duration) string {
	rest := window - (need - ck.Interval - ck.Timeout) // the window past the allowance
	if rest <= 0 {
		return ""
	}
	return fmt.Sprintf(", or give checkpointing.interval and checkpointing.timeout that sum to %s at most (now %s + %s)", rest, ck.Interval, ck.Timeout)
}

// sinkDuplicateWindows returns, for each exactly-once JetStream sink of
// spec by name, the duplicate window its stream needs — what submit checks
// (control.JobStatus.SinkDuplicateWindows) —, or nil where it has none.
func sinkDuplicateWindows(spec *jobspec.Spec) map[string]time.Duration {
	var out map[string]time.Duration
	for _, s := range spec.Sinks {
		if s.Kind != jobspec.KindJetStream || s.Guarantee == jobspec.AtLeastOnce {
			continue
		}
		if out == nil {
			out = map[string]time.Duration{}
		}
		out[s.Name] = sink.ExactlyOnceDuplicateWindow(spec.Checkpointing.Interval, spec.Checkpointing.Timeout, s.AckTimeout)
	}
	return out
}
