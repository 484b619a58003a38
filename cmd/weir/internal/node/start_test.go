package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A jetstream source's start: new reads only what is stored after the
// submit, a time what is stored from then on, a sequence from there; a
// sequence the stream has not reached, or no longer holds, is refused at
// submit, naming the source and the stream's bounds.
func TestSourceStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	publish := func(stream, word string, count int) {
		t.Helper()
		for i := 0; i < count; i++ {
			m := nats.NewMsg(strings.ToLower(stream))
			m.Data = []byte(word)
			if _, err := n.JS.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit := func(name, start string) error {
		t.Helper()
		in, out := strings.ToUpper(name)+"IN", strings.ToUpper(name)+"OUT"
		spec, err := jobspec.Parse(name+".yaml", fmt.Appendf(nil, `name: %s
sources: [{name: in, kind: jetstream, stream: %s, start: %q}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: %s, subject: %s, input: {from: count}}]
checkpointing: {interval: 100ms}
`, name, in, start, mods["wordcount"], out, strings.ToLower(out)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
		return err
	}
	// outputs waits until stream holds want messages and returns them.
	outputs := func(stream string, want int) []string {
		t.Helper()
		var got []string
		waitUntil(t, ctx, fmt.Sprintf("%d outputs in %s", want, stream), func() bool {
			st, err := n.JS.Stream(ctx, stream)
			if err != nil {
				return false
			}
			info, err := st.Info(ctx)
			if err != nil || info.State.Msgs < uint64(want) {
				return false
			}
			got = got[:0]
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					return false
				}
				got = append(got, m.Header.Get("Weir-Key")+"="+string(m.Data))
			}
			return true
		})
		time.Sleep(300 * time.Millisecond) // nothing more comes
		if st, err := n.JS.Stream(ctx, stream); err == nil {
			if info, err := st.Info(ctx); err == nil && info.State.Msgs != uint64(want) {
				t.Fatalf("%s holds %d outputs, want %d", stream, info.State.Msgs, want)
			}
		}
		return got
	}
	for _, name := range []string{"new", "time", "seq", "ahead", "gone"} {
		in, out := strings.ToUpper(name)+"IN", strings.ToUpper(name)+"OUT"
		mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: in, Subjects: []string{strings.ToLower(in)}})
		mustSinkStream(t, ctx, n.JS, out, strings.ToLower(out))
		publish(in, "old", 5)
	}

	// new: the 5 old messages are left out.
	if err := submit("new", "new"); err != nil {
		t.Fatal(err)
	}
	publish("NEWIN", "fresh", 3)
	if got := outputs("NEWOUT", 3); fmt.Sprint(got) != "[fresh=1 fresh=2 fresh=3]" {
		t.Errorf("start new: %v", got)
	}
	// The job's status says where the source starts.
	if st, err := n.API.Job(ctx, "new"); err != nil || !strings.Contains(fmt.Sprint(st.Guarantees), "without a checkpoint, reads from sequence 6 (start: new)") {
		t.Errorf("guarantees %v, %v; want the resolved start", st.Guarantees, err)
	}
	// The source task tells how much of its stream it has not read:
	// nothing, now.
	waitJob(t, ctx, n, "new", "the source's unread count", func(st control.JobStatus) bool {
		for _, task := range st.Tasks {
			if task.Task == "in-0" && task.Stats.SourcePending != nil {
				return *task.Stats.SourcePending == 0
			}
		}
		return false
	})

	// A time between the old messages and later ones.
	time.Sleep(20 * time.Millisecond)
	at := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	publish("TIMEIN", "later", 2)
	if err := submit("time", at.Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
	if got := outputs("TIMEOUT", 2); fmt.Sprint(got) != "[later=1 later=2]" {
		t.Errorf("start at a time: %v", got)
	}

	// Sequence 4: the last two of the five.
	if err := submit("seq", "4"); err != nil {
		t.Fatal(err)
	}
	if got := outputs("SEQOUT", 2); fmt.Sprint(got) != "[old=1 old=2]" {
		t.Errorf("start at sequence 4: %v", got)
	}

	err := submit("ahead", "9")
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "source in: start 9: stream AHEADIN's last sequence is 5") {
		t.Errorf("a start past the stream's end: %v", err)
	}
	// A JSON client's start_sequence is checked the same way.
	spec, err := jobspec.Parse("json.yaml", fmt.Appendf(nil, `name: json
sources: [{name: in, kind: jetstream, stream: AHEADIN}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: AHEADOUT, subject: aheadout, input: {from: count}}]
`, mods["wordcount"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Sources[0].StartSequence = 99
	_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "source in: start 99: stream AHEADIN's last sequence is 5") {
		t.Errorf("a start_sequence past the stream's end: %v", err)
	}
	st, _ := n.JS.Stream(ctx, "GONEIN")
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	err = submit("gone", "2")
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "source in: start 2: stream GONEIN's first sequence is 6: the messages before it are gone") {
		t.Errorf("a start the stream no longer holds: %v", err)
	}
}

