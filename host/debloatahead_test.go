package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// backlogSource returns the records of a backlog (small ones, ~40 B) in
// batches of at most 4096 records, or of the bound a task sets
// (host.BatchLimiter), as a JetStream source over a pre-loaded stream
// does; then none. The task sets the bound while a Poll waits.
type backlogSource struct {
	n, left int
	limit   atomic.Int64
}

func (s *backlogSource) LimitBatch(n int) {
	if n <= 0 || n > 4096 {
		n = 4096
	}
	s.limit.Store(int64(n))
}
func (s *backlogSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if s.left == 0 {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	limit := int(s.limit.Load())
	if limit == 0 {
		limit = 4096
	}
	var b abi.Builder
	for range min(limit, s.left) {
		s.n++
		s.left--
		b.Add([]byte(fmt.Sprintf("user-%d", s.n)), []byte(`{"v":1}`), int64(s.n))
	}
	return append([]byte(nil), b.Bytes()...), binary.LittleEndian.AppendUint64(nil, uint64(s.n)), nil
}
func (s *backlogSource) Seek(context.Context, []byte) error                      { return nil }
func (s *backlogSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *backlogSource) Close() error                                            { return nil }

// A fast task ahead of a slow one (source → parse → slow, 1 ms a record,
// over a pre-loaded backlog) keeps its input buffer to about what the
// slow one takes in the debloat target, from the start: its first
// measurement saw its output go into the slow task's empty buffer, and
// grew its input to full size (1 MiB) at once, which the source filled
// with the backlog — a trial's first checkpoint waited 28 s behind it
// (later ones 1–3 s). The buffers grow by debloatGrowth at most, and only
// while the latest period's pace asks for it.
func TestDebloatFastTaskAheadOfASlowOneStartsSmall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := host.Debloat{Target: time.Second}
	s1, r1 := local.New(local.Options{Name: "src -> parse"})
	s2, r2 := local.New(local.Options{Name: "parse -> slow"})
	s3, r3 := local.New(local.Options{Name: "slow -> agg"})
	mk := func(cfg host.Config) *host.Task {
		cfg.Debloat = d
		tk, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	src := mk(host.Config{Name: "src-0", Source: &backlogSource{left: 30000}, Outputs: []host.Output{{Senders: []stream.Sender{s1}}}})
	parse := mk(host.Config{Name: "parse-0", Operator: &passOp{}, Inputs: []host.Input{{Receiver: r1}}, Outputs: []host.Output{{Senders: []stream.Sender{s2}}}})
	slow := mk(host.Config{Name: "slow-0", Operator: &slowOp{per: time.Millisecond}, Inputs: []host.Input{{Receiver: r2}}, Outputs: []host.Output{{Senders: []stream.Sender{s3}}}})
	agg := mk(host.Config{Name: "agg-0", Sink: nullSink{}, Inputs: []host.Input{{Receiver: r3}}})
	var wg sync.WaitGroup
	for _, tk := range []*host.Task{src, parse, slow, agg} {
		wg.Add(1)
		go func() { defer wg.Done(); tk.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	// Until the slow task took 2000 records (2 s of its work; the
	// backlog's records take it 30 s), the parse task's buffer, and what
	// waits in it, stays well below the channel's 1 MiB: the slow task
	// takes ~40 KB in a second.
	const most = 256 << 10
	biggest, held := int64(0), 0
	for slow.Stats().RecordsIn < 2000 {
		biggest = max(biggest, parse.Stats().InputBufferBytes)
		_, q := s1.Queued()
		held = max(held, q)
		time.Sleep(5 * time.Millisecond)
	}
	if biggest > most || held > most {
		t.Fatalf("the parse task ahead of the slow one grew its input buffer to %d bytes and held %d there (the source's backlog), want at most %d",
			biggest, held, most)
	}
	t.Logf("parse's input buffer: up to %d bytes, holding up to %d", biggest, held)
}
