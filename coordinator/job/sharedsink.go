package job

import (
	"fmt"
	"sort"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/subject"
)

// sharedSinkWarnings returns a warning for each JetStream sink of spec that
// writes a stream subject another job that has not ended writes too: the
// same stream, and subjects some message could have both (a keyed
// subject's, out.{key}, as the wildcard it fills, out.*). Their records
// mix on the subject: a reader of it (weir job output, a job reading the
// stream) takes both jobs' output as one, and each job's counts there
// (the stream's messages on the subject) are the two's. A trial's jobs
// a1 and a2, both exactly-once to stream SHARED subject shared, got no
// word of it. It is allowed (two jobs may mean to merge into one
// subject), so it warns rather than refuses.
//
// The caller holds m.mu; each other job's lock is taken in turn, after
// it (the order start takes them in). A job of spec's name is the run
// spec replaces, left out.
func (m *Manager) sharedSinkWarnings(spec *jobspec.Spec) []string {
	names := make([]string, 0, len(m.jobs))
	for name := range m.jobs {
		if name != spec.Name {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []string
	for _, s := range spec.Sinks {
		if s.Kind != jobspec.KindJetStream {
			continue
		}
		mine := sinkFilter(s)
		for _, name := range names {
			o := m.jobs[name]
			o.mu.Lock()
			ended, state, other := o.gone || o.st.State.Terminal(), o.st.State, o.spec
			o.mu.Unlock()
			if ended {
				continue
			}
			for _, t := range other.Sinks {
				if t.Kind != jobspec.KindJetStream || t.Stream != s.Stream || !subject.Overlap(mine, sinkFilter(t)) {
					continue
				}
				out = append(out, fmt.Sprintf("sink %s writes stream %s subject %s, which job %s (%s) writes too (its sink %s, subject %s): the two jobs' records mix there, and a reader of the subject (weir job output, a job reading the stream) takes both as one; give each job a subject of its own unless they mean to merge (weir job cancel %s, if it is a leftover)",
					s.Name, s.Stream, s.Subject, name, state, t.Name, t.Subject, name))
			}
		}
	}
	return out
}

// sinkFilter returns the subjects sink s may write: its subject, or a
// keyed one's as a filter (subject.Template.Filter); the subject as
// written when it does not parse (the spec's check names that).
func sinkFilter(s jobspec.Sink) string {
	t, err := subject.Parse(s.Subject)
	if err != nil {
		return s.Subject
	}
	return t.Filter()
}
