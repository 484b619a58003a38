package sink

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/subject"
)

// ErrBadKey is wrapped by the error of a keyed sink ("out.{key}") given a
// record whose key cannot form a subject, or forms one its stream does not
// store. Replaying the input would meet the record again: it is the
// operator's output (or the stream's subjects) to fix.
var ErrBadKey = subject.ErrBadKey

// route is where a sink publishes each record: its subject template and,
// for a keyed JetStream sink, the subjects its stream stores, which every
// record's subject must fall in.
type route struct {
	tmpl     subject.Template
	stream   string
	subjects []string // nil: not checked (a core sink, or a stream that stores them all)
}

// newRoute parses tmpl for a sink on stream (empty for a core sink), whose
// configured subjects are subjects.
func newRoute(tmpl, stream string, subjects []string) (route, error) {
	t, err := subject.Parse(tmpl)
	if err != nil {
		return route{}, err
	}
	r := route{tmpl: t, stream: stream}
	if !t.Keyed() || len(subjects) == 0 {
		return r, nil
	}
	for _, s := range subjects {
		if subject.Covers(s, t.Filter()) {
			return r, nil // the stream stores every subject of the template
		}
	}
	r.subjects = subjects
	return r, nil
}

// subject returns the subject of a record with key key. A fixed subject
// takes any key.
func (r route) subject(key []byte) (string, error) { return r.tmpl.For(key) }

// check refuses a batch with a record whose key cannot form a subject, or
// forms one the stream does not store, naming the record: such a record
// must fail the write before any of the batch is published or staged (a
// staged one would fail every commit of its checkpoint).
func (r route) check(batch []byte) error {
	if !r.tmpl.Keyed() {
		return nil
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	for i := 1; it.Next(); i++ { // counted from 1 in messages: record 1 is the first
		key := it.Record().Key
		if r.subjects == nil { // any subject the key makes is stored: no need to make it
			if err := r.tmpl.Check(key); err != nil {
				return fmt.Errorf("record %d of the batch: %w", i, err)
			}
			continue
		}
		subj, err := r.tmpl.For(key)
		if err != nil {
			return fmt.Errorf("record %d of the batch: %w", i, err)
		}
		if !subject.Captured(r.subjects, subj) {
			return fmt.Errorf("record %d of the batch: %w: key %q makes subject %s, which stream %s does not store (its subjects: %s)",
				i, ErrBadKey, key, subj, r.stream, strings.Join(r.subjects, ", "))
		}
	}
	return it.Err()
}

// ErrSubjectNotStored is wrapped by the error of a sink's publish to a
// subject its stream no longer stores: the stream's subjects were changed
// while the job ran. JetStream answers such a publish at once with no
// responders, as it answers one to a stream without a leader; the sink
// tells the two apart by the stream's subjects. Every restart meets it
// again until the subject is added back to the stream's subjects (the
// output staged so far goes to the subject it was staged with).
var ErrSubjectNotStored = errors.New("subject not stored by the stream")

// unstored returns an error wrapping ErrSubjectNotStored when subjects,
// those r's stream now stores, leave out a subject r publishes on
// (unstoredSubject), naming it and saying what to change; nil when they
// store them all.
func (r route) unstored(subjects []string, keys iter.Seq[[]byte]) error {
	subj := r.unstoredSubject(subjects, keys)
	if subj == "" {
		return nil
	}
	return fmt.Errorf("%w: the sink publishes on %s, which stream %s does not store (its subjects: %s): %s",
		ErrSubjectNotStored, subj, r.stream, strings.Join(subjects, ", "), r.addBack(subjects))
}

// unstoredSubject returns a subject r publishes on that subjects (those
// its stream now stores) leave out: its fixed subject, its keyed
// template's filter when they store none of the template's subjects or,
// where keys is given, the subject of the first of those keys that forms
// one they do not store. It returns "" when they store them all, or when
// subjects is empty (a stream that stores by other means: nothing to
// tell).
func (r route) unstoredSubject(subjects []string, keys iter.Seq[[]byte]) string {
	if len(subjects) == 0 {
		return ""
	}
	filter := r.tmpl.Filter()
	switch {
	case !r.tmpl.Keyed():
		if !subject.Captured(subjects, filter) {
			return filter
		}
	case slices.ContainsFunc(subjects, func(s string) bool { return subject.Covers(s, filter) }):
	case !slices.ContainsFunc(subjects, func(s string) bool { return subject.Overlap(s, filter) }):
		return filter
	case keys != nil:
		for key := range keys {
			if s, err := r.tmpl.For(key); err == nil && !subject.Captured(subjects, s) {
				return s
			}
		}
	}
	return ""
}

// addBack says how to make r's stream, storing subjects, store r's
// subjects again: weir stream edit changes no subjects, the nats CLI
// does.
func (r route) addBack(subjects []string) string {
	filter := r.tmpl.Filter()
	return fmt.Sprintf("add %s back to the stream's subjects (nats stream edit %s --subjects '%s')",
		filter, r.stream, strings.Join(append(slices.Clone(subjects), filter), ","))
}
