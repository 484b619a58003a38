package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A record whose key cannot form its keyed sink's subject fails the job at
// once — a replay would meet it again — with a reason naming the sink, the
// key and what is wrong with it; the records before it are on their keys'
// subjects.
func TestBadKeyFailsTheJobAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out.>")
	spec, err := jobspec.Parse("keyed.yaml", fmt.Appendf(nil, `name: keyed
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: "out.{key}", input: {from: count}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`, mods["wordcount"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	publish := func(key string) {
		m := nats.NewMsg("in")
		m.Header.Set("Weir-Key", key)
		m.Data = []byte(key) // the word the operator counts, and keys its count by
		if _, err := n.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	publish("eu.fr")
	publish("fox")
	waitUntil(t, ctx, "two outputs", func() bool {
		st, err := n.JS.Stream(ctx, "OUT")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 2
	})
	publish("a..b")
	st := waitJob(t, ctx, n, "keyed", "the job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	// Each thing once: the task, the sink (subject and stream), the record,
	// the key.
	want := `task out-0 failed: exactly-once sink out (subject out.{key}, stream OUT): record 1 of the batch: record key cannot form a subject: ` +
		`key "a..b": an empty token at byte 2 (a leading, trailing or double dot) (not restarted: it would fail the same way again)`
	if st.State != control.JobFailed || st.Restarts != 0 || st.Reason != want {
		t.Fatalf("job %s after %d restarts: %q; want failed at once: %q", st.State, st.Restarts, st.Reason, want)
	}
	out, err := n.JS.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := out.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if s := info.State.Subjects; len(s) != 2 || s["out.eu.fr"] != 1 || s["out.fox"] != 1 {
		t.Fatalf("OUT holds %v, want one count on out.eu.fr and one on out.fox", s)
	}
}
