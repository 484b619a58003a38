package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/subject"
)

// AtLeastOnceGuarantee is the delivery guarantee of AtLeastOnce.
const AtLeastOnceGuarantee = "at-least-once: JetStream, every message acknowledged before its checkpoint completes; a replay after recovery may repeat output"

// AtomicBatchesNote is what the job status adds to AtLeastOnceGuarantee
// for a sink that publishes in atomic batches (PublishAtomic).
const AtomicBatchesNote = "; published in atomic batches (one fsync each where the server fsyncs every write)"

// AtLeastOnceConfig configures an at-least-once JetStream sink.
type AtLeastOnceConfig struct {
	// Name names the sink in its errors (the job spec's sink name), as
	// ExactlyOnceConfig.Name does.
	Name string
	// Subject is what the sink publishes on, or a keyed template
	// ("out.{key}": each record on "out." and its key); a stream must
	// capture it.
	Subject string
	// Stream is that stream; empty: the stream that captures Subject.
	Stream string
	// Publish is how records are published: PublishAuto (default) is
	// PublishAtomic when FsyncEachWrite is set and the stream allows atomic
	// publish, else PublishFast where the stream allows batched publish,
	// else PublishAsync (see ResolveAtLeastOnceMode).
	Publish PublishMode
	// FsyncEachWrite says the server fsyncs every JetStream write before
	// acknowledging it (sync_interval: always; weir up -sync always),
	// which stores a plain or fast-batch message at the disk's fsync rate
	// and an atomic batch with one fsync: PublishAuto then publishes atomic
	// batches where the stream allows atomic publish.
	FsyncEachWrite bool
	// BatchSize is the most messages per atomic batch in PublishAtomic
	// mode, up to MaxAtomicChunk; 0 means MaxAtomicBatch. The server must
	// accept batches this large (its max_batch_size).
	BatchSize int
	// MaxPending bounds unacknowledged messages in async mode (default
	// 4096): Write blocks beyond it.
	MaxPending int
	// Timestamps publishes each record's timestamp in TimeHeader.
	Timestamps bool
	// Timeout bounds the wait for an acknowledgement (default
	// DefaultAtLeastOnceTimeout).
	Timeout time.Duration
	// IdleCommit is how long a fast batch stays open without a record
	// before the sink commits it (default 1s): the server drops a batch
	// that sees no message for 10s. In PublishAtomic mode, how long
	// records wait for more before the sink publishes them as a batch
	// short of BatchSize.
	IdleCommit time.Duration
}

