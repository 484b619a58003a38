package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// orderedReader reads a stream's messages in order through a chain of
// ephemeral pull consumers, as nats.go's ordered consumer does: a consumer
// without acknowledgements, held in memory on the server, which the reader
// replaces by one starting after the last message read whenever its
// deliveries have a gap, it was deleted, the server has no such consumer
// (a restart) or it went silent (no message and no heartbeat for two
// heartbeat intervals). It differs where that matters on the data path:
//
//   - Its subscription's buffer has room, beyond the messages it asks for,
//     for the status messages the server sends with them: a pull bounded
//     by bytes ends with a "409 Batch Completed" (or "Message Size Exceeds
//     MaxBytes"). nats.go v1.56.0's buffer is exactly as deep as the
//     messages asked for, so a reader one pull behind made the client drop
//     a message as a slow consumer, and the consumer was recreated
//     (measured: one benchmark run in ten).
//   - It watches for missed heartbeats with one ticker while it waits,
//     instead of a timer made and stopped for every message, and parses a
//     message's reply subject once.
//
// Next is called from one goroutine; Stop, Name and Info from any.
type orderedReader struct {
	js       jetstream.JetStream
	nc       *nats.Conn
	stream   string
	filters  []string
	start    uint64 // the first consumer's start sequence; 0 or 1: the stream's first
	prefix   string // consumer names are prefix_1, prefix_2, …
	nextFmt  string // the pull request subject, with the consumer name to append
	maxMsgs  int
	maxBytes int
	hb       time.Duration // idle heartbeat the pull requests ask for
	expires  time.Duration // how long a pull request waits on the server

	mu      sync.Mutex
	info    *jetstream.ConsumerInfo // the current consumer's, as created
	sub     *nats.Subscription
	stopped bool
	done    chan struct{}      // closed by Stop
	ctx     context.Context    // canceled by Stop: a recreation's requests end with it
	cancel  context.CancelFunc //

	// The reader's own, used by Next only.
	serial    int
	msgs      chan *nats.Msg // the current consumer's deliveries
	status    chan nats.Status
	ticker    *time.Ticker
	streamSeq uint64 // stream sequence of the last message Next returned
	consSeq   uint64 // its consumer sequence, in the current consumer
	pending   int    // messages asked for and not delivered yet
	seen      uint64 // deliveries and status messages received
	seenTick  uint64 // seen at the last tick
	idle      int    // ticks in a row with nothing received while a pull waits
	reconnect bool   // the connection was lost since the last CONNECTED
}

// Ordered reader defaults: what nats.go's ordered consumer uses.
const (
	orderedExpires   = 30 * time.Second
	orderedHeartbeat = 5 * time.Second
	orderedInactive  = 5 * time.Minute
	// statusRoom is how many status messages the subscription's buffer
	// holds beyond the messages asked for: at most one ends each pull, and
	// heartbeats come only while a pull waits for messages (85 minutes of
	// them at 5 s).
	statusRoom = 1024
)

// errReaderStopped is what Next returns once Stop was called, or the
// connection closed for good: the iteration ended.
var errReaderStopped = jetstream.ErrMsgIteratorClosed

