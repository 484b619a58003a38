package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestRestoreWithOneForwardChainEnded stops a bounded job (stop: end)
// whose partitioned source, count and sink are wired by forward edges
// while subtask 0's chain has ended (its partitions hold few messages)
// and subtask 1's still reads (slow operators, many large messages), then
// restores the savepoint with the job's own spec: a plain resume. It
// must be accepted (count-1, which had not finished, feeds out-1 only,
// never out-0's ended port), the job must finish by itself, and the sink
// must hold every key's running counts 1..n exactly once.
func TestRestoreWithOneForwardChainEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	modPath := filepath.Join(t.TempDir(), "wordcount.wasm")
	if err := os.WriteFile(modPath, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	inj := &injector{piece: 1} // a millisecond per record
	main, _ := faultNodes(t, ctx, inj)
	js := main.JS
	mustPartitionedInput(t, ctx, js)
	mustSinkStream(t, ctx, js, "OUT", "out")

	sent := map[string]int{}
	publish := func(k string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			msg := nats.NewMsg("in." + k)
			msg.Header.Set("Weir-Key", k)
			// One word, padded with spaces: large records, so that the
			// channels hold few and subtask 1's source cannot read up to
			// its stop before its count has counted most of them.
			msg.Data = []byte(k + strings.Repeat(" ", 2000))
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
			sent[k]++
		}
	}
	// Which partition each key is stored in (in.<p>.<key>).
	for k := 0; k < e2eKeys; k++ {
		publish(fmt.Sprintf("k%02d", k), 1)
	}
	st, err := js.Stream(ctx, "IN")
	if err != nil {
		t.Fatal(err)
	}
	part := map[string]string{}
	for seq := uint64(1); seq <= e2eKeys; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		toks := strings.Split(m.Subject, ".")
		part[toks[2]] = toks[1]
	}
	// Subtask 0 reads partitions 0 and 2: little; subtask 1: a lot.
	odd := 0
	for k, p := range part {
		if p == "1" || p == "3" {
			publish(k, 400)
			odd++
		} else {
			publish(k, 3)
		}
	}
	if odd == 0 || odd == len(part) {
		t.Skipf("the keys do not spread over both subtasks' partitions: %v", part)
	}
	total := 0
	for _, n := range sent {
		total += n
	}

	spec, err := jobspec.Parse("fwd.yaml", fmt.Appendf(nil, `name: fwd
sources:
  - {name: in, kind: jetstream, stream: IN, parallelism: 2, partitions: 4, partition-filter: "in.{p}.*", stop: end}
operators:
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in}]}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, parallelism: 2, input: {from: count}}
checkpointing: {interval: 200ms, timeout: 10s}
`, modPath), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	ended := func(st control.JobStatus, task string) bool {
		for _, ts := range st.Tasks {
			if ts.Task == task {
				return ts.Stats.InputEnded
			}
		}
		return false
	}
	waitJob(t, ctx, main, "fwd", "out-0 ended, count-1 still counting", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && ended(st, "out-0")
	})
	if now, err := main.API.Job(ctx, "fwd"); err != nil || ended(now, "count-1") {
		t.Skip("count-1 ended too before the stop (a slow machine): not the case under test")
	}
	sp := stopWithSavepoint(t, ctx, main, "fwd")
	cps, err := main.API.Checkpoints(ctx, "fwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if fmt.Sprint(c.ID) != sp {
			continue
		}
		// The case under test: count-0's chain ended, count-1 had not.
		m := c.Tasks
		if m["count-1"]["ended_ports"] != 0 && m["count-0"]["ended_ports"] == 1 {
			// Between the look above and the savepoint's barrier.
			t.Skip("count-1 ended too before the savepoint (a slow machine): not the case under test")
		}
		if m["count-0"]["ended_ports"] != 1 || m["out-0"]["ended_ports"] != 1 || m["count-1"]["ended_ports"] != 0 {
			t.Fatalf("savepoint %s: ended_ports count-0 %d, out-0 %d, count-1 %d; want 1, 1, 0", sp,
				m["count-0"]["ended_ports"], m["out-0"]["ended_ports"], m["count-1"]["ended_ports"])
		}
	}

	if _, err := main.API.Restore(ctx, control.RestoreRequest{Job: "fwd", From: sp}); err != nil {
		t.Fatalf("restore of the job's own stop savepoint %s with its own spec: %v", sp, err)
	}
	fin := waitJob(t, ctx, main, "fwd", "the restored job to end", func(st control.JobStatus) bool { return st.State.Terminal() })
	if fin.State != control.JobFinished {
		t.Fatalf("restored job %s: %s", fin.State, fin.Reason)
	}
	checkRunningCounts(t, readCounts(t, ctx, js, total, true), sent)
}
