package storage

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// KV.Get reads a key's value from the stream's leader (the API's
// STREAM.MSG.GET, which only the leader answers), not with a direct get,
// which in a cluster any replica answers, a lagging one with an older
// revision or none: a coordinator would resume a job from an old record,
// or restore a job from an older checkpoint than its latest. The requests
// the server sees say so. A key deleted or purged by a KV client (which
// leaves a marker) reads as missing.
func TestKVGetReadsFromTheLeader(t *testing.T) {
	nc, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	kv, err := NewKV(ctx, js, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"old", "new"} {
		if err := kv.Put(ctx, "jobs/j", strings.NewReader(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"jobs/deleted", "jobs/purged"} {
		if err := kv.Put(ctx, k, strings.NewReader("v")); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := js.KeyValue(ctx, "meta")
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Delete(ctx, "jobs/deleted"); err != nil {
		t.Fatal(err)
	}
	if err := raw.Purge(ctx, "jobs/purged"); err != nil {
		t.Fatal(err)
	}

	direct, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Unsubscribe()
	get, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.KV_meta")
	if err != nil {
		t.Fatal(err)
	}
	defer get.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	rc, err := kv.Get(ctx, "jobs/j")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	if err != nil || string(data) != "new" {
		t.Errorf("Get gave %q, %v; want the last revision, new", data, err)
	}
	for _, k := range []string{"jobs/deleted", "jobs/purged", "jobs/never"} {
		if _, err := kv.Get(ctx, k); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Get %s: %v, want fs.ErrNotExist", k, err)
		}
	}
	// The server delivers in order: once the flush is answered, every
	// request Get made has reached the subscriptions.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	count := func(sub *nats.Subscription) int {
		t.Helper()
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(direct); n != 0 {
		t.Errorf("%d direct gets; want none", n)
	}
	if n := count(get); n < 4 {
		t.Errorf("%d message gets (STREAM.MSG.GET); want one a Get (4), or more where one was sent again", n)
	}
}
