package node

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestFailoverRestoresASinkStateThatNamesAnother runs a keyed count with an
// exactly-once sink over a backlog: the sink commits slower than the 50 ms
// checkpoints come (async publish, an ack per record), so its snapshots
// name the earlier completed checkpoint that holds the output still
// waiting for its commit instead of copying it (sink_state_from), and with
// one checkpoint retained, retention keeps the named one. A trap fails the
// job over once the latest checkpoint names another; the restore reads the
// named snapshot, and the output holds every key's counts 1..n once.
func TestFailoverRestoresASinkStateThatNamesAnother(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	inj := &injector{}
	n, mods := oneNodeHooked(t, ctx, inj.hooks(), "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	in := newKeyedInput(t, ctx, n.JS, 16)
	publishAsync(t, ctx, n.JS, in, 40_000)

	spec, err := jobspec.Parse("named.yaml", []byte(`name: named
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: `+mods["wordcount"]+`, inputs: [{from: in, partition: key}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, publish: async, input: {from: count}}]
checkpointing: {interval: 50ms, timeout: 2m, retained: 1}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 100}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	names := func(id int64) int64 {
		cks, err := n.API.Checkpoints(ctx, "named")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cks {
			if c.ID == id {
				return c.Tasks["out-0"][control.MetricSinkStateFrom]
			}
		}
		return 0
	}
	// Fail over until an attempt restored a checkpoint that names another
	// (a newer one that names none may complete between the trap's arming
	// and its firing).
	var restored, named int64
	for named == 0 {
		st := waitJob(t, ctx, n, "named", "a checkpoint that names another", func(st control.JobStatus) bool {
			return running(st) && st.LatestCheckpoint > st.RestoredFrom && names(st.LatestCheckpoint) != 0
		})
		if st.Restarts >= 5 {
			t.Fatalf("%d failovers, none restored a checkpoint that names another", st.Restarts)
		}
		inj.trap.Store(true)
		// A record more, for the trap to fire on should the backlog be
		// processed already; counted, as the restore processes it again.
		publishAsync(t, ctx, n.JS, in, 1)
		st = waitJob(t, ctx, n, "named", "the failover", func(s control.JobStatus) bool {
			return running(s) && s.Restarts > st.Restarts && s.RestoredFrom != 0
		})
		restored, named = st.RestoredFrom, names(st.RestoredFrom)
	}
	t.Logf("restored checkpoint %d, which names checkpoint %d", restored, named)
	in.checkCounts()
}
