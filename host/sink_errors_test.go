package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// A sink task's failure names each thing once: the task (the task), the
// sink with its subject and stream, and what failed with the checkpoint it
// was for (the sink). The task once put "sink: write:", "sink: pre-commit
// checkpoint N:", "sink: commit checkpoint N:" or "sink: end of input:"
// before the sink's own name; the at-least-once sink named itself twice
// for a failed batch; an exactly-once sink's end-of-input commit named
// checkpoint 9223372036854775807. Each case fails one call of a real sink
// on a real server: the sink's connection is closed before it (a record
// too large for a message fails an exactly-once sink's write).
func TestSinkErrorsNameEachThingOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"},
		Duplicates: 2 * time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	three := func() stream.Element {
		var b abi.Builder
		for _, v := range []string{"a", "b", "c"} {
			b.Add(nil, []byte(v), 1)
		}
		return stream.Records(append([]byte(nil), b.Bytes()...))
	}
	huge := func() stream.Element {
		var b abi.Builder
		b.Add(nil, make([]byte, 2<<20), 1)
		return stream.Records(append([]byte(nil), b.Bytes()...))
	}
	const (
		closed = "nats: connection closed"
		core   = "task out-0: core sink out: "
		alo    = "task out-0: at-least-once sink out (stream OUT): "
		eo     = "task out-0: exactly-once sink out (stream OUT): "
	)
	for _, c := range []struct {
		name string
		kind string // core, at-least-once, exactly-once
		// Before the sink's connection is closed: sent, then (ack) the
		// checkpoint 1 acknowledged and completed. After: sent.
		before []stream.Element
		ack    bool
		after  []stream.Element
		want   string
	}{
		{"core write", "core", nil, false, []stream.Element{three()},
			core + "publish: " + closed},
		{"core pre-commit", "core", []stream.Element{three()}, false, []stream.Element{stream.BarrierElement(stream.Barrier{ID: 1})},
			core + "checkpoint 1: flush: " + closed},
		{"core end of input", "core", []stream.Element{three()}, false, []stream.Element{stream.EndOfPartition()},
			core + "end of input: flush: " + closed},
		{"at-least-once write", "at-least-once", nil, false, []stream.Element{three()},
			alo + "publish: " + closed},
		{"at-least-once pre-commit", "at-least-once", []stream.Element{three()}, false, []stream.Element{stream.BarrierElement(stream.Barrier{ID: 1})},
			alo + "checkpoint 1: publish: batch of 3 messages: batch commit failed: " + closed},
		{"at-least-once end of input", "at-least-once", []stream.Element{three()}, false, []stream.Element{stream.EndOfPartition()},
			alo + "end of input: publish: batch of 3 messages: batch commit failed: " + closed},
		{"exactly-once write", "exactly-once", nil, false, []stream.Element{huge()},
			eo + `record 1 of the batch (key ""): record too large for a NATS message: a record of 2097152 bytes (key 0, value 2097152) and its headers (up to 1040 bytes) exceed the server's max_payload of 1048576 bytes; emit smaller records, or raise the server's max_payload`},
		// The commit runs in the background: its failure comes out of a
		// later call (here the end of input), and names its checkpoint.
		{"exactly-once commit", "exactly-once", []stream.Element{three(), stream.BarrierElement(stream.Barrier{ID: 1})}, true, []stream.Element{stream.EndOfPartition()},
			eo + "publish checkpoint 1 record 0: " + closed},
		{"exactly-once end of input", "exactly-once", []stream.Element{three()}, false, []stream.Element{stream.EndOfPartition()},
			eo + "publish end-of-input output record 0: " + closed},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, _ := embeddedtest.Connect(t, srv)
			var sk host.Sink
			var err error
			switch c.kind {
			case "core":
				sk, err = sink.NewCore(nc, "out")
			case "at-least-once":
				sk, err = sink.NewAtLeastOnce(ctx, nc, sink.AtLeastOnceConfig{Stream: "OUT", Subject: "out"})
			default:
				sk, err = sink.NewExactlyOnce(ctx, nc, sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "out-0"})
			}
			if err != nil {
				t.Fatal(err)
			}
			store, err := storage.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			rc, acks := ackWaiter()
			si, ri := local.New(local.Options{Name: "up-0->out-0"})
			task, err := host.New(host.Config{Name: "out-0", KeyPrefix: "j/", Inputs: []host.Input{{Receiver: ri}}, Sink: sk,
				Checkpointing: host.Checkpointing{Mode: barrier.Aligned}, Store: store, Listener: rc})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- task.Run(ctx) }()
			for _, e := range c.before {
				if err := si.Send(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if c.ack {
				if id := waitAck(t, acks, rc); id != 1 {
					t.Fatalf("ack %d", id)
				}
			}
			if len(c.before) > 0 {
				waitUntil(t, "the records written", func() bool { return task.Stats().RecordsOut == 3 })
			}
			nc.Close()
			if c.ack {
				task.NotifyCheckpointComplete(1)
			}
			for _, e := range c.after {
				if err := si.Send(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			err = <-done
			var te *host.TaskError
			if !errors.As(err, &te) || err.Error() != c.want || strings.Contains(err.Error(), "sink: ") {
				t.Errorf("got  %q\nwant %q", err, c.want)
			}
		})
	}
}
