package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
)

// streamOn is the configuration of stream name, storing the subjects of
// the sink subject tmpl, on which the exactly-once sink chooses mode.
func streamOn(t *testing.T, name string, mode PublishMode, tmpl string) jetstream.StreamConfig {
	t.Helper()
	cfg := outStream(mode)
	cfg.Name, cfg.Subjects = name, []string{filterOf(t, tmpl)}
	return cfg
}

// wantStored fails t unless stream holds want, each once, in order.
func wantStored(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, want []string) {
	t.Helper()
	if got := storedOn(t, ctx, js, stream); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stream %s holds %d messages:\n%v\nwant %d, each once, in order:\n%v", stream, len(got), got, len(want), want)
	}
}

// A job restored with its sink moved to another stream re-commits the
// checkpoint a crash cut in the stream it was staged for (on the subjects
// it was staged with: two streams cannot store the same subject), where
// the cut commit stored part of it, in the best mode that stream allows;
// only what is staged after the restore goes to the new stream. Past the
// old stream's duplicate window the read-back reads the old stream, so
// nothing is stored twice — the new stream's window is long: going by it,
// the sink would not read back at all —; inside it the message ids do
// that. Each case: checkpoint 1 (v0..v99) staged for OLD on from, cut
// after 40 records, a sink on NEW and to restored from checkpoint 1, then
// checkpoint 2 (v100..v129) committed to NEW.
func TestRecoverInTheStreamTheCheckpointWasStagedFor(t *testing.T) {
	for _, c := range []struct {
		old, now   PublishMode // what OLD and NEW allow, and the sink's mode on each
		from, to   string
		pastWindow bool
	}{
		{PublishFast, PublishFast, "out.{key}", "orders.{key}", true},
		{PublishAtomic, PublishAtomic, "out.{key}", "orders.{key}", true},
		{PublishAsync, PublishAsync, "out.{key}", "orders.{key}", true},
		{PublishFast, PublishFast, "out", "orders", false},
		{PublishAtomic, PublishAtomic, "out.{key}", "orders", false},
		// The sink's mode on NEW is one OLD does not allow: the
		// re-commit goes out in the best one OLD does.
		{PublishAtomic, PublishFast, "out.{key}", "orders", true},
		{PublishFast, PublishAtomic, "out", "orders.{key}", true},
		{PublishAsync, PublishFast, "out.{key}", "orders.{key}", true},
	} {
		name := fmt.Sprintf("%s→%s/%s→%s", c.old, c.now, c.from, c.to)
		if c.pastWindow {
			name += "/past-the-window"
		}
		t.Run(name, func(t *testing.T) {
			old := streamOn(t, "OLD", c.old, c.from)
			if c.pastWindow {
				old.Duplicates = 300 * time.Millisecond
			}
			nc, js, ctx := outSetup(t, old)
			cfg := ExactlyOnceConfig{Stream: "OLD", Subject: c.from, Job: "j", Task: "sink0", Publish: c.old, BatchSize: 10}
			state := stageAndCut(t, ctx, nc, cfg)
			if c.pastWindow {
				time.Sleep(2 * old.Duplicates) // OLD forgets the ids
			}
			_, err := js.CreateStream(ctx, streamOn(t, "NEW", c.now, c.to))
			must(t, err)

			cfg.Stream, cfg.Subject, cfg.Publish = "NEW", c.to, c.now
			b, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer b.Close()
			recoverThenCommit(t, ctx, b, state)

			wantStored(t, ctx, js, "OLD", onSubjects(t, c.from, 0, 100))
			wantStored(t, ctx, js, "NEW", onSubjects(t, c.to, 100, 130))
		})
	}
}

