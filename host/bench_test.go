package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// genSource produces one-record batches forever.
type genSource struct{ n uint64 }

func (s *genSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.n++
	b := abi.EncodeBatch(abi.Record{Key: []byte(fmt.Sprintf("k%d", s.n%16)), Value: []byte("0123456789abcdef"), Timestamp: int64(s.n)})
	return b, binary.LittleEndian.AppendUint64(nil, s.n), nil
}
func (s *genSource) Seek(context.Context, []byte) error                      { return nil }
func (s *genSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *genSource) Close() error                                            { return nil }

// slowOp forwards its input and takes `per` for every record.
type slowOp struct {
	per   time.Duration
	count uint64
}

func (o *slowOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	n, err := abi.BatchCount(batch)
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(n) * o.per)
	o.count += uint64(n)
	return emit(0, batch)
}
func (o *slowOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (o *slowOp) Snapshot(ctx context.Context, w io.Writer) error {
	_, err := w.Write(binary.LittleEndian.AppendUint64(nil, o.count))
	return err
}
func (o *slowOp) Restore(context.Context, io.Reader) error        { return nil }
func (o *slowOp) CheckpointComplete(context.Context, int64) error { return nil }
func (o *slowOp) Close(context.Context) error                     { return nil }

type nullSink struct{}

func (nullSink) Write(context.Context, []byte) error              { return nil }
func (nullSink) PreCommit(context.Context, int64) ([]byte, error) { return nil, nil }
func (nullSink) Commit(context.Context, int64) error              { return nil }
func (nullSink) Recover(context.Context, int64, []byte) error     { return nil }
func (nullSink) EndOfInput(context.Context) error                 { return nil }
func (nullSink) Close() error                                     { return nil }

// BenchmarkCheckpointUnderBackpressure measures checkpoint completion time
// (trigger at the sources → every task acknowledged, snapshots fsynced in a
// local directory) for the graph
//
//	source a ─┐
//	          ├─ slow operator (1 ms per record) ─ sink
//	source b ─┘
//
// with both input channels full (500 one-record batches each), so an aligned
// barrier waits behind ~1000 queued records and an unaligned one overtakes
// them; aligned-timeout (10 ms) switches to unaligned once the checkpoint is
// 10 ms old. Run: go test -run NONE -bench CheckpointUnderBackpressure -benchtime 5x ./host/
func BenchmarkCheckpointUnderBackpressure(b *testing.B) {
	for _, mode := range []barrier.Mode{barrier.Unaligned, barrier.AlignedTimeout, barrier.Aligned} {
		b.Run(mode.String(), func(b *testing.B) { benchCheckpoint(b, mode, 500, time.Millisecond, nil) })
	}
	// The protocol alone, without fsync: snapshots kept in memory.
	b.Run("unaligned-memstore", func(b *testing.B) {
		benchCheckpoint(b, barrier.Unaligned, 500, time.Millisecond, snapshot.NewMemStore())
	})
}

func benchCheckpoint(b *testing.B, mode barrier.Mode, capacity int, per time.Duration, store host.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if store == nil {
		ds, err := storage.NewDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		store = ds
	}
	var mu sync.Mutex
	acks := map[int64]int{}
	var chState int64
	done := make(chan int64, 16)
	rc := newRecorder()
	rc.onAck = func(task string, id int64) {
		mu.Lock()
		defer mu.Unlock()
		acks[id]++
		if acks[id] == 4 {
			done <- id
		}
	}
	ck := host.Checkpointing{Mode: mode, AlignmentTimeout: 10 * time.Millisecond}
	sa, ra := local.New(local.Options{Name: "a->op", CapacityElements: capacity})
	sb, rb := local.New(local.Options{Name: "b->op", CapacityElements: capacity})
	so, ro := local.New(local.Options{Name: "op->sink", CapacityElements: capacity})
	mk := func(cfg host.Config) *host.Task {
		cfg.Checkpointing, cfg.Store, cfg.Listener = ck, store, rc
		t, err := host.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	srcA := mk(host.Config{Name: "a", Source: &genSource{}, Outputs: []host.Output{{Senders: []stream.Sender{sa}}}})
	srcB := mk(host.Config{Name: "b", Source: &genSource{}, Outputs: []host.Output{{Senders: []stream.Sender{sb}}}})
	op := mk(host.Config{Name: "op", Operator: &slowOp{per: per},
		Inputs:  []host.Input{{Port: 0, Receiver: ra}, {Port: 1, Receiver: rb}},
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	sink := mk(host.Config{Name: "sink", Sink: nullSink{}, Inputs: []host.Input{{Receiver: ro}}})
	var wg sync.WaitGroup
	for _, t := range []*host.Task{srcA, srcB, op, sink} {
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	full := func() {
		for {
			na, _ := sa.Queued()
			nb, _ := sb.Queued()
			if na >= capacity && nb >= capacity && sa.Waiting() > 0 && sb.Waiting() > 0 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	var total, write time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		full()
		b.StartTimer()
		id := int64(i + 1)
		start := time.Now()
		bar := stream.Barrier{ID: id, Timestamp: start.UnixMilli()}
		srcA.TriggerCheckpoint(bar)
		srcB.TriggerCheckpoint(bar)
		select {
		case got := <-done:
			if got != id {
				b.Fatalf("completed %d, want %d", got, id)
			}
		case <-time.After(2 * time.Minute):
			b.Fatalf("checkpoint %d did not complete; declines %v failures %v", id, rc.declines, rc.failed)
		}
		total += time.Since(start)
		rc.mu.Lock()
		var slowest time.Duration
		for _, m := range rc.metrics[id] {
			chState += m[host.MetricChannelStateBytes]
			slowest = max(slowest, time.Duration(m[host.MetricAsyncNanos]))
		}
		write += slowest
		rc.mu.Unlock()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/checkpoint")
	b.ReportMetric(float64(chState)/float64(b.N), "channel-state-B/checkpoint")
	b.ReportMetric(float64(write.Microseconds())/1000/float64(b.N), "slowest-write-ms")
}

// countSource hands out the same batch n times, then ends.
type countSource struct {
	batch []byte
	n     int
}

func (s *countSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if s.n == 0 {
		return nil, nil, io.EOF
	}
	s.n--
	return s.batch, nil, nil
}
func (s *countSource) Seek(context.Context, []byte) error                      { return nil }
func (s *countSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *countSource) Close() error                                            { return nil }

// BenchmarkPipeline measures records through source task → forwarding task
// (native operator) → sink task over local channels, in batches of 100
// records of 64 B values. The baseline moves the same batches through one
// local channel to a consumer goroutine, without tasks.
func BenchmarkPipeline(b *testing.B) {
	var bld abi.Builder
	for i := 0; i < 100; i++ {
		bld.Add([]byte(fmt.Sprintf("key-%d", i)), make([]byte, 64), int64(i))
	}
	batch := append([]byte(nil), bld.Bytes()...)
	// "tasks-debloat": the same with buffer debloating (the default target
	// of a job's channels): a task that keeps up keeps its buffers.
	for _, name := range []string{"tasks", "tasks-debloat"} {
		var d host.Debloat
		if name == "tasks-debloat" {
			d.Target = time.Second
		}
		b.Run(name, func(b *testing.B) { benchPipelineTasks(b, batch, d) })
	}
	b.Run("channel-baseline", func(b *testing.B) {
		s, r := local.New(local.Options{CapacityElements: 64})
		wake := make(chan struct{}, 1)
		r.Notify(func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got := 0; got < b.N; {
				if _, ok, _ := r.Poll(); ok {
					got++
				} else {
					<-wake
				}
			}
		}()
		b.SetBytes(int64(len(batch)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.Send(context.Background(), stream.Records(batch))
		}
		<-done
		b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
	})
}

func benchPipelineTasks(b *testing.B, batch []byte, d host.Debloat) {
	ctx := context.Background()
	s1, r1 := local.New(local.Options{CapacityElements: 64})
	s2, r2 := local.New(local.Options{CapacityElements: 64})
	src, _ := host.New(host.Config{Name: "src", Source: &countSource{batch: batch, n: b.N}, Outputs: []host.Output{{Senders: []stream.Sender{s1}}}})
	op, _ := host.New(host.Config{Name: "op", Operator: &countOp{}, Inputs: []host.Input{{Receiver: r1}}, Outputs: []host.Output{{Senders: []stream.Sender{s2}}}, Debloat: d})
	sink, _ := host.New(host.Config{Name: "sink", Sink: nullSink{}, Inputs: []host.Input{{Receiver: r2}}, Debloat: d})
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, t := range []*host.Task{src, op, sink} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.Run(ctx); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
}

// bigSource produces one-record batches of 512-byte values forever.
type bigSource struct{ n uint64 }

func (s *bigSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.n++
	b := abi.EncodeBatch(abi.Record{Key: []byte(fmt.Sprintf("k%d", s.n%16)), Value: make([]byte, 512), Timestamp: int64(s.n)})
	return b, binary.LittleEndian.AppendUint64(nil, s.n), nil
}
func (s *bigSource) Seek(context.Context, []byte) error                      { return nil }
func (s *bigSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *bigSource) Close() error                                            { return nil }

// BenchmarkDebloatUnderBackpressure measures checkpoint completion time
// and channel state, as BenchmarkCheckpointUnderBackpressure, for the same
// graph with the channels a worker builds (1 MiB each) and records of
// 512 bytes, with and without buffer debloating (host.Debloat, the
// default target of 1s): the slow operator takes ~0.5 MB/s, so its full
// input channels hold ~4 s of work, and debloated ones about a second.
// Run: go test -run NONE -bench DebloatUnderBackpressure -benchtime 3x ./host/
func BenchmarkDebloatUnderBackpressure(b *testing.B) {
	for _, mode := range []barrier.Mode{barrier.Aligned, barrier.Unaligned} {
		for _, debloat := range []bool{false, true} {
			name := mode.String()
			if debloat {
				name += "-debloat"
			}
			b.Run(name, func(b *testing.B) { benchDebloat(b, mode, debloat) })
		}
	}
}

func benchDebloat(b *testing.B, mode barrier.Mode, debloat bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := storage.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	acks := map[int64]int{}
	var chState int64
	done := make(chan int64, 16)
	rc := newRecorder()
	rc.onAck = func(task string, id int64) {
		mu.Lock()
		defer mu.Unlock()
		acks[id]++
		if acks[id] == 4 {
			done <- id
		}
	}
	var d host.Debloat
	if debloat {
		d.Target = time.Second
	}
	sa, ra := local.New(local.Options{Name: "a->op"})
	sb, rb := local.New(local.Options{Name: "b->op"})
	so, ro := local.New(local.Options{Name: "op->sink"})
	mk := func(cfg host.Config) *host.Task {
		cfg.Checkpointing, cfg.Store, cfg.Listener, cfg.Debloat = host.Checkpointing{Mode: mode}, store, rc, d
		t, err := host.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	srcA := mk(host.Config{Name: "a", Source: &bigSource{}, Outputs: []host.Output{{Senders: []stream.Sender{sa}}}})
	srcB := mk(host.Config{Name: "b", Source: &bigSource{}, Outputs: []host.Output{{Senders: []stream.Sender{sb}}}})
	op := mk(host.Config{Name: "op", Operator: &slowOp{per: time.Millisecond},
		Inputs:  []host.Input{{Port: 0, Receiver: ra}, {Port: 1, Receiver: rb}},
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	sink := mk(host.Config{Name: "sink", Sink: nullSink{}, Inputs: []host.Input{{Receiver: ro}}})
	var wg sync.WaitGroup
	for _, t := range []*host.Task{srcA, srcB, op, sink} {
		wg.Add(1)
		go func() { defer wg.Done(); t.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	// Steady state: both sources blocked on their channels, which hold
	// what the operator lets them (with debloating, once it measured its
	// pace and took what the full-size buffers let in beyond the new size,
	// and its buffers, which grow by steps from the least, kept their size
	// for a second).
	var buf int64
	var sized time.Time
	steady := func() {
		for {
			if b := op.Stats().InputBufferBytes; b != buf {
				buf, sized = b, time.Now()
			}
			_, qa := sa.Queued()
			_, qb := sb.Queued()
			blocked := sa.Waiting() > 0 && sb.Waiting() > 0
			if !debloat && blocked && qa > 1<<19 && qb > 1<<19 {
				return
			}
			if debloat && blocked && buf > 0 && int64(qa+qb) <= buf+4096 && time.Since(sized) >= time.Second {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		steady()
		b.StartTimer()
		id := int64(i + 1)
		start := time.Now()
		bar := stream.Barrier{ID: id, Timestamp: start.UnixMilli()}
		srcA.TriggerCheckpoint(bar)
		srcB.TriggerCheckpoint(bar)
		select {
		case got := <-done:
			if got != id {
				b.Fatalf("completed %d, want %d", got, id)
			}
		case <-time.After(2 * time.Minute):
			b.Fatalf("checkpoint %d did not complete; declines %v failures %v", id, rc.declines, rc.failed)
		}
		total += time.Since(start)
		rc.mu.Lock()
		for _, m := range rc.metrics[id] {
			chState += m[host.MetricChannelStateBytes]
		}
		rc.mu.Unlock()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/checkpoint")
	b.ReportMetric(float64(chState)/float64(b.N), "channel-state-B/checkpoint")
	b.ReportMetric(float64(op.Stats().InputBufferBytes), "input-buffer-B")
}
