package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/subject"
)

// onSubjects is batchOf(from, to) as a sink on tmpl stores it, each
// record as "subject=value".
func onSubjects(t *testing.T, tmpl string, from, to int) []string {
	t.Helper()
	tm, err := subject.Parse(tmpl)
	must(t, err)
	var out []string
	for i := from; i < to; i++ {
		subj, err := tm.For([]byte("k" + strconv.Itoa(i%3)))
		must(t, err)
		out = append(out, subj+"=v"+strconv.Itoa(i))
	}
	return out
}

// storedOn reads every message of stream in order as "subject=value".
func storedOn(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) []string {
	t.Helper()
	var out []string
	for _, m := range readStream(t, ctx, js, stream) {
		out = append(out, m.subject+"="+m.value)
	}
	return out
}

// setSubjects changes the subjects stream stores, as an operator editing
// the stream for a changed spec does.
func setSubjects(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, subjects ...string) {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	must(t, err)
	info, err := st.Info(ctx)
	must(t, err)
	cfg := info.Config
	cfg.Subjects = subjects
	_, err = js.UpdateStream(ctx, cfg)
	must(t, err)
}

// filterOf is the subject filter of template tmpl.
func filterOf(t *testing.T, tmpl string) string {
	t.Helper()
	tm, err := subject.Parse(tmpl)
	must(t, err)
	return tm.Filter()
}

// stageAndCut stages checkpoint 1 (v0..v99) on a sink configured as cfg
// and publishes the start of it as the commit a crash cut leaves it: the
// first 40 records, with the ids and batches of the whole checkpoint's (4
// atomic batches of 10 under PublishAtomic). It returns the checkpoint's
// state.
func stageAndCut(t *testing.T, ctx context.Context, nc *nats.Conn, cfg ExactlyOnceConfig) []byte {
	t.Helper()
	a, err := NewExactlyOnce(ctx, nc, cfg)
	must(t, err)
	defer a.Close()
	must(t, a.Write(ctx, batchOf(0, 100)))
	state, err := a.PreCommit(ctx, 1)
	must(t, err)
	st, err := decodeState(state)
	must(t, err)
	recs, err := abi.DecodeBatch(st[0].batch)
	must(t, err)
	cut := st[0]
	cut.batch = abi.EncodeBatch(recs[:40]...)
	must(t, a.publish(ctx, a.prefix, []staged{cut}))
	return state
}

// A job restored with a changed sink subject re-commits the checkpoint a
// crash cut on the subjects it was staged with, as the cut commit would
// have; only what is staged after the restore goes to the new subject. Past
// the duplicate window, the read-back looks for the cut commit where it
// was published (the new subjects hold none of it), so nothing is stored
// twice; inside it the message ids do that. Each case: checkpoint 1 staged
// on from, cut after 40 of its 100 records, the stream given to's subjects
// too, a sink on to restored from checkpoint 1, then checkpoint 2
// (v100..v129) committed on to.
func TestRecoverOnTheSubjectTheCheckpointWasStagedWith(t *testing.T) {
	for _, c := range []struct {
		mode       PublishMode
		from, to   string
		pastWindow bool
	}{
		{PublishFast, "out.{key}", "orders.{key}.created", true},
		{PublishAtomic, "out.{key}", "orders.{key}.created", true},
		{PublishAsync, "out.{key}", "orders.{key}.created", true},
		{PublishFast, "out", "orders.{key}", true},
		{PublishAtomic, "out.{key}", "orders", true},
		{PublishFast, "out.{key}", "orders.{key}.created", false},
		{PublishAtomic, "out.{key}", "orders.{key}.created", false},
		{PublishAsync, "out", "orders", false},
	} {
		name := fmt.Sprintf("%s/%s→%s", c.mode, c.from, c.to)
		if c.pastWindow {
			name += "/past-the-window"
		}
		t.Run(name, func(t *testing.T) {
			scfg := outStream(c.mode)
			scfg.Subjects = []string{filterOf(t, c.from)}
			if c.pastWindow {
				scfg.Duplicates = 300 * time.Millisecond
			}
			nc, js, ctx := outSetup(t, scfg)
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: c.from, Job: "j", Task: "sink0", Publish: c.mode, BatchSize: 10}
			state := stageAndCut(t, ctx, nc, cfg)
			if c.pastWindow {
				time.Sleep(2 * scfg.Duplicates) // the stream forgets the ids
			}
			setSubjects(t, ctx, js, "OUT", filterOf(t, c.from), filterOf(t, c.to))

			cfg.Subject = c.to
			// The duplicate window is checked at job start as before:
			// the sink on the new subject is refused a window too short.
			cfg.MinDuplicateWindow = 2 * scfg.Duplicates
			if _, err := NewExactlyOnce(ctx, nc, cfg); !errors.Is(err, ErrDuplicateWindowTooShort) {
				t.Fatalf("a window of %s for a sink that needs %s: %v", scfg.Duplicates, cfg.MinDuplicateWindow, err)
			}
			cfg.MinDuplicateWindow = scfg.Duplicates
			b, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer b.Close()
			recoverThenCommit(t, ctx, b, state)

			want := append(onSubjects(t, c.from, 0, 100), onSubjects(t, c.to, 100, 130)...)
			if got := storedOn(t, ctx, js, "OUT"); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("stream holds %d messages:\n%v\nwant %d, each once, in order:\n%v", len(got), got, len(want), want)
			}
		})
	}
}

