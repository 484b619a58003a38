package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// rescale runs job "counts" from spec(first), then for each of next stops
// it with a savepoint and restores it under spec(p), publishing keyed
// input before each stop and after the last restore; the keyed counts
// must go on 1..n with no gap and no repeat.
func rescale(t *testing.T, ctx context.Context, n *Node, in *keyedInput, spec func(int) *jobspec.Spec, first int, next ...int) {
	t.Helper()
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(first)}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in.publish(220)
	for _, p := range next {
		from := stopWithSavepoint(t, ctx, n, "counts")
		if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(p)}); err != nil {
			t.Fatalf("restore at parallelism %d: %v", p, err)
		}
		waitJob(t, ctx, n, "counts", "restored job running", running)
		in.publish(110)
	}
	in.checkCounts()
}

// TestRescalePartitionedSource rescales a partitioned JetStream source
// from savepoints, 2 → 4 → 1 subtasks: every new subtask merges the old
// subtasks' per-partition offsets, so the keyed counts behind it go on
// 1..n with no gap and no repeat.
func TestRescalePartitionedSource(t *testing.T) {
	rescaleSource(t, &jetstream.SubjectTransformConfig{Source: "in.*", Destination: "in.{{partition(4,1)}}.{{wildcard(1)}}"},
		`partitions: 4, partition-filter: "in.{p}.*", `, 2, 4, 1)
}

// TestRescaleWholeStreamSource rescales a JetStream source whose subtasks
// each read the whole stream and keep their subjects' share, from
// savepoints, 2 → 3 → 1: the old subtasks stopped at different sequences,
// so the new ones skip what each old one had covered (source.StreamOffset),
// and the keyed counts behind them go on 1..n with no gap and no repeat.
func TestRescaleWholeStreamSource(t *testing.T) {
	rescaleSource(t, nil, "", 2, 3, 1)
}

// rescaleSource runs the Go wordcount behind a JetStream source on stream
// IN (subjects in.*, through transform if not nil; the source's spec
// fields start with fields) and rescales the source from savepoints to
// each parallelism in turn, checking the keyed counts at the end.
func rescaleSource(t *testing.T, transform *jetstream.SubjectTransformConfig, fields string, first int, next ...int) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}, SubjectTransform: transform})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec := func(sources int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN, %sparallelism: %d}]
operators:
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, fields, sources, mods["wordcount"])), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rescale(t, ctx, n, newKeyedInput(t, ctx, n.JS, 11), spec, first, next...)
}

// TestRescaleKeyedOperator rescales a stateful operator and the
// exactly-once sink behind it from savepoints, 2 → 3 → 1 subtasks each:
// the Go keyedcount writes its counts in the keyed layout, weir hands
// every new subtask the counts of the keys it will receive, the sink's
// vanished subtasks' staged output is re-committed under their ids, and
// the counts go on 1..n per key with no gap and no repeat.
func TestRescaleKeyedOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "keyedcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec := func(counters int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: count, module: %s, parallelism: %d, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: %d, input: {from: count, partition: key}}]
checkpointing: {interval: 100ms}
`, mods["keyedcount"], counters, counters)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	in := newKeyedInput(t, ctx, n.JS, 13)
	in.value = func(string) []byte { return []byte("x") } // keyedcount counts by key
	rescale(t, ctx, n, in, spec, 2, 3, 1)
}

// TestStopWithInputFlowing stops a job with a savepoint while its input
// keeps arriving, then restores it: the sources took nothing after the
// savepoint's barrier, so the counts go on 1..n per key with no repeat.
// (A savepoint followed by a cancel would repeat the output of every
// checkpoint completed in between.)
func TestStopWithInputFlowing(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stop and restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
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
	in.publish(100)
	// Input keeps arriving while the job stops, and checkpoints keep being
	// due every 50 ms.
	done := make(chan struct{})
	stopped := make(chan string, 1)
	go func() {
		defer close(done)
		sp, err := n.API.StopJob(ctx, "counts")
		if err != nil {
			t.Errorf("stop: %v", err)
		}
		stopped <- fmt.Sprint(sp.ID)
	}()
	for flowing := true; flowing; {
		select {
		case <-done:
			flowing = false
		default:
			in.send(5)
			time.Sleep(2 * time.Millisecond)
		}
	}
	from := <-stopped
	in.send(50) // while stopped
	time.Sleep(200 * time.Millisecond)
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "restored job running", running)
	in.publish(50)
	in.checkCounts()
}
