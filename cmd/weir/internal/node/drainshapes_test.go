package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// Drains of shapes TestDrainToOneSequence does not cover: a source split
// by the server into partitions, a job with two JetStream sources, and a
// worker lost while the drain runs. Each ends with a follow-on job that
// starts where weir job status says the drained one ended (start: N+1 of
// each source, stop: end) and checks that the two jobs together counted
// every input message once: per key, the drained job's totals are those
// of each stream's first N messages, and the two jobs' totals add up to
// the streams'.

// flowInput publishes keyed records (k00..k06, the key also the value)
// to each of prefixes in turn, on subject PREFIX.KEY, until the
// returned stop is called.
func flowInput(t *testing.T, ctx context.Context, js jetstream.JetStream, prefixes ...string) (stop func()) {
	t.Helper()
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			k := fmt.Sprintf("k%02d", i%7)
			m := nats.NewMsg(prefixes[i%len(prefixes)] + "." + k)
			m.Header.Set("Weir-Key", k)
			m.Data = []byte(k)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// sendKeyed publishes n keyed records (as flowInput) on subjects
// PREFIX.KEY.
func sendKeyed(t *testing.T, ctx context.Context, js jetstream.JetStream, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("k%02d", i%7)
		m := nats.NewMsg(prefix + "." + k)
		m.Header.Set("Weir-Key", k)
		m.Data = []byte(k)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// keysBySeq returns the Weir-Key of each message of stream name, by its
// stream sequence.
func keysBySeq(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	for _, m := range readStream(t, ctx, js, name) {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out[md.Sequence.Stream] = m.Headers().Get("Weir-Key")
	}
	return out
}

// drainedAt returns where st says each JetStream source ended, by source
// name, failing the test unless every one of want ended at one sequence.
func drainedAt(t *testing.T, st control.JobStatus, want map[string]string) map[string]uint64 {
	t.Helper()
	at := map[string]uint64{}
	for _, e := range st.DrainedAt {
		if !e.Exact() || e.Seq == 0 || want[e.Source] != e.Stream {
			t.Fatalf("drained at %+v; want each of the sources %v at one sequence", st.DrainedAt, want)
		}
		at[e.Source] = e.Seq
	}
	if len(at) != len(want) {
		t.Fatalf("drained at %+v; want each of the sources %v", st.DrainedAt, want)
	}
	return at
}

// checkSplit checks that the drained job's totals (stream drained: per
// key, one at the end of each of the operator's inputs, the last its
// total) are those of each input stream's messages up to where it
// ended (ends: stream → N), and that they and the follow-on job's (stream
// rest) add up to every input message, each once.
func checkSplit(t *testing.T, ctx context.Context, js jetstream.JetStream, ends map[string]uint64, drained, rest string, inputs int) {
	t.Helper()
	first, all := map[string]int{}, map[string]int{}
	stored := 0
	for stream, n := range ends {
		for seq, k := range keysBySeq(t, ctx, js, stream) {
			if seq <= n {
				first[k]++
			}
			all[k]++
			stored++
		}
	}
	got := map[string]int{}
	for _, s := range []string{drained, rest} {
		for k, ts := range readKeyed(t, ctx, js, s) {
			if len(ts) != inputs {
				t.Errorf("%s key %s: totals %v, want %d (one at the end of each input)", s, k, ts, inputs)
				continue
			}
			total := ts[len(ts)-1]
			if s == drained && total != first[k] {
				t.Errorf("key %s: the drained job counted %d, the streams up to where it ended (%v) hold %d", k, total, ends, first[k])
			}
			got[k] += total
		}
	}
	for k, c := range all {
		if got[k] != c {
			t.Errorf("key %s: the two jobs counted %d, the streams hold %d", k, got[k], c)
		}
	}
	t.Logf("drained at %v; %d input messages in all", ends, stored)
}

// TestDrainPartitionedSource drains a job whose JetStream source's
// subtasks (parallelism 3) read 4 server-side partitions of one stream
// (two for one of them) while input keeps arriving: every partition reads
// on to the one sequence N the drain chose, the status names it, and a
// job with start: N+1 reads exactly the rest.
func TestDrainPartitionedSource(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustPartitionedInput(t, ctx, n.JS)
	mustSinkStream(t, ctx, n.JS, "TOTALS", "totals")
	mustSinkStream(t, ctx, n.JS, "REST", "rest")
	job := func(name, start, sink string) *jobspec.Spec {
		spec, err := jobspec.Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
sources: [{name: in, kind: jetstream, stream: IN, parallelism: 3, partitions: 4, partition-filter: "in.{p}.*"%[3]s}]
operators:
  - {name: total, module: %[2]s, parallelism: 2, inputs: [{from: in, partition: key}], config: {emit: final}}
sinks:
  - {name: out, kind: jetstream, stream: %[4]s, subject: %[5]s, input: {from: total}}
checkpointing: {interval: 50ms}
`, name, mods["wordcount"], start, strings.ToUpper(sink), sink)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("counts", "", "totals")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	sendKeyed(t, ctx, n.JS, "in", 300)
	stop := flowInput(t, ctx, n.JS, "in")
	time.Sleep(100 * time.Millisecond)
	_, err := n.API.DrainJob(ctx, "counts")
	stop()
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	st, err := n.API.Job(ctx, "counts")
	if err != nil {
		t.Fatal(err)
	}
	seq := drainedAt(t, st, map[string]string{"in": "IN"})["in"]
	if h := control.ContinueHint(st.DrainedAt); !strings.Contains(h, fmt.Sprintf("start: %d", seq+1)) {
		t.Errorf("continue hint %q; want start: %d", h, seq+1)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("rest", fmt.Sprintf(", start: %d, stop: end", seq+1), "rest")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "rest", "the follow-on job finished", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	checkSplit(t, ctx, n.JS, map[string]uint64{"IN": seq}, "TOTALS", "REST", 1)
}

// TestDrainTwoSources drains a job whose one operator reads two JetStream
// sources of two streams, each at parallelism 2, while input keeps
// arriving on both (wordcount {emit: final} emits its totals at the end
// of each input, the last of them the total of both): each source ends at a sequence of its own stream, the
// status names both with the start that continues each, and a job with
// those two starts reads exactly the rest of both.
func TestDrainTwoSources(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "MORE", Subjects: []string{"more.*"}})
	mustSinkStream(t, ctx, n.JS, "TOTALS", "totals")
	mustSinkStream(t, ctx, n.JS, "REST", "rest")
	job := func(name, startIn, startMore, sink string) *jobspec.Spec {
		spec, err := jobspec.Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
sources:
  - {name: a, kind: jetstream, stream: IN, parallelism: 2%[3]s}
  - {name: b, kind: jetstream, stream: MORE, parallelism: 2%[4]s}
operators:
  - {name: total, module: %[2]s, parallelism: 2, inputs: [{from: a, partition: key}, {from: b, partition: key}], config: {emit: final}}
sinks:
  - {name: out, kind: jetstream, stream: %[5]s, subject: %[6]s, input: {from: total}}
checkpointing: {interval: 50ms}
`, name, mods["wordcount"], startIn, startMore, strings.ToUpper(sink), sink)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("counts", "", "", "totals")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	sendKeyed(t, ctx, n.JS, "in", 200)
	sendKeyed(t, ctx, n.JS, "more", 300)
	stop := flowInput(t, ctx, n.JS, "in", "more")
	time.Sleep(100 * time.Millisecond)
	_, err := n.API.DrainJob(ctx, "counts")
	stop()
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	st, err := n.API.Job(ctx, "counts")
	if err != nil {
		t.Fatal(err)
	}
	at := drainedAt(t, st, map[string]string{"a": "IN", "b": "MORE"})
	h := control.ContinueHint(st.DrainedAt)
	for src, stream := range map[string]string{"a": "IN", "b": "MORE"} {
		if want := fmt.Sprintf("source %s read stream %s up to sequence %d: a job with start: %d on it", src, stream, at[src], at[src]+1); !strings.Contains(h, want) {
			t.Errorf("continue hint %q; want %q", h, want)
		}
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("rest",
		fmt.Sprintf(", start: %d, stop: end", at["a"]+1), fmt.Sprintf(", start: %d, stop: end", at["b"]+1), "rest")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "rest", "the follow-on job finished", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	checkSplit(t, ctx, n.JS, map[string]uint64{"IN": at["a"], "MORE": at["b"]}, "TOTALS", "REST", 2)
}

// crashDrain runs a drain of a job on two workers (w1 with the
// coordinator, w2) whose JetStream source at parallelism 2 keeps getting
// input, and crashes w2 (no goodbye) — before the drain chose its
// sequence (early), or after, with the operators held so that the job
// cannot have finished — and returns the drained job's status once the
// drain returned, with the node and the wordcount module.
func crashDrain(t *testing.T, ctx context.Context, early, partitioned bool) (*Node, control.JobStatus, func(name, start, sink string) *jobspec.Spec) {
	t.Helper()
	inj := &injector{}
	main, startWorker := faultNodes(t, ctx, inj)
	w2 := startWorker("w2")
	t.Cleanup(func() { w2.Close() })
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	js := main.JS
	split := ""
	if partitioned {
		mustPartitionedInput(t, ctx, js)
		split = `, partitions: 4, partition-filter: "in.{p}.*"`
	} else {
		mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	}
	mustSinkStream(t, ctx, js, "TOTALS", "totals")
	mustSinkStream(t, ctx, js, "REST", "rest")
	job := func(name, start, sink string) *jobspec.Spec {
		spec, err := jobspec.Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
sources: [{name: in, kind: jetstream, stream: IN, parallelism: 2%[6]s%[3]s}]
operators:
  - {name: total, module: %[2]s, parallelism: 2, inputs: [{from: in, partition: key}], config: {emit: final}}
sinks:
  - {name: out, kind: jetstream, stream: %[4]s, subject: %[5]s, input: {from: total}}
checkpointing: {interval: 50ms, timeout: 10s}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 10}
`, name, mod, start, strings.ToUpper(sink), sink, split)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: job("counts", "", "totals")}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, main, "counts", "job running", running)
	t.Logf("placed: %v", st.Assignment)
	sendKeyed(t, ctx, js, "in", 300)
	waitJob(t, ctx, main, "counts", "a checkpoint past the first input", func(st control.JobStatus) bool { return st.LatestCheckpoint >= 3 })
	stop := flowInput(t, ctx, js, "in")
	defer stop()
	time.Sleep(100 * time.Millisecond)
	type result struct {
		cp  control.CheckpointInfo
		err error
	}
	drained := make(chan result, 1)
	drain := func() {
		go func() {
			cp, err := main.API.DrainJob(ctx, "counts")
			drained <- result{cp, err}
		}()
	}
	var chosen []control.SourceEnd
	if early {
		// Lost before the drain asks it to hold its sources: the drain
		// cannot choose a sequence in this attempt.
		w2.Conn.Close()
		w2.Close()
		drain()
	} else {
		release := inj.hold(t)
		waitUntil(t, ctx, "an operator held", func() bool { return inj.held.Load() > 0 })
		drain()
		chosen = waitJob(t, ctx, main, "counts", "the drain under way", func(st control.JobStatus) bool { return st.Drained && len(st.DrainedAt) > 0 }).DrainedAt
		w2.Conn.Close()
		release()
		w2.Close()
	}
	w2 = startWorker("w3")
	var r result
	select {
	case r = <-drained:
	case <-ctx.Done():
		t.Fatal("the drain did not return")
	}
	stop()
	if r.err != nil {
		t.Fatalf("drain: %v", r.err)
	}
	st, err := main.API.Job(ctx, "counts")
	if err != nil || st.State != control.JobFinished || st.DrainedWithSavepoint != r.cp.ID || st.Attempt < 2 {
		t.Fatalf("after the drain: %+v, %v; want finished in a later attempt, drained with savepoint %d", st, err, r.cp.ID)
	}
	if chosen != nil && fmt.Sprint(chosen) != fmt.Sprint(st.DrainedAt) {
		t.Errorf("drained at %+v; the drain had chosen %+v before the crash", st.DrainedAt, chosen)
	}
	t.Logf("drained in attempt %d: %s", st.Attempt, control.ContinueHint(st.DrainedAt))
	return main, st, job
}

// TestDrainThroughAWorkerCrashContinuesExactly crashes a worker after the
// drain chose the sequence N its source ends at: the next attempt's
// subtasks read on from the checkpoint to the same N (the status says
// the N it said before the crash), and a job with start: N+1 reads
// exactly the rest.
func TestDrainThroughAWorkerCrashContinuesExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain with a crash: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	main, st, job := crashDrain(t, ctx, false, false)
	seq := drainedAt(t, st, map[string]string{"in": "IN"})["in"]
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: job("rest", fmt.Sprintf(", start: %d, stop: end", seq+1), "rest")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, main, "rest", "the follow-on job finished", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	checkSplit(t, ctx, main.JS, map[string]uint64{"IN": seq}, "TOTALS", "REST", 1)
}

// TestDrainThroughAWorkerLostBeforeTheSequence loses a worker before the
// drain could hold its sources (a partitioned source, whose subtasks'
// lanes stand at different sequences in any checkpoint): no sequence is
// chosen in that attempt, and the next one restores the latest
// checkpoint, whose subtasks had read to different sequences. Each ends
// at the highest sequence any of them covered there, as the hold would
// have had them (before, they ended where each had read to, and the
// status named two sequences and no exact start); a job with start: N+1
// reads exactly the rest.
func TestDrainThroughAWorkerLostBeforeTheSequence(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain with a crash: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	main, st, job := crashDrain(t, ctx, true, true)
	seq := drainedAt(t, st, map[string]string{"in": "IN"})["in"]
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: job("rest", fmt.Sprintf(", start: %d, stop: end", seq+1), "rest")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, main, "rest", "the follow-on job finished", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	checkSplit(t, ctx, main.JS, map[string]uint64{"IN": seq}, "TOTALS", "REST", 1)
}
