package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/host/barrier"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/stream"
)

// seekSource is genSource that can rewind to a checkpointed offset.
type seekSource struct{ genSource }

func (s *seekSource) Seek(_ context.Context, off []byte) error {
	if len(off) == 8 {
		s.next = int(binary.LittleEndian.Uint64(off))
	}
	return nil
}

// txOutput is an external system with transactions: what a checkpoint
// committed is final, once.
type txOutput struct {
	mu        sync.Mutex
	final     []uint64
	committed map[int64]bool
}

func (o *txOutput) commit(id int64, seqs []uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.committed[id] {
		return
	}
	o.committed[id] = true
	o.final = append(o.final, seqs...)
}

// txSink stages per checkpoint into a txOutput (a two-phase-commit sink).
type txSink struct {
	out    *txOutput
	cur    []uint64
	staged []struct {
		id   int64
		seqs []uint64
	}
}

func (s *txSink) Write(_ context.Context, batch []byte) error {
	recs, err := abi.DecodeBatch(batch)
	if err != nil {
		return err
	}
	for _, r := range recs {
		s.cur = append(s.cur, binary.LittleEndian.Uint64(r.Value))
	}
	return nil
}

func (s *txSink) PreCommit(_ context.Context, id int64) ([]byte, error) {
	s.staged = append(s.staged, struct {
		id   int64
		seqs []uint64
	}{id, s.cur})
	s.cur = nil
	var st []byte
	for _, e := range s.staged {
		st = binary.LittleEndian.AppendUint64(st, uint64(e.id))
		st = binary.LittleEndian.AppendUint64(st, uint64(len(e.seqs)))
		for _, v := range e.seqs {
			st = binary.LittleEndian.AppendUint64(st, v)
		}
	}
	return st, nil
}

func (s *txSink) Commit(_ context.Context, id int64) error {
	n := 0
	for n < len(s.staged) && s.staged[n].id <= id {
		s.out.commit(s.staged[n].id, s.staged[n].seqs)
		n++
	}
	s.staged = s.staged[n:]
	return nil
}

func (s *txSink) Recover(ctx context.Context, id int64, st []byte) error {
	for len(st) >= 16 {
		cid := int64(binary.LittleEndian.Uint64(st))
		n := int(binary.LittleEndian.Uint64(st[8:]))
		st = st[16:]
		seqs := make([]uint64, n)
		for i := range seqs {
			seqs[i] = binary.LittleEndian.Uint64(st)
			st = st[8:]
		}
		s.out.commit(cid, seqs)
	}
	return nil
}

func (s *txSink) EndOfInput(ctx context.Context) error {
	if _, err := s.PreCommit(ctx, 1<<62); err != nil {
		return err
	}
	return s.Commit(ctx, 1<<62)
}
func (s *txSink) Close() error { return nil }

// attemptCoordinator completes a checkpoint when both tasks of the attempt
// acknowledged it and remembers the latest completed one.
type attemptCoordinator struct {
	mu      sync.Mutex
	tasks   []*host.Task
	acks    map[int64]map[string]string
	latest  int64
	handles map[string]string
}

