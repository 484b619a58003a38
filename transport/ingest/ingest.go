// Package ingest publishes a sequence of records into a JetStream stream
// exactly once, through lost connections and server restarts: `weir run
// -input` and the word count's input generator use it.
//
// Every record gets a Nats-Msg-Id: a prefix the caller makes unique (a
// random nonce per run, Nonce, plus the input's name) and the record's
// line number. Records go out asynchronously, up to Config.InFlight of
// them unacknowledged. When an acknowledgement fails for a reason that
// may pass (the connection dropped, the server restarted, no answer in
// Config.AckTimeout, JetStream briefly unavailable), the Publisher waits
// for the connection to come back and publishes again, in order, every
// record not acknowledged yet: the stream drops those it had stored by
// their ids. That holds only while the stream remembers the ids, for its
// duplicate window, so the Publisher gives up with ErrOutageTooLong once
// a record first sent that long ago (less a tenth, for the time the
// records take on the way) is still not acknowledged, and New refuses a
// stream whose window is shorter than MinDuplicateWindow
// (ErrDuplicateWindowTooShort). A record the stream refuses (a limit, a
// subject it does not store) is an error at once (*NotStoredError). Across
// a lost connection the stream keeps the records in order: it stored a
// prefix of what went out on the old connection, and the rest follows.
// Not so when the stream stops answering while the connection stays up (a
// clustered stream electing its leader: no responders): records that
// found no leader are published again after later ones that found the new
// one, each still stored once.
//
// The connection must not buffer publishes while it reconnects
// (ConnOptions): a record buffered then would reach the stream before the
// ones lost with the old connection, which are published again only
// after it, and the input would be stored out of order.
package ingest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/subject"
)

// MinDuplicateWindow is the shortest duplicate window New accepts: below
// it a record whose acknowledgement was lost could not be published again
// in time to be recognised by its id.
const MinDuplicateWindow = 10 * time.Second

// DefaultInFlight is how many records a Publisher leaves unacknowledged
// at most, unless Config.InFlight says otherwise.
const DefaultInFlight = 1024

// MaxAckTimeout is the longest a Publisher waits for one acknowledgement
// unless Config.AckTimeout says otherwise (a quarter of the duplicate
// window when that is shorter).
const MaxAckTimeout = 30 * time.Second

var (
	// ErrDuplicateWindowTooShort is wrapped by New when the stream keeps
	// message ids for less than MinDuplicateWindow.
	ErrDuplicateWindowTooShort = errors.New("duplicate window too short")
	// ErrOutageTooLong is wrapped when a record stayed unacknowledged for
	// longer than publishing it again could be deduplicated.
	ErrOutageTooLong = errors.New("no acknowledgement within the duplicate window")
	// ErrBufferingConn is returned by New for a connection that buffers
	// publishes while it reconnects.
	ErrBufferingConn = errors.New("the connection buffers publishes while it reconnects (connect with ingest.ConnOptions)")
)

// ConnOptions are the options a Publisher's connection needs: reconnect
// without end, buffer nothing while reconnecting (a publish then fails,
// and the Publisher publishes it again once the connection is back, after
// the records lost with the old one), and leave a server that falls silent
// without closing the connection after a few unanswered pings, or a write
// blocked for a few seconds (natsconn.LivenessOptions): with nats.go's
// defaults the Publisher sent the same records into it again and again for
// six minutes, and failed with ErrOutageTooLong once its stream's duplicate
// window was over, while the cluster's other servers could have stored
// them.
func ConnOptions() []nats.Option {
	return append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectBufSize(-1)}, natsconn.LivenessOptions()...)
}

// Nonce returns a short random string (8 characters: 48 bits) that makes a
// run's message ids its own, so that the same input published by another
// run is stored again rather than dropped as a duplicate.
func Nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// NotStoredError is a record the stream refused (a limit reached, a
// subject it does not store): publishing it again would be refused again.
type NotStoredError struct {
	// Line is the record's line number.
	Line int
	// Stream is the stream that refused it.
	Stream string
	// Err is the stream's reason.
	Err error
}

func (e *NotStoredError) Error() string {
	return fmt.Sprintf("line %d: stream %s did not acknowledge the record: %v (records after it may be missing too)", e.Line, e.Stream, e.Err)
}

func (e *NotStoredError) Unwrap() error { return e.Err }

// Config configures a Publisher.
type Config struct {
	// Stream is the stream the records' subjects are stored by.
	Stream string
	// IDPrefix starts every record's message id, which ends with its line
	// number: no other publisher to the stream may use it within the
	// duplicate window (Nonce, plus what tells the run's inputs apart).
	IDPrefix string
	// InFlight bounds the records sent and not yet acknowledged; 0 means
	// DefaultInFlight.
	InFlight int
	// AckTimeout bounds the wait for one acknowledgement, after which the
	// record counts as lost and is published again; 0 means a quarter of
	// the stream's duplicate window, at most MaxAckTimeout.
	AckTimeout time.Duration
	// Retrying, if set, is called whenever the Publisher starts waiting to
	// publish records again.
	Retrying func(Retry)
}