// A job with start: new whose source had read nothing when it was stopped
// (its stream was quiet: the savepoint's offset covers nothing), restored
// with a new spec that still says start: new, goes on where the job
// started: what was stored while it was stopped is read, as it is when
// restoring with the job's own spec. The new spec's start is not resolved
// again to the stream's end at the restore.
func TestRestoreStartNewWithANewSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	publish := func(word string, count int) {
		t.Helper()
		for i := 0; i < count; i++ {
			if _, err := n.JS.Publish(ctx, "in", []byte(word)); err != nil {
				t.Fatal(err)
			}
		}
	}
	spec := func() *jobspec.Spec {
		s, err := jobspec.Parse("j.yaml", fmt.Appendf(nil, `name: j
sources: [{name: in, kind: jetstream, stream: IN, start: new}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, mods["wordcount"]), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	publish("old", 5)
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec()}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "j", "job running", running)
	time.Sleep(300 * time.Millisecond) // checkpoints of a source that read nothing
	from := stopWithSavepoint(t, ctx, n, "j")
	publish("mid", 3) // while the job is stopped
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "j", From: from, Spec: spec()}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "j", "restored job running", running)
	publish("late", 2)
	var got []string
	waitUntil(t, ctx, "the late outputs", func() bool {
		st, err := n.JS.Stream(ctx, "OUT")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		got = got[:0]
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				return false
			}
			got = append(got, m.Header.Get("Weir-Key")+"="+string(m.Data))
		}
		return len(got) > 0 && got[len(got)-1] == "late=2"
	})
	if fmt.Sprint(got) != "[mid=1 mid=2 mid=3 late=1 late=2]" {
		t.Fatalf("outputs %v, want the 3 stored while the job was stopped, then the 2 later", got)
	}
}

// A start time still to come is refused at submit: the start is resolved
// to a sequence then, and whatever the stream stored between the submit
// and that time would be read, though stored before it.
func TestSourceStartInTheFuture(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	if _, err := n.JS.Publish(ctx, "in", []byte("old")); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	spec, err := jobspec.Parse("j.yaml", fmt.Appendf(nil, `name: j
sources: [{name: in, kind: jetstream, stream: IN, start: %q}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`, at, mods["wordcount"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.API.Submit(ctx, control.SubmitRequest{Spec: spec})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "source in: start "+at+": ") || !strings.Contains(err.Error(), "future") {
		t.Fatalf("a start an hour from now: %v", err)
	}
}

// Resolving a start time leaves no consumer behind on the stream: on one
// that allows a single consumer (max_consumers: 1) the job's source takes
// it, instead of restarting until the resolver's consumer expired.
func TestSourceStartTimeLeavesNoConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}, MaxConsumers: 1})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	at := time.Now().UTC()
	for i := 0; i < 3; i++ {
		if _, err := n.JS.Publish(ctx, "in", []byte("w")); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := jobspec.Parse("j.yaml", fmt.Appendf(nil, `name: j
sources: [{name: in, kind: jetstream, stream: IN, start: %q}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, at.Format(time.RFC3339Nano), mods["wordcount"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	waitUntil(t, wctx, "the 3 outputs", func() bool {
		st, err := n.JS.Stream(ctx, "OUT")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 3
	})
	if st, err := n.API.Job(ctx, "j"); err != nil || st.Restarts != 0 {
		t.Fatalf("job: %d restarts (%s), %v", st.Restarts, st.Reason, err)
	}
}

// A jetstream source's stop: resolved when the job starts (end, a time)
// or taken as it is (a sequence, which the stream may not have reached:
// the job waits for it), and refused when it would read nothing or stop
// before the start. A job whose sources all stopped finishes by itself;
// restored from its final savepoint with the stops it resolved it
// finishes again at once, and with a later stop the restore is refused
// (control.ErrInvalid, the job left as it was).
func TestSourceStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	specOf := func(name, in, out, fields string) *jobspec.Spec {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", fmt.Appendf(nil, `name: %s
sources: [{name: in, kind: jetstream, stream: %s, %s}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: %s, subject: %s, input: {from: count}}]
checkpointing: {interval: 100ms}
`, name, in, fields, mods["wordcount"], out, strings.ToLower(out)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	submit := func(name, in, out, fields string) error {
		t.Helper()
		_, err := n.API.Submit(ctx, control.SubmitRequest{Spec: specOf(name, in, out, fields)})
		return err
	}
	publish := func(subject string, count int) {
		t.Helper()
		for i := 0; i < count; i++ {
			if _, err := n.JS.Publish(ctx, subject, []byte("w")); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "EMPTY", Subjects: []string{"empty"}})
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	for _, s := range []string{"OUT1", "OUT2", "OUT3", "OUT4"} {
		mustSinkStream(t, ctx, n.JS, s, strings.ToLower(s))
	}
	publish("in", 5)

	for _, c := range []struct{ name, in, fields, want string }{
		{"empty", "EMPTY", "stop: end", "source in: stop end: stream EMPTY holds no message up to it"},
		{"before", "IN", "start: 4, stop: 2", "source in: stop 2 is before its start 4: the source would read nothing"},
		{"just-before", "IN", "start: 4, stop: 3", "source in: stop 3 is before its start 4: the source would read nothing"},
		{"new-to-end", "IN", "start: new, stop: end", "source in: stop end (sequence 5) is before its start new (sequence 6): the source would read nothing"},
		{"future", "IN", "stop: " + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "the time is in the future"},
	} {
		if err := submit(c.name, c.in, "OUT1", c.fields); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	// Sequences 2..4, then the job finishes.
	if err := submit("mid", "IN", "OUT1", "start: 2, stop: 4"); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "mid", "the job to finish", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFinished || !strings.Contains(fmt.Sprint(st.Guarantees), "stops after sequence 4 (stop: 4)") {
		t.Errorf("job %s (%s), guarantees %v", st.State, st.Reason, st.Guarantees)
	}
	if info := mustInfo(t, ctx, n, "OUT1"); info.State.Msgs != 3 {
		t.Errorf("OUT1 holds %d messages, want 3", info.State.Msgs)
	}

	// Restored from its final savepoint with a new spec that still says
	// stop: end, a finished job keeps the stop it resolved at its submit:
	// it ends at once and publishes nothing more, though the stream grew.
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "AGAIN", Subjects: []string{"again"}})
	publish("again", 3)
	if err := submit("again", "AGAIN", "OUT4", "stop: end"); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "again", "the job to finish", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	cps, err := n.API.Checkpoints(ctx, "again")
	if err != nil || len(cps) == 0 || !cps[0].Savepoint {
		t.Fatalf("checkpoints %+v, %v; want the final savepoint first", cps, err)
	}
	final := fmt.Sprint(cps[0].ID)
	publish("again", 2) // 4..5
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "again", From: final, Spec: specOf("again", "AGAIN", "OUT4", "stop: end")}); err != nil {
		t.Fatal(err)
	}
	st = waitJob(t, ctx, n, "again", "the restored job to end", func(st control.JobStatus) bool { return st.State.Terminal() && st.Attempt > 1 })
	if st.State != control.JobFinished || mustInfo(t, ctx, n, "OUT4").State.Msgs != 3 {
		t.Errorf("restored with the same stop: %s (%s), OUT4 holds %d, want finished with 3", st.State, st.Reason, mustInfo(t, ctx, n, "OUT4").State.Msgs)
	}
	// The final savepoint's metadata says which ports ended and where the
	// source stopped (the workers' acks carry it).
	if m := cps[0].Tasks["count-0"][control.MetricEndedPorts]; m != 1 {
		t.Errorf("count-0's ended ports %b in the final savepoint, want port 0", m)
	}
	if m := cps[0].Tasks["in-0"][control.MetricStopSequence]; m != 3 {
		t.Errorf("in-0's stop %d in the final savepoint, want 3", m)
	}
	if m, ok := cps[0].Tasks["in-0"][control.MetricSourceEnded]; m != 1 || !ok {
		t.Errorf("in-0's source_ended %d (%v) in the final savepoint, want 1: its offset is at the stop", m, ok)
	}
	// With a later stop, the records past the old one would reach ports
	// the operator ended: the restore is refused, saying why, and the
	// finished job stays as it was.
	_, err = n.API.Restore(ctx, control.RestoreRequest{Job: "again", From: final, Spec: specOf("again", "AGAIN", "OUT4", "stop: 5")})
	want := "restore again from checkpoint " + final + ": task count-0's input port 0 ended in the checkpoint, but source in would give it more records: it stops at sequence 5 in the spec (stop: 5), after sequence 3, where it stopped in the checkpoint (task in-0)"
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("restored with a later stop: %v, want ErrInvalid saying %q", err, want)
	}
	if now, err := n.API.Job(ctx, "again"); err != nil || now.State != control.JobFinished || now.Attempt != st.Attempt {
		t.Errorf("after the refused restore: %s attempt %d (%s), %v; want still finished at attempt %d", now.State, now.Attempt, now.Reason, err, st.Attempt)
	}
	if got := mustInfo(t, ctx, n, "OUT4").State.Msgs; got != 3 {
		t.Errorf("OUT4 holds %d, want still 3", got)
	}

	// A stop the stream has not reached: the job waits for it.
	if err := submit("ahead", "IN", "OUT2", "stop: 8"); err != nil {
		t.Fatal(err)
	}
	// Once it has written the outputs of the 5 messages stored, it still
	// runs (a loaded machine may take longer than half a second to deploy
	// it: a fixed wait saw it still created).
	waitJob(t, ctx, n, "ahead", "the job running", func(st control.JobStatus) bool { return st.State == control.JobRunning || st.State.Terminal() })
	waitUntil(t, ctx, "OUT2 to hold the outputs of the 5 messages stored", func() bool { return mustInfo(t, ctx, n, "OUT2").State.Msgs >= 5 })
	if st, _ := n.API.Job(ctx, "ahead"); st.State != control.JobRunning {
		t.Fatalf("job %s (%s) before its stop was stored", st.State, st.Reason)
	}
	publish("in", 5) // 6..10
	waitJob(t, ctx, n, "ahead", "the job to finish", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	if info := mustInfo(t, ctx, n, "OUT2"); info.State.Msgs != 8 {
		t.Errorf("OUT2 holds %d messages, want 8", info.State.Msgs)
	}

	// A time: the messages stored up to it.
	time.Sleep(20 * time.Millisecond)
	at := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	publish("in", 2)
	if err := submit("time", "IN", "OUT3", "stop: "+at.Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "time", "the job to finish", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	if info := mustInfo(t, ctx, n, "OUT3"); info.State.Msgs != 10 {
		t.Errorf("OUT3 holds %d messages, want 10", info.State.Msgs)
	}
}

func mustInfo(t *testing.T, ctx context.Context, n *Node, stream string) *jetstream.StreamInfo {
	t.Helper()
	st, err := n.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