// A checkpoint staged on subjects its stream no longer stores (the stream
// was changed with the spec) cannot be re-committed where its cut commit
// went, and anywhere else would split it or, past the duplicate window,
// store it twice: the recovery fails with ErrStagedSubjectNotStored,
// naming the sink, the checkpoint and the subject, and publishes nothing.
func TestRecoverRefusesAStagedSubjectTheStreamNoLongerStores(t *testing.T) {
	for _, c := range []struct {
		from, to string
		subjects []string // the stream's subjects at the restore
		want     string
		badKey   bool
	}{
		{"out", "orders", []string{"orders"},
			"exactly-once sink orders (stream OUT): recover checkpoint 1: staged output's subject not stored by its stream: staged checkpoint 1 goes to subject out (the subject it was staged with), which stream OUT does not store (its subjects: orders): add out back to the stream's subjects (nats stream edit OUT --subjects 'orders,out')", false},
		{"out.{key}", "orders.{key}.created", []string{"out.k0", "out.k1", "orders.*.created"},
			`exactly-once sink orders.{key}.created (stream OUT): recover checkpoint 1: staged output's subject not stored by its stream: staged checkpoint 1 goes to subject out.{key} (the subject it was staged with): record 3 of the batch: record key cannot form a subject: key "k2" makes subject out.k2, which stream OUT does not store (its subjects: out.k0, out.k1, orders.*.created)`, true},
	} {
		t.Run(c.from, func(t *testing.T) {
			scfg := outStream(PublishFast)
			scfg.Subjects, scfg.Duplicates = []string{filterOf(t, c.from)}, 300*time.Millisecond
			nc, js, ctx := outSetup(t, scfg)
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: c.from, Job: "j", Task: "sink0", Publish: PublishFast}
			state := stageAndCut(t, ctx, nc, cfg)
			time.Sleep(2 * scfg.Duplicates)
			setSubjects(t, ctx, js, "OUT", c.subjects...)
			cfg.Subject = c.to
			b, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer b.Close()
			err = b.Recover(ctx, 1, state)
			if !errors.Is(err, ErrStagedSubjectNotStored) || errors.Is(err, ErrBadKey) != c.badKey || err.Error() != c.want {
				t.Fatalf("recover:\n got %v\nwant %s", err, c.want)
			}
			if got := storedOn(t, ctx, js, "OUT"); strings.Join(got, " ") != strings.Join(onSubjects(t, c.from, 0, 40), " ") {
				t.Fatalf("stream holds %v, want the cut commit's 40 records only", got)
			}
		})
	}
}

