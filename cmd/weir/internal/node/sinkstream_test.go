package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A sink stream whose subjects are edited while the job runs, so that it
// no longer stores the exactly-once sink's subject: JetStream answers the
// commit at once with no responders, which the sink had taken for a
// stream without a leader — it waited 30 s for an election and failed
// "no leader elected", of no kind, and the next attempt failed as a bad
// record ("fix the operator"). The failure is the stream's, says what to
// add back where, and follows the restart strategy: once the subject is
// back, a restart commits the output, each record once (the source, a
// stream, replays what the failed attempts had not committed).
func TestSinkStreamThatStopsStoringTheSubject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "OUT9", Subjects: []string{"out9.>"}, Duplicates: 10 * time.Minute})
	spec, err := jobspec.Parse("s.yaml", fmt.Appendf(nil, `name: s
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: op, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT9, subject: out9.x, input: {from: op}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 50ms, attempts: 1000}
`, mods["passthrough"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	readingAgain(t, ctx, n, "s", 0)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "in.x", fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := func(want uint64) func() bool {
		return func() bool {
			st, err := js.Stream(ctx, "OUT9")
			return err == nil && st.CachedInfo().State.Msgs >= want
		}
	}
	publish(0, 10)
	waitUntil(t, ctx, "the first 10 records stored", stored(10))

	setStreamSubjects(t, ctx, js, "OUT9", "other.>")
	publish(10, 20)
	st := waitJob(t, ctx, n, "s", "a failure", func(st control.JobStatus) bool { return len(st.Failures) > 0 })
	f := st.Failures[len(st.Failures)-1] // the first
	want := "the sink publishes on out9.x, which stream OUT9 does not store (its subjects: other.>): add out9.x back to the stream's subjects (nats stream edit OUT9 --subjects 'other.>,out9.x')"
	if f.Kind != control.FailureStream || !strings.Contains(f.Reason, want) || strings.Contains(f.Reason, "no leader elected") {
		t.Fatalf("failure %+v; want kind stream, saying %q", f, want)
	}
	t.Logf("first failure: %s", f.Reason)
	// The next attempts' recoveries meet the checkpoint staged on
	// out9.x: the same kind, the same fix, and restarted.
	st = waitJob(t, ctx, n, "s", "a second failure", func(st control.JobStatus) bool { return len(st.Failures) > 1 || st.State.Terminal() })
	if f := st.Failures[0]; st.State.Terminal() || f.Kind != control.FailureStream || !strings.Contains(f.Reason, "add out9.x back to the stream's subjects") {
		t.Fatalf("job %s (%s); failure %+v: want it restarted after a failure of kind stream saying how to add the subject back", st.State, st.Reason, f)
	}
	t.Logf("next: %s", st.Failures[0].Reason)

	setStreamSubjects(t, ctx, js, "OUT9", "other.>", "out9.x")
	publish(20, 30)
	if !poll(ctx, stored(30)) {
		st, err := n.API.Job(ctx, "s")
		t.Fatalf("timed out waiting for the 30 records stored; job %s (%s), %d restarts, failures %+v (%v)", st.State, st.Reason, st.Restarts, st.Failures[:min(2, len(st.Failures))], err)
	}
	got := map[string]int{}
	cons, err := js.OrderedConsumer(ctx, "OUT9", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, "OUT9")
	if err != nil {
		t.Fatal(err)
	}
	for range info.CachedInfo().State.Msgs {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got[string(m.Data())]++
	}
	for i := range 30 {
		if v := fmt.Sprintf("v%d", i); got[v] != 1 {
			t.Errorf("%s stored %d times, want once (stored: %v)", v, got[v], got)
		}
	}
}

// setStreamSubjects changes the subjects stream stores, as someone
// editing the stream with the nats CLI does.
func setStreamSubjects(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, subjects ...string) {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Subjects = subjects
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}
