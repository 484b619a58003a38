package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// TestRestoreWithNewSpec restores a job from a savepoint under a changed
// spec, the way a user rescales it: a stateful keyed operator's new
// parallelism is refused with the reason (its state cannot be split by
// key), while a stateless operator's is accepted, and the job then
// continues every count exactly where it left off.
func TestRestoreWithNewSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mods := map[string]string{}
	for _, name := range []string{"uppercase", "wordcount"} {
		p := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(p, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/"+name), 0o644); err != nil {
			t.Fatal(err)
		}
		mods[name] = p
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

	spec := func(upper, count int) *jobspec.Spec {
		s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: upper, module: %s, parallelism: %d, inputs: [{from: in, partition: round-robin}]}
  - {name: count, module: %s, parallelism: %d, inputs: [{from: upper, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
checkpointing: {interval: 100ms}
`, mods["uppercase"], upper, mods["wordcount"], count)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sent := map[string]int{}
	total := 0
	publish := func(count int) {
		for i := 0; i < count; i++ {
			k := fmt.Sprintf("k%02d", i%7)
			sent[strings.ToUpper(k)]++
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
	running := func(st control.JobStatus) bool { return st.State == control.JobRunning }

	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(1, 2)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "job running", func() bool { st, err := n.API.Job(ctx, "counts"); return err == nil && running(st) })
	publish(210)
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
	from := fmt.Sprint(sp.ID)

	_, err = n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(1, 3)})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "operator count has parallelism 2 in the checkpoint and 3 in the spec and keeps state") {
		t.Fatalf("restore with the keyed operator rescaled: %v", err)
	}
	t.Log(err)

	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(3, 2)}); err != nil {
		t.Fatalf("restore with the stateless operator rescaled: %v", err)
	}
	waitUntil(t, ctx, "restored job running", func() bool { st, err := n.API.Job(ctx, "counts"); return err == nil && running(st) })
	publish(140)

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

// TestRestoreFromARecreatedStream restores a job whose source stream was
// deleted and created again since the savepoint: the checkpointed offset
// lies past the new stream's end, so resuming would skip messages. The
// job fails at once with the reason, without using up its restart
// strategy, since every restart would fail the same way.
func TestRestoreFromARecreatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
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
	js := n.JS
	in := jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}}
	mustStream(t, ctx, js, in)
	fill := func(count int) {
		for i := 0; i < count; i++ {
			if _, err := js.Publish(ctx, "in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(50)
	spec, err := jobspec.Parse("up.yaml", []byte(`name: up
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 2s, attempts: 5}
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
	for i := 0; i < 50; i++ {
		if _, err := out.NextMsgWithContext(ctx); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
	}
	// Every message went through: the savepoint's offset is 50.
	sp, err := n.API.Savepoint(ctx, "up")
	if err != nil || sp.Status != control.CheckpointCompleted {
		t.Fatalf("savepoint: %+v, %v", sp, err)
	}
	if _, err := n.API.CancelJob(ctx, "up"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "job canceled", func() bool { st, err := n.API.Job(ctx, "up"); return err == nil && st.State.Terminal() })

	if err := js.DeleteStream(ctx, "IN"); err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, js, in)
	fill(10)
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "up", From: fmt.Sprint(sp.ID)}); err != nil {
		t.Fatal(err)
	}
	var st control.JobStatus
	waitUntil(t, ctx, "job failed", func() bool {
		st, err = n.API.Job(ctx, "up")
		return err == nil && st.State.Terminal()
	})
	if st.State != control.JobFailed || st.Restarts != 0 ||
		!strings.Contains(st.Reason, "but the stream's last sequence is 10") ||
		!strings.Contains(st.Reason, "not restarted") {
		t.Errorf("status %+v; want failed at once, naming the stream's end", st)
	}
	t.Log(st.Reason)
}
