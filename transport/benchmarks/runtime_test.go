package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/local"
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
// which publishes as records come (one fast batch per checkpoint, atomic
// batches of the size weir's workers use on its embedded server as they
// fill, or an async publish per record) and waits for the
// acknowledgements at each checkpoint: what exactly-once costs on top.
func BenchmarkJetStreamWeirRuntimeAtLeastOnce(b *testing.B) {
	for _, mode := range []sink.PublishMode{sink.PublishFast, sink.PublishAtomic, sink.PublishAsync} {
		b.Run("publish="+string(mode), func(b *testing.B) {
			benchJetStreamRuntime(b, func(ctx context.Context, srv *embedded.Server) (host.Sink, error) {
				return sink.NewAtLeastOnce(ctx, conn(b, srv), sink.AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: mode,
					BatchSize: embedded.DefaultMaxAtomicBatch})
			}, mode)
		})
	}
}

// (d) as a deployed job runs it: the source, the operator and the sink
// each in a task of its own (a job's plan makes a task per vertex),
// connected by in-process channels as a worker connects them (1 MiB each),
// a checkpoint complete once all three acknowledged it. The same input,
// output, checkpoints and clock as BenchmarkJetStreamWeirRuntime, whose
// one task holds all three.
func BenchmarkJetStreamWeirJobTasks(b *testing.B) {
	mode := sink.PublishAuto
	srv, js := jsServer(b, mode)
	jsFill(b, js, "in", b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN"})
	if err != nil {
		b.Fatal(err)
	}
	snk, err := sink.NewExactlyOnce(ctx, conn(b, srv), sinkConfig(mode, "out-0"))
	if err != nil {
		b.Fatal(err)
	}
	store, err := storage.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	lis := &jobCompleter{declined: make(chan string, 1), acks: map[int64]int{}}
	s1, r1 := local.New(local.Options{Name: "in-0 -> uppercase-0"})
	s2, r2 := local.New(local.Options{Name: "uppercase-0 -> out-0"})
	var tasks []*host.Task
	for _, cfg := range []host.Config{
		{Name: "in-0", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{s1}}}},
		{Name: "uppercase-0", Operator: uppercase(b, "go").(host.Operator), Inputs: []host.Input{{Receiver: r1}}, Outputs: []host.Output{{Senders: []stream.Sender{s2}}}},
		{Name: "out-0", Sink: snk, Inputs: []host.Input{{Receiver: r2}}},
	} {
		cfg.Store, cfg.Listener = store, lis
		t, err := host.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		tasks = append(tasks, t)
	}
	lis.tasks = tasks
	out, err := js.Stream(ctx, "OUT")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	errc := make(chan error, len(tasks))
	for _, t := range tasks {
		go func() { errc <- t.Run(ctx) }()
	}
	waitOutput(b, ctx, out, tasks[0], lis.declined, errc)
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cancel()
	for range tasks {
		<-errc
	}
}

// waitOutput triggers a checkpoint on the source task every
// runtimeCheckpointInterval (or WEIR_BENCH_CHECKPOINT_INTERVAL) until the
// output stream holds b.N messages, looking at it every 5ms, so that the
// clock stops within 5ms of the last commit. A task that ends, or a
// declined checkpoint, fails the benchmark.
func waitOutput(b *testing.B, ctx context.Context, out jetstream.Stream, src *host.Task, declined <-chan string, errc <-chan error) {
	every := runtimeCheckpointInterval
	if v := os.Getenv("WEIR_BENCH_CHECKPOINT_INTERVAL"); v != "" {
		var err error
		if every, err = time.ParseDuration(v); err != nil {
			b.Fatalf("WEIR_BENCH_CHECKPOINT_INTERVAL: %v", err)
		}
	}
	ckpt := time.NewTicker(every)
	defer ckpt.Stop()
	look := time.NewTicker(5 * time.Millisecond)
	defer look.Stop()
	for id := int64(1); ; {
		select {
		case err := <-errc:
			b.Fatalf("task ended: %v", err)
		case why := <-declined:
			b.Fatal(why)
		case <-ckpt.C:
			src.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
			id++
			continue
		case <-look.C:
		}
		info, err := out.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if int(info.State.Msgs) >= b.N {
			return
		}
	}
}

// jobCompleter completes a checkpoint once every task acknowledged it (a
// job's coordinator, without the metadata) and reports the first declined
// one on declined.
type jobCompleter struct {
	tasks    []*host.Task
	declined chan string
	mu       sync.Mutex
	acks     map[int64]int
}

func (c *jobCompleter) Acknowledge(ctx context.Context, task string, id int64, handle string, metrics map[string]int64) error {
	c.mu.Lock()
	c.acks[id]++
	done := c.acks[id] == len(c.tasks)
	if done {
		delete(c.acks, id)
	}
	c.mu.Unlock()
	if done {
		for _, t := range c.tasks {
			t.NotifyCheckpointComplete(id)
		}
	}
	return nil
}
func (c *jobCompleter) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	select {
	case c.declined <- fmt.Sprintf("checkpoint %d declined by %s (%s): %s", id, task, kind, reason):
	default:
	}
	return nil
}
func (c *jobCompleter) Failed(ctx context.Context, task string, err error) error { return nil }

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
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	errc := make(chan error, 1)
	go func() { errc <- task.Run(ctx) }()
	waitOutput(b, ctx, out, task, lis.declined, errc)
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	cancel()
	<-errc
}