// newOrderedReader creates the reader's first consumer, on stream, of the
// messages of filters (none: all) from sequence start on (0 or 1: from the
// stream's first), named prefix_1. It reads nothing before Start.
func newOrderedReader(ctx context.Context, js jetstream.JetStream, stream string, filters []string, start uint64, prefix string) (*orderedReader, error) {
	r := &orderedReader{js: js, nc: js.Conn(), stream: stream, filters: filters, start: start, prefix: prefix,
		hb: orderedHeartbeat, expires: orderedExpires, done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.nextFmt = apiPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + stream + "."
	r.serial = 1
	info, err := r.create(ctx)
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.info = info
	return r, nil
}

// apiPrefix is the JetStream API subject prefix js sends its requests to.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// create creates consumer prefix_serial of the chain: after the last
// message read, or where the reader starts. Every try of one recreation
// uses one name, so a try that timed out but created it is taken over,
// not left behind.
func (r *orderedReader) create(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	cfg := jetstream.ConsumerConfig{
		Name:              r.prefix + "_" + strconv.Itoa(r.serial),
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: orderedInactive,
		Replicas:          1,
		MemoryStorage:     true,
	}
	if len(r.filters) == 1 {
		cfg.FilterSubject = r.filters[0]
	} else {
		cfg.FilterSubjects = r.filters
	}
	if from := max(r.streamSeq+1, r.start); from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	c, err := r.js.CreateOrUpdateConsumer(ctx, r.stream, cfg)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// Start subscribes to the current consumer's deliveries and asks, in
// pulls of up to maxMsgs messages and maxBytes bytes (0: unbounded), for
// its messages.
func (r *orderedReader) Start(maxMsgs, maxBytes int) error {
	r.maxMsgs, r.maxBytes = maxMsgs, maxBytes
	r.status = r.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.CLOSED)
	r.ticker = time.NewTicker(r.hb)
	if err := r.subscribe(); err != nil {
		r.Stop()
		return err
	}
	return nil
}

// subscribe subscribes to a new inbox for the current consumer's
// deliveries: a former consumer's, still on their way, are not mixed in.
func (r *orderedReader) subscribe() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errReaderStopped
	}
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	// Room for two pulls: one asked again after a reconnect may meet the
	// one asked before it, sent from the client's reconnect buffer.
	msgs := make(chan *nats.Msg, 2*r.maxMsgs+statusRoom)
	sub, err := r.nc.ChanSubscribe(r.nc.NewInbox(), msgs)
	if err != nil {
		return fmt.Errorf("subscribe to the consumer's deliveries: %w", err)
	}
	r.sub, r.msgs = sub, msgs
	r.pending, r.consSeq, r.idle = 0, 0, 0
	return nil
}

// Name is the current consumer's name.
func (r *orderedReader) Name() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.Name
}

// CachedInfo is the current consumer's info as it was created.
func (r *orderedReader) CachedInfo() *jetstream.ConsumerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}

// Info asks the server for the current consumer's info.
func (r *orderedReader) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	c, err := r.js.Consumer(ctx, r.stream, r.Name())
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// Stop ends the reading: Next returns errReaderStopped, now or when it
// next looks. The consumer stays on the server (the caller deletes it, or
// it expires after its inactivity threshold).
func (r *orderedReader) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	close(r.done)
	r.cancel()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	if r.status != nil {
		r.nc.RemoveStatusListener(r.status)
	}
	if r.ticker != nil {
		r.ticker.Stop()
	}
}

// Next returns the next message of the stream's (of the filters'), in
// order, with its reply subject's metadata; errReaderStopped once stopped.
func (r *orderedReader) Next() (*nats.Msg, ackInfo, error) {
	for {
		if r.pending < (r.maxMsgs+1)/2 {
			if err := r.pull(); err != nil {
				return nil, ackInfo{}, err
			}
		}
		var m *nats.Msg
		select {
		case m = <-r.msgs:
		default:
			var err error
			if m, err = r.wait(); err != nil {
				return nil, ackInfo{}, err
			}
			if m == nil {
				continue
			}
		}
		r.seen++
		if m.Reply == "" {
			if err := r.onStatus(m); err != nil {
				return nil, ackInfo{}, err
			}
			continue
		}
		a, ok := parseAck(m.Reply)
		if !ok {
			return nil, ackInfo{}, fmt.Errorf("message with reply subject %q: not a JetStream delivery", m.Reply)
		}
		if a.consumer != r.info.Name {
			continue // a former consumer's, delivered before its subscription ended
		}
		r.pending = max(r.pending-1, 0)
		if a.cseq != r.consSeq+1 {
			// A delivery went missing (the client dropped it, or the
			// server's consumer restarted): read again after the last.
			if err := r.reset(); err != nil {
				return nil, ackInfo{}, err
			}
			continue
		}
		r.consSeq, r.streamSeq = a.cseq, a.seq
		return m, a, nil
	}
}

// wait waits for a delivery; nil, nil when something else happened (a
// tick, a reconnect) that Next's loop looks at again.
func (r *orderedReader) wait() (*nats.Msg, error) {
	select {
	case m := <-r.msgs:
		return m, nil
	case <-r.done:
		return nil, errReaderStopped
	case st, ok := <-r.status:
		if !ok {
			return nil, errReaderStopped // Stop removed the listener
		}
		switch st {
		case nats.RECONNECTING:
			r.reconnect = true
		case nats.CONNECTED:
			if r.reconnect {
				// The pulls waiting on the server went with the connection;
				// a consumer that lived on a server that restarted went too
				// (the next pull finds no responder, and the reader
				// replaces it).
				r.reconnect, r.pending, r.idle = false, 0, 0
			}
		case nats.CLOSED:
			r.Stop()
			return nil, errReaderStopped
		}
		return nil, nil
	case <-r.ticker.C:
		if r.seen != r.seenTick || r.reconnect {
			r.seenTick, r.idle = r.seen, 0
			return nil, nil
		}
		if r.idle++; r.idle >= 2 {
			// Two heartbeat intervals with no message and no heartbeat
			// while a pull waits: the consumer is gone.
			return nil, r.reset()
		}
		return nil, nil
	}
}

