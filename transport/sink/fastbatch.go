package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// fastBatch is a JetStream fast-ingest batch in gap mode "fail": the part
// of jetstreamext v0.3.2's FastPublisher the sinks use, with one change.
// The server answers a batch message that no stream takes (the stream was
// deleted, or a clustered stream has no leader) with a bodiless "no
// responders" status on the message's reply subject. The FastPublisher
// reads that as a JSON syntax error, hands it to its error handler, and
// goes on waiting — for the first message's acknowledgement, for a flow
// acknowledgement when too many are missing, for the commit's answer —
// until its ack timeout (30 s at-least-once, 10 s exactly-once), and none
// of those waits can be cut short from outside: AddMsg takes no context.
// Here such a status ends the batch at once: in gap mode "fail" a message
// lost ends the batch anyway, and nothing will acknowledge it. Every
// wait, and every call after, returns the error that ended it, wrapping
// nats.ErrNoResponders. (jetstreamext v0.4.0 ends the first message's and
// the commit's waits so, but not a flow-control stall, and needs a newer
// nats.go.)
//
// The messages of a batch take the same path as the FastPublisher's: one
// lock, one reply subject and one core publish each; a message is not
// kept after AddMsg returns. It is used from one goroutine; its reply
// handler runs on the subscription's.
type fastBatch struct {
	nc      *nats.Conn
	stream  string        // the stream the batch goes to, for errors
	inbox   string        // the replies' subscription is inbox.>
	reply   string        // a message's reply subject up to its sequence: "<inbox>.<flow>.fail."
	maxOut  uint64        // acknowledgements missing before AddMsg waits
	timeout time.Duration // the longest wait for an answer
	onErr   func(error)   // the server's reports that do not end the batch (gaps, errors); called with mu held

	mu      sync.Mutex
	sub     *nats.Subscription
	buf     []byte // builds reply subjects
	seq     uint64 // messages sent, the commit included
	acked   uint64 // the server stored the batch's messages up to this one
	flow    uint64 // the server acknowledges every flow messages
	subject string // the first message's, for pings and the end-of-batch commit
	started bool   // the first message was acknowledged
	closed  bool   // committed, released or ended: no more messages
	acks    chan struct{}
	end     chan struct{}          // closed once the batch ended: a commit's answer or endErr
	endAck  *jetstreamext.BatchAck // the server's answer that ended the batch (to its commit, or early), once end is closed
	endErr  error                  // else what ended it
}

// Operations of a fast batch's message, the reply subject's second to last
// token (ADR-50).
const (
	fastOpStart  = 0
	fastOpAdd    = 1
	fastOpCommit = 2
	fastOpEOB    = 3 // end of batch: a commit without a message
	fastOpPing   = 4
)

// The header of a bodiless status reply, and the status of "no
// responders" (nats.go's own constants are not exported).
const (
	statusHeader       = "Status"
	noRespondersStatus = "503"
)

// errBatchEnded is a fast batch's answer to a call after it ended
// (committed or released).
var errBatchEnded = errors.New("fast batch ended")

// newFastBatch starts a fast batch to stream over nc: the server
// acknowledges every flow messages (it may ask for more often), AddMsg
// waits with maxOut acknowledgements missing, and no wait for the server
// lasts longer than timeout. onErr gets the server's reports that do not
// end the batch.
func newFastBatch(nc *nats.Conn, stream string, flow, maxOut uint16, timeout time.Duration, onErr func(error)) *fastBatch {
	b := &fastBatch{
		nc: nc, stream: stream, inbox: nc.NewInbox(), maxOut: uint64(maxOut), timeout: timeout, onErr: onErr,
		flow: uint64(flow), acks: make(chan struct{}, 1), end: make(chan struct{}),
	}
	b.reply = b.inbox + "." + strconv.FormatUint(uint64(flow), 10) + ".fail."
	return b
}

// replyTo sets m's reply subject for message seq of the batch, operation
// op. mu is held.
func (b *fastBatch) replyTo(m *nats.Msg, seq uint64, op int) {
	b.buf = append(b.buf[:0], b.reply...)
	b.buf = strconv.AppendUint(b.buf, seq, 10)
	b.buf = append(b.buf, '.', byte('0'+op))
	b.buf = append(b.buf, ".$FI"...)
	m.Reply = string(b.buf)
}

