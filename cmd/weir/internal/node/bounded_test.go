package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestBoundedJobFinishesExactlyOnce runs a job whose partitioned
// JetStream source stops at the stream's end when the job starts (stop:
// end) through the keyed running count into an exactly-once sink, on two
// workers, and injects failures: mid-run (an operator trap, a worker
// crash), or at the end (the final savepoint's storage write fails, so it
// is taken again). The job must finish by itself, and the sink must hold
// the counts of exactly the messages stored before the job started, each
// once: none of those published later, no gap, no repeat.
func TestBoundedJobFinishesExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end failure injection: skipped in -short")
	}
	modPath := filepath.Join(t.TempDir(), "wordcount.wasm")
	if err := os.WriteFile(modPath, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name     string
		interval string
		midRun   bool
		final    bool // the count emits totals at the end of its input only
	}{
		{"faults mid-run", "150ms", true, false},
		{"final savepoint fails once", "1h", false, false},
		// Every output comes from the operators' end of input, after the
		// faults, and must be in the final savepoint.
		{"totals at the end, faults mid-run", "150ms", true, true},
		{"totals at the end, final savepoint fails once", "1h", false, true},
	} {
		t.Run(c.name, func(t *testing.T) { runBoundedScenario(t, modPath, c.interval, c.midRun, c.final, uint64(i+1)) })
	}
}

func runBoundedScenario(t *testing.T, modPath, interval string, midRun, final bool, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 11))
	inj := &injector{piece: 1} // slow operators: the faults land while records flow
	main, startWorker := faultNodes(t, ctx, inj)
	w2 := startWorker("w2")
	defer func() { w2.Close() }()
	js := main.JS
	mustPartitionedInput(t, ctx, js)
	// A window for checkpoints an hour apart (the final savepoint scenario).
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 2 * time.Hour, AllowBatchPublish: true})
	sent := map[string]int{}
	const before = 4000
	publishKeys(t, ctx, js, rng, before, sent)
	config := ""
	if final {
		config = ", config: {emit: final}"
	}
	spec := fmt.Sprintf(`name: counts
sources:
  - {name: in, kind: jetstream, stream: IN, parallelism: 2, partitions: 4, partition-filter: "in.{p}.*", stop: end}
operators:
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in, partition: key}]%s}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}
checkpointing: {interval: %s, timeout: 10s, tolerable-failures: 1000000}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 100}
`, modPath, config, interval)
	// The faults are the trap, the crash and the failed write: a
	// checkpoint that expires does not fail the job over. Its barrier
	// waits behind what is in flight to the slow operators, which a loaded
	// machine made take longer than the timeout at every attempt: each
	// restarted from nothing, and the job never got past its backlog.
	s, err := jobspec.Parse("counts.yaml", []byte(spec), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if midRun {
		inj.trap.Store(true) // the first call of an operator
	} else {
		inj.failPut.Store(true) // the only snapshot write: the final savepoint's
	}
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	// Stored after the job started: past its stop.
	publishKeys(t, ctx, js, rng, 300, nil)
	if st, err := main.API.Job(ctx, "counts"); err != nil || !strings.Contains(fmt.Sprint(st.Guarantees), fmt.Sprintf("stops after sequence %d (stop: end)", before)) {
		t.Errorf("guarantees %v, %v; want the resolved stop", st.Guarantees, err)
	}
	wantRestarts := 0
	if midRun {
		wantRestarts = 1
		// A restarted attempt may also read to its stop before any
		// periodic checkpoint gets through the slow operators' backlog:
		// then the job finishes with its final savepoint, and there is
		// no run left to crash into.
		waitJob(t, ctx, main, "counts", "a restart and a checkpoint, or the end", func(st control.JobStatus) bool {
			return st.Restarts > 0 && (st.State.Terminal() || st.State == control.JobRunning && st.LatestCheckpoint > 0)
		})
		// The crash's restart is the second when it finds the job
		// unfinished, with tasks on w2. So that the job cannot end
		// between the look and the crash (a loaded machine can take the
		// seconds counting takes to get here, and more in between),
		// every operator is held at its next call meanwhile: one held
		// has not ended, and while it is held the job cannot end. None
		// comes once they all ended; then the job may end before the
		// crash.
		release := inj.hold(t)
		var now control.JobStatus
		waitUntil(t, ctx, "an operator held, or every task ended", func() bool {
			st, err := main.API.Job(ctx, "counts")
			if err == nil {
				now = st
			}
			return inj.held.Load() > 0 || err == nil && (st.State.Terminal() || allEnded(st))
		})
		if inj.held.Load() > 0 && now.State == control.JobRunning {
			for _, w := range now.Assignment {
				if w == "w2" {
					wantRestarts = 2
				}
			}
		}
		w2.Conn.Close() // a crash: no goodbye
		release()
		w2.Close()
		w2 = startWorker("w3")
	}
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Second)
	defer wcancel()
	if !poll(wctx, func() bool {
		st, err := main.API.Job(ctx, "counts")
		return err == nil && st.State.Terminal()
	}) {
		st, _ := main.API.Job(ctx, "counts")
		for _, task := range st.Tasks {
			t.Logf("task %s on %s: %+v", task.Task, task.Worker, task.Stats)
		}
		cps, _ := main.API.Checkpoints(ctx, "counts")
		for i, c := range cps {
			if i < 5 {
				t.Logf("checkpoint %d: %s %s acked %d/%d", c.ID, c.Status, c.Reason, c.Acked, c.Total)
			}
		}
		t.Fatalf("the job did not finish: %s (attempt %d, %d restarts): %s", st.State, st.Attempt, st.Restarts, st.Reason)
	}
	st, _ := main.API.Job(ctx, "counts")
	if st.State != control.JobFinished || !strings.Contains(st.Reason, "final savepoint") {
		t.Fatalf("job ended %s (%s), want finished with its final savepoint", st.State, st.Reason)
	}
	if final {
		// One total per key, once.
		counts := readCounts(t, ctx, js, len(sent), true)
		for k, n := range sent {
			if got := counts[k]; len(got) != 1 || got[0] != n {
				t.Errorf("key %s: totals %v, want [%d] exactly once", k, got, n)
			}
		}
	} else {
		checkRunningCounts(t, readCounts(t, ctx, js, before, true), sent)
	}
	t.Logf("%d records counted, %d restarts (want %d at least); %s", before, st.Restarts, wantRestarts, st.Reason)
	if st.Restarts < wantRestarts {
		t.Errorf("%d restarts, want %d (the trap's, and the crash's if w2 ran tasks)", st.Restarts, wantRestarts)
	}
	if n := inj.fired.Load(); n != 1 {
		t.Errorf("%d hook faults fired, want 1", n)
	}
}

// allEnded reports whether every task of st said its input ended.
func allEnded(st control.JobStatus) bool {
	for _, task := range st.Tasks {
		if !task.Stats.InputEnded {
			return false
		}
	}
	return len(st.Tasks) > 0
}
