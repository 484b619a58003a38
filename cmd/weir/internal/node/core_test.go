package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestCoreNATSJob runs core NATS subject → Go uppercase → core NATS
// subject on a worker with checkpointing: checkpoints complete (the core
// sink's pre-commit flush runs on a task's context, which has no
// deadline), every message comes out upper-cased, and the job's status
// says that the source is at-most-once.
func TestCoreNATSJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "uppercase")
	spec, err := jobspec.Parse("core.yaml", []byte(`name: core
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: `+mods["uppercase"]+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 50ms}
restart: {strategy: none}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.Conn.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	// The source subscribes once its task runs: publish after a
	// checkpoint completed (every task acknowledged it).
	st := waitJob(t, ctx, n, "core", "a checkpoint", func(st control.JobStatus) bool {
		return st.LatestCheckpoint >= 1 || st.State.Terminal()
	})
	if st.State != control.JobRunning {
		t.Fatalf("status %+v", st)
	}
	const count = 500
	for i := 0; i < count; i++ {
		if err := n.Conn.Publish("in", []byte(fmt.Sprintf("m%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < count; i++ {
		m, err := out.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
		if want := fmt.Sprintf("M%03d", i); string(m.Data) != want {
			t.Fatalf("output %d = %q, want %q", i, m.Data, want)
		}
	}
	first := st.LatestCheckpoint
	st = waitJob(t, ctx, n, "core", "three more checkpoints", func(st control.JobStatus) bool {
		return st.LatestCheckpoint >= first+3 || st.State.Terminal()
	})
	if st.State != control.JobRunning || st.Restarts != 0 {
		t.Fatalf("status %+v", st)
	}
	var lines []string
	for _, g := range st.Guarantees {
		lines = append(lines, g.String())
	}
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, "source in: at-most-once: core NATS subject, no replay") ||
		!strings.Contains(all, "sink out: at-most-once") {
		t.Errorf("guarantees in the status:\n%s", all)
	}
}
