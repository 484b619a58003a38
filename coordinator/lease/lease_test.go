package lease

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// testTTL is the lease bucket's TTL in these tests: a lease not renewed
// expires this long after.
const testTTL = 2 * time.Second

// bucket opens the lease bucket on a new connection to srv with ttl.
func bucket(t *testing.T, ctx context.Context, url string, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, got, err := Open(ctx, js, 0, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got != ttl {
		t.Fatalf("bucket TTL %v; want %v", got, ttl)
	}
	return kv
}

// take takes the lease as id on kv, failing the test on an error.
func take(t *testing.T, ctx context.Context, kv jetstream.KeyValue, id string, answers func(Holder) bool) *Lease {
	t.Helper()
	l, err := Take(ctx, Config{KV: kv, TTL: testTTL, Holder: Holder{ID: id, Host: "host-" + id, PID: 7}, Answers: answers})
	if err != nil {
		t.Fatalf("%s: take the lease: %v", id, err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// holder returns who holds the lease in kv now.
func holder(t *testing.T, ctx context.Context, kv jetstream.KeyValue) Holder {
	t.Helper()
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var h Holder
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// A lease whose holder answers is refused at once, naming the holder.
func TestTakeRefusesAHolderThatAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
	kv := bucket(t, ctx, url, testTTL)
	a := take(t, ctx, kv, "a", nil)
	var asked Holder
	_, err := Take(ctx, Config{KV: kv, TTL: testTTL, Holder: Holder{ID: "b"}, Answers: func(h Holder) bool { asked = h; return true }})
	var held *HeldError
	if !errors.As(err, &held) || !held.Answers {
		t.Fatalf("second take: %v; want a HeldError of a holder that answers", err)
	}
	if asked.ID != "a" || held.Holder.ID != "a" || held.Holder.Host != "host-a" || held.Holder.PID != 7 {
		t.Errorf("asked %+v, error names %+v; want holder a", asked, held.Holder)
	}
	if !strings.Contains(err.Error(), "coordinator a on host-a (pid 7, since ") {
		t.Errorf("error %q does not name the holder", err)
	}
	if err := a.Check(); err != nil {
		t.Errorf("the holder's lease after a refused take: %v", err)
	}
}

// A lease that its silent holder does not renew is taken once it expired;
// one renewed while the taker waits is refused, naming the holder.
func TestTakeWaitsForALeaseNotRenewed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
	kv := bucket(t, ctx, url, testTTL)
	// A holder that froze right after it took the lease.
	frozen, _ := json.Marshal(Holder{ID: "frozen", Host: "h", PID: 1, Since: time.Now()})
	if _, err := kv.Create(ctx, key, frozen); err != nil {
		t.Fatal(err)
	}
	silent := func(Holder) bool { return false }
	b := take(t, ctx, kv, "b", silent)
	if h := holder(t, ctx, kv); h.ID != "b" {
		t.Fatalf("lease held by %+v; want b", h)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	// b renews its lease: a third that does not hear it answer waits,
	// sees the renewal and is refused.
	_, err := Take(ctx, Config{KV: kv, TTL: testTTL, Holder: Holder{ID: "c"}, Answers: silent})
	var held *HeldError
	if !errors.As(err, &held) || held.Answers || held.Holder.ID != "b" {
		t.Fatalf("take beside a holder that renews: %v; want a HeldError naming b", err)
	}
	if !strings.Contains(err.Error(), "coordinator b on host-b (pid 7, since ") || !strings.Contains(err.Error(), "renews it") {
		t.Errorf("error %q", err)
	}
}

// A holder cut off from its server lets its lease lapse by its own clock,
// before the server lets another take it: Check and Guard refuse from
// then on and a guarded context ends. The other takes it once it expired.
// The holder, still cut off, does not know that: it is lapsed, not lost.
func TestSilencedHolderLapses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	quiet := natsconntest.NewSilencer(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	kvA := bucket(t, ctx, quiet.URL(), testTTL)
	kvB := bucket(t, ctx, srv.ClientURL(), testTTL)
	a := take(t, ctx, kvA, "a", nil)
	guarded, release, err := a.Guard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	quiet.Silence()
	<-guarded.Done()
	if !errors.Is(context.Cause(guarded), ErrLapsed) {
		t.Errorf("guarded context ended with %v; want the lapse", context.Cause(guarded))
	}
	if err := a.Check(); !errors.Is(err, ErrLapsed) || !strings.Contains(err.Error(), "not renewed for") {
		t.Errorf("lapsed lease: %v; want ErrLapsed saying for how long it was not renewed", err)
	}
	if err := a.Err(); err != nil {
		t.Errorf("a lapsed lease is lost: %v", err)
	}
	short, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := a.Guard(short); !errors.Is(err, ErrLapsed) || !errors.Is(err, context.Canceled) {
		t.Errorf("Guard on a lapsed lease, its context done: %v", err)
	}
	// a is past its end before the server lets b take the lease: b finds
	// it held, does not hear a answer, and waits for it to expire.
	b := take(t, ctx, kvB, "b", func(Holder) bool { return false })
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	// Released while lapsed, a deletes nothing: the lease stays b's.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Err(); !errors.Is(err, ErrLost) {
		t.Errorf("released: %v", err)
	}
	if h := holder(t, ctx, kvB); h.ID != "b" {
		t.Errorf("lease %+v; want b's", h)
	}
}

// A holder whose renewal finds another's lease has lost it, and says who
// holds it now.
func TestRenewalFindsAnotherHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
	kv := bucket(t, ctx, url, testTTL)
	a := take(t, ctx, kv, "a", nil)
	// What a's renewal finds after a freeze longer than the TTL: another
	// took the lease meanwhile.
	other, _ := json.Marshal(Holder{ID: "b", Host: "host-b", PID: 8, Since: time.Now()})
	if _, err := kv.Put(ctx, key, other); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-ctx.Done():
		t.Fatal("a holder kept a lease another took")
	}
	if err := a.Err(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "coordinator b on host-b (pid 8, since ") {
		t.Errorf("lost lease: %v; want it to name b", err)
	}
	// Released, a lease lost stays its new holder's.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(t, ctx, kv); h.ID != "b" {
		t.Errorf("after a's release the lease is %+v; want b's", h)
	}
}

