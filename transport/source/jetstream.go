package source

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamGuarantee is the delivery guarantee of a JetStream source.
const JetStreamGuarantee = "replayable: JetStream stream, offset = stream sequence, exactly-once with aligned or unaligned checkpoints"

// ErrOffsetGone is returned when the checkpointed offset is older than the
// stream's first message: the stream's retention dropped data the job has
// not processed.
var ErrOffsetGone = errors.New("checkpointed offset no longer in the stream")

// JetStreamConfig configures a JetStream stream source.
type JetStreamConfig struct {
	// Stream is the stream name.
	Stream string
	// FilterSubjects restricts the source to these subjects (wildcards
	// allowed); empty reads the whole stream.
	FilterSubjects []string
	// Parallelism and Index split the stream among Parallelism source
	// subtasks: subtask Index reads the messages whose subject hashes
	// (FNV-1a) to Index. The split is a pure function of the subject, so a
	// replay hands every message to the same subtask again, and the order
	// per subject is kept. Parallelism 0 or 1 reads everything.
	Parallelism, Index int
	// MaxBatchRecords and MaxBatchBytes bound one batch returned by Poll;
	// defaults 4096 records and 1 MiB.
	MaxBatchRecords, MaxBatchBytes int
	// PullMaxMessages is how many messages the consumer keeps requested
	// ahead; default 4096.
	PullMaxMessages int
}

// maxResetAttempts bounds how often in a row the ordered consumer tries to
// recreate itself (backing off from 1 s to 10 s) before the source fails:
// about two and a half minutes, long enough to ride out a server restart,
// short enough that a deleted stream fails the task with a reason.
const maxResetAttempts = 20

// JetStream reads a JetStream stream through an ordered consumer (an
// ephemeral, flow-controlled consumer that the client recreates at the
// next sequence after a reconnect or a missed heartbeat), drained in order
// by one goroutine of its own. Its offset is the
// stream sequence of the last message covered, 8 bytes little-endian; a
// restored source starts at offset + 1.
type JetStream struct {
	cfg JetStreamConfig
	js  jetstream.JetStream

	mu      sync.Mutex
	start   uint64 // first sequence to read
	acc     *accumulator
	it      jetstream.MessagesContext
	cons    jetstream.Consumer
	wg      sync.WaitGroup
	started bool
	closed  bool
}

// NewJetStream prepares a source on cfg.Stream; it starts consuming on the
// first Poll, from the beginning or from where Seek put it.
func NewJetStream(js jetstream.JetStream, cfg JetStreamConfig) (*JetStream, error) {
	if cfg.Stream == "" {
		return nil, errors.New("jetstream source: no stream")
	}
	if cfg.Parallelism > 1 && (cfg.Index < 0 || cfg.Index >= cfg.Parallelism) {
		return nil, fmt.Errorf("jetstream source %s: index %d outside parallelism %d", cfg.Stream, cfg.Index, cfg.Parallelism)
	}
	if cfg.PullMaxMessages <= 0 {
		cfg.PullMaxMessages = 4096
	}
	return &JetStream{cfg: cfg, js: js, start: 1, acc: newAccumulator(cfg.MaxBatchRecords, cfg.MaxBatchBytes)}, nil
}

// EncodeOffset encodes a stream sequence as a source offset.
func EncodeOffset(seq uint64) []byte { return binary.LittleEndian.AppendUint64(nil, seq) }

// DecodeOffset decodes a source offset; nil is sequence 0 (the beginning).
func DecodeOffset(off []byte) (uint64, error) {
	if len(off) == 0 {
		return 0, nil
	}
	if len(off) != 8 {
		return 0, fmt.Errorf("jetstream source offset of %d bytes, want 8", len(off))
	}
	return binary.LittleEndian.Uint64(off), nil
}

// Guarantee describes the source's delivery guarantee for the job status.
func (s *JetStream) Guarantee() string { return JetStreamGuarantee }

// PartitionOf is the subtask among parallelism that reads subject.
func PartitionOf(subject string, parallelism int) int {
	if parallelism <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(subject))
	return int(h.Sum32() % uint32(parallelism))
}

// Seek positions the source after offset (nil = the beginning). Call it
// before the first Poll.
func (s *JetStream) Seek(ctx context.Context, offset []byte) error {
	seq, err := DecodeOffset(offset)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("jetstream source %s: Seek after the first Poll", s.cfg.Stream)
	}
	s.start = seq + 1
	return nil
}