// A state may hold checkpoints staged on different subjects (in theory: a
// sink's state is re-committed whole before it stages more). Past the
// window the read-back reads all their subjects at once — the whole stream
// when their filters overlap, which one consumer refuses — and each
// checkpoint is re-committed on its own: checkpoint 1 (v0..v29) on
// out.{key}, stored whole, and checkpoint 2 (v30..v59) on the other
// subject, cut after v39, restored by a sink on a third subject.
func TestRecoverCheckpointsStagedOnDifferentSubjects(t *testing.T) {
	for _, c := range []struct {
		mode   PublishMode
		second string
	}{{PublishFast, "orders.{key}.created"}, {PublishAtomic, "orders.{key}.created"}, {PublishFast, "out.{key}.v1"}, {PublishAtomic, "out.{key}.v1"}} {
		t.Run(string(c.mode)+"/"+c.second, func(t *testing.T) {
			scfg := outStream(c.mode)
			scfg.Subjects, scfg.Duplicates = []string{"out.>", "orders.>", "now.>"}, 300*time.Millisecond
			if c.second == "out.{key}.v1" {
				scfg.Subjects = []string{"out.>", "now.>"} // stores out.*.v1 too
			}
			nc, js, ctx := outSetup(t, scfg)
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "now.{key}", Job: "j", Task: "sink0", Publish: c.mode, BatchSize: 10}
			a, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			defer a.Close()
			var chunk uint32
			if c.mode == PublishAtomic {
				chunk = 10
			}
			at := time.Now().UnixNano()
			st := []staged{
				{id: 1, at: at, batch: batchOf(0, 30), chunk: chunk, subject: "out.{key}"},
				{id: 2, at: at, batch: batchOf(30, 60), chunk: chunk, subject: c.second},
			}
			state := encodeState(st)
			for i := range st {
				must(t, a.stagedRoute(&st[i]))
			}
			recs, err := abi.DecodeBatch(st[1].batch)
			must(t, err)
			st[1].batch = abi.EncodeBatch(recs[:10]...)
			must(t, a.publish(ctx, a.prefix, st)) // checkpoint 1 whole, 2 cut
			time.Sleep(2 * scfg.Duplicates)
			recoverNew(t, ctx, nc, cfg, 2, state)
			want := append(onSubjects(t, "out.{key}", 0, 30), onSubjects(t, c.second, 30, 60)...)
			if got := storedOn(t, ctx, js, "OUT"); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("stream holds %d messages:\n%v\nwant %d, each once, in order:\n%v", len(got), got, len(want), want)
			}
		})
	}
}

// stateV3 encodes st as version 3 wrote it: no subject recorded.
func stateV3(st []staged) []byte {
	out := binary.LittleEndian.AppendUint32([]byte("WEOS\x03"), uint32(len(st)))
	for _, e := range st {
		out = binary.LittleEndian.AppendUint64(out, uint64(e.id))
		out = binary.LittleEndian.AppendUint64(out, uint64(e.at))
		out = binary.LittleEndian.AppendUint32(out, e.chunk)
		out = binary.LittleEndian.AppendUint32(out, e.chunkBytes)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.batch)))
		out = append(out, e.batch...)
	}
	return out
}

// The state records each checkpoint's subject from version 4 on; older
// states decode without one (re-committed on the sink's subject). A
// recorded subject that is no sink subject decodes (a subject rule made
// stricter later must not make unchanged sinks' state unreadable) and is
// malformed state where a recovery would publish on it.
func TestStateRecordsTheSubject(t *testing.T) {
	st := []staged{{id: 1, at: 5, batch: batchOf(0, 3), subject: "orders.{key}.created"}, {id: 2, at: 6, batch: batchOf(3, 4), subject: "out"}}
	got, err := decodeState(encodeState(st))
	must(t, err)
	if len(got) != 2 || got[0].subject != "orders.{key}.created" || got[1].subject != "out" || got[1].at != 6 || string(got[1].batch) != string(st[1].batch) {
		t.Fatalf("decoded %+v", got)
	}
	got, err = decodeState(stateV3(st))
	must(t, err)
	if len(got) != 2 || got[0].subject != "" || got[0].at != 5 || string(got[0].batch) != string(st[0].batch) {
		t.Fatalf("version 3 decoded as %+v", got)
	}
	subjects := []string{"out", "orders.>"}
	s := &ExactlyOnce{cfg: ExactlyOnceConfig{Subject: "out", Stream: "OUT"}, target: target{stream: "OUT", subjects: subjects}}
	var err2 error
	s.route, err2 = newRoute("out", "OUT", subjects)
	must(t, err2)
	for _, bad := range []string{"out.*", "a..b", "{key}"} {
		got, err := decodeState(encodeState([]staged{{id: 1, batch: batchOf(0, 1), subject: bad}}))
		if err != nil || len(got) != 1 || got[0].subject != bad {
			t.Errorf("subject %q decoded as %+v, %v", bad, got, err)
			continue
		}
		if err := s.stagedRoute(&got[0]); !errors.Is(err, ErrMalformedState) {
			t.Errorf("subject %q recovered: %v, want ErrMalformedState", bad, err)
		}
	}
}

// recoverThenCommit recovers checkpoint 1 from state on b, restored with a
// changed spec, then writes records 100..129 and commits them as
// checkpoint 2: what the sink stages after the restore.
func recoverThenCommit(t *testing.T, ctx context.Context, b *ExactlyOnce, state []byte) {
	t.Helper()
	must(t, b.Recover(ctx, 1, state))
	must(t, b.Write(ctx, batchOf(100, 130)))
	_, err := b.PreCommit(ctx, 2)
	must(t, err)
	must(t, b.Commit(ctx, 2))
	must(t, b.Wait(ctx))
}