// AddMsg publishes m as the batch's next message and returns how many of
// the batch's first messages the server acknowledged as stored. The first
// message waits for its acknowledgement, and any other once the server is
// flow-control acknowledgements behind; a wait ends with ctx, at the
// timeout, or when the batch ends (a message no stream took). m is not
// kept; its Reply is set.
func (b *fastBatch) AddMsg(ctx context.Context, m *nats.Msg) (uint64, error) {
	b.mu.Lock()
	if b.closed {
		defer b.mu.Unlock()
		return b.acked, b.endedLocked()
	}
	b.seq++
	seq, op := b.seq, fastOpAdd
	if seq == 1 {
		op = fastOpStart
		sub, err := b.nc.Subscribe(b.inbox+".>", b.handle)
		if err != nil {
			b.closed = true
			b.mu.Unlock()
			return 0, err // names the subscription (a permissions violation, say)
		}
		b.sub, b.subject = sub, m.Subject
	}
	b.replyTo(m, seq, op)
	if err := b.nc.PublishMsg(m); err != nil {
		b.mu.Unlock()
		return 0, err // the sink names the record
	}
	if !b.behindLocked() {
		acked := b.acked
		b.mu.Unlock()
		return acked, nil
	}
	b.mu.Unlock()
	if err := b.await(ctx, b.behind); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.closeLocked()
		return b.acked, fmt.Errorf("batch message %d (acknowledged up to %d): %w", seq, b.acked, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acked, nil
}

// behindLocked reports whether AddMsg is to wait for an acknowledgement:
// the first message's, or one of the flow-control window's. mu is held.
func (b *fastBatch) behindLocked() bool {
	return !b.started || b.acked+b.flow*b.maxOut <= b.seq
}

// behind is behindLocked, taking mu.
func (b *fastBatch) behind() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.behindLocked()
}

