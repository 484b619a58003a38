package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/snapshot"
)

// TestRestoreWithNewSpec restores a job from a savepoint under a changed
// spec, the way a user rescales it: a keyed operator whose state is in a
// layout of its own (wordcount's) keeps its parallelism — the new one is
// refused with the reason — while a stateless operator's is accepted, and
// the job then continues every count exactly where it left off.
func TestRestoreWithNewSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "uppercase", "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
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
	in := newKeyedInput(t, ctx, n.JS, 7)
	in.outKey = strings.ToUpper // wordcount counts the upper-cased value

	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec(1, 2)}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in.publish(210)
	from := stopWithSavepoint(t, ctx, n, "counts")

	_, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(1, 3)})
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "operator count has parallelism 2 in the checkpoint and 3 in the spec and keeps state") {
		t.Fatalf("restore with the keyed operator rescaled: %v", err)
	}
	t.Log(err)

	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: from, Spec: spec(3, 2)}); err != nil {
		t.Fatalf("restore with the stateless operator rescaled: %v", err)
	}
	waitJob(t, ctx, n, "counts", "restored job running", running)
	in.publish(140)
	in.checkCounts()
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
	n, mods := oneNode(t, ctx, "uppercase")
	js := n.JS
	inCfg := jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}}
	mustStream(t, ctx, js, inCfg)
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
operators: [{name: upper, module: `+mods["uppercase"]+`, inputs: [{from: in}]}]
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
	from := stopWithSavepoint(t, ctx, n, "up")

	if err := js.DeleteStream(ctx, "IN"); err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, js, inCfg)
	fill(10)
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "up", From: from}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "up", "job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 ||
		!strings.Contains(st.Reason, "but the stream's last sequence is 10") ||
		!strings.Contains(st.Reason, "not restarted") {
		t.Errorf("status %+v; want failed at once, naming the stream's end", st)
	}
	t.Log(st.Reason)
}

// A task snapshot corrupted in storage (its checkpoint's metadata intact)
// of a savepoint a restore names fails the job at once, naming the
// snapshot and the older checkpoint to restore instead: the user chose
// that savepoint, and falling back to an older one on its own would
// repeat output committed since. (A failover or resume falls back:
// TestResumeFallsBackFromACorruptSnapshot.)
func TestRestoreFromACorruptSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "uppercase")
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	for i := 0; i < 20; i++ {
		if _, err := js.Publish(ctx, "in", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := jobspec.Parse("up.yaml", []byte(`name: up
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: upper, module: `+mods["uppercase"]+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: upper}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 1s, attempts: 5}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "up", "a checkpoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > 0 })
	from := stopWithSavepoint(t, ctx, n, "up")

	// Flip a byte in the middle of the source task's snapshot file.
	// (oneNode's data directory is one of the test's temporary ones.)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "checkpoints", "up", "chk-"+from, "in-0"))
	if len(files) != 1 {
		t.Fatalf("snapshot files of in-0 in savepoint %s: %v", from, files)
	}
	file := files[0]
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "up", From: from}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "up", "job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || !strings.Contains(st.Reason, "corrupt task snapshot") ||
		!strings.Contains(st.Reason, "up/chk-"+from+"/in-0") || !strings.Contains(st.Reason, "not restarted") ||
		!strings.Contains(st.Reason, "restore the job from an older one") {
		t.Errorf("status %+v; want failed at once, naming the corrupt snapshot and an older checkpoint", st)
	}
	if f := st.LastFailure; f == nil || f.Kind != control.FailureCheckpointCorrupt {
		t.Errorf("last failure %+v; want kind %s", f, control.FailureCheckpointCorrupt)
	}
	t.Log(st.Reason)
}

// A restore whose exactly-once sink state is malformed — output staged
// under the subject out.{KEY}, which is no sink subject (weir refuses it
// since) — fails the job at once, naming the subject, instead of using up
// the restart strategy: the staged state reads the same on every restart.
func TestRestoreMalformedSinkStateIsUnrecoverable(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end restore: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := oneNode(t, ctx)
	js := n.JS
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	mustSinkStream(t, ctx, js, "OUT", "out", "out.>")
	for range 5 {
		if _, err := js.Publish(ctx, "in", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := jobspec.Parse("st.yaml", []byte(`name: st
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: exactly-once, input: {from: in}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 5}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	from := stopWithSavepoint(t, ctx, n, "st")

	// The sink's snapshot, its state replaced by one staged entry (state
	// version 5: id, at, chunk, chunk bytes, subject, stream, batch) for
	// the savepoint under out.{KEY}. (oneNode's data directory is one of
	// the test's temporary ones.)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "checkpoints", "st", "chk-"+from, "out-0"))
	if len(files) != 1 {
		t.Fatalf("snapshot files of out-0 in savepoint %s: %v", from, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseUint(from, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var batch abi.Builder
	batch.Add([]byte("k"), []byte("v"), 0)
	const bad = "out.{KEY}"
	st := append([]byte("WEOS"), 5)
	st = binary.LittleEndian.AppendUint32(st, 1)
	st = binary.LittleEndian.AppendUint64(st, id)
	st = binary.LittleEndian.AppendUint64(st, 0)
	st = binary.LittleEndian.AppendUint32(st, 0)
	st = binary.LittleEndian.AppendUint32(st, 0)
	st = binary.LittleEndian.AppendUint16(st, uint16(len(bad)))
	st = append(st, bad...)
	st = binary.LittleEndian.AppendUint16(st, 0)
	st = binary.LittleEndian.AppendUint32(st, uint32(len(batch.Bytes())))
	st = append(st, batch.Bytes()...)
	snap.SinkState = st
	if err := os.WriteFile(files[0], snapshot.Encode(snap), 0o644); err != nil {
		t.Fatal(err)
	}
	// As if a crash had cut the savepoint's commit: no marker says its
	// output is stored, so the restore commits what is staged.
	if err := os.Remove(host.CommittedMarker(files[0])); err != nil {
		t.Fatal(err)
	}

	if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "st", From: from}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, ctx, n, "st", "job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if got.State != control.JobFailed || got.Restarts != 0 || !strings.Contains(got.Reason, "malformed exactly-once sink state") ||
		!strings.Contains(got.Reason, bad) || !strings.Contains(got.Reason, "not restarted: it would fail the same way again") ||
		strings.Contains(got.Reason, "\n") {
		t.Errorf("status %s after %d restarts: %q; want failed at once, naming the subject", got.State, got.Restarts, got.Reason)
	}
}
