// Package lease makes one coordinator the only one of a NATS: it holds a
// lease, a key of a JetStream KV bucket of its own (Bucket) that expires
// unless it is renewed, and acts only while it surely holds it.
//
// A coordinator takes the lease with Create (only if the key is absent)
// and renews it with Update at the revision it last wrote, every TTL/3
// (after a failure, every TTL/30);
// the bucket's TTL (its streams's MaxAge) makes the server drop a key
// that was not renewed for the TTL, after which another coordinator can
// take it. An update that fails on the revision means that another took
// it (or that it expired): the holder has lost it.
//
// The holder also knows, by its own clock, until when it surely holds the
// lease: the time it sent its last successful renewal (or the Create),
// plus the TTL, minus a tenth of it (Lease.Check). The server stores the
// renewal after it was sent and drops it a TTL after storing it, so no
// other coordinator can take the lease before then. Both the monotonic
// and the wall clock are checked, and the earlier end counts: a process
// frozen (kill -STOP, a long pause) sees its monotonic clock run on, and
// a virtual machine suspended and resumed its wall clock. Past that time
// the lease has lapsed: the holder no longer surely holds it, and
// Lease.Guard lets no write to shared state through — but the lease may
// still be its own (nobody else exists, or took it), and the holder keeps
// trying to renew it. It re-takes the lease when its key still holds the
// holder's value, at whatever revision (a renewal stored while its answer
// was lost bumped it): only the holder writes that value, and only at the
// revision it last saw, so the key held it throughout and no other could
// take it meanwhile. A key that expired is taken again only when nothing
// was written to the bucket since the holder's last known renewal (the
// stream's last sequence), with a write that the stream refuses if
// anything was. Another's value, or writes that another may have made,
// and the lease is lost for good (Lease.Lost).
//
// What remains is a write that was checked before the lease's end and is
// still on its way to the server after it: Guard cancels its context at
// the end (a write waiting for a leader stops trying then), so only a
// message already sent is left, which reaches the server within the
// network's delay — milliseconds, where the tenth of the TTL held back
// is a second with the default TTL. A server whose clock jumps forward
// expires the key early, and nothing here protects against that.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/storage"
)

// Bucket is the KV bucket that holds the coordinator's lease.
const Bucket = "weir_coordinator"

// key is the lease's key in Bucket.
const key = "lease"

// DefaultTTL is how long a lease lasts without a renewal when the bucket
// is created: long enough that a loaded machine renews it (every TTL/3)
// in time, and that a coordinator whose server falls silent renews it
// through another server of the cluster (its connection leaves the silent
// one after 4 to 6 s); short enough that one replacing a frozen
// coordinator waits little.
const DefaultTTL = 15 * time.Second

// ErrLost is wrapped by the errors of a lease that is no longer held.
var ErrLost = errors.New("coordinator lease lost")

// ErrLapsed is wrapped by the errors of a lease that lapsed: not renewed
// in time (a process frozen, NATS without quorum or answer), so not surely
// held, but not known to be another's either: its holder tries to re-take
// it.
var ErrLapsed = errors.New("coordinator lease lapsed")

