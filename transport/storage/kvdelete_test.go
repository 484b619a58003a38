package storage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// KV.Delete reads each key's last revision from the stream's leader (the
// API's STREAM.MSG.GET, which only the leader answers), not with a direct
// get (which in a cluster any replica answers, a lagging one with an older
// revision or none, and the key would be left), and purges the key's
// subject up to that revision and no further. The requests the server
// sees say so.
func TestKVDeleteReadsTheLastRevisionFromTheLeader(t *testing.T) {
	nc, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	kv, err := NewKV(ctx, js, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"j/chk-1/a", "j/chk-1/a", "j/chk-1/b", "j/chk-2/a"} { // revisions 1 to 4
		if err := kv.Put(ctx, k, bytes.NewReader([]byte("meta"))); err != nil {
			t.Fatal(err)
		}
	}
	subscribe := func(subj string) *nats.Subscription {
		t.Helper()
		sub, err := nc.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		return sub
	}
	direct := subscribe(jetstream.DefaultAPIPrefix + "DIRECT.GET.>")
	get := subscribe(jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.KV_meta")
	purge := subscribe(jetstream.DefaultAPIPrefix + "STREAM.PURGE.KV_meta")
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	if err := kv.Delete(ctx, "j/chk-1/"); err != nil {
		t.Fatal(err)
	}
	// The server delivers in order: once the flush is answered, every
	// request Delete made has reached the subscriptions.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	requests := func(sub *nats.Subscription) []string {
		t.Helper()
		var got []string
		for {
			m, err := sub.NextMsg(0)
			if errors.Is(err, nats.ErrTimeout) {
				return got
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, m.Subject+" "+string(m.Data))
		}
	}
	if got := requests(direct); len(got) != 0 {
		t.Errorf("direct gets %q; want none", got)
	}
	if got, want := requests(get), []string{
		`$JS.API.STREAM.MSG.GET.KV_meta {"last_by_subj":"$KV.meta.j/chk-1/a"}`,
		`$JS.API.STREAM.MSG.GET.KV_meta {"last_by_subj":"$KV.meta.j/chk-1/b"}`,
	}; !slices.Equal(got, want) {
		t.Errorf("message gets %q; want %q", got, want)
	}
	if got, want := requests(purge), []string{
		`$JS.API.STREAM.PURGE.KV_meta {"seq":3,"filter":"$KV.meta.j/chk-1/a"}`,
		`$JS.API.STREAM.PURGE.KV_meta {"seq":4,"filter":"$KV.meta.j/chk-1/b"}`,
	}; !slices.Equal(got, want) {
		t.Errorf("purges %q; want %q (each through its key's last revision)", got, want)
	}

	if keys, err := kv.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"j/chk-2/a"}) {
		t.Errorf("keys left %q, %v; want j/chk-2/a", keys, err)
	}
	if _, err := kv.Get(ctx, "j/chk-1/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a deleted key: %v", err)
	}
	st, err := js.Stream(ctx, "KV_meta")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the bucket's stream holds %d messages, want 1 (no delete markers)", n)
	}
	// A key that was never there, or is gone already, is no error.
	if err := kv.Delete(ctx, "j/chk-1/"); err != nil {
		t.Fatal(err)
	}
	if _, err := lastSeq(ctx, js, "KV_meta", "$KV.meta.j/chk-1/a"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the last message of a purged subject: %v, want ErrMsgNotFound", err)
	}
}