// AtLeastOnce publishes records to a JetStream stream as they are written
// and waits at every checkpoint until all are stored, so a completed
// checkpoint implies the output before it is stored. In PublishFast mode
// the records go out as one fast-ingest batch per checkpoint (the server
// acknowledges every few hundred messages instead of each one, and a
// message lost on the way ends the batch, which fails the checkpoint: the
// job recovers and replays). In PublishAsync mode each record is its own
// asynchronous publish. In PublishAtomic mode the records go out as
// atomic batches of up to BatchSize messages (and MaxAtomicChunkBytes of
// keys and values), each as it fills, committed one after the other in
// the background while the task writes on, and the records since the last
// batch as one more at every checkpoint (and after IdleCommit without a
// record): a server that fsyncs every write stores each batch with one
// fsync instead of one per message.
//
// While the stream elects a leader (a server's loss in a cluster) the sink
// publishes again what the stream has not acknowledged, for up to
// natsconn.ElectionWait from the first failure since it last got further
// (commitThroughElection): a fast batch starts again as a new batch from
// the first message not acknowledged, so the stream keeps the output's
// order; async publishes that failed go out again before the next write's,
// in the order they failed (which plain async publish does not keep: the
// client times out, or retries on no responders, each on its own timer),
// each with a message id from its second try on; an atomic batch goes
// out again whole, with the message id its first message carried the
// first time (one per batch), so that a try that was stored after all is
// refused as a duplicate. Some may be stored twice
// (at least once: a publish that got no answer may be stored after all);
// a stream that is gone, or any other answer, fails the sink at once.
type AtLeastOnce struct {
	cfg   AtLeastOnceConfig
	js    jetstream.JetStream
	pub   *asyncPublisher // js's async publishes (PublishAsync)
	mode  PublishMode
	route route
	name  string // "at-least-once sink <subject> (stream <name>)", for errors

	emu   sync.Mutex
	err   error       // the first failure; the sink fails from then on
	again []*nats.Msg // async publishes that failed for want of a leader, to publish again
	why   error       // why the last of them failed

	bg   context.Context // the idle commit's; cancelled by Close
	stop context.CancelFunc

	mu     sync.Mutex // guards the fields below; held while a batch is committed
	fp     *fastBatch
	fpErr  *batchErr // what fp's reply handler reported
	sent   int       // messages added to fp
	acked  int       // of those, how many the server acknowledged
	pend   pending   // the messages of fp after the acknowledged ones, and those for the next batch
	last   time.Time // when the last message was added to fp
	m      *nats.Msg // reused for every message of fp
	key    []string  // its key header's value, reused
	ts     []string  // its time header's value, reused (Timestamps)
	idle   *time.Timer
	closed bool

	// PublishAtomic, guarded by mu too:
	batch   int            // the most messages per atomic batch
	fill    *atomicBatch   // records written since the last batch was cut
	queue   []*atomicBatch // batches cut and not yet stored, oldest first: the sender publishes queue[0]
	sending bool           // the sender runs
	moved   chan struct{}  // closed, and replaced, when the sender stored a batch or stopped
	wg      sync.WaitGroup
}

// atomicBatch is the records of one atomic batch of an at-least-once
// sink, copied: once cut (queued) it does not change.
type atomicBatch struct {
	recs pending // never dropped from: len(recs.buf) is the records' bytes
	// id is the message id of its first message: a try that was stored
	// after all makes the next one a duplicate, refused whole.
	id string
}

// maxQueuedBatches is how many atomic batches an at-least-once sink keeps
// cut and not yet stored, the one being published among them, before
// Write waits: the next is ready when one is stored, and the task writes
// on meanwhile.
const maxQueuedBatches = 2

// batchErr is what a fast publisher's reply handler reported: the first
// error that is no election's (natsconn.Leaderless, leaderLost), else the
// first.
type batchErr struct {
	mu  sync.Mutex
	err error
}

// set records err, reported by the reply handler.
func (b *batchErr) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil || natsconn.Leaderless(leaderLost(b.err)) && !natsconn.Leaderless(leaderLost(err)) {
		b.err = err
	}
}

// with is err, the failure of a fast publisher's call, and what its reply
// handler reported.
func (b *batchErr) with(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return fmt.Errorf("%w (%w)", err, b.err)
	}
	return err
}

// pending holds copies of the keys and values of messages not yet
// acknowledged, oldest first, in one buffer, and their timestamps.
type pending struct {
	buf   []byte
	ends  [][2]int // each message's key end and value end in buf
	times []int64  // each message's timestamp
	first int      // ends[first:] are pending; those before were acknowledged
}

// add appends a copy of a message's key and value, and its timestamp.
func (p *pending) add(key, value []byte, ts int64) {
	p.buf = append(p.buf, key...)
	k := len(p.buf)
	p.buf = append(p.buf, value...)
	p.ends = append(p.ends, [2]int{k, len(p.buf)})
	p.times = append(p.times, ts)
}

// timestamp returns the timestamp of pending message i (0: the oldest).
func (p *pending) timestamp(i int) int64 { return p.times[p.first+i] }

// record returns the key, value and timestamp of pending message i.
func (p *pending) record(i int) (key, value []byte, ts int64) {
	key, value = p.at(i)
	return key, value, p.timestamp(i)
}