func (s *JetStream) startLocked(ctx context.Context) error {
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("jetstream source %s: %w", s.cfg.Stream, err)
	}
	if s.start > 1 {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("jetstream source %s: stream info: %w", s.cfg.Stream, err)
		}
		// Messages from start on must still be there: a stream whose
		// retention (limits, age, purge) dropped some of them lost data this
		// job has not processed. (With FilterSubjects the dropped ones may
		// all have been filtered out; the check cannot tell, and refuses.)
		if first := info.State.FirstSeq; first > s.start {
			return fmt.Errorf("jetstream source %s: resume at sequence %d, stream starts at %d: %w", s.cfg.Stream, s.start, first, ErrOffsetGone)
		}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: s.cfg.FilterSubjects, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxResetAttempts: maxResetAttempts}
	if s.start > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = s.start
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("jetstream source %s: ordered consumer at %d: %w", s.cfg.Stream, s.start, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.PullMaxMessages))
	if err != nil {
		return fmt.Errorf("jetstream source %s: consume: %w", s.cfg.Stream, err)
	}
	s.it, s.cons = it, cons
	s.started = true
	s.wg.Add(1)
	go s.run(it)
	return nil
}

// run moves messages from the iterator into the accumulator, in order, from
// one goroutine; it ends when the iterator is stopped.
func (s *JetStream) run(it jetstream.MessagesContext) {
	defer s.wg.Done()
	for {
		m, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				s.acc.fail(fmt.Errorf("jetstream source %s: %w", s.cfg.Stream, err))
			}
			return
		}
		if !s.onMsg(m) {
			return
		}
	}
}

func (s *JetStream) onMsg(m jetstream.Msg) bool {
	seq, tsNanos, ok := parseAckReply(m.Reply())
	if !ok {
		meta, err := m.Metadata()
		if err != nil {
			s.acc.fail(fmt.Errorf("jetstream source %s: message metadata: %w", s.cfg.Stream, err))
			return false
		}
		seq, tsNanos = meta.Sequence.Stream, uint64(meta.Timestamp.UnixNano())
	}
	if s.cfg.Parallelism > 1 && PartitionOf(m.Subject(), s.cfg.Parallelism) != s.cfg.Index {
		s.acc.skip(seq)
		return true
	}
	var key []byte
	if h := m.Headers(); h != nil {
		if k := h.Get(KeyHeader); k != "" {
			key = []byte(k)
		}
	}
	return s.acc.add(key, m.Data(), int64(tsNanos/1e6), seq)
}

// Poll starts the consumer on first use, then returns every message that
// arrived since the last Poll (up to the batch limits) as one record batch
// and the offset of the last one.
func (s *JetStream) Poll(ctx context.Context) ([]byte, []byte, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if !s.started {
		if err := s.startLocked(ctx); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
	}
	s.mu.Unlock()
	b, last, err := s.acc.take(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b, EncodeOffset(last), nil
}

// CheckpointComplete does nothing: the ordered consumer acknowledges
// nothing, and the stream's own retention decides what to keep.
func (s *JetStream) CheckpointComplete(ctx context.Context, id int64, offset []byte) error {
	return nil
}

// Close stops the consumer; a blocked Poll returns.
func (s *JetStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.acc.close()
	if s.it == nil {
		return nil
	}
	s.it.Stop()
	if s.waitRun(stopGrace) {
		return nil
	}
	// Stopping the iterator while the ordered consumer recreates itself
	// (after a server restart) can miss the new inner subscription, and
	// the reader waits on it forever (nats.go v1.55.0). Deleting the
	// consumer on the server wakes it: the ordered consumer sees it is
	// stopped and ends the iteration.
	dctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	_ = s.js.DeleteConsumer(dctx, s.cfg.Stream, s.cons.CachedInfo().Name)
	cancel()
	if !s.waitRun(closeTimeout) {
		return fmt.Errorf("jetstream source %s: the consumer did not stop within %s", s.cfg.Stream, stopGrace+closeTimeout)
	}
	return nil
}

// stopGrace is how long Close waits for the reader after stopping the
// iterator before it deletes the consumer; closeTimeout how long it waits
// after that before it gives up (leaving the reader goroutine behind).
const (
	stopGrace    = time.Second
	closeTimeout = 10 * time.Second
)

// waitRun waits up to d for the reader goroutine to end.
func (s *JetStream) waitRun(d time.Duration) bool {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// parseAckReply reads the stream sequence and timestamp from a JetStream
// ack reply subject without allocating:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
//	$JS.ACK.<domain>.<acchash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<random>
func parseAckReply(reply string) (seq, ts uint64, ok bool) {
	var starts [13]int
	n := 0
	starts[0] = 0
	n = 1
	for i := 0; i < len(reply); i++ {
		if reply[i] == '.' {
			if n == len(starts) {
				return 0, 0, false
			}
			starts[n] = i + 1
			n++
		}
	}
	tok := func(i int) string {
		end := len(reply)
		if i+1 < n {
			end = starts[i+1] - 1
		}
		return reply[starts[i]:end]
	}
	if n < 9 || tok(0) != "$JS" || tok(1) != "ACK" {
		return 0, 0, false
	}
	base := 2
	if n >= 12 {
		base = 4
	} else if n != 9 {
		return 0, 0, false
	}
	seq, okS := parseUint(tok(base + 3))
	ts, okT := parseUint(tok(base + 5))
	if !okS || !okT {
		return 0, 0, false
	}
	return seq, ts, true
}

func parseUint(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false // overflows uint64
		}
		v = v*10 + d
	}
	return v, true
}
