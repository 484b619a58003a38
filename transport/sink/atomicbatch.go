package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
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
// AtomicCommitWait(timeout, n). It streams: each message goes to the
// connection as it is made, so the server stages the batch while the rest
// is still being written, and one message and header set are reused
// throughout (the connection copies each out before PublishMsg returns).
// Only the commit (the last message) is a request; a message the server
// refused on the way makes it fail the commit. An answer with an error is
// returned as a *refusedBatch wrapping the *jetstream.APIError.
func publishAtomicBatch(ctx context.Context, nc *nats.Conn, rt *route, n int, rec func(i int) (key, value []byte, ts int64), times bool, id, lastID string, timeout time.Duration) error {
	batchID := nuid.Next()
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
			return fmt.Errorf("message %d of the batch: %w", i+1, err)
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
				return fmt.Errorf("message %d of the batch: %w", i+1, err)
			}
			continue
		}
		h[jetstreamext.BatchCommitHeader] = []string{"1"}
	}
	wait := AtomicCommitWait(timeout, n)
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(rctx, m)
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
	if ack.Stream == "" || ack.Batch != batchID || ack.Count != n {
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