// A checkpoint staged for a stream that no longer exists, or that no
// longer stores the checkpoint's subjects, cannot be re-committed where
// its cut commit went: the recovery fails before it publishes anything,
// naming the sink, the checkpoint and the stream.
func TestRecoverRefusesAStagedStreamGoneOrChanged(t *testing.T) {
	for _, c := range []struct {
		from string
		gone bool // OLD deleted; else its subjects changed to "other"
		is   error
		want string
	}{
		{"out.{key}", true, ErrStagedStreamNotFound,
			"exactly-once sink orders (stream NEW): recover checkpoint 1: staged output's stream not found: staged checkpoint 1 goes to stream OLD (the stream it was staged for), which does not exist; create it, storing subjects out.>"},
		{"out", true, ErrStagedStreamNotFound,
			"exactly-once sink orders (stream NEW): recover checkpoint 1: staged output's stream not found: staged checkpoint 1 goes to stream OLD (the stream it was staged for), which does not exist; create it, storing subjects out"},
		{"out", false, ErrStagedSubjectNotStored,
			"exactly-once sink orders (stream NEW): recover checkpoint 1: staged output's subject not stored by its stream: staged checkpoint 1 goes to subject out (the subject it was staged with), which stream OLD (the stream it was staged for) does not store (its subjects: other): add out back to the stream's subjects (nats stream edit OLD --subjects 'other,out')"},
		{"out.{key}", false, ErrStagedSubjectNotStored,
			`exactly-once sink orders (stream NEW): recover checkpoint 1: staged output's subject not stored by its stream: staged checkpoint 1 goes to subject out.{key} (the subject it was staged with), which stream OLD (the stream it was staged for) does not store (its subjects: other): add out.> back to the stream's subjects (nats stream edit OLD --subjects 'other,out.>')`},
	} {
		t.Run(fmt.Sprintf("%s/gone=%v", c.from, c.gone), func(t *testing.T) {
			nc, js, ctx := outSetup(t, streamOn(t, "OLD", PublishFast, c.from))
			cfg := ExactlyOnceConfig{Stream: "OLD", Subject: c.from, Job: "j", Task: "sink0"}
			state := stageAndCut(t, ctx, nc, cfg)
			// NEW before OLD goes: nats-server v2.15.2 removes an
			// account's streams directory with its last stream, and a
			// stream created meanwhile failed ("could not create storage
			// directory - mkdir …/jetstream/$G/streams: no such file or
			// directory", 4 of 900 under load).
			_, err := js.CreateStream(ctx, streamOn(t, "NEW", PublishFast, "orders"))
			must(t, err)
			if c.gone {
				must(t, js.DeleteStream(ctx, "OLD"))
			} else {
				setSubjects(t, ctx, js, "OLD", "other")
			}
			cfg.Stream, cfg.Subject = "NEW", "orders"
			b, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer b.Close()
			err = b.Recover(ctx, 1, state)
			if !errors.Is(err, c.is) || err.Error() != c.want {
				t.Fatalf("recover:\n got %v\nwant %s", err, c.want)
			}
			if !c.gone {
				wantStored(t, ctx, js, "OLD", onSubjects(t, c.from, 0, 40))
			}
			wantStored(t, ctx, js, "NEW", nil)
		})
	}
}

// A state may hold checkpoints staged for different streams (in theory:
// a sink's state is re-committed whole before it stages more). Each is
// re-committed to its own stream, a read-back past a stream's window reads
// that stream, and entries within theirs are left to the ids: checkpoint 1
// (v0..v29) for A on out.{key}, stored whole, checkpoint 2 (v30..v59) for
// B on orders.{key}, cut after v39, restored by a sink on a third stream.
func TestRecoverCheckpointsStagedForDifferentStreams(t *testing.T) {
	for _, mode := range []PublishMode{PublishFast, PublishAtomic} {
		for _, bPast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/B-past-its-window=%v", mode, bPast), func(t *testing.T) {
				a := streamOn(t, "A", mode, "out.{key}")
				a.Duplicates = 300 * time.Millisecond
				nc, js, ctx := outSetup(t, a)
				b := streamOn(t, "B", mode, "orders.{key}")
				if bPast {
					b.Duplicates = 300 * time.Millisecond
				}
				_, err := js.CreateStream(ctx, b)
				must(t, err)
				_, err = js.CreateStream(ctx, streamOn(t, "NOW", mode, "now.{key}"))
				must(t, err)
				cfg := ExactlyOnceConfig{Stream: "NOW", Subject: "now.{key}", Job: "j", Task: "sink0", Publish: mode, BatchSize: 10}
				s, err := NewExactlyOnce(ctx, nc, cfg)
				must(t, err)
				defer s.Close()
				var chunk uint32
				if mode == PublishAtomic {
					chunk = 10
				}
				at := time.Now().UnixNano()
				st := []staged{
					{id: 1, at: at, batch: batchOf(0, 30), chunk: chunk, subject: "out.{key}", stream: "A"},
					{id: 2, at: at, batch: batchOf(30, 60), chunk: chunk, subject: "orders.{key}", stream: "B"},
				}
				state := encodeState(st)
				targets := map[string]*target{}
				for i := range st {
					must(t, s.stagedTarget(ctx, &st[i], targets))
					must(t, s.stagedRoute(&st[i]))
				}
				recs, err := abi.DecodeBatch(st[1].batch)
				must(t, err)
				st[1].batch = abi.EncodeBatch(recs[:10]...)
				must(t, s.publish(ctx, s.prefix, st)) // checkpoint 1 whole, 2 cut
				time.Sleep(600 * time.Millisecond)    // A (and B) forget the ids
				recoverNew(t, ctx, nc, cfg, 2, state)
				wantStored(t, ctx, js, "A", onSubjects(t, "out.{key}", 0, 30))
				wantStored(t, ctx, js, "B", onSubjects(t, "orders.{key}", 30, 60))
				wantStored(t, ctx, js, "NOW", nil)
			})
		}
	}
}

