package lease

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// stallingKV answers the lease's renewals and reads with a timeout while
// stalled, reaching no server (a process cut off, or a NATS without
// quorum), and can store one renewal and answer it with a timeout all
// the same (its acknowledgement lost), stalling from then on.
type stallingKV struct {
	jetstream.KeyValue
	mu       sync.Mutex
	stalled  bool
	loseNext bool
	tries    chan struct{} // a stalled try, or the renewal whose answer was lost
}

func newStallingKV(kv jetstream.KeyValue) *stallingKV {
	return &stallingKV{KeyValue: kv, tries: make(chan struct{}, 100)}
}

func (kv *stallingKV) stall(on bool) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.stalled = on
}

// stalls reports whether a request is stalled, and records the try.
func (kv *stallingKV) stalls() bool {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.stalled {
		kv.tries <- struct{}{}
	}
	return kv.stalled
}

func (kv *stallingKV) Update(ctx context.Context, k string, value []byte, last uint64) (uint64, error) {
	if kv.stalls() {
		return 0, nats.ErrTimeout
	}
	kv.mu.Lock()
	lose := kv.loseNext
	kv.mu.Unlock()
	rev, err := kv.KeyValue.Update(ctx, k, value, last)
	if !lose || err != nil {
		return rev, err
	}
	kv.mu.Lock()
	kv.loseNext, kv.stalled = false, true
	kv.mu.Unlock()
	kv.tries <- struct{}{}
	return 0, nats.ErrTimeout
}

func (kv *stallingKV) Get(ctx context.Context, k string) (jetstream.KeyValueEntry, error) {
	if kv.stalls() {
		return nil, nats.ErrTimeout
	}
	return kv.KeyValue.Get(ctx, k)
}

// lapseTest is a lease taken as "a" on a stalling bucket with ttl, and
// its log.
type lapseTest struct {
	kv   *stallingKV
	raw  jetstream.KeyValue // the bucket, not stalled
	js   jetstream.JetStream
	l    *Lease
	logs *strings.Builder
	mu   *sync.Mutex
}

func (lt lapseTest) log() string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.logs.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func takeStalling(t *testing.T, ctx context.Context, ttl time.Duration) lapseTest {
	t.Helper()
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	raw, got, err := Open(ctx, js, 0, ttl)
	if err != nil || got != ttl {
		t.Fatalf("open the bucket: %v (TTL %v)", err, got)
	}
	lt := lapseTest{kv: newStallingKV(raw), raw: raw, js: js, logs: &strings.Builder{}, mu: &sync.Mutex{}}
	log := slog.New(slog.NewTextHandler(lockedWriter{lt.mu, lt.logs}, nil))
	lt.l, err = Take(ctx, Config{KV: lt.kv, TTL: ttl, Conn: nc, Log: log, Holder: Holder{ID: "a", Host: "host-a", PID: 7}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lt.l.Release(context.Background()) })
	return lt
}

// freeze makes l lapse now, as a process frozen past its lease's end
// finds when it runs again: its clocks say the lease ended.
func freeze(t *testing.T, l *Lease) {
	t.Helper()
	l.mu.Lock()
	l.until = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
	if err := l.Check(); !errors.Is(err, ErrLapsed) {
		t.Fatalf("a frozen holder's lease: %v; want it lapsed", err)
	}
}

// await waits for n tries of kv's.
func (kv *stallingKV) await(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for range n {
		select {
		case <-kv.tries:
		case <-ctx.Done():
			t.Fatal("the lease was not tried")
		}
	}
}

// A holder frozen past its lease's end (its clocks say so) while NATS does
// not answer it either: the lease lapses, and a write waits for it rather
// than go through; once NATS answers, the holder finds the lease still its
// own, re-takes it and the write goes ahead. Nothing is lost.
func TestFrozenHolderReTakesItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lt := takeStalling(t, ctx, time.Minute)
	first := lt.l.rev
	lt.kv.stall(true)
	freeze(t, lt.l)
	type guarded struct {
		ctx     context.Context
		release context.CancelFunc
		err     error
	}
	waited := make(chan guarded, 1)
	go func() {
		c, release, err := lt.l.Guard(ctx)
		waited <- guarded{c, release, err}
	}()
	lt.kv.await(t, ctx, 2) // two renewals tried, and failed
	select {
	case g := <-waited:
		t.Fatalf("Guard on a lapsed lease returned (err %v); want it to wait", g.err)
	case <-lt.l.Lost():
		t.Fatalf("lost: %v", lt.l.Err())
	default:
	}
	lt.kv.stall(false)
	g := <-waited
	if g.err != nil {
		t.Fatalf("Guard once the lease was re-taken: %v", g.err)
	}
	defer g.release()
	if g.ctx.Err() != nil {
		t.Errorf("guarded context done: %v", context.Cause(g.ctx))
	}
	if err := lt.l.Check(); err != nil {
		t.Errorf("re-taken lease: %v", err)
	}
	e, err := lt.raw.Get(ctx, key)
	if err != nil || e.Revision() <= first {
		t.Fatalf("the lease after the re-take: %v, revision %v; want one after %d", err, e, first)
	}
	logs := lt.log()
	for _, want := range []string{"coordinator lease lapsed: not renewed for", "it may still be this coordinator's: retrying", "coordinator lease: re-took it after"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %q; want it to say %q", logs, want)
		}
	}
}