// Holder names who holds a lease.
type Holder struct {
	// ID is the holder's random ID, new for each lease taken.
	ID   string `json:"id"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Since is when the holder took the lease.
	Since time.Time `json:"since"`
}

// String names h in one phrase: "coordinator 5f1c… on host1 (pid 42,
// since 2026-01-02T15:04:05Z)".
func (h Holder) String() string {
	return fmt.Sprintf("coordinator %s on %s (pid %d, since %s)", h.ID, h.Host, h.PID, h.Since.UTC().Format(time.RFC3339))
}

// HeldError is Take's error when another holds the lease and is alive: it
// answers (Config.Answers), or it renewed the lease while Take waited.
type HeldError struct {
	Holder Holder
	// Answers is true when the holder answered, false when it renewed
	// the lease.
	Answers bool
}

func (e *HeldError) Error() string {
	if e.Answers {
		return fmt.Sprintf("%s holds the coordinator lease", e.Holder)
	}
	return fmt.Sprintf("%s holds the coordinator lease and renews it", e.Holder)
}

// Open opens the lease bucket, creating it with ttl (0: DefaultTTL) and
// replicas (storage.OpenKeyValue) if it does not exist, and returns it
// with its TTL: a bucket that exists keeps the TTL it was created with,
// which every holder must go by. While the bucket's stream elects a
// leader, Open tries again (natsconn.ThroughElection): opening, or
// creating, the bucket may be done twice.
func Open(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (jetstream.KeyValue, time.Duration, error) {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	var kv jetstream.KeyValue
	err := through(ctx, js.Conn(), func(ctx context.Context) error {
		var err error
		kv, err = storage.OpenKeyValue(ctx, js, jetstream.KeyValueConfig{
			Bucket: Bucket, Storage: jetstream.FileStorage, TTL: ttl,
			Description: "weir coordinator lease: one coordinator per NATS",
		}, replicas)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("coordinator lease: %w", err)
	}
	var st jetstream.KeyValueStatus
	err = through(ctx, js.Conn(), func(ctx context.Context) error {
		var err error
		st, err = kv.Status(ctx)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("coordinator lease: bucket %s: %w", Bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, 0, fmt.Errorf("coordinator lease: bucket %s keeps its keys for ever (no TTL): delete it, weir creates it again", Bucket)
	}
	return kv, st.TTL(), nil
}

// Current returns who holds the lease in kv now, if anyone does (a
// refusal for another reason names it).
func Current(ctx context.Context, kv jetstream.KeyValue) (Holder, bool) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return Holder{}, false
	}
	var h Holder
	if json.Unmarshal(e.Value(), &h) != nil {
		return Holder{}, false
	}
	return h, true
}

// Config configures Take.
type Config struct {
	// KV is the lease bucket and TTL its TTL (Open).
	KV  jetstream.KeyValue
	TTL time.Duration
	// Conn is KV's connection: while the bucket's stream elects a leader
	// (right after a server restarted, say), Take and Release try again
	// (natsconn.ThroughElection) while it is connected. Nil: each request
	// is tried once.
	Conn *nats.Conn
	// Holder names the taker; Since is set by Take. A caller that takes
	// again after a Take that failed keeps its ID: a key holding it was
	// stored by the Take that failed (its answer lost), and is this
	// holder's.
	Holder Holder
	// Answers reports whether the holder of the lease answers (it is
	// alive): Take refuses then. Nil when the caller found that none
	// answers already: Take waits for the lease to expire or be renewed.
	Answers func(Holder) bool
	// Log receives the line saying that Take waits for the lease, and
	// those of a lease that lapsed and was re-taken.
	Log *slog.Logger
}

// Lease is a lease held: Check says whether it still is.
type Lease struct {
	kv     jetstream.KeyValue
	nc     *nats.Conn          // Config.Conn
	js     jetstream.JetStream // on nc; nil without it
	ttl    time.Duration
	holder Holder
	value  []byte
	log    *slog.Logger

	lost chan struct{}
	// running ends with Release (stop), and with the loss: renew's
	// requests are made in it.
	running context.Context
	stop    context.CancelFunc
	done    chan struct{} // closed when renew returns
	kick    chan struct{} // a lapse has renew try at once
	timer   *time.Timer   // fires at until

	mu sync.Mutex
	// ctx is canceled, with the lapse or the loss as its cause, once
	// the lease lapsed or is lost (Guard); a new one begins when it is
	// re-taken.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	lapsed  time.Time     // when the lease lapsed; zero while surely held
	lapse   error         // why it lapsed, wrapping ErrLapsed
	said    time.Time     // when the lapse was last logged
	changed chan struct{} // closed when the lease is re-taken or lost
	rev     uint64
	renewed time.Time // when the last successful renewal (or the Create) was sent
	until   time.Time // renewed + ttl - margin: the lease surely ends then
	pending time.Time // when the first renewal not known to be stored since was sent
	lastErr error     // of the last renewal that failed
	err     error     // why the lease was lost; nil while held
	taker   *Holder   // who took the lease over, when it was lost to another
}

// Take takes the lease: at once when nobody holds it. When another holds
// it, Take returns a *HeldError if the holder answers (cfg.Answers), or
// else waits for its lease to expire (up to the TTL: a frozen or dead
// holder does not renew it) and takes it then — unless it is renewed
// meanwhile (a holder still starting, or resumed), which is a *HeldError
// too. It logs one line as it begins to wait. The lease is renewed until
// Release or until it is lost.
//
// While the bucket's stream elects a leader, its create and reads are
// tried again (cfg.Conn, natsconn.ThroughElection). A create that failed
// so may have been stored all the same: found there after, it is known
// for this holder's by its ID, and taken as of the first try's sending.
func Take(ctx context.Context, cfg Config) (*Lease, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		seen   uint64 // the revision of another's lease found
		asked  bool
		poll   = max(cfg.TTL/20, 50*time.Millisecond)
		holder = cfg.Holder
	)
	for {
		holder.Since = time.Now().UTC().Truncate(time.Millisecond)
		value, err := json.Marshal(holder)
		if err != nil {
			return nil, fmt.Errorf("coordinator lease: %w", err)
		}
		rev, sent, err := create(ctx, cfg.Conn, cfg.KV, value, log)
		if err == nil {
			return start(cfg, holder, value, rev, sent), nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("coordinator lease: take it: %w", err)
		}
		e, err := get(ctx, cfg.Conn, cfg.KV)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // expired, or released, since
		case err != nil:
			return nil, fmt.Errorf("coordinator lease: read who holds it: %w", err)
		}
		var other Holder
		if err := json.Unmarshal(e.Value(), &other); err != nil {
			other = Holder{ID: "(unreadable: " + err.Error() + ")"}
		}
		if other.ID == holder.ID {
			if !sent.IsZero() {
				// A try of the Create that failed was stored after all:
				// ours, taken when the first such try was sent (stored
				// after).
				return start(cfg, other, e.Value(), e.Revision(), sent), nil
			}
			// Stored by an earlier Take of this holder (a caller that
			// takes again after a Take that failed keeps Holder.ID)
			// whose answer was lost. When it was sent is not known
			// here: it is renewed now, at the revision found.
			rev, sent, err := update(ctx, cfg.Conn, cfg.KV, e.Value(), e.Revision())
			switch {
			case err == nil:
				return start(cfg, other, e.Value(), rev, sent), nil
			case wrongRevision(err) || errors.Is(err, jetstream.ErrKeyNotFound):
				continue // written since, or expired: look again
			}
			return nil, fmt.Errorf("coordinator lease: renew the one an earlier take stored: %w", err)
		}
		if seen != 0 && e.Revision() > seen {
			return nil, &HeldError{Holder: other}
		}
		if !asked {
			asked, seen = true, e.Revision()
			if cfg.Answers != nil && cfg.Answers(other) {
				return nil, &HeldError{Holder: other, Answers: true}
			}
			log.Warn(fmt.Sprintf("%s holds the coordinator lease and does not answer: waiting up to %v for it to expire", other, cfg.TTL))
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("coordinator lease: waiting for %s's to expire: %w", other, ctx.Err())
		}
	}
}

// through calls try through a leader election of the lease bucket's
// stream (natsconn.ThroughElection) on nc, or once without nc.
func through(ctx context.Context, nc *nats.Conn, try func(context.Context) error) error {
	if nc == nil {
		return try(ctx)
	}
	return natsconn.ThroughElection(ctx, nc, natsconn.ElectionTry, try)
}

// create creates the lease's key in kv with value, through an election
// of the bucket's stream, and returns when the try that stored it was
// sent. A try that failed for want of a leader may have been stored all
// the same (its acknowledgement lost), so that a later try finds the key
// there (jetstream.ErrKeyExists) — with this value, which Take recognises
// by the holder's ID; the error then comes with when the first such try
// was sent (zero if none failed so). The first such failure is logged:
// the wait may be long (a cluster without a quorum).
func create(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, value []byte, log *slog.Logger) (rev uint64, sent time.Time, err error) {
	var failed time.Time // the first try that failed so
	err = through(ctx, nc, func(ctx context.Context) error {
		var err error
		sent = time.Now()
		rev, err = kv.Create(ctx, key, value)
		if err != nil && natsconn.Leaderless(err) && failed.IsZero() {
			failed = sent
			log.Warn("coordinator lease: its bucket's stream has no leader (an election, or a NATS cluster without a quorum); trying again", "err", err)
		}
		return err
	})
	if err != nil {
		return 0, failed, err
	}
	return rev, sent, nil
}

// update writes value to the lease's key in kv at revision rev, through
// an election of the bucket's stream, and returns when the try that
// stored it was sent. A try that failed for want of a leader may have
// been stored all the same: a later try is then refused on the revision.
func update(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, value []byte, rev uint64) (next uint64, sent time.Time, err error) {
	err = through(ctx, nc, func(ctx context.Context) error {
		var err error
		sent = time.Now()
		next, err = kv.Update(ctx, key, value, rev)
		return err
	})
	return next, sent, err
}

// get reads the lease's key in kv through an election of the bucket's
// stream. A key that is not there is no failure to try again.
func get(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := through(ctx, nc, func(ctx context.Context) error {
		var err error
		e, err = kv.Get(ctx, key)
		return err
	})
	return e, err
}

// wrongRevision reports whether err is a write's refusal on the key's
// revision: nats-server's "wrong last sequence", code 10071, or 10164 on
// a replicated stream (jetstream.KeyValue.Delete leaves it unmapped).
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// margin is the part of the TTL a holder gives up: its lease surely ends
// a TTL less margin after it sent a renewal.
func margin(ttl time.Duration) time.Duration { return ttl / 10 }

// start returns the lease taken at revision rev by a Create sent at sent,
// and starts renewing it.
func start(cfg Config, h Holder, value []byte, rev uint64, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	running, stop := context.WithCancel(context.Background())
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Lease{kv: cfg.KV, nc: cfg.Conn, ttl: cfg.TTL, holder: h, value: value, log: log, ctx: ctx, cancel: cancel,
		lost: make(chan struct{}), changed: make(chan struct{}), running: running, stop: stop, done: make(chan struct{}), kick: make(chan struct{}, 1),
		rev: rev, renewed: sent, until: sent.Add(cfg.TTL - margin(cfg.TTL))}
	if cfg.Conn != nil {
		l.js, _ = jetstream.New(cfg.Conn)
	}
	l.timer = time.AfterFunc(time.Until(l.until), func() { _ = l.Check() })
	go l.renew()
	return l
}

// Holder is who holds the lease: this process.
func (l *Lease) Holder() Holder { return l.holder }

// TTL is the lease's TTL (the bucket's).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Lost is closed once the lease is lost (Err says why).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// TakenBy returns who holds the lease now when it was lost to another
// holder (its key found holding another's value), and false otherwise:
// while it is held or lapsed, once released, and once lost with its key
// gone (expired or deleted, with writes to the bucket since) or holding
// a value that does not read as a holder's. Nobody holds it then, or who
// does is not known: a coordinator may campaign for it again (Take),
// which refuses, or waits, while another holds it.
func (l *Lease) TakenBy() (Holder, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taker == nil {
		return Holder{}, false
	}
	return *l.taker, true
}

// Err is why the lease was lost, wrapping ErrLost; nil while it is held
// or lapsed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Check returns nil while the lease surely is held, and otherwise why it
// is not: once past its end by either clock (see the package comment) it
// lapsed (wrapping ErrLapsed) until it is re-taken; once lost (wrapping
// ErrLost) it is lost for good.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

// checkLocked is Check with l.mu held: it lapses the lease past its end.
func (l *Lease) checkLocked() error {
	if l.err != nil {
		return l.err
	}
	if !l.lapsed.IsZero() {
		return l.lapse
	}
	now := time.Now()
	if now.Before(l.until) && now.Round(0).Before(l.until.Round(0)) {
		return nil
	}
	why := ""
	if l.lastErr != nil {
		why = fmt.Sprintf(" (last renewal: %v)", l.lastErr)
	}
	l.lapsed, l.said = now, now
	l.lapse = fmt.Errorf("%w: not renewed for %v of its %v%s, so that this coordinator does not surely hold it",
		ErrLapsed, now.Round(0).Sub(l.renewed.Round(0)).Round(100*time.Millisecond), l.ttl, why)
	l.cancel(l.lapse)
	select {
	case l.kick <- struct{}{}:
	default:
	}
	l.log.Warn(fmt.Sprintf("%v: this process was not running, or NATS did not answer (no quorum?); it may still be this coordinator's: "+
		"retrying, and writing, triggering and deploying nothing until it re-took it", l.lapse))
	return l.lapse
}

// heldAgainLocked ends a lapse once the lease surely is held again (its
// end, just renewed, is ahead). l.mu is held.
func (l *Lease) heldAgainLocked() {
	if l.lapsed.IsZero() || l.err != nil {
		return
	}
	now := time.Now()
	if !now.Before(l.until) || !now.Round(0).Before(l.until.Round(0)) {
		return
	}
	l.log.Warn(fmt.Sprintf("coordinator lease: re-took it after %v without it; the coordinator acts again", now.Round(0).Sub(l.lapsed.Round(0)).Round(100*time.Millisecond)),
		"revision", l.rev)
	l.lapsed, l.lapse = time.Time{}, nil
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	close(l.changed)
	l.changed = make(chan struct{})
}

// loseLocked records that the lease is lost, for err. l.mu is held.
func (l *Lease) loseLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	l.cancel(err)
	close(l.lost)
	close(l.changed)
}

// Guard returns nil and a context derived from ctx that ends when the
// lease lapses or is lost, for a write to shared state, while the lease
// is held; once lost, the error of Check. While the lease lapsed, Guard
// waits for it to be re-taken (the write goes ahead then) or lost, for
// ctx, and for the TTL at most: then it returns the lapse (NATS still
// does not answer, and a write there would fail too). The caller calls
// release once the write is done.
func (l *Lease) Guard(ctx context.Context) (_ context.Context, release context.CancelFunc, _ error) {
	var timeout <-chan time.Time
	for {
		l.mu.Lock()
		err := l.checkLocked()
		held, changed := l.ctx, l.changed
		l.mu.Unlock()
		if err == nil {
			c, cancel := context.WithCancelCause(ctx)
			stop := context.AfterFunc(held, func() { cancel(context.Cause(held)) })
			return c, func() { stop(); cancel(nil) }, nil
		}
		if !errors.Is(err, ErrLapsed) {
			return nil, nil, err
		}
		if timeout == nil {
			t := time.NewTimer(l.ttl)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w (waited for it to be re-taken: %w)", err, ctx.Err())
		case <-timeout:
			return nil, nil, fmt.Errorf("%w (waited %v for it to be re-taken)", err, l.ttl)
		}
	}
}

// renew renews the lease every TTL/3 until Release or the loss. A
// renewal that fails is tried again after TTL/30, each try given TTL/10:
// a connection that moves to another server (4 to 6 s after its own fell
// silent) renews the lease within 2 s of getting there. A lease that
// lapsed is tried likewise, to re-take it (see the package comment), a
// line logged each TTL while it is not.
func (l *Lease) renew() {
	defer close(l.done)
	t := time.NewTimer(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.kick:
		case <-l.running.Done():
			return
		}
		l.mu.Lock()
		if l.checkLocked(); l.err != nil {
			l.mu.Unlock()
			return
		}
		if !l.lapsed.IsZero() && time.Since(l.said) >= l.ttl {
			l.said = time.Now()
			last := ""
			if l.lastErr != nil {
				last = fmt.Sprintf(" (last try: %v)", l.lastErr)
			}
			l.log.Warn(fmt.Sprintf("coordinator lease: renewal failed for %v%s: NATS does not answer, or has no quorum; still holding it, retrying",
				time.Now().Round(0).Sub(l.renewed.Round(0)).Round(100*time.Millisecond), last))
		}
		rev := l.rev
		sent := time.Now()
		if l.pending.IsZero() {
			l.pending = sent
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.running, l.ttl/10)
		next, err := l.kv.Update(ctx, key, l.value, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			err = l.mismatch(ctx, rev, err)
		} else {
			l.mu.Lock()
			if err == nil {
				// Stored at rev's successor: the key held this
				// holder's rev until then, lapsed or not.
				l.renewedLocked(next, sent)
			} else {
				l.lastErr = err
				l.checkLocked()
			}
			l.mu.Unlock()
		}
		cancel()
		l.mu.Lock()
		gone, lapsed := l.err != nil, !l.lapsed.IsZero()
		l.mu.Unlock()
		switch {
		case gone:
			return
		case err != nil || lapsed:
			t.Reset(l.ttl / 30)
		default:
			t.Reset(l.ttl / 3)
		}
	}
}

// renewedLocked records that the lease was stored at revision rev by a
// write sent at sent. l.mu is held.
func (l *Lease) renewedLocked(rev uint64, sent time.Time) {
	l.rev, l.renewed, l.pending, l.lastErr = rev, sent, time.Time{}, nil
	l.until = sent.Add(l.ttl - margin(l.ttl))
	l.timer.Reset(time.Until(l.until))
	l.heldAgainLocked()
}

// mismatch handles a renewal at revision rev refused on the revision
// (err). A renewal that timed out may have been stored all the same: the
// lease holds this holder's value at a later revision, and goes on from
// there, as renewed when the first renewal not known to be stored was
// sent (the server stored it after that) — re-taken by the next renewal,
// at that revision, if it lapsed meanwhile. The same value at rev is a
// replica that lags: the renewal is tried again. Another's value, and the
// lease is lost. None (it expired, or was deleted) is retake's.
func (l *Lease) mismatch(ctx context.Context, rev uint64, err error) error {
	e, gerr := l.kv.Get(ctx, key)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return l.retake(ctx, rev)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if gerr != nil {
		l.lastErr = fmt.Errorf("%w; reading who holds it: %w", err, gerr) // not known yet: tried again
		l.checkLocked()
		return l.lastErr
	}
	var other Holder
	readable := json.Unmarshal(e.Value(), &other) == nil && other.ID != ""
	if readable && other.ID == l.holder.ID {
		if e.Revision() <= rev {
			l.lastErr = err
			l.checkLocked()
			return err
		}
		l.renewedLocked(e.Revision(), l.pending)
		return nil
	}
	silent := time.Now().Round(0).Sub(l.renewed.Round(0)).Round(100 * time.Millisecond)
	if readable {
		l.taker = &other
	} else {
		other.ID = fmt.Sprintf("(unreadable: %q)", e.Value())
	}
	l.loseLocked(fmt.Errorf("%w: %s holds it now; this one had not renewed it for %v", ErrLost, other, silent))
	return l.err
}

// retake takes the lease again after its key was found gone, when
// nothing was written to the bucket since this holder's renewal at rev:
// its stream's last sequence is still rev, and the write is refused if it
// no longer is (another took the lease meanwhile). Any other write since
// — another's take, a delete, or a renewal of this holder's own whose
// answer was lost and which expired since, which cannot be told apart —
// and the lease is lost.
func (l *Lease) retake(ctx context.Context, rev uint64) error {
	silent := func() time.Duration {
		return time.Now().Round(0).Sub(l.renewed.Round(0)).Round(100 * time.Millisecond)
	}
	if l.js == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.loseLocked(fmt.Errorf("%w: it expired, not renewed for %v", ErrLost, silent()))
		return l.err
	}
	st, err := l.js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lastErr = fmt.Errorf("lease gone; reading its bucket's stream: %w", err)
		l.checkLocked()
		return l.lastErr
	}
	if last := st.CachedInfo().State.LastSeq; last != rev {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.loseLocked(fmt.Errorf("%w: it expired, not renewed for %v, and its bucket %s was written %d time(s) since this coordinator's last renewal "+
			"(revision %d): another coordinator may have held it meanwhile", ErrLost, silent(), Bucket, last-rev, rev))
		return l.err
	}
	sent := time.Now()
	ack, err := l.js.Publish(ctx, "$KV."+Bucket+"."+key, l.value, jetstream.WithExpectLastSequence(rev))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		// Refused on the sequence: written meanwhile, which the next
		// try reads.
		l.lastErr = fmt.Errorf("lease gone; taking it again: %w", err)
		l.checkLocked()
		return l.lastErr
	}
	l.renewedLocked(ack.Sequence, sent)
	return nil
}

// Release stops renewing the lease and, while it is held, deletes it, so
// that the next coordinator takes it at once instead of waiting for it to
// expire. A lease lost is left to its new holder.
//
// A ctx that is done stops the renewals and deletes nothing: the lease
// expires then (for a server that is gone).
func (l *Lease) Release(ctx context.Context) error {
	l.stop()
	<-l.done
	l.timer.Stop()
	if err := l.Check(); err != nil {
		if errors.Is(err, ErrLapsed) {
			// Not surely this holder's: left to expire.
			l.mu.Lock()
			l.loseLocked(fmt.Errorf("%w: released (lapsed, not deleted)", ErrLost))
			l.mu.Unlock()
		}
		return nil
	}
	if ctx.Err() != nil {
		l.mu.Lock()
		l.loseLocked(fmt.Errorf("%w: released (not deleted: %w)", ErrLost, ctx.Err()))
		l.mu.Unlock()
		return nil
	}
	l.mu.Lock()
	rev := l.rev
	l.loseLocked(fmt.Errorf("%w: released", ErrLost))
	l.mu.Unlock()
	failed := false // a try failed: it may have been stored
	err := through(ctx, l.nc, func(ctx context.Context) error {
		err := l.kv.Delete(ctx, key, jetstream.LastRevision(rev))
		if err != nil && natsconn.Leaderless(err) {
			failed = true
		}
		return err
	})
	if err != nil && failed && wrongRevision(err) {
		// Refused on the revision after a try that failed: that try's
		// delete was stored, unless the key holds a value again.
		if _, gerr := get(ctx, l.nc, l.kv); errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("coordinator lease: release it: %w", err)
	}
	return nil
}