// stateV4 encodes st as version 4 wrote it: no stream recorded.
func stateV4(st []staged) []byte {
	out := binary.LittleEndian.AppendUint32([]byte("WEOS\x04"), uint32(len(st)))
	for _, e := range st {
		out = binary.LittleEndian.AppendUint64(out, uint64(e.id))
		out = binary.LittleEndian.AppendUint64(out, uint64(e.at))
		out = binary.LittleEndian.AppendUint32(out, e.chunk)
		out = binary.LittleEndian.AppendUint32(out, e.chunkBytes)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(e.subject)))
		out = append(out, e.subject...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.batch)))
		out = append(out, e.batch...)
	}
	return out
}

// The state records each checkpoint's stream from version 5 on; older
// states decode without one and are re-committed to the sink's stream.
// A recorded stream that is no stream name decodes (as a subject does)
// and is malformed state where a recovery would publish to it.
func TestStateRecordsTheStream(t *testing.T) {
	st := []staged{{id: 1, at: 5, batch: batchOf(0, 3), subject: "out", stream: "OLD"}, {id: 2, at: 6, batch: batchOf(3, 4), subject: "out", stream: "OUT"}}
	got, err := decodeState(encodeState(st))
	must(t, err)
	if len(got) != 2 || got[0].stream != "OLD" || got[1].stream != "OUT" || got[1].subject != "out" || got[1].at != 6 || string(got[1].batch) != string(st[1].batch) {
		t.Fatalf("decoded %+v", got)
	}
	got, err = decodeState(stateV4(st))
	must(t, err)
	if len(got) != 2 || got[0].stream != "" || got[0].subject != "out" || got[0].at != 5 || string(got[0].batch) != string(st[0].batch) {
		t.Fatalf("version 4 decoded as %+v", got)
	}

	nc, js, ctx := outSetup(t, outStream(PublishFast))
	cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0"}
	recoverNew(t, ctx, nc, cfg, 2, stateV4(st)) // the stream OLD does not exist: no matter
	wantStored(t, ctx, js, "OUT", onSubjects(t, "out", 0, 4))

	s, err := NewExactlyOnce(ctx, nc, cfg)
	must(t, err)
	defer s.Close()
	for _, bad := range []string{"a.b", "a b", "*"} {
		got, err := decodeState(encodeState([]staged{{id: 1, batch: batchOf(0, 1), subject: "out", stream: bad}}))
		if err != nil || len(got) != 1 || got[0].stream != bad {
			t.Errorf("stream %q decoded as %+v, %v", bad, got, err)
			continue
		}
		if err := s.stagedTarget(ctx, &got[0], map[string]*target{}); !errors.Is(err, ErrMalformedState) {
			t.Errorf("stream %q recovered: %v, want ErrMalformedState", bad, err)
		}
	}
}