// await waits while wait reports true, pinging the server every third of
// the timeout for an acknowledgement it may have lost, until ctx ends,
// the timeout passes (an error wrapping nats.ErrTimeout: the stream may
// be electing a leader), or the batch ends.
func (b *fastBatch) await(ctx context.Context, wait func() bool) error {
	deadline := time.NewTimer(b.timeout)
	defer deadline.Stop()
	ping := time.NewTicker(max(b.timeout/3, time.Millisecond))
	defer ping.Stop()
	for wait() {
		select {
		case <-b.acks:
		case <-b.end:
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.endedLocked()
		case <-ping.C:
			if err := b.ping(); err != nil {
				return err
			}
		case <-deadline.C:
			return fmt.Errorf("ack timeout: %w", nats.ErrTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ping asks the server for its latest acknowledgement of the batch.
func (b *fastBatch) ping() error {
	b.mu.Lock()
	m := &nats.Msg{Subject: b.subject}
	b.replyTo(m, b.seq, fastOpPing)
	b.mu.Unlock()
	if err := b.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// CommitMsg publishes m as the batch's last message and waits for the
// server's answer: how many messages of the batch it stored.
func (b *fastBatch) CommitMsg(ctx context.Context, m *nats.Msg) (*jetstreamext.BatchAck, error) {
	return b.commit(ctx, m, fastOpCommit)
}

// Close ends the batch without a message of its own and waits for the
// server's answer: how many messages of the batch it stored.
func (b *fastBatch) Close(ctx context.Context) (*jetstreamext.BatchAck, error) {
	b.mu.Lock()
	subject := b.subject
	b.mu.Unlock()
	return b.commit(ctx, &nats.Msg{Subject: subject}, fastOpEOB)
}

// commit publishes m, the batch's commit, and waits for the server's
// answer, pinging every third of the timeout (for an answer lost) until
// ctx ends, the timeout passes, or the batch ends otherwise. The batch is
// closed after it, whatever the answer.
func (b *fastBatch) commit(ctx context.Context, m *nats.Msg, op int) (*jetstreamext.BatchAck, error) {
	b.mu.Lock()
	if b.seq == 0 && op == fastOpEOB {
		b.mu.Unlock()
		return nil, jetstreamext.ErrEmptyBatch
	}
	if b.closed {
		defer b.mu.Unlock()
		return nil, b.endedLocked()
	}
	b.seq++
	if b.seq == 1 {
		sub, err := b.nc.Subscribe(b.inbox+".>", b.handle)
		if err != nil {
			b.closed = true
			b.mu.Unlock()
			return nil, fmt.Errorf("batch commit failed: %w", err)
		}
		b.sub, b.subject = sub, m.Subject
	}
	b.replyTo(m, b.seq, op)
	err := b.nc.PublishMsg(m)
	b.mu.Unlock()
	if err == nil {
		err = b.await(ctx, func() bool { return true }) // until the batch ends
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeLocked()
	if b.endAck != nil && b.endErr == nil {
		return b.endAck, nil
	}
	return nil, fmt.Errorf("batch commit failed: %w", err)
}

// release ends the batch without waiting for the server: it sends the
// end-of-batch commit and leaves at once, dropping the replies'
// subscription (and the goroutine nats.go runs for it) from the
// connection — a worker's connection outlives its tasks. The messages
// the batch sent are stored already; ending it only closes it. A batch
// that ended already is left as it is.
func (b *fastBatch) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if b.seq > 0 {
		b.seq++
		m := &nats.Msg{Subject: b.subject}
		b.replyTo(m, b.seq, fastOpEOB)
		_ = b.nc.PublishMsg(m) // best effort: else the server drops the batch after 10 s without a message
	}
	b.closeLocked()
}

// closeLocked takes no more messages and drops the replies' subscription.
// mu is held.
func (b *fastBatch) closeLocked() {
	b.closed = true
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
		b.sub = nil
	}
}

// endedLocked is the error a call gets after the batch ended: what the
// server answered, errBatchEnded for a batch committed or released. A
// batch the server ended with an acknowledgement before its commit (at a
// gap: a message lost on the way) fails as one with a gap. mu is held.
func (b *fastBatch) endedLocked() error {
	switch {
	case b.endErr != nil:
		return b.endErr
	case b.endAck != nil:
		return fmt.Errorf("the server ended the batch after storing %d of its messages: %w", b.endAck.BatchSize, jetstreamext.ErrFastBatchGapDetected)
	}
	return errBatchEnded
}

// finishLocked ends the batch with the server's answer to its commit
// (ack), or with err, and wakes whoever waits. mu is held.
func (b *fastBatch) finishLocked(ack *jetstreamext.BatchAck, err error) {
	select {
	case <-b.end:
		return // ended before
	default:
	}
	b.endAck, b.endErr = ack, err
	close(b.end)
	b.closeLocked()
}

// fastReply is the union of the server's replies to a fast batch: a flow
// acknowledgement ("ack"), a gap ("gap"), an error for one message ("err"),
// or, without a type, the answer to the commit (a jetstreamext.BatchAck,
// or an error).
type fastReply struct {
	Type    string              `json:"type"`
	Seq     uint64              `json:"seq"`
	Msgs    uint16              `json:"msgs"`
	LastSeq uint64              `json:"last_seq"`
	Error   *jetstream.APIError `json:"error,omitempty"`
}

// handle takes a reply of the server to the batch. A "no responders"
// status — no stream took the message — ends the batch, as does the answer
// to a commit (also one that ends the batch early, such as a stream's
// refusal of its first message). A reply that is not JSON is reported to
// onErr, as the FastPublisher does.
func (b *fastBatch) handle(m *nats.Msg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(m.Data) == 0 && m.Header.Get(statusHeader) == noRespondersStatus {
		b.finishLocked(nil, fmt.Errorf("stream %s took no message of the batch: %w; the stream is gone or has no leader", b.stream, nats.ErrNoResponders))
		return
	}
	var r fastReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		if b.onErr != nil {
			b.onErr(fmt.Errorf("stream %s answered the batch with a reply that is not JSON: %w", b.stream, err))
		}
		return
	}
	switch r.Type {
	case "ack":
		b.started = true
		if r.Msgs > 0 {
			b.flow = uint64(r.Msgs)
		}
		b.acked = max(b.acked, r.Seq)
		select {
		case b.acks <- struct{}{}:
		default:
		}
	case "gap":
		if b.onErr != nil {
			b.onErr(fmt.Errorf("%w: expected last sequence %d; current sequence %d", jetstreamext.ErrFastBatchGapDetected, r.LastSeq, r.Seq))
		}
	case "err":
		if b.onErr != nil {
			b.onErr(fmt.Errorf("error processing batch at sequence %d: %w", r.Seq, r.Error))
		}
	default:
		if r.Error != nil {
			b.finishLocked(nil, r.Error)
			return
		}
		var ack jetstreamext.BatchAck
		if err := json.Unmarshal(m.Data, &ack); err != nil || ack.Stream == "" {
			b.finishLocked(nil, fmt.Errorf("stream %s: %w: %q", b.stream, jetstreamext.ErrInvalidBatchAck, m.Data))
			return
		}
		b.acked = max(b.acked, ack.BatchSize)
		b.finishLocked(&ack, nil)
	}
}
