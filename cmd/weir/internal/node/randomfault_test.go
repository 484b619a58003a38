package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// An operator that traps on one record, then on another (a trial's Go
// operator panicked at random, on keys k99, k473 and k390), did not fail
// the same way: each failure names its record (control.Failure.Record),
// and failures on different records are alike (SameKindAs) but not the
// same (SameAs), so weir job status does not say that restarting does
// not help. A core NATS source replays neither record, so each attempt
// fails on a record of its own.
func TestFailuresOnDifferentRecordsAreNotTheSame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	mod, err := filepath.Abs("../../../../host/wasm/testdata/misbehave.wasm")
	if err != nil {
		t.Fatal(err)
	}
	// Config "d": trap on a record whose value starts with "!".
	spec, err := jobspec.Parse("random.yaml", fmt.Appendf(nil, `name: random
sources: [{name: in, kind: nats, subject: "in.>", key: subject}]
operators: [{name: op, module: %s, config: d, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: rout, input: {from: op}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`, mod), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	readingAgain(t, ctx, n, "random", 0)
	for i, key := range []string{"k99", "k473", "k99"} {
		if err := n.Conn.Publish("in."+key, []byte("!panic")); err != nil {
			t.Fatal(err)
		}
		readingAgain(t, ctx, n, "random", i+1)
	}
	st, err := n.API.Job(ctx, "random")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Failures) != 3 {
		t.Fatalf("failures %+v, want 3", st.Failures)
	}
	for i, key := range []string{"k99", "k473", "k99"} {
		f := st.Failures[2-i]
		want := fmt.Sprintf(`key "in.%s", value "!panic"`, key)
		if f.Kind != control.FailureTrap || f.Task != "op-0" || f.Record != want || !strings.Contains(f.Reason, "("+want+")") {
			t.Errorf("failure %d: %+v; want a trap in op-0 on record %s, which its reason names", i+1, f, want)
		}
	}
	newest, before, first := st.Failures[0], st.Failures[1], st.Failures[2]
	if !newest.SameKindAs(before) || newest.SameAs(before) {
		t.Errorf("failures on keys k99 and k473: alike %v, the same %v; want alike, not the same", newest.SameKindAs(before), newest.SameAs(before))
	}
	if !newest.SameAs(first) {
		t.Errorf("failures on key k99 in attempts 1 and 3 not the same: %+v, %+v", first, newest)
	}
}