// A released lease is taken at once: the next holder does not wait for it
// to expire (a minute here, beyond the test's deadline).
func TestReleasedLeaseIsTakenAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
	kv := bucket(t, ctx, url, time.Minute)
	a, err := Take(ctx, Config{KV: kv, TTL: time.Minute, Holder: Holder{ID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(); !errors.Is(err, ErrLost) {
		t.Errorf("released lease: Check %v", err)
	}
	b, err := Take(ctx, Config{KV: kv, TTL: time.Minute, Holder: Holder{ID: "b"}})
	if err != nil {
		t.Fatalf("take after a release: %v", err)
	}
	defer b.Release(ctx)
	if h := holder(t, ctx, kv); h.ID != "b" {
		t.Errorf("lease %+v; want b's", h)
	}
}

// On a three-server cluster, a coordinator that takes the lease while
// the bucket's stream has no leader (its leader's server and another
// stopped, as right after servers restarted) takes it once the stream's
// replicas elected a leader again, as weir up does: the create that
// nobody stored failed Take, where a few seconds later it would have
// succeeded. The stopped server other than the leader is started again
// once the create was sent (seen on the wire), so that the first try
// surely finds no leader.
func TestTakeThroughALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A longer TTL than the other tests': on two loaded cores the renewals
	// of a lease taken while the replicas catch up lagged past 2s once.
	const ttl = 5 * testTTL
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, _, err := Open(ctx, js, 3, ttl); err != nil {
		t.Fatal(err)
	}
	stay, stop := embeddedtest.QuorumLoss(t, ctx, js, "KV_"+Bucket, servers)
	nc, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	kv, _, err := Open(ctx, sjs, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	watcher, _ := embeddedtest.ConnectTo(t, stay.ClientURL())
	sent, err := watcher.SubscribeSync("$KV." + Bucket + "." + key)
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	restart := stop()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		if _, err := sent.NextMsgWithContext(ctx); err != nil {
			t.Errorf("the create was not seen: %v", err)
			return
		}
		restart()
	}()
	// No deadline, as weir up's: each try has its own, the election its
	// natsconn.ElectionWait (ctx above bounds the test).
	l, err := Take(context.WithoutCancel(ctx), Config{KV: kv, TTL: ttl, Conn: nc, Holder: Holder{ID: "a", Host: "host-a", PID: 7}})
	<-restarted
	if err != nil {
		t.Fatalf("take the lease while its stream elects a leader: %v", err)
	}
	if err := l.Check(); err != nil {
		t.Errorf("the lease just taken: %v", err)
	}
	// Read from the stream's leader (STREAM.MSG.GET, which only the
	// leader answers): the direct get that GetLastMsgForSubject sends on a
	// KV stream may be answered by the replica of the server started
	// again, still catching up, and then missed the release's delete.
	last := func() (hdrs string, data []byte) {
		t.Helper()
		req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + Bucket + "." + key})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+Bucket, req)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Message struct {
				Hdrs, Data []byte
			} `json:"message"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil || r.Error != nil {
			t.Fatalf("the key's last message from the leader: %v %+v", err, r.Error)
		}
		return string(r.Message.Hdrs), r.Message.Data
	}
	var h Holder
	if _, data := last(); json.Unmarshal(data, &h) != nil || h.ID != "a" {
		t.Errorf("the lease is held by %+v (%q); want a", h, data)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if hdrs, _ := last(); !strings.Contains(hdrs, "KV-Operation: DEL") {
		t.Errorf("the lease released has headers %q; want it deleted (KV-Operation: DEL)", hdrs)
	}
}

// losingKV stores the first Create and the first Delete it is asked for
// and answers them with a timeout, as tries whose acknowledgement never
// came.
type losingKV struct {
	jetstream.KeyValue
	created, deleted bool
}

func (kv *losingKV) Create(ctx context.Context, k string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if kv.created {
		return kv.KeyValue.Create(ctx, k, value, opts...)
	}
	kv.created = true
	if _, err := kv.KeyValue.Create(ctx, k, value, opts...); err != nil {
		return 0, err
	}
	return 0, nats.ErrTimeout
}

func (kv *losingKV) Delete(ctx context.Context, k string, opts ...jetstream.KVDeleteOpt) error {
	if kv.deleted {
		return kv.KeyValue.Delete(ctx, k, opts...)
	}
	kv.deleted = true
	if err := kv.KeyValue.Delete(ctx, k, opts...); err != nil {
		return err
	}
	return nats.ErrTimeout
}

// A take whose create was stored but not acknowledged tries again, finds
// the lease there and knows it for its own by its ID: the lease is taken,
// not refused as another's. So is a release whose delete was stored but
// not acknowledged: the delete tried again is refused on the revision,
// and the lease found gone.
func TestTakeAndReleaseWhoseAcknowledgementWasLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	kv := &losingKV{KeyValue: bucket(t, ctx, srv.ClientURL(), testTTL)}
	nc, _ := embeddedtest.Connect(t, srv)
	l, err := Take(ctx, Config{KV: kv, TTL: testTTL, Conn: nc, Holder: Holder{ID: "a", Host: "host-a", PID: 7},
		Answers: func(Holder) bool { return true }})
	if err != nil {
		t.Fatalf("take the lease, its create's acknowledgement lost: %v", err)
	}
	if !kv.created {
		t.Fatal("the create was not tried")
	}
	if err := l.Check(); err != nil {
		t.Errorf("the lease just taken: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release the lease, its delete's acknowledgement lost: %v", err)
	}
	if !kv.deleted {
		t.Fatal("the delete was not tried")
	}
	if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the lease released: %v; want %v", err, jetstream.ErrKeyNotFound)
	}
}

// A take that failed, its create stored but not acknowledged, and a take
// after it by the same holder (weir up tries again, keeping its ID): the
// second knows the lease for its own and renews it at once, neither
// refused as another's nor waiting for it to expire.
func TestTakeAgainAfterATakeWhoseCreateWasStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	kv := &losingKV{KeyValue: bucket(t, ctx, srv.ClientURL(), testTTL)}
	cfg := Config{KV: kv, TTL: testTTL, Holder: Holder{ID: "a", Host: "host-a", PID: 7}, Answers: func(Holder) bool { return true }}
	if _, err := Take(ctx, cfg); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("the first take: %v; want its create's timeout", err)
	}
	stored, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("the first take's create: %v; want it stored", err)
	}
	l, err := Take(ctx, cfg)
	if err != nil {
		t.Fatalf("take again: %v", err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	if err := l.Check(); err != nil {
		t.Errorf("the lease taken again: %v", err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil || e.Revision() <= stored.Revision() || holder(t, ctx, kv).ID != "a" {
		t.Errorf("the lease taken again: revision %d (the first take's %d), %v; want a's, renewed", e.Revision(), stored.Revision(), err)
	}
}
