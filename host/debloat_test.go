package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/stream"
)

// sleepyOp takes its time over each batch while slow is set, and counts
// the records it was given.
type sleepyOp struct {
	slow    atomic.Bool
	records atomic.Int64
}

func (o *sleepyOp) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	n, err := abi.BatchCount(batch)
	if err != nil {
		return err
	}
	o.records.Add(int64(n))
	if o.slow.Load() {
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}
func (o *sleepyOp) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (o *sleepyOp) Snapshot(context.Context, io.Writer) error                      { return nil }
func (o *sleepyOp) Restore(context.Context, io.Reader) error                       { return nil }
func (o *sleepyOp) CheckpointComplete(context.Context, int64) error                { return nil }
func (o *sleepyOp) Close(context.Context) error                                    { return nil }

// feed sends 1 KiB records on s until ctx ends, and returns how many.
func feed(ctx context.Context, s stream.Sender) <-chan int64 {
	sent := make(chan int64, 1)
	go func() {
		e := stream.Records(abi.EncodeBatch(abi.Record{Value: []byte(strings.Repeat("r", 1024))}))
		var n int64
		for ctx.Err() == nil {
			if err := s.Send(ctx, e); err != nil {
				break
			}
			n++
		}
		sent <- n
	}()
	return sent
}

