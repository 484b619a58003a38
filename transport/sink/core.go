// Package sink writes a task's output records to NATS: a core subject
// (at-most-once), a JetStream stream at-least-once (a fast-ingest batch
// per checkpoint where the stream allows batched publish, atomic batches
// as they fill on a server that fsyncs every write, else asynchronous
// publishes; acknowledgements awaited at every checkpoint), or a JetStream stream
// exactly-once (output staged in the checkpoint and published when the
// checkpoint completes, with deterministic message ids that JetStream
// deduplicates).
//
// Every record becomes one NATS message: data = the record's value, the
// Weir-Key header = its key (omitted when empty), and, where the sink is
// asked to, the Weir-Time header = its timestamp (TimeHeader). A sink's
// subject is fixed,
// or keyed: "counts.{key}" publishes each record on "counts." followed by
// its key (see transport/subject); a key that cannot form a subject fails
// the write with an error wrapping ErrBadKey, and a record whose message
// would exceed the server's max_payload one wrapping ErrRecordTooLarge,
// before anything of the batch is published or staged.
//
// An exactly-once sink's staged output belongs to the subject and stream it
// was staged for, which its state records: a restore whose spec changed the
// sink's subject or stream re-commits each staged checkpoint where it was
// staged — the commit a crash cut stored part of it there — and publishes
// only output staged since on the new subject and stream. Staged output
// its stream can no longer take fails the recovery before anything is
// published (ErrStagedSubjectNotStored, ErrStagedStreamNotFound).
//
// On a NATS cluster, a stream whose leader's server is gone has none for a
// few seconds while its replicas elect one. Sinks wait that out where a
// task would otherwise fail and its job fail over: at their start
// (throughElection) and as they publish (commitThroughElection) — an
// exactly-once commit, the re-commit in Recover, an at-least-once sink's
// batches and checkpoints publish again what the stream did not
// acknowledge, in order, for up to natsconn.ElectionWait from the first
// failure since they last got further. A stream that is gone, or any
// other answer, fails them at once.
package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/natsconn"
)

// KeyHeader carries a record's key.
const KeyHeader = "Weir-Key"

// TimeHeader carries a record's timestamp, milliseconds since the Unix
// epoch in decimal, where a sink is asked to publish it (Core.Timestamps,
// AtLeastOnceConfig.Timestamps, ExactlyOnceConfig.Timestamps) and the
// record has one (not 0). It is the header sources read a record's time
// from (source.TimeHeader), so a job reading another's output reads the
// event time the first one gave.
const TimeHeader = "Weir-Time"

// stamp sets h's TimeHeader to ts, or removes it where ts is 0; v, if
// not nil, is a one-element slice reused for its value.
func stamp(h nats.Header, ts int64, v []string) {
	if ts == 0 {
		delete(h, TimeHeader)
		return
	}
	if v == nil {
		v = make([]string, 1)
	}
	v[0] = strconv.FormatInt(ts, 10)
	h[TimeHeader] = v
}

// CoreGuarantee is the delivery guarantee of a core-subject sink.
const CoreGuarantee = "at-most-once: core NATS subject (subscribers that are down or slow miss messages, and so does every subscriber what was on its way when the worker's connection was lost; a replay after recovery may repeat some)"

// Core publishes records on a core NATS subject.
type Core struct {
	// Timestamps, set before the first Write, publishes each record's
	// timestamp in TimeHeader.
	Timestamps bool

	nc      *nats.Conn
	subject string
	route   route
}

// NewCore returns a sink that publishes on subj, a subject or a keyed
// template ("out.{key}").
func NewCore(nc *nats.Conn, subj string) (*Core, error) {
	if subj == "" {
		return nil, fmt.Errorf("core sink: empty subject")
	}
	r, err := newRoute(subj, "", nil)
	if err != nil {
		return nil, fmt.Errorf("core sink: %w", err)
	}
	return &Core{nc: nc, subject: subj, route: r}, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (c *Core) Guarantee() string { return CoreGuarantee }

// Write publishes every record of batch without waiting. It checks every
// record of the batch first — a keyed sink its key, every sink its size
// against the server's max_payload (ErrRecordTooLarge) —: a bad one fails
// the write with nothing of the batch published.
func (c *Core) Write(ctx context.Context, batch []byte) error {
	if err := c.route.check(batch); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	if err := checkSizes(batch, c.nc.MaxPayload(), coreHeadersMost, false, func(r abi.Record) int64 { return coreHeaders(r, c.Timestamps) }); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	for it.Next() {
		r := it.Record()
		subj, err := c.route.subject(r.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		switch {
		case c.Timestamps && r.Timestamp != 0:
			m := keyedMsg(subj, r)
			if len(r.Key) == 0 {
				delete(m.Header, KeyHeader)
			}
			stamp(m.Header, r.Timestamp, nil)
			err = c.nc.PublishMsg(m)
		case len(r.Key) == 0:
			err = c.nc.Publish(subj, r.Value)
		default:
			err = c.nc.PublishMsg(keyedMsg(subj, r))
		}
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			// The connection is down and nats.go's buffer for what is
			// published meanwhile is full: wait for it to be back.
			if err = c.flush(ctx); err == nil {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("%s: publish: %w", c, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	return nil
}

func keyedMsg(subj string, r abi.Record) *nats.Msg {
	return &nats.Msg{Subject: subj, Data: r.Value, Header: nats.Header{KeyHeader: []string{string(r.Key)}}}
}

// String names the sink in its errors: "core sink <subject>".
func (c *Core) String() string { return "core sink " + c.subject }

// flush waits until the server has what the sink published, or ctx
// ends; without a deadline on ctx, for natsconn.DefaultFlushTimeout at
// most. A connection lost meanwhile does not fail it: nats.go reconnects
// and sends what was published while it was down (its reconnect buffer),
// and what was on its way when the connection went may be lost, as an
// at-most-once sink allows (CoreGuarantee) — failing the task for it
// would restart the job, which loses as much and repeats output besides.
// So a flush that the loss cut short is made again, once the connection
// is back. A connection closed for good fails it (nats.ErrConnectionClosed).
func (c *Core) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, natsconn.DefaultFlushTimeout)
		defer cancel()
	}
	for {
		// nats.go ends a flush the connection's loss cut short with
		// ErrConnectionClosed, as one on a connection closed for good.
		err := c.nc.FlushWithContext(ctx)
		if err == nil || !errors.Is(err, nats.ErrConnectionClosed) || c.nc.IsClosed() {
			return err
		}
		// Not a busy loop should the next flush end as fast.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// PreCommit flushes the connection (flush); a core sink stages nothing.
func (c *Core) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := c.flush(ctx); err != nil {
		return nil, fmt.Errorf("%s: checkpoint %d: flush: %w", c, id, err)
	}
	return nil, nil
}

// Commit does nothing.
func (c *Core) Commit(ctx context.Context, id int64) error { return nil }

// Recover does nothing.
func (c *Core) Recover(ctx context.Context, id int64, state []byte) error { return nil }

// EndOfInput flushes the connection (flush).
func (c *Core) EndOfInput(ctx context.Context) error {
	if err := c.flush(ctx); err != nil {
		return fmt.Errorf("%s: end of input: flush: %w", c, err)
	}
	return nil
}

// Close does nothing; the connection belongs to the caller.
func (c *Core) Close() error { return nil }
