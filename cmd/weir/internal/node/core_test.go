package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestCoreNATSJob runs core NATS subject → Go uppercase → core NATS
// subject on a worker with checkpointing: checkpoints complete (the core
// sink's pre-commit flush runs on a task's context, which has no
// deadline), every message comes out upper-cased, and the job's status
// says that the source is at-most-once.
func TestCoreNATSJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "uppercase.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/uppercase"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	spec, err := jobspec.Parse("core.yaml", []byte(`name: core
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
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
	var st control.JobStatus
	waitUntil(t, ctx, "a checkpoint", func() bool {
		st, err = n.API.Job(ctx, "core")
		return err == nil && (st.LatestCheckpoint >= 1 || st.State.Terminal())
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
	waitUntil(t, ctx, "three more checkpoints", func() bool {
		st, err = n.API.Job(ctx, "core")
		return err == nil && (st.LatestCheckpoint >= first+3 || st.State.Terminal())
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