func (c *attemptCoordinator) Acknowledge(ctx context.Context, task string, id int64, handle string, m map[string]int64) error {
	c.mu.Lock()
	if c.acks[id] == nil {
		c.acks[id] = map[string]string{}
	}
	c.acks[id][task] = handle
	done := len(c.acks[id]) == len(c.tasks)
	if done && id > c.latest {
		c.latest, c.handles = id, c.acks[id]
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
func (c *attemptCoordinator) Decline(context.Context, string, int64, string, string) error {
	return nil
}
func (c *attemptCoordinator) Failed(context.Context, string, error) error { return nil }

// A two-task job over a remote channel while the server restarts: the
// channel fails with a ChannelError (never a silent gap), the job restarts
// both tasks from the latest completed unaligned checkpoint on fresh
// channel subjects, and the transactional output holds every record
// exactly once, in order.
func TestJobRecoversFromServerRestart(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	var conns []*nats.Conn
	for i := 0; i < 2; i++ {
		nc, err := srv.Connect(nats.ReconnectWait(20 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	store := snapshot.NewMemStore()
	out := &txOutput{committed: map[int64]bool{}}
	const batches, per = 300, 50
	var restore map[string]string
	restarted, channelErrors := false, 0

	for attempt := 1; ; attempt++ {
		if attempt > 10 || ctx.Err() != nil {
			t.Fatalf("job did not finish in %d attempts", attempt-1)
		}
		for _, nc := range conns {
			for nc.Status() != nats.CONNECTED {
				time.Sleep(10 * time.Millisecond)
			}
		}
		cfg := remote.Config{Channel: "src[0] -> sink[0]", Subject: fmt.Sprintf("weir.ch.job.a%d.e0", attempt), Window: 64 << 10, MaxFrameBytes: 8 << 10}
		rcv, err := remote.NewReceiver(conns[1], cfg)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := remote.NewSender(conns[0], cfg)
		if err != nil {
			t.Fatal(err)
		}
		coord := &attemptCoordinator{acks: map[int64]map[string]string{}}
		ck := host.Checkpointing{Mode: barrier.Unaligned}
		a, err := host.New(host.Config{Name: "src[0]", Source: &seekSource{genSource{batches: batches, per: per}},
			Outputs: []host.Output{{Senders: []stream.Sender{snd}}}, Checkpointing: ck, Store: store, Listener: coord, Restore: restore["src[0]"]})
		if err != nil {
			t.Fatal(err)
		}
		b, err := host.New(host.Config{Name: "sink[0]", Inputs: []host.Input{{Receiver: rcv}},
			Operator: slowForward{pause: 100 * time.Microsecond}, Sink: &txSink{out: out}, Checkpointing: ck, Store: store, Listener: coord,
			Restore: restore["sink[0]"]})
		if err != nil {
			t.Fatal(err)
		}
		coord.tasks = []*host.Task{a, b}
		actx, acancel := context.WithCancel(ctx)
		type result struct {
			task string
			err  error
		}
		results := make(chan result, 2)
		go func() { results <- result{"src", a.Run(actx)} }()
		go func() { results <- result{"sink", b.Run(actx)} }()
		pending := 2

		tick := time.NewTicker(5 * time.Millisecond)
		id := int64(attempt) * 100000
		var failure error
		finished := false
	run:
		for {
			select {
			case r := <-results:
				pending--
				if r.err != nil {
					failure = r.err
					break run
				}
				if r.task == "sink" {
					finished = true
					break run
				}
			case <-tick.C:
				id++
				a.TriggerCheckpoint(stream.Barrier{ID: id, Timestamp: time.Now().UnixMilli()})
				coord.mu.Lock()
				latest := coord.latest
				coord.mu.Unlock()
				if !restarted && latest >= int64(attempt)*100000+5 {
					restarted = true
					if err := srv.Restart(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		tick.Stop()
		acancel()
		for ; pending > 0; pending-- {
			<-results
		}
		if finished {
			break
		}
		var ce *stream.ChannelError
		if errors.As(failure, &ce) {
			channelErrors++
		}
		t.Logf("attempt %d failed: %v", attempt, failure)
		coord.mu.Lock()
		if coord.handles != nil {
			restore = coord.handles
		}
		coord.mu.Unlock()
	}
	if !restarted {
		t.Fatal("the server was never restarted")
	}
	if channelErrors == 0 {
		t.Fatal("no attempt failed with a ChannelError")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.final) != batches*per {
		t.Fatalf("output holds %d records, want %d", len(out.final), batches*per)
	}
	for i, v := range out.final {
		if v != uint64(i) {
			t.Fatalf("record %d = %d (loss, duplicate or reorder)", i, v)
		}
	}
}
