package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// TestDrainFinishesExactlyOnce drains (weir job stop -drain) an unbounded
// job whose input keeps arriving: one keyed count emits a running count
// per record, another ({emit: final}) only its totals at the end of its
// input. The drain ends the source's input where it had read to: the job
// finishes with a final savepoint, the running counts go 1..n per key
// with no gap and no repeat, the totals (end-of-input output only) are
// there once each and agree with them, and what was counted is exactly a
// prefix of the input stream: nothing read is lost, nothing repeats, and
// what came after is not read. A restore of the final savepoint is
// refused, saying the job was drained; a second drain says the job
// finished.
func TestDrainFinishesExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "EACH", "each")
	mustSinkStream(t, ctx, n.JS, "TOTALS", "totals")
	spec, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: each, module: %[1]s, parallelism: 2, inputs: [{from: in, partition: key}]}
  - {name: total, module: %[1]s, parallelism: 2, inputs: [{from: in, partition: key}], config: {emit: final}}
sinks:
  - {name: each-out, kind: jetstream, stream: EACH, subject: each, input: {from: each}}
  - {name: total-out, kind: jetstream, stream: TOTALS, subject: totals, input: {from: total}}
checkpointing: {interval: 50ms}
`, mods["wordcount"])), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in := newKeyedInput(t, ctx, n.JS, 7)
	in.send(200)
	waitStored(t, ctx, n.JS, "EACH", 200) // committed: read before the drain
	// Input keeps arriving while the job drains.
	var wg sync.WaitGroup
	flowing := make(chan struct{})
	wg.Go(func() {
		pub, err := jetstream.New(n.Conn)
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; ; i++ {
			select {
			case <-flowing:
				return
			default:
			}
			k := fmt.Sprintf("k%02d", i%7)
			m := nats.NewMsg("in." + k)
			m.Header.Set("Weir-Key", k)
			m.Data = []byte(k)
			if _, err := pub.PublishMsg(ctx, m); err != nil {
				t.Error(err)
				return
			}
			if i%10 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
	time.Sleep(100 * time.Millisecond)
	cp, err := n.API.DrainJob(ctx, "counts")
	if err != nil {
		close(flowing)
		wg.Wait()
		t.Fatalf("drain: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // input goes on arriving after the end
	close(flowing)
	wg.Wait()
	st, err := n.API.Job(ctx, "counts")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != control.JobFinished || !st.Drained || st.DrainedWithSavepoint != cp.ID || cp.ID == 0 || !strings.HasPrefix(st.Reason, "drained: ") {
		t.Fatalf("after the drain (savepoint %d): %s, drained %v with savepoint %d: %s; want finished, drained with it",
			cp.ID, st.State, st.Drained, st.DrainedWithSavepoint, st.Reason)
	}
	// The output: a running count per record read, a total per key.
	each := readKeyed(t, ctx, n.JS, "EACH")
	totals := readKeyed(t, ctx, n.JS, "TOTALS")
	counted := map[string]int{}
	read := 0
	for k, ts := range totals {
		if len(ts) != 1 {
			t.Errorf("key %s: totals %v, want one", k, ts)
			continue
		}
		counted[k] = ts[0]
		read += ts[0]
	}
	checkRunningCounts(t, each, counted)
	for k := range each {
		if _, ok := counted[k]; !ok {
			t.Errorf("key %s: running counts %v but no total", k, summarize(each[k]))
		}
	}
	// What was counted is the stream's first read messages.
	prefix := map[string]int{}
	stored := 0
	for i, k := range readInputKeys(t, ctx, n.JS) {
		if i < read {
			prefix[k]++
		}
		stored++
	}
	if read < 200 || stored <= read {
		t.Errorf("counted %d of the %d records stored, want the 200 sent before and fewer than all", read, stored)
	}
	for k, c := range counted {
		if prefix[k] != c {
			t.Errorf("key %s: counted %d, but the stream's first %d messages hold %d of it", k, c, read, prefix[k])
		}
	}
	t.Logf("drained with savepoint %d: %d of %d records counted", cp.ID, read, stored)
	// The final savepoint is a drained job's: a restore would read on.
	_, err = n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: strconv.FormatInt(cp.ID, 10)})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("restore counts from checkpoint %d: job counts was drained with it (weir job stop -drain)", cp.ID)) ||
		!strings.Contains(err.Error(), "submit a new job for more input") || !strings.Contains(err.Error(), "it was drained: task in-0's input ended where it had read to") {
		t.Errorf("restore of the drained job's final savepoint: %v; want it refused, saying the job was drained", err)
	}
	if _, err := n.API.DrainJob(ctx, "counts"); err == nil || !strings.Contains(err.Error(), "already finished") || !strings.Contains(err.Error(), "nothing to drain") {
		t.Errorf("drain of the finished job: %v; want it refused", err)
	}
	if _, err := n.API.DrainJob(ctx, "nosuch"); err == nil || !strings.Contains(err.Error(), `no job "nosuch"`) {
		t.Errorf("drain of no job: %v", err)
	}
}

// TestDrainThroughAWorkerCrash drains a job on two workers and crashes
// one of them while the drain is under way (the operators held, so the
// job cannot have finished): the drain goes on in the next attempt, whose
// sources end their input as they restore, where the latest checkpoint
// had read to. The job finishes drained; its output holds, per key, the
// running counts 1..n once and the total n once, n counted over a prefix
// of the input: what the crashed attempt had read past the checkpoint was
// not committed, and is neither lost in the counts nor counted twice.
func TestDrainThroughAWorkerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain with a crash: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inj := &injector{}
	main, startWorker := faultNodes(t, ctx, inj)
	w2 := startWorker("w2")
	defer func() { w2.Close() }()
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	js := main.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, js, "EACH", "each")
	mustSinkStream(t, ctx, js, "TOTALS", "totals")
	spec, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: each, module: %[1]s, parallelism: 2, inputs: [{from: in, partition: key}]}
  - {name: total, module: %[1]s, parallelism: 2, inputs: [{from: in, partition: key}], config: {emit: final}}
sinks:
  - {name: each-out, kind: jetstream, stream: EACH, subject: each, input: {from: each}}
  - {name: total-out, kind: jetstream, stream: TOTALS, subject: totals, input: {from: total}}
checkpointing: {interval: 50ms, timeout: 10s}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 10}
`, mod)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := main.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, main, "counts", "job running", running)
	onW2 := 0
	for _, w := range st.Assignment {
		if w == "w2" {
			onW2++
		}
	}
	if onW2 == 0 {
		t.Fatalf("no task on w2: %v", st.Assignment)
	}
	in := newKeyedInput(t, ctx, js, 7)
	in.send(300)
	waitStored(t, ctx, js, "EACH", 300) // committed: in a checkpoint a failover restores
	in.send(100)                        // read after the latest checkpoint, most of it
	release := inj.hold(t)
	// The operators may have taken all of it already: a record more until
	// one of them is held (a run on a loaded machine waited for a call
	// that never came).
	waitUntil(t, ctx, "an operator held", func() bool {
		if inj.held.Load() > 0 {
			return true
		}
		in.send(1)
		return false
	})
	type result struct {
		cp  control.CheckpointInfo
		err error
	}
	drained := make(chan result, 1)
	go func() {
		cp, err := main.API.DrainJob(ctx, "counts")
		drained <- result{cp, err}
	}()
	// The sources are held at the sequence the drain chose: nothing sent
	// from now on is read.
	waitJob(t, ctx, main, "counts", "the drain under way", func(st control.JobStatus) bool { return st.Drained && len(st.DrainedAt) > 0 })
	in.send(50)     // after the end: not read
	w2.Conn.Close() // a crash: no goodbye
	release()
	w2.Close()
	w2 = startWorker("w3")
	var r result
	select {
	case r = <-drained:
	case <-ctx.Done():
		t.Fatal("the drain did not return")
	}
	if r.err != nil {
		t.Fatalf("drain: %v", r.err)
	}
	st, err = main.API.Job(ctx, "counts")
	if err != nil || st.State != control.JobFinished || st.DrainedWithSavepoint != r.cp.ID || st.Attempt < 2 {
		t.Fatalf("after the drain: %+v, %v; want finished in a later attempt, drained with savepoint %d", st, err, r.cp.ID)
	}
	each := readKeyed(t, ctx, js, "EACH")
	totals := readKeyed(t, ctx, js, "TOTALS")
	counted, read := map[string]int{}, 0
	for k, ts := range totals {
		if len(ts) != 1 {
			t.Errorf("key %s: totals %v, want one", k, ts)
			continue
		}
		counted[k], read = ts[0], read+ts[0]
	}
	checkRunningCounts(t, each, counted)
	for k := range each {
		if _, ok := counted[k]; !ok {
			t.Errorf("key %s: running counts %v but no total", k, summarize(each[k]))
		}
	}
	prefix := map[string]int{}
	keys := readInputKeys(t, ctx, js)
	for _, k := range keys[:min(read, len(keys))] {
		prefix[k]++
	}
	if read < 300 || read > len(keys)-50 {
		t.Errorf("counted %d records of %d, want at least the 300 before the checkpoint and none of the 50 after the drain", read, len(keys))
	}
	for k, c := range counted {
		if prefix[k] != c {
			t.Errorf("key %s: counted %d, but the stream's first %d messages hold %d of it", k, c, read, prefix[k])
		}
	}
	t.Logf("drained in attempt %d with savepoint %d: %d of %d records counted; failures %v", st.Attempt, r.cp.ID, read, len(keys), st.Failures)
}

// waitStored waits until stream holds at least n messages.
func waitStored(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, n uint64) {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, fmt.Sprintf("%d messages in %s", n, name), func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= n
	})
}

// readKeyed returns what stream holds, by key: the values as numbers, in
// stream order.
func readKeyed(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, m := range readStream(t, ctx, js, name) {
		c, err := strconv.Atoi(string(m.Data()))
		if err != nil {
			t.Fatalf("%s message %q: %v", name, m.Data(), err)
		}
		k := m.Headers().Get("Weir-Key")
		out[k] = append(out[k], c)
	}
	return out
}

// readInputKeys returns the keys of IN's messages in stream order.
func readInputKeys(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	var keys []string
	for _, m := range readStream(t, ctx, js, "IN") {
		keys = append(keys, m.Headers().Get("Weir-Key"))
	}
	return keys
}

// readStream returns every message stream holds, in order.
func readStream(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) []jetstream.Msg {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	var out []jetstream.Msg
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.Sequence.Stream > info.State.LastSeq {
			return out
		}
		out = append(out, m)
		if md.Sequence.Stream == info.State.LastSeq {
			return out
		}
	}
}
