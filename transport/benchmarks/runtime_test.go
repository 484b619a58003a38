package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// The same pipelines as BenchmarkCoreWeirUppercase and
// BenchmarkJetStreamWeirExactlyOnce, run by the task runtime (host.Task:
// source, operator and sink in one source task) instead of a bare loop.

// (c) through host.Task.
func BenchmarkCoreWeirRuntime(b *testing.B) {
	srv := startServer(b, false)
	pub, taskConn, sub := conn(b, srv), conn(b, srv), conn(b, srv)
	done := counter(b, sub, "out", b.N)
	src, err := source.NewCore(taskConn, source.CoreConfig{Subject: "in", PendingMsgs: -1, PendingBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	snk, err := sink.NewCore(taskConn, "out")
	if err != nil {
		b.Fatal(err)
	}
	op := uppercase(b, "go").(host.Operator)
	task, err := host.New(host.Config{Name: "uppercase-0", Source: src, Operator: op, Sink: snk})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- task.Run(ctx) }()
	publishAndWait(b, pub, "in", b.N, done)
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}

// completer completes every acknowledged checkpoint at once (a one-task
// job's coordinator) and reports the first declined one on declined.
type completer struct {
	task     *host.Task
	declined chan string
}

func (c *completer) Acknowledge(ctx context.Context, task string, id int64, handle string, metrics map[string]int64) error {
	c.task.NotifyCheckpointComplete(id)
	return nil
}
func (c *completer) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	select {
	case c.declined <- fmt.Sprintf("checkpoint %d declined (%s): %s", id, kind, reason):
	default:
	}
	return nil
}
func (c *completer) Failed(ctx context.Context, task string, err error) error { return nil }

// runtimeCheckpointInterval is how often the (d) runtime benchmarks
// trigger a checkpoint: 50 times the default of a job (10s), so that a
// run of a few seconds takes dozens of checkpoints and each commits a
// share of the output; WEIR_BENCH_CHECKPOINT_INTERVAL overrides it.
const runtimeCheckpointInterval = 200 * time.Millisecond

// (d) through host.Task, with a checkpoint triggered every
// runtimeCheckpointInterval, snapshots stored where a worker stores them
// (a checkpoint directory, fsync'd, beside an embedded server; the
// JetStream object store on an external one); the clock stops when the
// output stream holds every message (looked at every 5ms).
func BenchmarkJetStreamWeirRuntime(b *testing.B) {
	for _, mode := range publishModes {
		b.Run("publish="+string(mode), func(b *testing.B) {
			benchJetStreamRuntime(b, func(ctx context.Context, srv *embedded.Server) (host.Sink, error) {
				return sink.NewExactlyOnce(ctx, conn(b, srv), sinkConfig(mode, "uppercase-0"))
			}, mode)
		})
	}
}

// (d) reference: the same pipeline with the at-least-once JetStream sink,
// which publishes as records come (one fast batch per checkpoint, or an
// async publish per record) and waits for the acknowledgements at each
// checkpoint: what exactly-once costs on top.
func BenchmarkJetStreamWeirRuntimeAtLeastOnce(b *testing.B) {
	for _, mode := range []sink.PublishMode{sink.PublishFast, sink.PublishAsync} {
		b.Run("publish="+string(mode), func(b *testing.B) {
			benchJetStreamRuntime(b, func(ctx context.Context, srv *embedded.Server) (host.Sink, error) {
				return sink.NewAtLeastOnce(ctx, conn(b, srv), sink.AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: mode})
			}, mode)
		})
	}
}

func benchJetStreamRuntime(b *testing.B, newSink func(context.Context, *embedded.Server) (host.Sink, error), mode sink.PublishMode) {
	srv, js := jsServer(b, mode)
	jsFill(b, js, "in", b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN"})
	if err != nil {
		b.Fatal(err)
	}
	snk, err := newSink(ctx, srv)
	if err != nil {
		b.Fatal(err)
	}
	var store host.Store
	if srv != nil {
		store, err = storage.NewDir(b.TempDir())
	} else {
		store, err = storage.NewObjectStore(ctx, js, "WEIR_BENCH_STATE", 0)
		// The server outlives the benchmark: leave no bucket behind.
		b.Cleanup(func() { _ = js.DeleteObjectStore(context.Background(), "WEIR_BENCH_STATE") })
	}
	if err != nil {
		b.Fatal(err)
	}
	lis := &completer{declined: make(chan string, 1)}
	task, err := host.New(host.Config{Name: "uppercase-0", Source: src, Operator: uppercase(b, "go").(host.Operator), Sink: snk,
		Store: store, Listener: lis})
	if err != nil {
		b.Fatal(err)
	}
	lis.task = task
	out, err := js.Stream(ctx, "OUT")
	if err != nil {
		b.Fatal(err)
	}
	every := runtimeCheckpointInterval
	if v := os.Getenv("WEIR_BENCH_CHECKPOINT_INTERVAL"); v != "" {
		if every, err = time.ParseDuration(v); err != nil {
			b.Fatalf("WEIR_BENCH_CHECKPOINT_INTERVAL: %v", err)
		}
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	errc := make(chan error, 1)
	go func() { errc <- task.Run(ctx) }()
	// The output stream is looked at every 5ms, so that the clock stops
	// within 5ms of the last commit.
	ckpt := time.NewTicker(every)
	defer ckpt.Stop()
	look := time.NewTicker(5 * time.Millisecond)
	defer look.Stop()
	for id := int64(1); ; {
		select {
		case err := <-errc:
			b.Fatalf("task ended: %v", err)
		case why := <-lis.declined:
			b.Fatal(why)
		case <-ckpt.C:
			task.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
			id++
			continue
		case <-look.C:
		}
		info, err := out.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if int(info.State.Msgs) >= b.N {
			break
		}
	}
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cancel()
	<-errc
}