// len is how many messages are pending.
func (p *pending) len() int { return len(p.ends) - p.first }

// at returns the key and value of pending message i (0: the oldest).
func (p *pending) at(i int) (key, value []byte) {
	start := 0
	if j := p.first + i; j > 0 {
		start = p.ends[j-1][1]
	}
	e := p.ends[p.first+i]
	return p.buf[start:e[0]:e[0]], p.buf[e[0]:e[1]:e[1]]
}

// drop forgets the oldest n messages, acknowledged, and moves the rest to
// the front of the buffer once they are fewer than those dropped.
func (p *pending) drop(n int) {
	p.first += n
	switch {
	case p.first == len(p.ends):
		p.buf, p.ends, p.times, p.first = p.buf[:0], p.ends[:0], p.times[:0], 0
	case p.first > 1024 && p.first > len(p.ends)/2:
		base := p.ends[p.first-1][1]
		p.buf = p.buf[:copy(p.buf, p.buf[base:])]
		p.ends = p.ends[:copy(p.ends, p.ends[p.first:])]
		p.times = p.times[:copy(p.times, p.times[p.first:])]
		for i := range p.ends {
			p.ends[i][0] -= base
			p.ends[i][1] -= base
		}
		p.first = 0
	}
}

// NewAtLeastOnce checks that a stream captures cfg.Subject and returns the
// sink. While the stream, or JetStream's meta layer, has no leader (an
// election) the lookups are made again, within ctx's deadline or
// natsconn.ElectionWait; a stream that does not exist fails at once.
func NewAtLeastOnce(ctx context.Context, nc *nats.Conn, cfg AtLeastOnceConfig) (*AtLeastOnce, error) {
	if cfg.Subject == "" {
		return nil, errors.New("at-least-once sink: a subject is required")
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultAtLeastOnceTimeout
	}
	if cfg.IdleCommit <= 0 {
		cfg.IdleCommit = time.Second
	}
	s := &AtLeastOnce{cfg: cfg}
	js, err := jetstream.New(nc,
		jetstream.WithDefaultTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { s.asyncFailed(m, err) }))
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink %s: %w", cfg.Subject, err)
	}
	s.js, s.pub = js, newAsyncPublisher(js)
	tmpl, err := subject.Parse(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink: %w", err)
	}
	name := cfg.Stream
	if !tmpl.Keyed() || name == "" {
		// A keyed template's filter may overlap several streams' subjects:
		// the named stream is the one, and each record's subject is
		// checked against its subjects.
		var found string
		err := throughElection(ctx, js, func(ctx context.Context) (err error) {
			found, err = js.StreamNameBySubject(ctx, tmpl.Filter())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("at-least-once sink %s: no stream captures the subject: %w", cfg.Subject, err)
		}
		if name != "" && name != found {
			return nil, fmt.Errorf("at-least-once sink %s: the subject is captured by stream %s, not by %s", cfg.Subject, found, name)
		}
		name = found
	}
	st, err := lookupStream(ctx, js, name)
	if err != nil {
		return nil, fmt.Errorf("at-least-once sink %s: stream %s: %w", cfg.Subject, name, err)
	}
	s.name = sinkName("at-least-once", cfg.Name, cfg.Subject, name)
	if s.route, err = newRoute(cfg.Subject, name, st.CachedInfo().Config.Subjects); err != nil {
		return nil, fmt.Errorf("at-least-once sink: %w", err)
	}
	if err := CheckDurable(st.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if s.mode, err = ResolveAtLeastOnceMode(cfg.Publish, st.CachedInfo().Config, cfg.FsyncEachWrite); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	s.batch = cfg.BatchSize
	if s.batch <= 0 {
		s.batch = MaxAtomicBatch
	}
	s.batch = min(s.batch, MaxAtomicChunk)
	s.moved = make(chan struct{})
	s.bg, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// ResolveAtLeastOnceMode is the mode an at-least-once sink configured with
// mode publishes in on a stream configured as stream, on a server that
// fsyncs every write (fsyncEachWrite) or not: PublishAuto becomes
// PublishAtomic on such a server where the stream allows atomic publish,
// else PublishFast where the stream allows batched publish, else
// PublishAsync. A mode the stream does not allow is an error.
func ResolveAtLeastOnceMode(mode PublishMode, stream jetstream.StreamConfig, fsyncEachWrite bool) (PublishMode, error) {
	auto := mode == "" || mode == PublishAuto
	if auto && fsyncEachWrite && stream.AllowAtomicPublish {
		return PublishAtomic, nil
	}
	resolved, err := ResolvePublishMode(mode, stream)
	if err != nil {
		return "", err
	}
	if auto && resolved == PublishAtomic {
		// A stream that allows atomic but not batched publish: atomic
		// batches hold records back until they fill, which only a server
		// that fsyncs every write repays.
		resolved = PublishAsync
	}
	return resolved, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (s *AtLeastOnce) Guarantee() string {
	if s.mode == PublishAtomic {
		return AtLeastOnceGuarantee + AtomicBatchesNote
	}
	return AtLeastOnceGuarantee
}

// String names the sink in its errors: "at-least-once sink <subject>
// (stream <name>)".
func (s *AtLeastOnce) String() string { return s.name }

// Mode reports how the sink publishes: PublishFast, PublishAtomic or
// PublishAsync.
func (s *AtLeastOnce) Mode() PublishMode { return s.mode }

// fail records err as the sink's failure unless it failed before.
func (s *AtLeastOnce) fail(err error) {
	s.emu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.emu.Unlock()
}

// failed reports the sink's failure, if any, without the sink's name:
// "publish: <cause>" (with what to change for a stream that is full).
func (s *AtLeastOnce) failed() error {
	s.emu.Lock()
	defer s.emu.Unlock()
	if s.err != nil {
		return streamFull(s.route.stream, fmt.Errorf("publish: %w", s.err))
	}
	return nil
}

// Write publishes every record of batch. It checks every record of the
// batch first — a keyed sink its key, every sink its size against the
// server's max_payload (ErrRecordTooLarge) —: a bad one fails the write
// with nothing of the batch published.
func (s *AtLeastOnce) Write(ctx context.Context, batch []byte) error {
	if err := s.route.check(batch); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	h := jetStreamHeaders(s.cfg.Timestamps)
	if err := checkSizes(batch, s.js.Conn().MaxPayload(), h, true, func(abi.Record) int64 { return h }); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	switch s.mode {
	case PublishFast:
		return s.writeFast(ctx, &it)
	case PublishAtomic:
		return s.writeAtomic(ctx, &it)
	}
	if err := s.failed(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	// What failed for want of a leader goes out before what comes after
	// it, once the stream has one again.
	if err := s.publishAgain(ctx, false); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	for it.Next() {
		r := it.Record()
		subj, err := s.route.subject(r.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		// A copy: the message is published again if the stream has no
		// leader, after Write returned and the batch was reused.
		m := &nats.Msg{Subject: subj, Data: bytes.Clone(r.Value)}
		if len(r.Key) > 0 {
			m.Header = nats.Header{KeyHeader: []string{string(r.Key)}}
		}
		if s.cfg.Timestamps && r.Timestamp != 0 {
			if m.Header == nil {
				m.Header = nats.Header{}
			}
			stamp(m.Header, r.Timestamp, nil)
		}
		if err := s.pub.publish(ctx, s.route.stream, m); err != nil {
			return fmt.Errorf("%s: publish: %w", s, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	return nil
}

// writeFast adds the records to the open fast batch, opening one if
// needed. AddMsg waits while the server is behind (flow control), up to the
// ack timeout, until ctx ends, or until a message that no stream took ends
// the batch; a cancelled task stops at the next record, leaving the open
// batch to Close. A batch that fails for want of a leader is sent again as
// a new one (sendFast).
func (s *AtLeastOnce) writeFast(ctx context.Context, it *abi.Iter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	done := ctx.Done()
	for it.Next() {
		select {
		case <-done:
			return fmt.Errorf("%s: %w", s, ctx.Err())
		default:
		}
		r := it.Record() // its key checked (Write)
		s.pend.add(r.Key, r.Value, r.Timestamp)
		if err := s.sendFast(ctx); err != nil {
			s.fail(err)
			return fmt.Errorf("%s: %w", s, s.failed())
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	s.last = time.Now()
	if s.idle == nil && !s.closed {
		s.idle = time.AfterFunc(s.cfg.IdleCommit, s.commitIdle)
	}
	return nil
}

// unstored is commitThroughElection's check of the sink's subject against
// the subjects its stream stores now (route.unstored).
func (s *AtLeastOnce) unstored(subjects []string) error { return s.route.unstored(subjects, nil) }

// sendFast adds the pending messages not in the open batch to it, opening
// one if needed, through the stream's leader election
// (commitThroughElection): a batch that fails so is released, and the
// next try sends every message not acknowledged as a new batch.
func (s *AtLeastOnce) sendFast(ctx context.Context) error {
	return commitThroughElection(ctx, s.js, s.route.stream, s.unstored, func(ctx context.Context) (bool, error) {
		before := s.pend.len()
		err := s.addFast(ctx)
		return s.pend.len() < before, err
	})
}

// addFast adds the pending messages after those in the open batch to it,
// opening one if needed, and forgets those the server acknowledged. On a
// failure it releases the batch: its messages not acknowledged stay
// pending.
func (s *AtLeastOnce) addFast(ctx context.Context) error {
	if s.fp == nil {
		berr := &batchErr{}
		s.fp = newFastBatch(s.js.Conn(), s.route.stream, fastFlow, fastOutstanding, s.cfg.Timeout, berr.set)
		s.fpErr, s.sent, s.acked = berr, 0, 0
		if s.m == nil {
			s.m, s.key, s.ts = &nats.Msg{Subject: s.cfg.Subject, Header: nats.Header{}}, []string{""}, []string{""}
		}
	}
	// The publisher encodes the message before AddMsg returns and keeps
	// nothing of it: one message and header map serve them all.
	for s.sent-s.acked < s.pend.len() {
		key, value := s.pend.at(s.sent - s.acked)
		subj, err := s.route.subject(key)
		if err != nil {
			return err
		}
		s.m.Subject, s.m.Data = subj, value
		if len(key) > 0 {
			s.key[0] = string(key)
			s.m.Header[KeyHeader] = s.key
		} else {
			delete(s.m.Header, KeyHeader)
		}
		if s.cfg.Timestamps {
			stamp(s.m.Header, s.pend.timestamp(s.sent-s.acked), s.ts)
		}
		acked, err := s.fp.AddMsg(ctx, s.m)
		if err != nil {
			err = leaderLost(s.fpErr.with(err))
			s.releaseBatch()
			return err
		}
		s.sent++
		s.ackTo(int(acked))
	}
	return nil
}

// ackTo forgets the messages of the open batch up to its message n, which
// the server acknowledged (gap mode "fail": every one before it is
// stored too).
func (s *AtLeastOnce) ackTo(n int) {
	if n > s.acked {
		s.pend.drop(n - s.acked)
		s.acked = n
	}
}

// releaseBatch ends the open batch without waiting for the server; its
// messages not acknowledged stay pending, for the next batch.
func (s *AtLeastOnce) releaseBatch() {
	if s.fp != nil {
		s.fp.release()
	}
	s.fp, s.fpErr, s.sent, s.acked = nil, nil, 0, 0
}

// commitIdle commits the open fast batch once no record came for
// IdleCommit, so a quiet input does not let the server drop it.
func (s *AtLeastOnce) commitIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = nil
	if s.fp == nil && s.fill == nil || s.closed {
		return
	}
	if wait := s.cfg.IdleCommit - time.Since(s.last); wait > 0 {
		s.idle = time.AfterFunc(wait, s.commitIdle)
		return
	}
	if s.mode == PublishAtomic {
		s.cut()
		return
	}
	if err := s.commitLocked(s.bg); err != nil && s.bg.Err() == nil {
		s.fail(err)
	}
}

// commitLocked commits the open fast batch, or sends what is pending as a
// new one and commits it, and checks that the server stored all of it,
// through the stream's leader election (commitThroughElection).
func (s *AtLeastOnce) commitLocked(ctx context.Context) error {
	return commitThroughElection(ctx, s.js, s.route.stream, s.unstored, func(ctx context.Context) (bool, error) {
		before := s.pend.len()
		if s.pend.len() == 0 {
			s.releaseBatch()
			return false, nil
		}
		if err := s.addFast(ctx); err != nil {
			return s.pend.len() < before, err
		}
		fp, berr, n := s.fp, s.fpErr, s.sent
		s.fp, s.fpErr = nil, nil // Close ends it, whatever it answers
		ack, err := fp.Close(ctx)
		if err != nil {
			s.sent, s.acked = 0, 0
			return s.pend.len() < before, fmt.Errorf("batch of %d messages: %w", n, leaderLost(berr.with(err)))
		}
		// The server ends a batch early at a gap or an error and
		// acknowledges what it stored up to there.
		s.ackTo(int(ack.BatchSize))
		s.sent, s.acked = 0, 0
		if int(ack.BatchSize) != n {
			return true, fmt.Errorf("the server stored %d of a batch of %d messages: %w", ack.BatchSize, n, jetstreamext.ErrFastBatchGapDetected)
		}
		return true, nil
	})
}

// writeAtomic adds the records to the batch being filled, cutting it
// into the queue when it holds BatchSize messages (or the next record
// would take it past MaxAtomicChunkBytes), where the sender publishes it.
// With maxQueuedBatches cut and not yet stored, it waits for the sender,
// until ctx ends or the sink fails.
func (s *AtLeastOnce) writeAtomic(ctx context.Context, it *abi.Iter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failed(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	for it.Next() {
		r := it.Record() // its key checked (Write)
		if s.fill != nil && len(s.fill.recs.buf)+len(r.Key)+len(r.Value) > MaxAtomicChunkBytes {
			s.cut()
		}
		if s.fill == nil {
			s.fill = &atomicBatch{id: nuid.Next()}
		}
		s.fill.recs.add(r.Key, r.Value, r.Timestamp)
		if s.fill.recs.len() >= s.batch {
			s.cut()
		}
		for len(s.queue) >= maxQueuedBatches {
			if err := s.awaitSender(ctx); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	s.last = time.Now()
	if s.fill != nil && s.idle == nil && !s.closed {
		s.idle = time.AfterFunc(s.cfg.IdleCommit, s.commitIdle)
	}
	return nil
}

// cut queues the batch being filled, if any, for the sender, and starts
// the sender if it does not run. s.mu is held.
func (s *AtLeastOnce) cut() {
	if s.fill == nil {
		return
	}
	s.queue = append(s.queue, s.fill)
	s.fill = nil
	if !s.sending && !s.closed {
		s.sending = true
		s.wg.Add(1)
		go s.sendBatches()
	}
}

// awaitSender waits, with s.mu released, until the sender stored a batch
// or stopped, and returns the sink's failure, if any; or ctx's error.
// s.mu is held.
func (s *AtLeastOnce) awaitSender(ctx context.Context) error {
	if err := s.failed(); err != nil {
		return err
	}
	if !s.sending {
		return errors.New("the sink is closed") // only Close stops a sender with batches queued and no failure
	}
	moved := s.moved
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-moved:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for atomic batches to be stored: %w", ctx.Err())
	}
}

// sendBatches publishes the queued atomic batches one after the other,
// oldest first, each once the one before it is stored (so the stream
// keeps the output's order), until none is left, the sink fails, or Close
// stops it. A batch that fails for want of a leader (or that got no
// answer) is sent again whole (sendBatch).
func (s *AtLeastOnce) sendBatches() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.failed() == nil && s.bg.Err() == nil {
		b := s.queue[0]
		s.mu.Unlock()
		err := s.sendBatch(s.bg, b)
		s.mu.Lock()
		if err != nil {
			s.fail(err)
		} else {
			s.queue[0] = nil
			s.queue = s.queue[1:]
		}
		s.signal()
	}
	s.sending = false
	s.signal()
}

// signal wakes those waiting for the sender (awaitSender). s.mu is held.
func (s *AtLeastOnce) signal() {
	close(s.moved)
	s.moved = make(chan struct{})
}

// sendBatch publishes b as one atomic batch and waits until it is stored,
// through the stream's leader election (commitThroughElection): a try
// that fails so is followed by the whole batch again, with the same
// message id on its first message, so that the stream refuses it as a
// duplicate if the try was stored after all. Its error does not name the
// sink.
func (s *AtLeastOnce) sendBatch(ctx context.Context, b *atomicBatch) error {
	n := b.recs.len()
	return commitThroughElection(ctx, s.js, s.route.stream, s.unstored, func(ctx context.Context) (bool, error) {
		err := publishAtomicBatch(ctx, s.js.Conn(), &s.route, n, b.recs.record, s.cfg.Timestamps, b.id, "", s.cfg.Timeout)
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID:
			return false, nil // stored by an earlier try
		case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicBatchTooLarge:
			return false, fmt.Errorf("atomic batch of %d messages: %w (the server's max_batch_size is below it: lower the atomic batch size, -atomic-batch, or raise the server's limit)", n, err)
		case err != nil:
			return false, fmt.Errorf("atomic batch of %d messages: %w", n, err)
		}
		return false, nil
	})
}

// awaitBatches queues the batch being filled and waits until every batch
// queued is stored, the sink fails, or ctx ends. Its error does not name
// the sink.
func (s *AtLeastOnce) awaitBatches(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut()
	for len(s.queue) > 0 {
		if err := s.awaitSender(ctx); err != nil {
			return err
		}
	}
	return s.failed()
}

// wait blocks until every published message is acknowledged. Its error
// does not name the sink.
func (s *AtLeastOnce) wait(ctx context.Context) error {
	if s.mode == PublishAtomic {
		return s.awaitBatches(ctx)
	}
	if s.mode == PublishFast {
		s.mu.Lock()
		err := s.commitLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
		}
		return s.failed()
	}
	if err := s.publishAgain(ctx, true); err != nil {
		s.fail(err)
	}
	return s.failed()
}

// asyncFailed records err, the failure of the async publish of m: one for
// want of a leader (natsconn.Leaderless, leaderLost) to publish m again
// (publishAgain), any other as the sink's failure.
func (s *AtLeastOnce) asyncFailed(m *nats.Msg, err error) {
	s.pub.publishFailed(err)
	if err = leaderLost(err); !natsconn.Leaderless(err) || m == nil {
		s.fail(err)
		return
	}
	s.emu.Lock()
	s.again, s.why = append(s.again, m), err
	s.emu.Unlock()
}

// publishAgain publishes again, in the order they failed, the async
// publishes that failed for want of a leader, until every one is
// acknowledged, through the stream's leader election
// (commitThroughElection). With all set, it first waits for every
// publish out to be acknowledged or to fail; else it returns at once when
// none failed. Its error does not name the sink.
func (s *AtLeastOnce) publishAgain(ctx context.Context, all bool) error {
	if !all {
		s.emu.Lock()
		n := len(s.again)
		s.emu.Unlock()
		if n == 0 {
			return nil
		}
	}
	return commitThroughElection(ctx, s.js, s.route.stream, s.unstored, func(ctx context.Context) (bool, error) {
		// Every publish out is answered (or timed out) first: a failure
		// still to come is published again in this try.
		if err := s.pub.awaitAcks(ctx, s.route.stream); err != nil {
			return false, err
		}
		if err := s.failed(); err != nil {
			return false, err
		}
		s.emu.Lock()
		msgs, why := s.again, s.why
		s.again, s.why = nil, nil
		s.emu.Unlock()
		if len(msgs) == 0 {
			return false, nil
		}
		for i, m := range msgs {
			// A publish that got no answer may be stored yet (by a
			// leader that kept it until it had a quorum again): its
			// tries from the second on carry one message id, so that
			// the stream stores it once more at most.
			if m.Header.Get(jetstream.MsgIDHeader) == "" {
				if m.Header == nil {
					m.Header = nats.Header{}
				}
				m.Header.Set(jetstream.MsgIDHeader, nuid.Next())
			}
			if err := s.pub.publish(ctx, s.route.stream, m); err != nil {
				s.emu.Lock()
				s.again = append(msgs[i:], s.again...)
				s.emu.Unlock()
				return false, fmt.Errorf("publish: %w", err)
			}
		}
		if err := s.pub.awaitAcks(ctx, s.route.stream); err != nil {
			return false, err
		}
		if err := s.failed(); err != nil {
			return false, err
		}
		s.emu.Lock()
		left := len(s.again)
		if left > 0 {
			why = s.why
		}
		s.emu.Unlock()
		if left > 0 {
			return left < len(msgs), fmt.Errorf("%d of %d messages published again: %w", left, len(msgs), why)
		}
		return true, nil
	})
}

// PreCommit waits until everything written so far is stored.
func (s *AtLeastOnce) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := s.wait(ctx); err != nil {
		return nil, fmt.Errorf("%s: checkpoint %d: %w", s, id, err)
	}
	return nil, nil
}

// Commit does nothing: the output is already stored.
func (s *AtLeastOnce) Commit(ctx context.Context, id int64) error { return nil }

// Recover does nothing.
func (s *AtLeastOnce) Recover(ctx context.Context, id int64, state []byte) error { return nil }

// EndOfInput waits until everything written is stored.
func (s *AtLeastOnce) EndOfInput(ctx context.Context) error {
	if err := s.wait(ctx); err != nil {
		return fmt.Errorf("%s: end of input: %w", s, err)
	}
	return nil
}

// Close stops the idle commit and the atomic batches' sender, and ends a
// fast batch still open without waiting for the server: what they hold is
// not covered by a completed checkpoint, so a recovery replays it. The connection belongs to the
// caller, and is left as the sink found it (async publishes' subscription
// dropped).
func (s *AtLeastOnce) Close() error {
	s.stop() // an idle commit, or the atomic batches' sender, waiting out an election
	s.mu.Lock()
	s.closed = true
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.releaseBatch()
	s.mu.Unlock()
	// The atomic batches' sender ends with its context: what it had not
	// stored is not covered by a completed checkpoint either.
	s.wg.Wait()
	// Async publishes subscribed to their acknowledgements on the
	// caller's connection, with a goroutine listening to its status:
	// they outlive the sink unless dropped. What is still out is not
	// covered by a completed checkpoint, and a recovery replays it.
	s.js.CleanupPublisher()
	return nil
}

// sinkName is how a JetStream sink of guarantee g names itself in its
// errors: by name, with its subject and stream, or, without a name, by
// its subject.
func sinkName(g, name, subject, stream string) string {
	if name == "" {
		return fmt.Sprintf("%s sink %s (stream %s)", g, subject, stream)
	}
	return fmt.Sprintf("%s sink %s (subject %s, stream %s)", g, name, subject, stream)
}