// Retry says that a Publisher waits to publish records again, from which
// on, why, and for how long at the most.
type Retry struct {
	// Line is the first record to publish again.
	Line int
	// Err is why: the failure of its acknowledgement or publish.
	Err error
	// Until is when the Publisher gives up (ErrOutageTooLong).
	Until time.Time
	// Stream is the Publisher's stream.
	Stream string
}

// String says what r means for a user, in one line.
func (r Retry) String() string {
	return fmt.Sprintf("lines from %d on not acknowledged (%v); publishing them again once NATS answers, for up to %s (stream %s drops by message id what it stored already)",
		r.Line, r.Err, time.Until(r.Until).Round(time.Second), r.Stream)
}

// Publisher publishes records to one stream exactly once (see the package
// documentation). It is not safe for concurrent use.
type Publisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	window  time.Duration
	pending []*record // sent or to send, not acknowledged, in line order
	retries int
	acked   int   // records acknowledged
	err     error // the first error: the Publisher is done
}

// record is one record not yet acknowledged.
type record struct {
	msg  *nats.Msg
	line int
	f    jetstream.PubAckFuture // nil while it is not in flight
	sent time.Time              // when it first went out; zero before
}

// New returns a Publisher of records to cfg.Stream over nc, which must
// have been connected with ConnOptions. It reads the stream's duplicate
// window and refuses one shorter than MinDuplicateWindow.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Publisher, error) {
	if nc.Opts.ReconnectBufSize >= 0 {
		return nil, ErrBufferingConn
	}
	js0, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	st, err := js0.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("stream %s does not exist (weir run creates the streams a job names): %w", cfg.Stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	window := st.CachedInfo().Config.Duplicates
	if window < MinDuplicateWindow {
		return nil, fmt.Errorf("stream %s: %w: it remembers message ids for %s, too short to publish a record again after a lost connection without storing it twice; give it %s or more, e.g. `weir stream edit %s -dupe-window 2m`",
			cfg.Stream, ErrDuplicateWindowTooShort, window, MinDuplicateWindow, cfg.Stream)
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = min(window/4, MaxAckTimeout)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Publisher{nc: nc, js: js, cfg: cfg, window: window}, nil
}

// Retries is how many times the Publisher published records again.
func (p *Publisher) Retries() int { return p.retries }

// Publish publishes m, the record at line (its number in the input, which
// ends its message id), once the records in flight leave room for it. An
// error means the stream may lack this record or an earlier one; the
// Publisher returns it from then on.
func (p *Publisher) Publish(ctx context.Context, line int, m *nats.Msg) error {
	if p.err == nil {
		p.err = p.publish(ctx, line, m)
	}
	return p.err
}

func (p *Publisher) publish(ctx context.Context, line int, m *nats.Msg) error {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(jetstream.MsgIDHeader, p.cfg.IDPrefix+strconv.Itoa(line))
	for len(p.pending) >= p.cfg.InFlight {
		if err := p.settleFirst(ctx); err != nil {
			return err
		}
	}
	r := &record{msg: m, line: line}
	p.pending = append(p.pending, r)
	if err := p.send(r); err != nil {
		if !transient(err) {
			return p.refused(r, err)
		}
		return p.recover(ctx, err)
	}
	return nil
}

// Flush returns once every record published is acknowledged.
func (p *Publisher) Flush(ctx context.Context) error {
	for p.err == nil && len(p.pending) > 0 {
		p.err = p.settleFirst(ctx)
	}
	return p.err
}

// Acknowledged waits, until ctx ends, for the acknowledgements of the
// records in flight, in order, and returns how many records the stream
// has acknowledged in all, and the line of the first record published and
// not acknowledged (0 when there is none). It may be called after Publish
// or Flush failed (an interrupt: their ctx ended): the stream holds every
// record before that line; of those from it on, some may be stored.
func (p *Publisher) Acknowledged(ctx context.Context) (n, line int) {
	for len(p.pending) > 0 {
		r := p.pending[0]
		if r.f == nil || wait(ctx, r.f) != nil {
			break
		}
		p.pending[0] = nil
		p.pending = p.pending[1:]
		p.acked++
	}
	if len(p.pending) == 0 {
		return p.acked, 0
	}
	return p.acked, p.pending[0].line
}

// send publishes r.
func (p *Publisher) send(r *record) error {
	f, err := p.js.PublishMsgAsync(r.msg)
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		// What a connection without a reconnect buffer says while it
		// reconnects.
		return nats.ErrConnectionReconnecting
	}
	if err != nil {
		return err
	}
	r.f = f
	if r.sent.IsZero() {
		r.sent = time.Now()
	}
	return nil
}

