package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// An operator's own lines go to Options.OperatorLog, at their level, while
// the node's log keeps only warnings: weir up logs its own work at warn
// and up by default, and a trial's operator info lines were lost in it.
func TestOperatorLinesGoToTheOperatorLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nodeLog, opLog lockedBuffer
	n, err := Start(ctx, Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatInterval: 100 * time.Millisecond,
		Log:               slog.New(slog.NewTextHandler(&nodeLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OperatorLog:       slog.New(slog.NewTextHandler(&opLog, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	// bombs with config l logs "slow" at info on each batch.
	bombs, err := filepath.Abs("../../../../host/wasm/testdata/bombs.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("logs.yaml", []byte(`name: logs
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: `+bombs+`, config: "l", inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "logs", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	for !strings.Contains(opLog.String(), "msg=slow") {
		if err := n.Conn.Publish("in", []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the operator's line did not reach its log; node log:\n%s", nodeLog.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.Contains(opLog.String(), "level=INFO") || !strings.Contains(opLog.String(), "operator=op[0]") {
		t.Errorf("operator log:\n%s", opLog.String())
	}
	if strings.Contains(nodeLog.String(), "msg=slow") {
		t.Errorf("the node's log has the operator's line:\n%s", nodeLog.String())
	}
	// Its heartbeats carry the operator's memory and limit to the status.
	st := waitJob(t, ctx, n, "logs", "the operator's memory", func(st control.JobStatus) bool {
		for _, ts := range st.Tasks {
			if ts.Task == "op-0" && ts.Stats.MemoryLimit > 0 {
				return true
			}
		}
		return false
	})
	for _, ts := range st.Tasks {
		if ts.Task == "op-0" && (ts.Stats.MemoryLimit != 64<<20 || ts.Stats.MemoryBytes == 0 || ts.Stats.MemoryBytes > ts.Stats.MemoryLimit) {
			t.Errorf("op-0's memory %d of %d; want some of the default 64 MiB", ts.Stats.MemoryBytes, ts.Stats.MemoryLimit)
		}
	}
}