// pull asks the current consumer for as many messages as make up the
// reader's maxMsgs with those asked for already.
func (r *orderedReader) pull() error {
	r.mu.Lock()
	sub, name, stopped := r.sub, r.info.Name, r.stopped
	r.mu.Unlock()
	if stopped {
		return errReaderStopped
	}
	n := r.maxMsgs - r.pending
	var b []byte
	b = append(b, `{"batch":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	if r.maxBytes > 0 {
		b = append(b, `,"max_bytes":`...)
		b = strconv.AppendInt(b, int64(r.maxBytes), 10)
	}
	b = append(b, `,"expires":`...)
	b = strconv.AppendInt(b, int64(r.expires), 10)
	b = append(b, `,"idle_heartbeat":`...)
	b = strconv.AppendInt(b, int64(r.hb), 10)
	b = append(b, '}')
	if err := r.nc.PublishRequest(r.nextFmt+name, sub.Subject, b); err != nil {
		if r.nc.IsClosed() {
			r.Stop()
			return errReaderStopped
		}
		// Lost with the connection: asked again once it is back.
		return nil
	}
	r.pending = r.maxMsgs
	return nil
}

// onStatus handles a status message of the server's about the current
// consumer's pulls.
func (r *orderedReader) onStatus(m *nats.Msg) error {
	code := m.Header.Get("Status")
	desc := strings.ToLower(m.Header.Get("Description"))
	switch code {
	case "100": // idle heartbeat (or flow control, which pulls do not use)
		return nil
	case "404", "408", "409":
		switch {
		case code == "409" && (strings.Contains(desc, "consumer deleted") || strings.Contains(desc, "consumer is push based")):
			return r.reset()
		case code == "409" && (strings.Contains(desc, "leadership change") || strings.Contains(desc, "server shutdown")):
			r.pending = 0 // the pulls waiting went with the leader
			return nil
		}
		// The end of a pull (expired, bounded by bytes, its batch done):
		// what it did not deliver is asked again. A pull refused for the
		// server's limits on pulls, which the reader's do not reach, says
		// nothing of the kind: nothing is asked again at once (no loop of
		// refusals); two silent heartbeat intervals replace the consumer.
		if left, err := strconv.Atoi(m.Header.Get("Nats-Pending-Messages")); err == nil {
			r.pending = max(r.pending-left, 0)
		}
		return nil
	case "503":
		// No responder: the server has no such consumer (it restarted, or
		// the stream has no leader now).
		return r.reset()
	}
	return fmt.Errorf("consumer %s: %s %s", r.info.Name, code, m.Header.Get("Description"))
}

// reset replaces the current consumer with one that starts after the last
// message read, trying up to maxResetAttempts times, backing off from 1 s
// to 10 s; the old one is deleted in the background.
func (r *orderedReader) reset() error {
	go r.delete(r.Name())
	r.serial++
	wait := time.Second
	var err error
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		var info *jetstream.ConsumerInfo
		info, err = r.create(ctx)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.info = info
			r.mu.Unlock()
			err = r.subscribe()
			if err == errReaderStopped {
				// Stopped while it was created: whoever stopped the
				// reader may have deleted the one before.
				go r.delete(info.Name)
			}
			return err
		}
		if attempt >= maxResetAttempts {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-r.done:
			t.Stop()
			return errReaderStopped
		case <-t.C:
		}
		wait = min(2*wait, 10*time.Second)
	}
	return fmt.Errorf("ordered consumer: %d attempts to create it again after sequence %d failed: %w", maxResetAttempts, r.streamSeq, err)
}

// delete deletes consumer name, best effort, within 10 s.
func (r *orderedReader) delete(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.js.DeleteConsumer(ctx, r.stream, name)
}

// ackInfo is what a JetStream delivery's reply subject says of it.
type ackInfo struct {
	consumer string
	seq      uint64 // stream sequence
	cseq     uint64 // consumer sequence
	ts       uint64 // when the stream stored it, Unix nanoseconds
	pending  uint64 // messages of the consumer's after it
}
