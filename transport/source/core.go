package source

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/abi"
)

// KeyHeader is the NATS message header whose value becomes a record's key
// under KeyFromHeader; a message without it yields an empty key.
const KeyHeader = "Weir-Key"

// TimeHeader is the NATS message header whose value, milliseconds since
// the Unix epoch in decimal, becomes a record's timestamp: the time the
// event happened, which its publisher knows (weir run -input -time and
// weir input -time set it), instead of the time the message was stored
// (JetStream) or taken (core NATS). A value that is not such a number, or
// is 0, is ignored: the record gets the time it would without it.
const TimeHeader = "Weir-Time"

// headerTime returns the timestamp h's TimeHeader gives, or 0.
func headerTime(h nats.Header) int64 {
	v := h.Get(TimeHeader)
	if v == "" {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return ms
}

// KeyFrom says where a source takes the key of each record it reads.
type KeyFrom int

const (
	// KeyFromHeader, the zero value, takes the key from the message's
	// KeyHeader (Weir-Key) header; a message without it yields an empty
	// key.
	KeyFromHeader KeyFrom = iota
	// KeyFromSubject takes the key from the full subject of the message,
	// e.g. "orders.eu.1234": the subject it was published to, or for a
	// JetStream source the subject the stream stored it under (after the
	// stream's subject transform, if any). A KeyHeader header is ignored.
	// It lets an operator see, and key by, the subject of messages whose
	// publishers never set KeyHeader.
	KeyFromSubject
)

// check reports an unknown KeyFrom.
func (k KeyFrom) check() error {
	if k != KeyFromHeader && k != KeyFromSubject {
		return fmt.Errorf("unknown key source %d", int(k))
	}
	return nil
}

// CoreGuarantee is the delivery guarantee of a core-subject source, for a
// job's status: what core NATS loses, which the job cannot get back.
const CoreGuarantee = "at-most-once: core NATS subject, no replay (messages published while the job is down or recovering are lost; " +
	"so are those that arrive while the job falls behind its input past the source's pending limit, and a cancel or stop discards what the subscription holds)"

// DefaultCorePendingMsgs and DefaultCorePendingBytes are the pending
// limits of a core source whose CoreConfig gives none: nats.go's own
// defaults for a subscription.
const (
	DefaultCorePendingMsgs  = nats.DefaultSubPendingMsgsLimit
	DefaultCorePendingBytes = nats.DefaultSubPendingBytesLimit
)

// CoreConfig configures a core NATS subject source.
type CoreConfig struct {
	// Subject may contain wildcards.
	Subject string
	// Queue, when set, makes parallel source subtasks share the subject as
	// a queue group: each message goes to one of them.
	Queue string
	// Key is where each record's key comes from: the Weir-Key header
	// (KeyFromHeader, the default) or the message's subject
	// (KeyFromSubject).
	Key KeyFrom
	// MaxBatchRecords and MaxBatchBytes bound one batch returned by Poll;
	// defaults 4096 records and 1 MiB.
	MaxBatchRecords, MaxBatchBytes int
	// PendingMsgs and PendingBytes bound what the NATS client buffers for
	// the subscription while Poll lags behind; past them it drops (core
	// NATS has no flow control), and Dropped counts those. 0 keeps the
	// defaults (DefaultCorePendingMsgs, DefaultCorePendingBytes: 500 000
	// messages, 64 MiB); -1 is unlimited.
	PendingMsgs, PendingBytes int
	// Job and Task name who reads through the source, for the log line
	// of a slow consumer (CoreOf); either may be empty.
	Job, Task string
}

// cores maps the subscription of every open Core to it (CoreOf).
var cores sync.Map

// CoreOf returns the open core source that reads through sub, if one
// does: a connection's asynchronous error handler, told that sub is a
// slow consumer, finds with it which job and task lose messages.
func CoreOf(sub *nats.Subscription) (*Core, bool) {
	if sub == nil {
		return nil, false
	}
	c, ok := cores.Load(sub)
	if !ok {
		return nil, false
	}
	return c.(*Core), true
}

// Config returns the source's configuration.
func (c *Core) Config() CoreConfig { return c.cfg }

// Core reads a core NATS subject. It is at-most-once: core NATS keeps no
// history, so there is nothing to rewind to after a failure; messages that
// arrive while the job is down, or that were read but not checkpointed, are
// lost. Its offset is always empty.
type Core struct {
	cfg CoreConfig
	acc *accumulator
	sub *nats.Subscription
}

// NewCore subscribes to cfg.Subject on nc.
func NewCore(nc *nats.Conn, cfg CoreConfig) (*Core, error) {
	if err := cfg.Key.check(); err != nil {
		return nil, fmt.Errorf("core source %s: %w", cfg.Subject, err)
	}
	c := &Core{cfg: cfg, acc: newAccumulator(cfg.MaxBatchRecords, cfg.MaxBatchBytes, 1)}
	var err error
	if cfg.Queue != "" {
		c.sub, err = nc.QueueSubscribe(cfg.Subject, cfg.Queue, c.onMsg)
	} else {
		c.sub, err = nc.Subscribe(cfg.Subject, c.onMsg)
	}
	if err != nil {
		return nil, fmt.Errorf("core source %s: subscribe: %w", cfg.Subject, err)
	}
	if cfg.PendingMsgs != 0 || cfg.PendingBytes != 0 {
		msgs, bytes := cfg.PendingMsgs, cfg.PendingBytes
		if msgs == 0 {
			msgs = nats.DefaultSubPendingMsgsLimit
		}
		if bytes == 0 {
			bytes = nats.DefaultSubPendingBytesLimit
		}
		if err := c.sub.SetPendingLimits(msgs, bytes); err != nil {
			_ = c.sub.Unsubscribe()
			return nil, fmt.Errorf("core source %s: pending limits: %w", cfg.Subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		_ = c.sub.Unsubscribe()
		return nil, fmt.Errorf("core source %s: flush subscription: %w", cfg.Subject, err)
	}
	cores.Store(c.sub, c)
	return c, nil
}

func (c *Core) onMsg(m *nats.Msg) {
	// The conversions below copy nothing: add copies the key into the
	// batch and keeps no reference, so the compiler lets the slice alias
	// the string (TestOnMsgAllocs holds it to that).
	var (
		key []byte
		ts  int64 // 0: stamped when Poll takes it
	)
	if c.cfg.Key == KeyFromSubject {
		key = []byte(m.Subject)
	}
	if m.Header != nil {
		if k := m.Header.Get(KeyHeader); k != "" && c.cfg.Key != KeyFromSubject {
			key = []byte(k)
		}
		ts = headerTime(m.Header)
	}
	c.acc.add(0, key, m.Data, ts, 0)
}

// Guarantee describes the source's delivery guarantee for the job status.
func (c *Core) Guarantee() string { return CoreGuarantee }

// Poll returns every message that arrived since the last Poll (up to the
// batch limits) as one record batch: key from the Weir-Key header or the
// subject (CoreConfig.Key), value = the message data, timestamp = the
// message's TimeHeader, else the time Poll took the batch, in ms, the same
// for all such records of it (ingestion time: a core message carries no
// time of its own). The offset is nil.
func (c *Core) Poll(ctx context.Context) ([]byte, []byte, error) {
	b, _, err := c.acc.take(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("core source %s: %w", c.cfg.Subject, err)
	}
	// One clock read per batch: per message it cost ~3 % of the whole
	// pipeline's CPU (core subject → operator → core subject).
	stamp(b, time.Now().UnixMilli())
	return b, nil, nil
}

// LimitBatch bounds the records of the batches Poll returns from now on
// (n <= 0: MaxBatchRecords), for a task whose operator is slow per record
// (host.BatchLimiter). Messages wait in the subscription meanwhile.
func (c *Core) LimitBatch(n int) { c.acc.setLimit(n) }

// Seek accepts any offset and does nothing: a core subject cannot rewind.
func (c *Core) Seek(ctx context.Context, offset []byte) error { return nil }

// CheckpointComplete does nothing.
func (c *Core) CheckpointComplete(ctx context.Context, id int64, offset []byte) error { return nil }

// Dropped is the number of messages the NATS client dropped because Poll
// did not keep up (core NATS cuts slow consumers).
func (c *Core) Dropped() int {
	n, _ := c.sub.Dropped()
	return n
}

// CoreStats is what a core source's subscription holds and dropped.
type CoreStats struct {
	// Pending is how many messages the source holds that Poll has not
	// returned: those the NATS client buffers for the subscription and
	// those gathered into the next batch. PendingBytes is the client's
	// buffer in bytes (message data and headers), which PendingBytesLimit
	// bounds.
	Pending, PendingBytes int
	// Dropped counts the messages the client dropped since the source
	// subscribed: they came while its buffer was at a limit.
	Dropped int
	// PendingMsgsLimit and PendingBytesLimit are the limits in effect (-1
	// or 0: none).
	PendingMsgsLimit, PendingBytesLimit int
}

// Stats returns what the subscription holds and dropped. Once the source
// is closed it returns the zero CoreStats.
func (c *Core) Stats() CoreStats {
	var s CoreStats
	var err error
	if s.Pending, s.PendingBytes, err = c.sub.Pending(); err != nil {
		return CoreStats{}
	}
	s.Dropped, _ = c.sub.Dropped()
	s.PendingMsgsLimit, s.PendingBytesLimit, _ = c.sub.PendingLimits()
	c.acc.locked(func() {
		if !c.acc.closed {
			s.Pending += c.acc.b.Len()
		}
	})
	return s
}

// Pending reports how many messages the source holds that Poll has not
// returned (CoreStats.Pending): the subscription's buffer is a core
// source's backlog, what it is behind its input. ok is false once it is
// closed.
func (c *Core) Pending() (n uint64, ok bool) {
	if !c.sub.IsValid() {
		return 0, false
	}
	return uint64(max(c.Stats().Pending, 0)), true
}

// Close unsubscribes; a blocked Poll returns. What the subscription held
// is discarded: core NATS cannot deliver it again.
func (c *Core) Close() error {
	cores.Delete(c.sub)
	c.acc.close()
	if err := c.sub.Unsubscribe(); err != nil && err != nats.ErrConnectionClosed && err != nats.ErrBadSubscription {
		return fmt.Errorf("core source %s: unsubscribe: %w", c.cfg.Subject, err)
	}
	return nil
}

// stamp sets the timestamp of every record of batch that has none (0) to
// ts. The batch was built by the accumulator, so it is well formed.
func stamp(batch []byte, ts int64) {
	n := int(binary.LittleEndian.Uint32(batch))
	off := abi.BatchHeaderSize
	for range n {
		kl := int(binary.LittleEndian.Uint32(batch[off:]))
		vl := int(binary.LittleEndian.Uint32(batch[off+4:]))
		if binary.LittleEndian.Uint64(batch[off+8:]) == 0 {
			binary.LittleEndian.PutUint64(batch[off+8:], uint64(ts))
		}
		off += abi.RecordHeaderSize + kl + vl
	}
}
