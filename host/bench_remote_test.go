package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// tinySource has a backlog that never ends: batches of 64 records of
// 30-byte values.
type tinySource struct{ n uint64 }

func (s *tinySource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var b abi.Builder
	v := make([]byte, 30)
	for range 64 {
		s.n++
		b.Add([]byte(fmt.Sprintf("k%d", s.n%16)), v, int64(s.n))
	}
	return append([]byte(nil), b.Bytes()...), binary.LittleEndian.AppendUint64(nil, s.n), nil
}
func (s *tinySource) Seek(context.Context, []byte) error                      { return nil }
func (s *tinySource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *tinySource) Close() error                                            { return nil }

// benchRemoteConfig is the remote channel a worker builds: a 4 MiB window
// and, for a job that debloats, a start and a least of 16 KiB.
func benchRemoteConfig(subject string, debloat bool) remote.Config {
	cfg := remote.Config{Channel: "src -> op", Subject: subject, Window: 4 << 20, MinWindow: 16 << 10}
	if debloat {
		cfg.StartWindow = 16 << 10
	}
	return cfg
}

// BenchmarkDebloatRemote measures aligned checkpoint completion time
// (trigger at the source → every task acknowledged) across a remote
// channel with small records: source → remote channel (the worker's
// 4 MiB window, two connections to an embedded server) → an operator at
// 300 µs a record → sink, the source's backlog never ending, records of
// 30-byte values (~50 B with their header): the operator takes ~160 KB/s,
// so a full window is ~26 s of its work and a 256 KiB frame ~1.6 s.
//
//   - steady-*: checkpoints once the channel is in its steady state under
//     backpressure (debloated: its window no larger than the task sized
//     it; not: full).
//   - first-*: the first checkpoint of a new attempt (a deploy, a restore)
//     over a backlog, triggered 1 s after the tasks start.
//
// Run: go test -run NONE -bench DebloatRemote -benchtime 2x ./host/
func BenchmarkDebloatRemote(b *testing.B) {
	for _, first := range []bool{false, true} {
		for _, debloat := range []bool{false, true} {
			name := "steady"
			if first {
				name = "first"
			}
			if debloat {
				name += "-debloat"
			} else {
				name += "-off"
			}
			b.Run(name, func(b *testing.B) { benchDebloatRemote(b, first, debloat) })
		}
	}
}

func benchDebloatRemote(b *testing.B, first, debloat bool) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	var total time.Duration
	var queuedAt, buffer int64
	if first {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			p := startRemotePipeline(b, srv, fmt.Sprintf("weir.bench.first.%d", i), debloat)
			time.Sleep(time.Second)
			b.StartTimer()
			d, q := p.checkpoint(b, 1)
			b.StopTimer()
			total += d
			queuedAt += q
			buffer += p.op.Stats().InputBufferBytes
			p.stop()
		}
	} else {
		p := startRemotePipeline(b, srv, "weir.bench.steady", debloat)
		defer p.stop()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			p.steady(debloat)
			b.StartTimer()
			d, q := p.checkpoint(b, int64(i+1))
			total += d
			queuedAt += q
		}
		b.StopTimer()
		buffer = p.op.Stats().InputBufferBytes * int64(b.N)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/checkpoint")
	b.ReportMetric(float64(queuedAt)/float64(b.N), "queued-B/trigger")
	b.ReportMetric(float64(buffer)/float64(b.N), "input-buffer-B")
}

type remotePipeline struct {
	src, op *host.Task
	snd     *remote.Sender
	rcv     *remote.Receiver
	done    chan int64
	rc      *recorder
	cancel  func()
	wg      sync.WaitGroup
}

func startRemotePipeline(b *testing.B, srv *embedded.Server, subject string, debloat bool) *remotePipeline {
	ncS, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	ncR, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	store, err := storage.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	p := &remotePipeline{done: make(chan int64, 16), rc: newRecorder()}
	var mu sync.Mutex
	acks := map[int64]int{}
	p.rc.onAck = func(task string, id int64) {
		mu.Lock()
		defer mu.Unlock()
		acks[id]++
		if acks[id] == 3 {
			p.done <- id
		}
	}
	cfg := benchRemoteConfig(subject, debloat)
	// The receiver's worker deploys first, as often as not.
	if p.rcv, err = remote.NewReceiver(ncR, cfg); err != nil {
		b.Fatal(err)
	}
	if p.snd, err = remote.NewSender(ncS, cfg); err != nil {
		b.Fatal(err)
	}
	so, ro := local.New(local.Options{Name: "op -> sink"})
	var d host.Debloat
	if debloat {
		d = host.Debloat{Target: time.Second, MinBytes: 16 << 10}
	}
	mk := func(cfg host.Config) *host.Task {
		cfg.Checkpointing, cfg.Store, cfg.Listener, cfg.Debloat = host.Checkpointing{Mode: barrier.Aligned}, store, p.rc, d
		t, err := host.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	p.src = mk(host.Config{Name: "src", Source: &tinySource{}, Outputs: []host.Output{{Senders: []stream.Sender{p.snd}}}})
	p.op = mk(host.Config{Name: "op", Operator: &slowOp{per: 300 * time.Microsecond},
		Inputs: []host.Input{{Receiver: p.rcv}}, Outputs: []host.Output{{Senders: []stream.Sender{so}}}})
	sink := mk(host.Config{Name: "sink", Sink: nullSink{}, Inputs: []host.Input{{Receiver: ro}}})
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = func() {
		cancel()
		p.wg.Wait()
		p.snd.Close()
		p.rcv.Close()
		ncS.Close()
		ncR.Close()
	}
	for _, t := range []*host.Task{p.src, p.op, sink} {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); t.Run(ctx) }()
	}
	return p
}

func (p *remotePipeline) stop() { p.cancel() }

// steady waits for the channel's steady state under backpressure: full
// without debloating, and no more than the window the task sized it to
// with (after the operator measured its pace over a few seconds).
func (p *remotePipeline) steady(debloat bool) {
	start := time.Now()
	for {
		q, _ := p.rcv.QueuedBytes()
		if !debloat && q > 3<<20 {
			return
		}
		if buf := p.op.Stats().InputBufferBytes; debloat && time.Since(start) > 3*time.Second && buf > 0 && int64(q) <= buf {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkpoint triggers checkpoint id at the source and returns how long it
// took to complete, and what the receiver held at the trigger.
func (p *remotePipeline) checkpoint(b *testing.B, id int64) (time.Duration, int64) {
	q, _ := p.rcv.QueuedBytes()
	s, _ := p.snd.QueuedBytes()
	start := time.Now()
	p.src.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: start.UnixMilli()})
	select {
	case got := <-p.done:
		if got != id {
			b.Fatalf("completed %d, want %d", got, id)
		}
	case <-time.After(5 * time.Minute):
		b.Fatalf("checkpoint %d did not complete; declines %v failures %v", id, p.rc.declines, p.rc.failed)
	}
	return time.Since(start), int64(q + s)
}
