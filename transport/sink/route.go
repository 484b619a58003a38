package sink

import (
	"fmt"
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
	for i := 0; it.Next(); i++ {
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
