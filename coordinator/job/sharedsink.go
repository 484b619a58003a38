package job

import (
	"fmt"
	"sort"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/subject"
)

// SharedSinkMark is in every warning of a sink subject another job writes
// too (sharedSinkWarnings), and in no other warning: weir run picks them
// out of the status's warnings by it, to print them as they come.
const SharedSinkMark = "the two jobs' records mix there"

// liveSpec is a job that has not ended, as the shared-sink warnings see
// it.
type liveSpec struct {
	name string
	j    *job
	spec *jobspec.Spec
}

// refreshSharedSinksLocked computes the shared-sink warnings of every job
// (job.sharedSinks) from the jobs that have not ended now: each job that
// has not ended is warned of each other such job whose sink writes a
// subject its own sinks write; a job that ended is warned of none (it
// writes nothing now). It is called whenever the set of jobs that have
// not ended changes — a job submitted, restored or resumed, a job that
// ends (canceled, stopped, failed, finished) — so that a warning is
// shown by both jobs for as long as both run: a trial's a1 said nothing
// of a2, submitted after it, and a restarted coordinator's jobs nothing
// at all.
//
// The caller holds m.mu; each job's lock is taken in turn, after it (the
// order start takes them in). Holding m.mu throughout orders the
// refreshes: the last one reads every job's state after its latest change.
func (m *Manager) refreshSharedSinksLocked() {
	var live []liveSpec
	for name, j := range m.jobs {
		j.mu.Lock()
		ended := j.gone || j.st.State.Terminal()
		if ended {
			j.sharedSinks = nil
		}
		j.mu.Unlock()
		if !ended {
			live = append(live, liveSpec{name: name, j: j, spec: j.spec})
		}
	}
	sort.Slice(live, func(a, b int) bool { return live[a].name < live[b].name })
	for _, l := range live {
		w := sharedSinkWarnings(l.spec, live)
		l.j.mu.Lock()
		l.j.sharedSinks = w
		l.j.mu.Unlock()
	}
}

// sharedSinksChanged recomputes every job's shared-sink warnings
// (refreshSharedSinksLocked); the caller holds no lock.
func (m *Manager) sharedSinksChanged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshSharedSinksLocked()
}

// sharedSinkWarnings returns a warning for each JetStream sink of spec
// that writes a stream subject one of the jobs of others (by name; the
// job of spec's name left out) writes too: the same stream, and subjects
// some message could have both (a keyed subject's, out.{key}, as the
// wildcard it fills, out.*). Their records mix on the subject: a reader
// of it (weir job output, a job reading the stream) takes both jobs'
// output as one, and each job's counts there (the stream's messages on
// the subject) are the two's. A trial's jobs a1 and a2, both
// exactly-once to stream SHARED subject shared, got no word of it. It is
// allowed (two jobs may mean to merge into one subject), so it warns
// rather than refuses. The warning names no state of the other job: it
// holds as long as both have not ended, and reads the same meanwhile.
func sharedSinkWarnings(spec *jobspec.Spec, others []liveSpec) []string {
	var out []string
	for _, s := range spec.Sinks {
		if s.Kind != jobspec.KindJetStream {
			continue
		}
		mine := sinkFilter(s)
		for _, o := range others {
			if o.name == spec.Name {
				continue
			}
			for _, t := range o.spec.Sinks {
				if t.Kind != jobspec.KindJetStream || t.Stream != s.Stream || !subject.Overlap(mine, sinkFilter(t)) {
					continue
				}
				out = append(out, fmt.Sprintf("sink %s writes stream %s subject %s, which job %s writes too (its sink %s, subject %s): %s, and a reader of the subject (weir job output, a job reading the stream) takes both as one; give each job a subject of its own unless they mean to merge (weir job cancel %s, if it is a leftover)",
					s.Name, s.Stream, s.Subject, o.name, t.Name, t.Subject, SharedSinkMark, o.name))
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
