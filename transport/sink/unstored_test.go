package sink

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A commit to a stream whose subjects no longer take the sink's subject
// (edited mid-run) fails at once, saying so, in every publish mode:
// JetStream answers no responders at once where no stream stores a
// subject, and the sink took it for a stream without a leader and waited
// 30 s for an election. The recovery of the next attempt says the same.
func TestExactlyOnceCommitToAStreamThatNoLongerStoresTheSubject(t *testing.T) {
	for _, c := range []struct {
		mode PublishMode
		tmpl string
	}{{PublishAsync, "out"}, {PublishFast, "out"}, {PublishAtomic, "out"}, {PublishFast, "out.{key}"}, {PublishAtomic, "out.{key}"}} {
		t.Run(string(c.mode)+"/"+c.tmpl, func(t *testing.T) {
			cfg := outStream(c.mode)
			cfg.Subjects = []string{filterOf(t, c.tmpl)}
			nc, js, ctx := outSetup(t, cfg)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: c.tmpl, Job: "j", Task: "sink0", Publish: c.mode})
			must(t, err)
			defer s.Close()
			must(t, s.Write(ctx, batchOf(0, 10)))
			state, err := s.PreCommit(ctx, 1)
			must(t, err)
			setSubjects(t, ctx, js, "OUT", "other.>")
			start := time.Now()
			err = s.Commit(ctx, 1)
			if err == nil {
				err = s.Wait(ctx)
			}
			took := time.Since(start)
			want := "which stream OUT does not store (its subjects: other.>): add "
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrSubjectNotStored) {
				t.Fatalf("commit after the stream's subjects changed (%s): %v; want an ErrSubjectNotStored saying %q", took, err, want)
			}
			t.Logf("%s: %v", took, err)
			// The next attempt's recovery re-commits the checkpoint on the
			// subject it was staged with: it says the same, not that a
			// record's key forms no subject (fix the operator), and the
			// failure is the stream's.
			b, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: c.tmpl, Job: "j", Task: "sink0", Publish: c.mode})
			must(t, err)
			defer b.Close()
			err = b.Recover(ctx, 1, state)
			want = "which stream OUT does not store (its subjects: other.>): add " + filterOf(t, c.tmpl) + " back to the stream's subjects (nats stream edit OUT --subjects 'other.>," + filterOf(t, c.tmpl) + "')"
			if !errors.Is(err, ErrStagedSubjectNotStored) || errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), want) {
				t.Fatalf("recover after the stream's subjects changed: %v; want an ErrStagedSubjectNotStored (no ErrBadKey) saying %q", err, want)
			}
		})
	}
}

// So does an at-least-once sink's publish.
func TestAtLeastOnceToAStreamThatNoLongerStoresTheSubject(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAsync} {
		t.Run(string(mode), func(t *testing.T) {
			nc, js, ctx := outSetup(t, outStream(mode))
			s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", IdleCommit: time.Hour})
			must(t, err)
			defer s.Close()
			setSubjects(t, ctx, js, "OUT", "other.>")
			err = s.Write(ctx, batchOf(0, 10))
			if err == nil {
				_, err = s.PreCommit(ctx, 1)
			}
			if want := "which stream OUT does not store (its subjects: other.>): add "; err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrSubjectNotStored) {
				t.Fatalf("publish after the stream's subjects changed: %v; want an ErrSubjectNotStored saying %q", err, want)
			}
		})
	}
}
