package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// batchAck is the server's answer to the commit of an atomic batch.
type batchAck struct {
	Error  *jetstream.APIError `json:"error,omitempty"`
	Stream string              `json:"stream"`
	Batch  string              `json:"batch"`
	Count  int                 `json:"count"`
}

// publishAtomicBatch publishes n records (at least one; rec(i) is record
// i's key, value and timestamp, the last published in TimeHeader where
// times is set) through nc as one atomic batch on the subjects of rt, the
// first message with message id id and the last with lastID (none where
// ""), and waits for the server's answer to its commit, up to
// AtomicCommitWait(timeout, n): stageAtomicBatch under a new batch id,
// then the batch's send and wait.
func publishAtomicBatch(ctx context.Context, nc *nats.Conn, rt *route, n int, rec func(i int) (key, value []byte, ts int64), times bool, id, lastID string, timeout time.Duration) error {
	b, err := stageAtomicBatch(nc, newBatchID(), rt, n, rec, times, id, lastID)
	if err != nil {
		return err
	}
	if err := b.send(); err != nil {
		return err
	}
	return b.wait(ctx, timeout)
}

// batchIDChars are the characters of an atomic batch's id: letters and
// digits, but no capital N. nats-server looks for each of a dozen
// "Nats-…" headers in every message of a batch, several times over, by a
// search for their first letter; an N in the id would be one more false
// start in each of those searches.
const batchIDChars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMOPQRSTUVWXYZ"

// batchIDLen is the length of an atomic batch's id: 61^7, some 3·10^12
// ids, for the batches a stream has open at once (a few per sink task),
// and short enough that a batch message's headers — the id and the
// message's sequence in the batch, up to 99 999 — stay within 64 bytes,
// which the server's header searches read fastest.
const batchIDLen = 7

// newBatchID returns a random atomic batch id. Two batches open on one
// stream under one id fail each other's commit: the server drops the
// batch at the second first message (a gap in the batch sequence), and
// every later message of either finds no batch. Nothing of either is
// stored; the exactly-once sink streams its batch again under a new id
// (commitChunk, TestRepeatedBatchID).
func newBatchID() string {
	var b [batchIDLen]byte
	r := rand.Uint64()
	for i := range b {
		b[i] = batchIDChars[r%uint64(len(batchIDChars))]
		r /= uint64(len(batchIDChars))
	}
	return string(b[:])
}

// pendingBatch is an atomic batch streamed to the server but for its last
// message, the commit (stageAtomicBatch). The server keeps what it staged
// until the commit comes, or drops it after its batch timeout: a batch
// never sent is abandoned, nothing of it is stored.
type pendingBatch struct {
	nc     *nats.Conn
	id     string    // the batch's id
	n      int       // messages
	commit *nats.Msg // the last message, with the commit header
	sub    *nats.Subscription
}

// stageAtomicBatch streams the first n-1 of n records (rec(i) is record
// i's key, value and timestamp, published in TimeHeader where times is
// set; it is called once for each i, in order) through nc as atomic batch
// batchID (newBatchID) on the subjects of rt, the first
// message with message id id and the last with lastID (none where ""),
// and returns the batch with its commit unsent. Each message goes to the
// connection as it is made, so the server stages the batch while the rest
// is still being written; one header set is reused throughout (the
// connection copies each message out before PublishMsg returns), the
// commit's is its own.
func stageAtomicBatch(nc *nats.Conn, batchID string, rt *route, n int, rec func(i int) (key, value []byte, ts int64), times bool, id, lastID string) (*pendingBatch, error) {
	seq := []string{""}
	h := nats.Header{jetstreamext.BatchIDHeader: {batchID}, jetstreamext.BatchSeqHeader: seq}
	m := &nats.Msg{Header: h}
	setID := func(id string) {
		if id == "" {
			delete(h, jetstream.MsgIDHeader)
		} else {
			h[jetstream.MsgIDHeader] = []string{id}
		}
	}
	for i := range n {
		key, value, ts := rec(i)
		subj, err := rt.subject(key)
		if err != nil {
			return nil, fmt.Errorf("message %d of the batch: %w", i+1, err)
		}
		m.Subject = subj
		switch i {
		case 0:
			setID(id)
		case n - 1:
			setID(lastID)
		case 1:
			delete(h, jetstream.MsgIDHeader)
		}
		if len(key) > 0 {
			h[KeyHeader] = []string{string(key)}
		} else {
			delete(h, KeyHeader)
		}
		if times {
			stamp(h, ts, nil)
		}
		seq[0] = strconv.Itoa(i + 1)
		m.Data = value
		if i < n-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, fmt.Errorf("message %d of the batch: %w", i+1, err)
			}
			continue
		}
		h[jetstreamext.BatchCommitHeader] = []string{"1"}
	}
	return &pendingBatch{nc: nc, id: batchID, n: n, commit: m}, nil
}

// send sends the batch's commit, its answer to come to an inbox of its
// own (wait reads it).
func (b *pendingBatch) send() error {
	sub, err := b.nc.SubscribeSync(b.nc.NewInbox())
	if err != nil {
		return fmt.Errorf("commit of the batch of %d messages: %w", b.n, err)
	}
	b.sub = sub
	b.commit.Reply = sub.Subject
	if err := b.nc.PublishMsg(b.commit); err != nil {
		b.close()
		return fmt.Errorf("commit of the batch of %d messages: %w", b.n, err)
	}
	return nil
}

// close drops the subscription to the commit's answer, if any.
func (b *pendingBatch) close() {
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
		b.sub = nil
	}
}

// wait waits for the server's answer to the commit send sent, up to
// AtomicCommitWait(timeout, n). A message the server refused on the way
// makes it fail the commit. An answer with an error is returned as a
// *refusedBatch wrapping the *jetstream.APIError.
func (b *pendingBatch) wait(ctx context.Context, timeout time.Duration) error {
	defer b.close()
	n := b.n
	wait := AtomicCommitWait(timeout, n)
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := b.sub.NextMsgWithContext(rctx)
	if err == nil && len(resp.Data) == 0 && resp.Header.Get("Status") == "503" {
		err = nats.ErrNoResponders
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("commit of the batch of %d messages: %w", n, err) // answered at once
	}
	if err != nil {
		return fmt.Errorf("commit of the batch of %d messages (waited %s): %w", n, wait, err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return fmt.Errorf("commit of the batch: %w: %q", jetstream.ErrInvalidJSAck, resp.Data)
	}
	if ack.Error != nil {
		return &refusedBatch{n: n, err: ack.Error}
	}
	if ack.Stream == "" || ack.Batch != b.id || ack.Count != n {
		return fmt.Errorf("commit of the batch: %w: %q", jetstreamext.ErrInvalidBatchAck, resp.Data)
	}
	return nil
}

// refusedBatch is the server's refusal of an atomic batch of n messages,
// stored none of them: a stream's limit reached says so (streamFull).
type refusedBatch struct {
	n   int
	err error // the server's *jetstream.APIError
}

func (e *refusedBatch) Error() string { return e.err.Error() }
func (e *refusedBatch) Unwrap() error { return e.err }
