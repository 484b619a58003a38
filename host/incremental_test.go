package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// An exactly-once sink's output whose commit waits (here: the server is
// down) goes into the snapshot of the checkpoint that staged it and, once
// that checkpoint completed, later snapshots name it instead of holding it
// again; the ack says which checkpoint they name (MetricSinkStateFrom). A
// restore of a later checkpoint reads the named snapshot next to it — a
// missing one fails the restore naming its key — and the stream holds the
// output once, restored as the task or merged into another (a rescale).
func TestRestoreReadsTheSnapshotsASinkStateNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc, acks := ackWaiter()
	type running struct {
		task *host.Task
		in   stream.Sender
		done chan error
		stop context.CancelFunc
	}
	start := func(name string, cfg host.Config) *running {
		sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: name, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		si, ri := local.New(local.Options{Name: "up->" + name})
		cfg.Name, cfg.KeyPrefix, cfg.Inputs, cfg.Sink = name, "j/", []host.Input{{Receiver: ri}}, sk
		cfg.Checkpointing, cfg.Store, cfg.Listener = host.Checkpointing{Mode: barrier.Aligned}, store, rc
		task, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := &running{task: task, in: si, done: make(chan error, 1), stop: stop}
		go func() { r.done <- task.Run(rctx) }()
		return r
	}
	send := func(r *running, e stream.Element) {
		if err := r.in.Send(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	records := func(vs ...string) stream.Element {
		var b abi.Builder
		for _, v := range vs {
			b.Add(nil, []byte(v), 1)
		}
		return stream.Records(append([]byte(nil), b.Bytes()...))
	}

	// Attempt 1: checkpoint 1 stages a long record; the server goes down,
	// so its commit waits, and the checkpoints after it name it.
	r := start("out-0", host.Config{})
	long := strings.Repeat("x", 4096)
	send(r, records("a", long))
	send(r, stream.BarrierElement(stream.Barrier{ID: 1}))
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	srv.Shutdown()
	r.task.NotifyCheckpointComplete(1)
	last := int64(0)
	for id := int64(2); id <= 6 && last == 0; id++ {
		send(r, records("v"+string(rune('0'+id))))
		send(r, stream.BarrierElement(stream.Barrier{ID: id}))
		if got := waitAck(t, acks, rc); got != id {
			t.Fatalf("ack %d, want %d", got, id)
		}
		if from := rc.metric(id, "out-0", host.MetricSinkStateFrom); from != 0 {
			if from != 1 {
				t.Fatalf("checkpoint %d's sink state names checkpoint %d, want 1", id, from)
			}
			last = id
		}
	}
	if last == 0 {
		t.Fatal("no checkpoint's sink state named checkpoint 1")
	}
	if rc.metric(1, "out-0", host.MetricSinkStateFrom) != 0 {
		t.Fatal("checkpoint 1's ack names a checkpoint")
	}
	read := func(key string) []byte {
		rd, err := store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		b, err := io.ReadAll(rd)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	handle := rc.handle(last, "out-0")
	snap, err := snapshot.Decode(read(handle))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap.SinkState, []byte(long)) {
		t.Fatalf("checkpoint %d's sink state holds checkpoint 1's record again", last)
	}
	r.stop() // the crash, with the commit still waiting
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	embeddedtest.Restart(t, srv, nc)

	// Attempt 2: the named snapshot is gone; the restore fails, naming it.
	first := rc.handle(1, "out-0")
	saved := read(first)
	if err := store.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	r = start("out-0", host.Config{Restore: handle})
	if err := <-r.done; err == nil || !strings.Contains(err.Error(), "chk-1/out-0") {
		t.Fatalf("restore without the named snapshot: %v", err)
	}
	r.stop()
	if err := store.Put(ctx, first, bytes.NewReader(saved)); err != nil {
		t.Fatal(err)
	}

	var next int64
	// Attempt 3: a rescaled sink merges the snapshot into a new task; then
	// attempt 4 restores it as the task itself, which adds nothing.
	for _, cfg := range []struct {
		name string
		host.Config
	}{{"out-new", host.Config{RestoreMerged: []string{handle}, Parallelism: 1}}, {"out-0", host.Config{Restore: handle}}} {
		r = start(cfg.name, cfg.Config)
		// Acknowledged once restored (the restore commits and waits).
		next++
		id := 100 + next
		send(r, stream.BarrierElement(stream.Barrier{ID: id}))
		if got := waitAck(t, acks, rc); got != id {
			t.Fatalf("ack %d, want %d", got, id)
		}
		r.stop()
		if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: run: %v", cfg.name, err)
		}
	}
	st, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Replace(string(m.Data), long, "LONG", 1))
	}
	want := []string{"a", "LONG"}
	for id := int64(2); id <= last; id++ {
		want = append(want, "v"+string(rune('0'+id)))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stream holds %v, want %v once each", got, want)
	}
}
