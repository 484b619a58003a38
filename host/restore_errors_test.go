package host_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
)

// A restore's error names each thing once: the snapshot (the task), the
// sink and the checkpoint it recovers (the sink), the store's key (the
// store). The task once repeated the sink's "recover checkpoint 1" and the
// store's key.
func TestRestoreErrorsNameEachThingOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	store, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	handle := host.SnapshotKey("j/", 1, "out-0")
	var buf bytes.Buffer
	if _, err := snapshot.WriteTo(&buf, &snapshot.Task{Task: "out-0", CheckpointID: 1, SinkState: []byte("not sink state")}); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, handle, &buf); err != nil {
		t.Fatal(err)
	}
	restore := func(handle string) error {
		t.Helper()
		sk, err := sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "out-0"})
		if err != nil {
			t.Fatal(err)
		}
		_, ri := local.New(local.Options{Name: "up->out-0"})
		task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
			Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Restore: handle})
		if err != nil {
			t.Fatal(err)
		}
		err = task.Run(ctx)
		if err == nil {
			t.Fatalf("the restore of %s succeeded", handle)
		}
		return err
	}

	err = restore(handle)
	want := "task out-0: restore j/chk-1/out-0: exactly-once sink out (stream OUT): recover checkpoint 1: malformed exactly-once sink state: bad header"
	if err.Error() != want || !errors.Is(err, sink.ErrMalformedState) {
		t.Errorf("restore of malformed sink state:\n got %q\nwant %q", err, want)
	}

	// The store names the key; the task says what it was doing.
	err = restore("j/chk-9/out-0")
	if want := "task out-0: restore: storage: j/chk-9/out-0: file does not exist (open "; !strings.HasPrefix(err.Error(), want) ||
		strings.Count(err.Error(), "chk-9/out-0") != 2 { // the key, and the file's path (os.Open's)
		t.Errorf("restore of a missing snapshot: %q; want it to start %q", err, want)
	}
}
