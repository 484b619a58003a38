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

// AtLeastOnceConfig configures an at-least-once JetStream sink.
type AtLeastOnceConfig struct {
	// Subject is what the sink publishes on, or a keyed template
	// ("out.{key}": each record on "out." and its key); a stream must
	// capture it.
	Subject string
	// Stream is that stream; empty: the stream that captures Subject.
	Stream string
	// Publish is how records are published: PublishAuto (default) is
	// PublishFast where the stream allows batched publish, PublishAsync
	// elsewhere. PublishAtomic is for exactly-once sinks only.
	Publish PublishMode
	// MaxPending bounds unacknowledged messages in async mode (default
	// 4096): Write blocks beyond it.
	MaxPending int
	// Timeout bounds the wait for an acknowledgement (default
	// DefaultAtLeastOnceTimeout).
	Timeout time.Duration
	// IdleCommit is how long a fast batch stays open without a record
	// before the sink commits it (default 1s): the server drops a batch
	// that sees no message for 10s.
	IdleCommit time.Duration
}

// AtLeastOnce publishes records to a JetStream stream as they are written
// and waits at every checkpoint until all are stored, so a completed
// checkpoint implies the output before it is stored. In PublishFast mode
// the records go out as one fast-ingest batch per checkpoint (the server
// acknowledges every few hundred messages instead of each one, and a
// message lost on the way ends the batch, which fails the checkpoint: the
// job recovers and replays). In PublishAsync mode each record is its own
// asynchronous publish.
//
// While the stream elects a leader (a server's loss in a cluster) the sink
// publishes again what the stream has not acknowledged, for up to
// natsconn.ElectionWait from the first failure since it last got further
// (commitThroughElection): a fast batch starts again as a new batch from
// the first message not acknowledged, so the stream keeps the output's
// order; async publishes that failed go out again before the next write's,
// in the order they failed (which plain async publish does not keep: the
// client times out, or retries on no responders, each on its own timer),
// each with a message id from its second try on. Some may be stored twice
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
	idle   *time.Timer
	closed bool
}

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
// acknowledged, oldest first, in one buffer.
type pending struct {
	buf   []byte
	ends  [][2]int // each message's key end and value end in buf
	first int      // ends[first:] are pending; those before were acknowledged
}

// add appends a copy of a message's key and value.
func (p *pending) add(key, value []byte) {
	p.buf = append(p.buf, key...)
	k := len(p.buf)
	p.buf = append(p.buf, value...)
	p.ends = append(p.ends, [2]int{k, len(p.buf)})
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
		p.buf, p.ends, p.first = p.buf[:0], p.ends[:0], 0
	case p.first > 1024 && p.first > len(p.ends)/2:
		base := p.ends[p.first-1][1]
		p.buf = p.buf[:copy(p.buf, p.buf[base:])]
		p.ends = p.ends[:copy(p.ends, p.ends[p.first:])]
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
	s.name = fmt.Sprintf("at-least-once sink %s (stream %s)", cfg.Subject, name)
	if s.route, err = newRoute(cfg.Subject, name, st.CachedInfo().Config.Subjects); err != nil {
		return nil, fmt.Errorf("at-least-once sink: %w", err)
	}
	if err := CheckDurable(st.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if s.mode, err = ResolveAtLeastOnceMode(cfg.Publish, st.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	s.bg, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// ResolveAtLeastOnceMode is the mode an at-least-once sink configured with
// mode publishes in on a stream configured as stream: PublishAuto becomes
// PublishFast where the stream allows batched publish, else PublishAsync.
func ResolveAtLeastOnceMode(mode PublishMode, stream jetstream.StreamConfig) (PublishMode, error) {
	if mode == PublishAtomic {
		return "", errors.New("publish mode atomic is for exactly-once sinks; at-least-once publishes fast or async")
	}
	resolved, err := ResolvePublishMode(mode, stream)
	if err != nil {
		return "", err
	}
	if resolved == PublishAtomic { // auto on a stream that allows atomic but not batched publish
		resolved = PublishAsync
	}
	return resolved, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (s *AtLeastOnce) Guarantee() string { return AtLeastOnceGuarantee }

// String names the sink in its errors: "at-least-once sink <subject>
// (stream <name>)".
func (s *AtLeastOnce) String() string { return s.name }

// Mode reports how the sink publishes: PublishFast or PublishAsync.
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

// Write publishes every record of batch. A keyed sink checks every key of
// the batch first: a bad one fails the write with nothing of the batch
// published.
func (s *AtLeastOnce) Write(ctx context.Context, batch []byte) error {
	if err := s.route.check(batch); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	if s.mode == PublishFast {
		return s.writeFast(ctx, &it)
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
		s.pend.add(r.Key, r.Value)
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

// sendFast adds the pending messages not in the open batch to it, opening
// one if needed, through the stream's leader election
// (commitThroughElection): a batch that fails so is released, and the
// next try sends every message not acknowledged as a new batch.
func (s *AtLeastOnce) sendFast(ctx context.Context) error {
	return commitThroughElection(ctx, s.js, s.route.stream, func(ctx context.Context) (bool, error) {
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
			s.m, s.key = &nats.Msg{Subject: s.cfg.Subject, Header: nats.Header{}}, []string{""}
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
	if s.fp == nil || s.closed {
		return
	}
	if wait := s.cfg.IdleCommit - time.Since(s.last); wait > 0 {
		s.idle = time.AfterFunc(wait, s.commitIdle)
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
	return commitThroughElection(ctx, s.js, s.route.stream, func(ctx context.Context) (bool, error) {
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

// wait blocks until every published message is acknowledged. Its error
// does not name the sink.
func (s *AtLeastOnce) wait(ctx context.Context) error {
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
	return commitThroughElection(ctx, s.js, s.route.stream, func(ctx context.Context) (bool, error) {
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

// Close stops the idle commit and ends a fast batch still open without
// waiting for the server: what it holds is not covered by a completed
// checkpoint, so a recovery replays it. The connection belongs to the
// caller, and is left as the sink found it (async publishes' subscription
// dropped).
func (s *AtLeastOnce) Close() error {
	s.stop() // an idle commit waiting out an election
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.releaseBatch()
	// Async publishes subscribed to their acknowledgements on the
	// caller's connection, with a goroutine listening to its status:
	// they outlive the sink unless dropped. What is still out is not
	// covered by a completed checkpoint, and a recovery replays it.
	s.js.CleanupPublisher()
	return nil
}
