package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestRescalePartitionedSource rescales a partitioned JetStream source
// from savepoints, 2 → 4 → 1 subtasks: every new subtask merges the old
// subtasks' per-partition offsets, so the keyed counts behind it go on
// 1..n with no gap and no repeat.
func TestRescalePartitionedSource(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "in.*", Destination: "in.{{partition(4,1)}}.{{wildcard(1)}}"}})
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 5 * time.Minute, AllowBatchPublish: true})
	spec := func(sources int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN, partitions: 4, partition-filter: "in.{p}.*", parallelism: %d}]
operators:
  - {name: count, module: %s, parallelism: 2, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, sources, mod)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sent := map[string]int{}
	total := 0
	publish := func(count int) {
		for i := 0; i < count; i++ {
			k := fmt.Sprintf("k%02d", (total+i)%11)
			sent[k]++
			m := nats.NewMsg("in." + k)
			m.Header.Set("Weir-Key", k)
			m.Data = []byte(k)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		total += count
		stream, err := js.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, ctx, fmt.Sprintf("%d outputs", total), func() bool {
			info, err := stream.Info(ctx)
			return err == nil && int(info.State.Msgs) >= total
		})
	}
	running := func() bool {
		st, err := n.API.Job(ctx, "counts")
		return err == nil && st.State == control.JobRunning
	}
	stop := func() string {
		sp, err := n.API.Savepoint(ctx, "counts")
		if err != nil || sp.Status != control.CheckpointCompleted {
			t.Fatalf("savepoint: %+v, %v", sp, err)
		}
		if _, err := n.API.CancelJob(ctx, "counts"); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, ctx, "job canceled", func() bool {
			st, err := n.API.Job(ctx, "counts")
			return err == nil && st.State.Terminal()
		})
		return fmt.Sprint(sp.ID)
	}

	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(2)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "job running", running)
	publish(220)
	for _, sources := range []int{4, 1} {
		from := stop()
		if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(sources)}); err != nil {
			t.Fatalf("restore with %d source subtasks: %v", sources, err)
		}
		waitUntil(t, ctx, "restored job running", running)
		publish(110)
	}

	counts := readCounts(t, ctx, js, total, true)
	for k, want := range sent {
		got := counts[k]
		ok := len(got) == want
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == i+1
		}
		if !ok {
			t.Errorf("key %s: counts %s, want 1..%d with no gap or repeat", k, summarize(got), want)
		}
	}
}

// TestRescaleKeyedOperator rescales a stateful operator from savepoints,
// 2 → 3 → 1 subtasks: the Go keyedcount writes its counts in the keyed
// layout, weir hands every new subtask the counts of the keys it will
// receive, and the counts go on 1..n per key with no gap and no repeat.
func TestRescaleKeyedOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mod := filepath.Join(dir, "keyedcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/keyedcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, WorkerID: "w1",
		HeartbeatTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: 5 * time.Minute, AllowBatchPublish: true})
	spec := func(counters int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: count, module: %s, parallelism: %d, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, mod, counters)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sent := map[string]int{}
	total := 0
	publish := func(count int) {
		for i := 0; i < count; i++ {
			k := fmt.Sprintf("k%02d", (total+i)%13)
			sent[k]++
			m := nats.NewMsg("in." + k)
			m.Header.Set("Weir-Key", k)
			m.Data = []byte("x")
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		total += count
		stream, err := js.Stream(ctx, "OUT")
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, ctx, fmt.Sprintf("%d outputs", total), func() bool {
			info, err := stream.Info(ctx)
			return err == nil && int(info.State.Msgs) >= total
		})
	}
	running := func() bool {
		st, err := n.API.Job(ctx, "counts")
		return err == nil && st.State == control.JobRunning
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(2)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "job running", running)
	publish(260)
	for _, counters := range []int{3, 1} {
		sp, err := n.API.Savepoint(ctx, "counts")
		if err != nil || sp.Status != control.CheckpointCompleted {
			t.Fatalf("savepoint: %+v, %v", sp, err)
		}
		if _, err := n.API.CancelJob(ctx, "counts"); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, ctx, "job canceled", func() bool {
			st, err := n.API.Job(ctx, "counts")
			return err == nil && st.State.Terminal()
		})
		if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: fmt.Sprint(sp.ID), Spec: spec(counters)}); err != nil {
			t.Fatalf("restore with %d counters: %v", counters, err)
		}
		waitUntil(t, ctx, "restored job running", running)
		publish(130)
	}
	counts := readCounts(t, ctx, js, total, true)
	for k, want := range sent {
		got := counts[k]
		ok := len(got) == want
		for i := 0; ok && i < len(got); i++ {
			ok = got[i] == i+1
		}
		if !ok {
			t.Errorf("key %s: counts %s, want 1..%d with no gap or repeat", k, summarize(got), want)
		}
	}
}
