package benchmarks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host/wasm"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/sink"
	"github.com/weirhq/weir/transport/source"
)

var payload = []byte("the quick brown fox jumps over the lazy dog, 64 bytes of payload")[:64]

// externalEnv names a NATS server URL (JetStream enabled) the benchmarks
// use instead of an embedded server inside the benchmark process: then the
// server's work runs in a process of its own, as in a deployment that
// connects to NATS by URL, and cpu-ns/msg counts the clients alone. The
// benchmarks delete and recreate the streams they use there.
const externalEnv = "WEIR_BENCH_NATS"

// syncEnv set to "always" runs the embedded server with SyncAlways (weir up
// -sync always): JetStream fsyncs every write before acknowledging it.
const syncEnv = "WEIR_BENCH_SYNC"

// startServer starts an embedded server, or returns nil when externalEnv
// names a server to use instead (conn connects to it).
func startServer(b *testing.B, js bool) *embedded.Server {
	b.Helper()
	if os.Getenv(externalEnv) != "" {
		return nil
	}
	cfg := embedded.Config{NoJetStream: !js, SyncAlways: os.Getenv(syncEnv) == "always"}
	if js {
		cfg.DataDir = b.TempDir()
	}
	srv, err := embedded.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	return srv
}

func conn(b *testing.B, srv *embedded.Server) *nats.Conn {
	b.Helper()
	if url := os.Getenv(externalEnv); url != "" {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// counter subscribes to subject and closes done after n messages.
func counter(b *testing.B, nc *nats.Conn, subject string, n int) <-chan struct{} {
	b.Helper()
	done := make(chan struct{})
	got := 0
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		got++
		if got == n {
			close(done)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	unlimited(b, sub)
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return done
}

func unlimited(b *testing.B, sub *nats.Subscription) {
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
}

// publish sends n 64-byte messages on subject, then waits for done.
func publishAndWait(b *testing.B, nc *nats.Conn, subject string, n int, done <-chan struct{}) {
	b.Helper()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	for i := 0; i < n; i++ {
		if err := nc.Publish(subject, payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatal("timed out")
	}
	b.StopTimer()
	cpu.report(b, n)
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// (a) raw core NATS publish -> subscribe.
func BenchmarkCoreRaw(b *testing.B) {
	srv := startServer(b, false)
	pub, sub := conn(b, srv), conn(b, srv)
	done := counter(b, sub, "out", b.N)
	publishAndWait(b, pub, "out", b.N, done)
}

// (b) a plain Go forwarder: subscribe to "in", publish each message on "out".
func BenchmarkCoreForwarder(b *testing.B) {
	srv := startServer(b, false)
	pub, fwd, sub := conn(b, srv), conn(b, srv), conn(b, srv)
	done := counter(b, sub, "out", b.N)
	s, err := fwd.Subscribe("in", func(m *nats.Msg) {
		if err := fwd.Publish("out", m.Data); err != nil {
			b.Error(err)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	unlimited(b, s)
	if err := fwd.Flush(); err != nil {
		b.Fatal(err)
	}
	publishAndWait(b, pub, "in", b.N, done)
}

var (
	goWasmOnce sync.Once
	goWasm     []byte
	goWasmErr  error
)

// guestModule returns the uppercase module of a guest language: "go" is
// built from guests/go/examples/uppercase with guestbuild; the others are
// the committed builds under guests/.
func guestModule(b *testing.B, lang string) []byte {
	b.Helper()
	if lang == "go" {
		goWasmOnce.Do(func() {
			path, err := guestbuild.Build(context.Background(), "github.com/weirhq/weir/guests/go/examples/uppercase")
			if err != nil {
				goWasmErr = err
				return
			}
			goWasm, goWasmErr = os.ReadFile(path)
		})
		if goWasmErr != nil {
			b.Fatal(goWasmErr)
		}
		return goWasm
	}
	path := map[string]string{
		"rust": "../../guests/rust/examples/uppercase.wasm",
		"c":    "../../guests/c/examples/uppercase.wasm",
	}[lang]
	m, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// operator is the part of host.Operator the pipelines call.
type operator interface {
	Process(ctx context.Context, port int, batch []byte, emit func(port int, batch []byte) error) error
}

func uppercase(b *testing.B, lang string) operator {
	b.Helper()
	if lang == "native" {
		return nativeUppercase{}
	}
	ctx := context.Background()
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(ctx) })
	m, err := e.Load(ctx, "uppercase-"+lang, guestModule(b, lang), wasm.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, wasm.InstanceConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	return inst
}

// nativeUppercase is uppercase in plain Go, to separate the pipeline's own
// cost from the guest's.
type nativeUppercase struct{}

func (nativeUppercase) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	var out abi.Builder
	var v []byte
	for it.Next() {
		r := it.Record()
		v = append(v[:0], r.Value...)
		upper(v)
		out.Add(r.Key, v, r.Timestamp)
	}
	return emit(0, append([]byte(nil), out.Bytes()...))
}

// pollSource is host.Source's Poll.
type pollSource interface {
	Poll(ctx context.Context) ([]byte, []byte, error)
}

// run drives src -> op -> sink the way a source task chained with its
// operator does: one Process call per polled batch.
func run(ctx context.Context, src pollSource, op operator, write func(ctx context.Context, batch []byte) error, each func(records int) error) error {
	emit := func(_ int, out []byte) error { return write(ctx, out) }
	for {
		batch, _, err := src.Poll(ctx)
		if err != nil {
			if errors.Is(err, source.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := op.Process(ctx, 0, batch, emit); err != nil {
			return err
		}
		n, _ := abi.BatchCount(batch)
		if err := each(n); err != nil {
			return err
		}
	}
}

// (c) weir: core subject -> uppercase operator -> core subject, one record
// per external message. guest=go is the Go-SDK module (the figure the goal
// is about); rust and c are the same operator from other SDKs, native is
// plain Go without wasm (the pipeline's own cost).
func BenchmarkCoreWeirUppercase(b *testing.B) {
	for _, lang := range []string{"go", "rust", "c", "native"} {
		b.Run("guest="+lang, func(b *testing.B) {
			srv := startServer(b, false)
			pub, task, sub := conn(b, srv), conn(b, srv), conn(b, srv)
			op := uppercase(b, lang)
			done := counter(b, sub, "out", b.N)
			src, err := source.NewCore(task, source.CoreConfig{Subject: "in", PendingMsgs: -1, PendingBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			snk, err := sink.NewCore(task, "out")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			calls := 0
			go func() { errc <- run(ctx, src, op, snk.Write, func(int) error { calls++; return nil }) }()
			publishAndWait(b, pub, "in", b.N, done)
			cancel()
			src.Close()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/float64(max(calls, 1)), "records/call")
		})
	}
}

// jsFill publishes n 64-byte messages to subject.
func jsFill(b *testing.B, js jetstream.JetStream, subject string, n int) {
	b.Helper()
	jsPublish(b, js, n, func(int) *nats.Msg { return &nats.Msg{Subject: subject, Data: payload} })
}

// jsPublish publishes the n messages msg makes asynchronously, waiting
// while too many are unacknowledged, and returns when all are stored.
func jsPublish(b *testing.B, js jetstream.JetStream, n int, msg func(i int) *nats.Msg) {
	b.Helper()
	for i := 0; i < n; i++ {
		m := msg(i)
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("publish timed out")
	}
}

// jsServer starts an embedded server with JetStream and creates the
// streams IN and OUT (OUT allowing mode), returning the server and a
// JetStream client on a connection of its own.
func jsServer(b *testing.B, mode sink.PublishMode) (*embedded.Server, jetstream.JetStream) {
	b.Helper()
	srv := startServer(b, true)
	js, err := jetstream.New(conn(b, srv))
	if err != nil {
		b.Fatal(err)
	}
	createStreams(b, js, mode)
	return srv, js
}

// publishModes are the exactly-once sink's publish modes, benchmarked
// side by side; auto is what a job gets on a stream weir run creates.
var publishModes = []sink.PublishMode{sink.PublishAuto, sink.PublishFast, sink.PublishAsync, sink.PublishAtomic}

// sinkConfig configures the benchmarks' exactly-once sink for mode, with
// the atomic batch size weir's workers use on its embedded server.
func sinkConfig(mode sink.PublishMode, task string) sink.ExactlyOnceConfig {
	return sink.ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "bench", Task: task, MinDuplicateWindow: time.Minute,
		Publish: mode, BatchSize: embedded.DefaultMaxAtomicBatch}
}

// createStreams creates the input stream IN and the output stream OUT; OUT
// allows the publish mode (batched or atomic publish; both for auto, as
// weir run creates sink streams). Both are file-stored unless
// WEIR_BENCH_STORAGE=memory.
func createStreams(b *testing.B, js jetstream.JetStream, mode sink.PublishMode) {
	b.Helper()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "IN", Subjects: []string{"in"}},
		{Name: "OUT", Subjects: []string{"out", "out.>"}, Duplicates: 10 * time.Minute,
			AllowAtomicPublish: mode == sink.PublishAtomic || mode == sink.PublishAuto,
			AllowBatchPublish:  mode == sink.PublishFast || mode == sink.PublishAuto},
	} {
		switch v := os.Getenv("WEIR_BENCH_STORAGE"); v {
		case "", "file":
		case "memory":
			cfg.Storage = jetstream.MemoryStorage
		default:
			b.Fatalf("WEIR_BENCH_STORAGE=%q: want file or memory", v)
		}
		recreateStream(b, js, cfg)
	}
}

// recreateStream creates the stream cfg describes, deleting one of that
// name first (left by an earlier benchmark on an external server).
func recreateStream(b *testing.B, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	b.Helper()
	ctx := context.Background()
	if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
}

// (d) baseline: raw JetStream async publish of n 64-byte messages.
func BenchmarkJetStreamRawAsyncPublish(b *testing.B) {
	_, js := jsServer(b, sink.PublishAsync)
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	jsFill(b, js, "out", b.N)
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// (d) reference: raw JetStream async publish of n 64-byte messages, each
// with a unique Nats-Msg-Id — the deduplication an exactly-once sink
// needs, alone: the server checks and records every id on the stream's
// one goroutine, the path every message into the stream takes.
func BenchmarkJetStreamRawAsyncPublishMsgID(b *testing.B) {
	_, js := jsServer(b, sink.PublishAsync)
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	jsPublish(b, js, b.N, func(i int) *nats.Msg {
		return &nats.Msg{Subject: "out", Data: payload, Header: nats.Header{jetstream.MsgIDHeader: []string{"bench/sink0/1/" + strconv.Itoa(i)}}}
	})
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// (d) reference: raw JetStream async publish of n 64-byte messages, each
// checking that a per-sink-task fence subject still ends at the sequence
// the publisher last wrote there (Nats-Expected-Last-Subject-Sequence
// with its -Subject override): the per-message check a sink fenced by a
// fence subject instead of message ids would need so that a recovery
// stops an earlier attempt's messages. It costs the stream's goroutine
// about what an id does (docs/bench/transport.md).
func BenchmarkJetStreamRawAsyncPublishFence(b *testing.B) {
	_, js := jsServer(b, sink.PublishAsync)
	ctx := context.Background()
	const fence = "out.fence.bench.sink0"
	ack, err := js.Publish(ctx, fence, []byte("fence"))
	if err != nil {
		b.Fatal(err)
	}
	seq := strconv.FormatUint(ack.Sequence, 10)
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	jsPublish(b, js, b.N, func(i int) *nats.Msg {
		return &nats.Msg{Subject: "out", Data: payload, Header: nats.Header{
			jetstream.ExpectedLastSubjSeqHeader:           []string{seq},
			"Nats-Expected-Last-Subject-Sequence-Subject": []string{fence}}}
	})
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	st, err := js.Stream(ctx, "OUT")
	if err != nil {
		b.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != uint64(b.N)+1 {
		b.Fatalf("OUT holds %d messages, want %d: a fence check failed", got, b.N+1)
	}
}

// (d) the exactly-once sink alone: n staged 64-byte records committed in
// one checkpoint (Commit + Wait), no reading and no operator.
func BenchmarkJetStreamSinkCommit(b *testing.B) {
	for _, mode := range publishModes {
		b.Run("publish="+string(mode), func(b *testing.B) {
			srv, _ := jsServer(b, mode)
			ctx := context.Background()
			snk, err := sink.NewExactlyOnce(ctx, conn(b, srv), sinkConfig(mode, "sink0"))
			if err != nil {
				b.Fatal(err)
			}
			defer snk.Close()
			var staged abi.Builder
			for i := 0; i < b.N; i++ {
				staged.Add(nil, payload, 0)
			}
			if err := snk.Write(ctx, staged.Bytes()); err != nil {
				b.Fatal(err)
			}
			if _, err := snk.PreCommit(ctx, 1); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			cpu := startCPU()
			if err := snk.Commit(ctx, 1); err != nil {
				b.Fatal(err)
			}
			if err := snk.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu.report(b, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkKeyedSinkCommit is the exactly-once sink's commit
// (publish auto) of records with 1000 distinct keys, on one subject and on
// a subject per key ("out.{key}"): what keyed subjects cost the sink and
// the server.
func BenchmarkKeyedSinkCommit(b *testing.B) {
	for _, subj := range []string{"out", "out.{key}"} {
		name := "subject=fixed"
		if subj != "out" {
			name = "subject=keyed"
		}
		b.Run(name, func(b *testing.B) {
			srv, _ := jsServer(b, sink.PublishAuto)
			ctx := context.Background()
			cfg := sinkConfig(sink.PublishAuto, "sink0")
			cfg.Subject = subj
			snk, err := sink.NewExactlyOnce(ctx, conn(b, srv), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer snk.Close()
			var staged abi.Builder
			for i := 0; i < b.N; i++ {
				staged.Add([]byte("key-"+strconv.Itoa(i%1000)), payload, 0)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			cpu := startCPU()
			// Write checks the keys: part of the keyed cost.
			if err := snk.Write(ctx, staged.Bytes()); err != nil {
				b.Fatal(err)
			}
			if _, err := snk.PreCommit(ctx, 1); err != nil {
				b.Fatal(err)
			}
			if err := snk.Commit(ctx, 1); err != nil {
				b.Fatal(err)
			}
			if err := snk.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu.report(b, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// (d) weir: JetStream source -> Go-SDK uppercase (wasm) -> exactly-once
// JetStream sink, with a checkpoint (PreCommit + Commit) every
// ckptRecords records. The input stream is filled before the timer starts.
func BenchmarkJetStreamWeirExactlyOnce(b *testing.B) {
	for _, mode := range publishModes {
		b.Run("publish="+string(mode), func(b *testing.B) {
			srv, js := jsServer(b, mode)
			jsFill(b, js, "in", b.N)
			op := uppercase(b, "go")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN"})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			snk, err := sink.NewExactlyOnce(ctx, conn(b, srv), sinkConfig(mode, "sink0"))
			if err != nil {
				b.Fatal(err)
			}
			if mode != sink.PublishAuto && snk.Mode() != mode {
				b.Fatalf("publish mode %s, want %s", snk.Mode(), mode)
			}
			const ckptRecords = 20000
			var ckpt int64
			seen, since := 0, 0
			errDone := errors.New("done")
			commit := func() error {
				ckpt++
				if _, err := snk.PreCommit(ctx, ckpt); err != nil {
					return err
				}
				return snk.Commit(ctx, ckpt)
			}
			defer snk.Close()
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			cpu := startCPU()
			err = run(ctx, src, op, snk.Write, func(n int) error {
				seen += n
				since += n
				if since >= ckptRecords || seen >= b.N {
					since = 0
					if err := commit(); err != nil {
						return err
					}
				}
				if seen >= b.N {
					return errDone
				}
				return nil
			})
			if err != nil && !errors.Is(err, errDone) {
				b.Fatal(err)
			}
			if err := snk.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu.report(b, b.N)
			info, err := js.Stream(ctx, "OUT")
			if err != nil {
				b.Fatal(err)
			}
			st, err := info.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if int(st.State.Msgs) != b.N {
				b.Fatalf("OUT holds %d messages, want %d", st.State.Msgs, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// The read half of (d) alone: a JetStream source polling n 64-byte
// messages.
func BenchmarkJetStreamSourceRead(b *testing.B) {
	_, js := jsServer(b, sink.PublishAsync)
	jsFill(b, js, "in", b.N)
	src, err := source.NewJetStream(js, source.JetStreamConfig{Stream: "IN"})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	cpu := startCPU()
	for seen := 0; seen < b.N; {
		batch, _, err := src.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := abi.BatchCount(batch)
		seen += n
	}
	b.StopTimer()
	cpu.report(b, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// Two source subtasks sharing one stream of n 64-byte messages, split by
// subject hash (each subtask receives the whole stream and keeps its half)
// or by partitions (the server sends each subtask only its own); one op is
// one message of the stream read by whichever subtask owns it.
func BenchmarkJetStreamSourceSplit(b *testing.B) {
	for _, split := range []string{"hash", "partitions"} {
		b.Run("split="+split, func(b *testing.B) {
			srv := startServer(b, true)
			js, err := jetstream.New(conn(b, srv))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			recreateStream(b, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*.*"}})
			jsPublish(b, js, b.N, func(i int) *nats.Msg {
				return &nats.Msg{Subject: fmt.Sprintf("in.%d.k%d", i%4, i%64), Data: payload}
			})
			var srcs []*source.JetStream
			for idx := 0; idx < 2; idx++ {
				cfg := source.JetStreamConfig{Stream: "IN", Parallelism: 2, Index: idx}
				if split == "partitions" {
					cfg.Partitions, cfg.PartitionFilter = 4, "in.{p}.*"
				}
				src, err := source.NewJetStream(js, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer src.Close()
				srcs = append(srcs, src)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			cpu := startCPU()
			var wg sync.WaitGroup
			var mu sync.Mutex
			read := 0
			done := make(chan struct{})
			for _, src := range srcs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						batch, _, err := src.Poll(ctx)
						if err != nil {
							return
						}
						n, _ := abi.BatchCount(batch)
						mu.Lock()
						// Once: a batch without records (only the offset
						// moved past skipped messages) may follow the last.
						if read < b.N && read+n >= b.N {
							close(done)
						}
						read += n
						mu.Unlock()
					}
				}()
			}
			<-done
			b.StopTimer()
			cpu.report(b, b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			for _, src := range srcs {
				src.Close()
			}
			wg.Wait()
		})
	}
}

// upper converts the ASCII letters a-z of b to A-Z in place, 8 bytes per
// step as every guest language's uppercase example does (upper8 in
// guests/go/examples/uppercase), so the comparison is like with like.
func upper(b []byte) {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		h := x &^ high
		m := (h + ones*(0x80-'a')) &^ (h + ones*(0x80-'z'-1)) &^ x & high
		binary.LittleEndian.PutUint64(b[i:], x^m>>2)
	}
	for ; i < len(b); i++ {
		if c := b[i]; 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
}
