package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/stream"
)

// The remote channel ends satisfy the optional stream interfaces the task
// runtime looks for.
var (
	_ stream.PriorityPoller = (*remote.Receiver)(nil)
)

// genSource emits batches of per records numbered from 0, then io.EOF.
type genSource struct {
	batches, per, next int
}

func (s *genSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if s.next == s.batches {
		return nil, nil, io.EOF
	}
	var b abi.Builder
	v := make([]byte, 64)
	for i := 0; i < s.per; i++ {
		binary.LittleEndian.PutUint64(v, uint64(s.next*s.per+i))
		b.Add(nil, v, 0)
	}
	s.next++
	return append([]byte(nil), b.Bytes()...), binary.LittleEndian.AppendUint64(nil, uint64(s.next)), nil
}
func (s *genSource) Seek(context.Context, []byte) error                      { return nil }
func (s *genSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *genSource) Close() error                                            { return nil }

// slowForward forwards every batch after a pause: a deliberately slow
// operator.
type slowForward struct{ pause time.Duration }

func (o slowForward) Process(ctx context.Context, port int, batch []byte, emit func(int, []byte) error) error {
	time.Sleep(o.pause)
	return emit(0, append([]byte(nil), batch...))
}
func (slowForward) EndOfInput(context.Context, int, func(int, []byte) error) error { return nil }
func (slowForward) Snapshot(context.Context, io.Writer) error                      { return nil }
func (slowForward) Restore(context.Context, io.Reader) error                       { return nil }
func (slowForward) CheckpointComplete(context.Context, int64) error                { return nil }
func (slowForward) Close(context.Context) error                                    { return nil }

// collectSink keeps every record value it is given.
type collectSink struct {
	mu   sync.Mutex
	seqs []uint64
}

func (s *collectSink) Write(ctx context.Context, batch []byte) error {
	recs, err := abi.DecodeBatch(batch)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, r := range recs {
		s.seqs = append(s.seqs, binary.LittleEndian.Uint64(r.Value))
	}
	s.mu.Unlock()
	return nil
}
func (s *collectSink) PreCommit(context.Context, int64) ([]byte, error) { return nil, nil }
func (s *collectSink) Commit(context.Context, int64) error              { return nil }
func (s *collectSink) Recover(context.Context, int64, []byte) error     { return nil }
func (s *collectSink) EndOfInput(context.Context) error                 { return nil }
func (s *collectSink) Close() error                                     { return nil }

// coordinator completes a checkpoint once both tasks acknowledged it.
type coordinator struct {
	mu        sync.Mutex
	tasks     []*host.Task
	acks      map[int64]int
	completed []int64
	chState   int64
	problems  []string
}

func (c *coordinator) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	c.mu.Lock()
	c.acks[id]++
	c.chState += m[host.MetricChannelStateBytes]
	done := c.acks[id] == len(c.tasks)
	if done {
		c.completed = append(c.completed, id)
	}
	tasks := c.tasks
	c.mu.Unlock()
	if done {
		for _, t := range tasks {
			t.NotifyCheckpointComplete(id)
		}
	}
	return nil
}
func (c *coordinator) Decline(ctx context.Context, task string, id int64, kind, reason string) error {
	return nil
}
func (c *coordinator) Failed(ctx context.Context, task string, err error) error {
	c.mu.Lock()
	c.problems = append(c.problems, err.Error())
	c.mu.Unlock()
	return nil
}

// Two tasks in one job talk over a remote channel through the embedded
// server: a fast source task and a deliberately slow task with a sink,
// unaligned checkpoints every few milliseconds. Nothing is lost or
// repeated, the receiver never holds more than its window, and the
// checkpoints complete under backpressure with in-flight data as channel
// state.
func TestJobOverRemoteChannelUnderBackpressure(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ncA, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer ncA.Close()
	ncB, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer ncB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const window = 64 << 10
	cfg := remote.Config{Channel: "src[0] -> slow[0]", Subject: "weir.ch.test.a1.e0", Window: window, MaxFrameBytes: 8 << 10}
	rcv, err := remote.NewReceiver(ncB, cfg)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := remote.NewSender(ncA, cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewMemStore()
	coord := &coordinator{acks: map[int64]int{}}
	unaligned := host.Checkpointing{Mode: barrier.Unaligned}
	const batches, per = 400, 50
	out := &collectSink{}
	a, err := host.New(host.Config{Name: "src[0]", Source: &genSource{batches: batches, per: per},
		Outputs: []host.Output{{Senders: []stream.Sender{snd}}}, Checkpointing: unaligned, Store: store, Listener: coord})
	if err != nil {
		t.Fatal(err)
	}
	b, err := host.New(host.Config{Name: "slow[0]", Inputs: []host.Input{{Port: 0, Receiver: rcv}},
		Operator: slowForward{pause: 200 * time.Microsecond}, Sink: out, Checkpointing: unaligned, Store: store, Listener: coord})
	if err != nil {
		t.Fatal(err)
	}
	coord.tasks = []*host.Task{a, b}
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- a.Run(ctx) }()
	go func() { errB <- b.Run(ctx) }()

	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	id := int64(0)
loop:
	for {
		select {
		case err := <-errB:
			if err != nil {
				t.Fatalf("slow task: %v", err)
			}
			break loop
		case <-tick.C:
			id++
			a.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
		}
	}
	if err := <-errA; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("source task: %v", err)
	}
	if len(coord.problems) > 0 {
		t.Fatalf("failures: %v", coord.problems)
	}
	if len(out.seqs) != batches*per {
		t.Fatalf("sink got %d records, want %d", len(out.seqs), batches*per)
	}
	for i, s := range out.seqs {
		if s != uint64(i) {
			t.Fatalf("record %d = %d", i, s)
		}
	}
	if _, max := rcv.QueuedBytes(); max > window {
		t.Fatalf("receiver queued %d bytes, window %d", max, window)
	}
	coord.mu.Lock()
	defer coord.mu.Unlock()
	if len(coord.completed) == 0 {
		t.Fatalf("no checkpoint completed (%d triggered)", id)
	}
	t.Logf("%d checkpoints triggered, %d completed, %d bytes of channel state", id, len(coord.completed), coord.chState)
}