// settleFirst waits for the first record's acknowledgement, and publishes
// it and those after it again if it failed.
func (p *Publisher) settleFirst(ctx context.Context) error {
	r := p.pending[0]
	err := wait(ctx, r.f)
	switch {
	case err == nil:
		p.pending[0] = nil
		p.pending = p.pending[1:]
		p.acked++
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	if err := p.check(ctx, r, err); err != nil {
		return err
	}
	r.f = nil // its answer is taken: recover must not wait for another
	return p.recover(ctx, err)
}

// recover publishes again, in order, every record not acknowledged, once
// the connection is back: JetStream drops those it stored already by their
// ids. cause is why the first of them failed.
func (p *Publisher) recover(ctx context.Context, cause error) error {
	for {
		// Let every record in flight settle, so that none stored late
		// comes after one published again.
		kept := p.pending[:0]
		for _, r := range p.pending {
			if r.f != nil {
				err := wait(ctx, r.f)
				r.f = nil
				switch {
				case err == nil:
					p.acked++
					continue // stored
				case ctx.Err() != nil:
					return ctx.Err()
				}
				if err := p.check(ctx, r, err); err != nil {
					return err
				}
			}
			kept = append(kept, r)
		}
		clear(p.pending[len(kept):])
		p.pending = kept
		if len(p.pending) == 0 {
			return nil
		}
		until := p.deadline()
		if p.cfg.Retrying != nil {
			p.cfg.Retrying(Retry{Line: p.pending[0].line, Err: cause, Until: until, Stream: p.cfg.Stream})
		}
		if err := p.awaitConn(ctx, until); err != nil {
			if errors.Is(err, ErrOutageTooLong) {
				return p.tooLong(cause)
			}
			return err
		}
		p.retries++
		var err error
		for _, r := range p.pending {
			if !time.Now().Before(until) {
				return p.tooLong(cause)
			}
			if err = p.send(r); err != nil {
				if !transient(err) {
					return p.refused(r, err)
				}
				break
			}
		}
		if err == nil {
			return nil
		}
		cause = err
	}
}

// deadline is when publishing the first pending record again would no
// longer be safe: its first send plus the stream's duplicate window, less
// a tenth for the time records take on the way.
func (p *Publisher) deadline() time.Time {
	first := time.Now() // nothing went out yet: no repeat to fear, but bound the wait as well
	if s := p.pending[0].sent; !s.IsZero() {
		first = s
	}
	return first.Add(p.window - p.window/10)
}

// awaitConn returns once the connection is up, failing with
// ErrOutageTooLong at until.
func (p *Publisher) awaitConn(ctx context.Context, until time.Time) error {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		switch {
		case p.nc.IsClosed():
			return fmt.Errorf("stream %s: %w", p.cfg.Stream, nats.ErrConnectionClosed)
		case p.nc.Status() == nats.CONNECTED:
			return nil
		case !time.Now().Before(until):
			return ErrOutageTooLong
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// check returns nil when r, whose publish or acknowledgement failed with
// err, may be published again, else the error that ends the Publisher. No
// answer from the stream at all (no responders) passes while JetStream
// elects the stream's leader, but not when the stream does not exist or
// stores no subject of r's (a stream created or edited by hand): then the
// record could never be stored.
func (p *Publisher) check(ctx context.Context, r *record, err error) error {
	if !transient(err) {
		return p.refused(r, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		if why := p.unstorable(ctx, r.msg.Subject); why != nil {
			return p.refused(r, fmt.Errorf("%w: %w", why, err))
		}
	}
	return nil
}

// unstorable says why the stream cannot store a record on subj: it does
// not exist, or none of its subjects matches subj. It returns nil when
// the stream could (or did not answer).
func (p *Publisher) unstorable(ctx context.Context, subj string) error {
	st, err := p.js.Stream(ctx, p.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return errors.New("the stream does not exist")
	}
	if err != nil {
		return nil
	}
	subjects := st.CachedInfo().Config.Subjects
	if len(subjects) == 0 {
		return errors.New("it has no subjects (a mirror or a stream of sources takes no publishes)")
	}
	if slices.ContainsFunc(subjects, func(s string) bool { return subject.Overlap(s, subj) }) {
		return nil
	}
	return fmt.Errorf("it stores no subject %s (its subjects: %s)", subj, strings.Join(subjects, ", "))
}

// refused is the error for r, which the stream did not store (err says
// why).
func (p *Publisher) refused(r *record, err error) error {
	return &NotStoredError{Line: r.line, Stream: p.cfg.Stream, Err: err}
}

// tooLong is the error for the first pending record staying
// unacknowledged for too long to publish it again (cause: the last
// failure).
func (p *Publisher) tooLong(cause error) error {
	return fmt.Errorf("line %d: %w of stream %s (%s; the last try: %v): publishing the record again could store it twice, and the stream may lack it and the records after it",
		p.pending[0].line, ErrOutageTooLong, p.cfg.Stream, p.window, cause)
}

// wait waits for f's acknowledgement.
func wait(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errCodeClusterNotAvailable is JetStream's "JetStream system temporarily
// unavailable" (a leader election, a server starting).
const errCodeClusterNotAvailable jetstream.ErrorCode = 10008

// transient reports whether err, a failed publish or acknowledgement, may
// pass: the record may be published again. A refusal by the stream does
// not (a limit reached, a subject it does not store): publishing it again
// would be refused again. A network error (a write to a connection the
// server reset as it went down) does: the record may or may not have
// reached the stream, and its id drops a second copy.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == errCodeClusterNotAvailable
	}
	var netErr *net.OpError
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}