// A renewal stored but answered with a timeout (its acknowledgement lost
// as NATS lost its quorum) leaves the holder renewing at a revision that
// is no longer the key's: refused on the revision, it finds its own ID
// there, at a later revision, and goes on from it — lapsed meanwhile or
// not.
func TestRevisionMismatchOnItsOwnLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lt := takeStalling(t, ctx, time.Minute)
	first := lt.l.rev
	lt.kv.mu.Lock()
	lt.kv.loseNext = true
	lt.kv.mu.Unlock()
	lt.l.kick <- struct{}{} // renew now, not in 20s
	lt.kv.await(t, ctx, 1)  // the renewal stored, its answer lost; stalled since
	if e, err := lt.raw.Get(ctx, key); err != nil || e.Revision() != first+1 {
		t.Fatalf("the renewal whose answer was lost: %v %v; want it stored at %d", e, err, first+1)
	}
	freeze(t, lt.l)
	lt.kv.await(t, ctx, 1)
	lt.kv.stall(false)
	for lt.l.Check() != nil {
		select {
		case <-lt.l.Lost():
			t.Fatalf("lost: %v", lt.l.Err())
		case <-ctx.Done():
			t.Fatalf("not re-taken: %v", lt.l.Check())
		case <-time.After(20 * time.Millisecond):
		}
	}
	lt.l.mu.Lock()
	rev := lt.l.rev
	lt.l.mu.Unlock()
	if rev < first+1 {
		t.Errorf("renewing at revision %d; want the lost renewal's %d or a later one", rev, first+1)
	}
	if !strings.Contains(lt.log(), "coordinator lease: re-took it after") {
		t.Errorf("log %q", lt.log())
	}
}

// A lease that expired while its holder was cut off, and that nobody
// wrote since, is taken again by the holder when it hears NATS again.
func TestExpiredLeaseNobodyTookIsReTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lt := takeStalling(t, ctx, testTTL)
	lt.kv.stall(true)
	for {
		if _, err := lt.raw.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the lease did not expire")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := lt.l.Check(); !errors.Is(err, ErrLapsed) {
		t.Fatalf("a lease expired on the server: Check %v; want it lapsed", err)
	}
	lt.kv.stall(false)
	for lt.l.Check() != nil {
		select {
		case <-lt.l.Lost():
			t.Fatalf("lost: %v", lt.l.Err())
		case <-ctx.Done():
			t.Fatalf("not re-taken: %v", lt.l.Check())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if h := holder(t, ctx, lt.raw); h.ID != "a" {
		t.Errorf("lease %+v; want a's", h)
	}
	if !strings.Contains(lt.log(), "coordinator lease: re-took it after") {
		t.Errorf("log %q", lt.log())
	}
}

// A lapsed holder that finds another's lease when it hears NATS again has
// lost it, and stops; so does one whose lease is gone with writes to the
// bucket since its last renewal, which another may have made: it cannot
// know that nobody held the lease meanwhile.
func TestLapsedHolderStopsForAnother(t *testing.T) {
	for _, c := range []struct {
		name, want string
		takenBy    string // TakenBy's holder, "" for none known
		other      func(t *testing.T, ctx context.Context, lt lapseTest)
	}{
		{"holds it", "coordinator b on host-b (pid 8, since ", "b", func(t *testing.T, ctx context.Context, lt lapseTest) {
			other, _ := json.Marshal(Holder{ID: "b", Host: "host-b", PID: 8, Since: time.Now()})
			if _, err := lt.raw.Put(ctx, key, other); err != nil {
				t.Fatal(err)
			}
		}},
		{"held it", "its bucket weir_coordinator was written 3 time(s) since this coordinator's last renewal", "", func(t *testing.T, ctx context.Context, lt lapseTest) {
			if err := lt.raw.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			b, err := Take(ctx, Config{KV: lt.raw, TTL: time.Minute, Holder: Holder{ID: "b"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lt := takeStalling(t, ctx, time.Minute)
			lt.kv.stall(true)
			freeze(t, lt.l)
			c.other(t, ctx, lt)
			lt.kv.stall(false)
			select {
			case <-lt.l.Lost():
			case <-ctx.Done():
				t.Fatal("a lapsed holder kept a lease another held")
			}
			if err := lt.l.Err(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("lost: %v; want it to say %q", err, c.want)
			}
			if _, _, err := lt.l.Guard(ctx); !errors.Is(err, ErrLost) {
				t.Errorf("Guard after the loss: %v", err)
			}
			// Taken by another is what weir up exits for; lost to
			// nobody known, it campaigns for the lease again.
			if h, ok := lt.l.TakenBy(); h.ID != c.takenBy || ok != (c.takenBy != "") {
				t.Errorf("TakenBy after the loss: %v, %v; want %q", h, ok, c.takenBy)
			}
		})
	}
}