// waitFor polls cond until it holds, failing the test with what after 30s
// (a bound for a stuck test, not a timing expectation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A task that debloats sizes its input buffer to what it takes in the
// target time: a slow operator (~500 KB/s) behind a 1 MiB channel shrinks
// it to a few tens of KiB, the channel then holds no more than that, and
// once the operator is fast again the buffer grows back to the channel's
// capacity. Every record sent is processed.
func TestDebloatSizesTheInputBuffer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const capacity = 1 << 20
	s, r := local.New(local.Options{Name: "feed -> slow", CapacityBytes: capacity})
	op := &sleepyOp{}
	op.slow.Store(true)
	task, err := host.New(host.Config{Name: "slow-0", Operator: op, Inputs: []host.Input{{Receiver: r}},
		Debloat: host.Debloat{Target: 50 * time.Millisecond, Period: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	sent := feed(feedCtx, s)
	errc := make(chan error, 1)
	go func() { errc <- task.Run(ctx) }()

	// ~1 KiB per 2 ms at most is ~512 KB/s: 50 ms of it is ~26 KB. The
	// operator can only be slower than that (a loaded machine), which
	// makes the buffer smaller still.
	const bound = 128 << 10
	waitFor(t, "the input buffer did not shrink", func() bool {
		b := task.Stats().InputBufferBytes
		return b > 0 && b <= bound
	})
	waitFor(t, "the channel still holds more than the shrunk buffer", func() bool {
		_, queued := s.Queued()
		return queued <= bound+2048
	})
	if b := task.Stats().InputBufferBytes; b < host.DefaultDebloatMin {
		t.Errorf("input buffer %d bytes, under the least (%d)", b, host.DefaultDebloatMin)
	}

	op.slow.Store(false)
	waitFor(t, "the input buffer did not grow back to the channel's capacity", func() bool {
		return task.Stats().InputBufferBytes == capacity
	})

	stopFeed()
	n := <-sent
	if err := s.Send(ctx, stream.EndOfPartition()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := op.records.Load(); got != n {
		t.Fatalf("operator got %d records, %d were sent", got, n)
	}
}

// Without Debloat the channel keeps its capacity: the same slow operator
// has its 1 MiB channel fill up, and the task reports no buffer size.
func TestNoDebloatKeepsTheCapacity(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const capacity = 1 << 20
	s, r := local.New(local.Options{Name: "feed -> slow", CapacityBytes: capacity})
	op := &sleepyOp{}
	op.slow.Store(true)
	task, err := host.New(host.Config{Name: "slow-0", Operator: op, Inputs: []host.Input{{Receiver: r}}})
	if err != nil {
		t.Fatal(err)
	}
	feed(ctx, s)
	go task.Run(ctx)
	waitFor(t, "the channel did not fill", func() bool {
		_, queued := s.Queued()
		return queued > capacity/2
	})
	if b := task.Stats().InputBufferBytes; b != 0 {
		t.Fatalf("InputBufferBytes = %d without debloating", b)
	}
}

// batchSource hands out batches of per (64 if 0) records of 1 KiB
// forever.
type batchSource struct{ n, per uint64 }

func (s *batchSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var b abi.Builder
	per := s.per
	if per == 0 {
		per = 64
	}
	for range per {
		s.n++
		b.Add(nil, make([]byte, 1024), int64(s.n))
	}
	return append([]byte(nil), b.Bytes()...), binary.LittleEndian.AppendUint64(nil, s.n), nil
}
func (s *batchSource) Seek(context.Context, []byte) error                      { return nil }
func (s *batchSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *batchSource) Close() error                                            { return nil }

// A task sends a debloated channel its output in pieces the channel can
// hold (stream.ElementLimiter): a source's 64 KiB batches reach an
// operator that debloated its input to a few KiB in pieces of half that,
// so the channel holds no more than its buffer — not one whole batch
// past it, behind which a barrier would wait.
func TestDebloatedChannelTakesPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, r := local.New(local.Options{Name: "src -> slow", CapacityBytes: 1 << 20})
	src, err := host.New(host.Config{Name: "src-0", Source: &batchSource{}, Outputs: []host.Output{{Senders: []stream.Sender{s}}}})
	if err != nil {
		t.Fatal(err)
	}
	// 1 ms a record of 1 KiB: ~1 MB/s, 10 KB in the target's 10 ms.
	op, err := host.New(host.Config{Name: "slow-0", Operator: &slowOp{per: time.Millisecond}, Inputs: []host.Input{{Receiver: r}},
		Debloat: host.Debloat{Target: 10 * time.Millisecond, MinBytes: 4096, Period: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	go op.Run(ctx)
	const bound = 32 << 10
	waitFor(t, "the input buffer did not shrink", func() bool {
		b := op.Stats().InputBufferBytes
		_, queued := s.Queued()
		return b > 0 && b <= bound && queued <= bound
	})
	most := 0
	for range 50 {
		_, queued := s.Queued()
		most = max(most, queued)
		time.Sleep(2 * time.Millisecond)
	}
	if most > bound {
		t.Fatalf("the channel held up to %d bytes with a buffer of %d: a whole batch (~66 KB) past it", most, op.Stats().InputBufferBytes)
	}
	if s.MaxElementBytes() == 0 {
		t.Fatal("the debloated channel limits no element")
	}
}

// Across workers the same: a remote channel's receiver behind shrinks its
// window below a frame, to its least (remote.Config.MinWindow), and its
// sender, short of credit, sizes its frames to half the window and takes a
// source's 512 KiB batches in pieces of a frame (stream.ElementLimiter)
// instead of queueing every frame of a batch ahead of the next barrier.
func TestDebloatedRemoteChannelTakesFrames(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const frame, least = 32 << 10, 16 << 10
	cfg := remote.Config{Channel: "src -> slow", Subject: "weir.test.debloat", Window: 1 << 20, MaxFrameBytes: frame,
		StartWindow: least, MinWindow: least}
	r, err := remote.NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := remote.NewSender(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := host.New(host.Config{Name: "src-0", Source: &batchSource{per: 512}, Outputs: []host.Output{{Senders: []stream.Sender{s}}}})
	if err != nil {
		t.Fatal(err)
	}
	// 1 ms a record of 1 KiB: ~1 MB/s, 10 KB in the target's 10 ms,
	// which the receiver raises to its least.
	op, err := host.New(host.Config{Name: "slow-0", Operator: &slowOp{per: time.Millisecond}, Inputs: []host.Input{{Receiver: r}},
		Debloat: host.Debloat{Target: 10 * time.Millisecond, MinBytes: 4096, Period: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	go op.Run(ctx)
	waitFor(t, "the receiver's window did not shrink below a frame", func() bool {
		queued, _ := r.QueuedBytes()
		return op.Stats().InputBufferBytes == least && queued <= least
	})
	// What the source task cut before the receiver shrank its window
	// goes first: a batch (512 records at ~1 ms) later its pieces are
	// those of the window in effect.
	done := op.Stats().RecordsIn
	waitFor(t, "the operator did not take a batch more", func() bool { return op.Stats().RecordsIn >= done+512 })
	// Over more than the time the operator takes for a batch (~0.5 s):
	// the sender holds at most the frame it waits to publish (half the
	// window) and one piece (Send waits while a frame's worth is queued).
	most := 0
	for range 400 {
		now, _ := s.QueuedBytes()
		most = max(most, now)
		time.Sleep(2 * time.Millisecond)
	}
	if most > least {
		t.Fatalf("the sender held up to %d bytes, a window of %d: a whole batch (~520 KB) or frame (%d) waits there", most, least, frame)
	}
}

// A task that debloats starts each input channel at the least (the slow
// start of a new attempt): a feed with a backlog fills the channel to that
// and no more before the task runs, and a remote receiver configured to
// start small (StartWindow) grants no more; once the task runs and keeps
// up, both grow to their configured size, and every record sent arrives.
func TestDebloatSlowStart(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const capacity, window, least = 1 << 20, 2 << 20, 16 << 10
	ls, lr := local.New(local.Options{Name: "feed -> op", CapacityBytes: capacity})
	cfg := remote.Config{Channel: "feed -> op", Subject: "weir.test.slowstart", Window: window, StartWindow: least, MinWindow: least}
	rr, err := remote.NewReceiver(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := remote.NewSender(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	op := &sleepyOp{}
	task, err := host.New(host.Config{Name: "op-0", Operator: op,
		Inputs:  []host.Input{{Receiver: lr}, {Port: 1, Receiver: rr}},
		Debloat: host.Debloat{Target: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if b := task.Stats().InputBufferBytes; b != 2*least {
		t.Fatalf("InputBufferBytes = %d before the task ran, want the least of both channels, %d", b, 2*least)
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	sentL, sentR := feed(feedCtx, ls), feed(feedCtx, rs)
	waitFor(t, "the local feed did not block", func() bool { return ls.Waiting() > 0 })
	if _, q := ls.Queued(); q > least {
		t.Errorf("the local channel took %d bytes before the task ran, want at most %d", q, least)
	}
	waitFor(t, "the remote feed did not fill the start window", func() bool {
		q, _ := rr.QueuedBytes()
		return q > least/2
	})
	if _, most := rr.QueuedBytes(); most > least {
		t.Errorf("the remote receiver took %d bytes before the task ran, want at most %d", most, least)
	}

	errc := make(chan error, 1)
	go func() { errc <- task.Run(ctx) }()
	waitFor(t, "the input buffers did not grow to their configured size", func() bool {
		return task.Stats().InputBufferBytes == capacity+window
	})
	stopFeed()
	n := <-sentL + <-sentR
	for _, s := range []stream.Sender{ls, rs} {
		if err := s.Send(ctx, stream.EndOfPartition()); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := op.records.Load(); got != n {
		t.Fatalf("operator got %d records, %d were sent", got, n)
	}
}

// A small channel (channels.buffer), debloated or not, holds about its
// bound: a source's 64 KiB batches reach a slow operator through a 16 KiB
// channel in pieces of 8 KiB, not a whole batch past the bound.
func TestSmallChannelTakesPieces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const capacity = 16 << 10
	s, r := local.New(local.Options{Name: "src -> slow", CapacityBytes: capacity})
	src, err := host.New(host.Config{Name: "src-0", Source: &batchSource{}, Outputs: []host.Output{{Senders: []stream.Sender{s}}}})
	if err != nil {
		t.Fatal(err)
	}
	op, err := host.New(host.Config{Name: "slow-0", Operator: &slowOp{per: time.Millisecond}, Inputs: []host.Input{{Receiver: r}}})
	if err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	go op.Run(ctx)
	waitFor(t, "no input reached the operator", func() bool { return op.Stats().RecordsIn > 0 })
	most := 0
	for range 200 {
		_, queued := s.Queued()
		most = max(most, queued)
		time.Sleep(2 * time.Millisecond)
	}
	if most > capacity {
		t.Fatalf("the channel held up to %d bytes with a bound of %d: a whole batch (~66 KB) past it", most, capacity)
	}
}
