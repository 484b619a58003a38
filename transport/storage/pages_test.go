package storage

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A bucket with more subjects than the server sends in one STREAM.INFO
// answer (100,000) is listed in pages, sorted, by offset. A key deleted
// between two pages, sorted before the second one's offset, moves every
// later subject one place down: the second page starts one past where
// the first ended, and a key that was there all along was left out of
// the listing (Catalog.IDs missing the newest checkpoint restores an
// older one). Every key that stays through the listing is listed.
func TestPagedListingKeepsEveryKeyWhileOthersGo(t *testing.T) {
	if testing.Short() {
		t.Skip("puts 100,002 keys")
	}
	srv := embeddedtest.Server(t, embedded.Config{MaxPayload: 16 << 20})
	nc, js := embeddedtest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// In memory: the test is about the listing, not the disk.
	b, err := OpenKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "meta", Storage: jetstream.MemoryStorage}, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv := &KV{kv: b, js: js, bucket: "meta"}
	start := time.Now()
	const n = 100_002 // one page of 100,000 and a second of two
	key := func(i int) string { return fmt.Sprintf("k-%06d", i) }
	// Core publishes, which the stream stores all the same, without
	// waiting for an ack each: the test is about the listing.
	for i := 0; i < n; i++ {
		if err := nc.Publish("$KV.meta."+key(i), nil); err != nil {
			t.Fatal(err)
		}
		if i%10_000 == 9_999 {
			if err := nc.FlushWithContext(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		st, err := js.Stream(ctx, "KV_meta")
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().State.Msgs == n {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the stream holds %d messages of %d", st.CachedInfo().State.Msgs, n)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("put %v", time.Since(start))
	// The listing's requests go through a relay that deletes the first
	// key just before the server answers a request for a later page.
	pnc, _ := embeddedtest.Connect(t, srv)
	var deleted, listed atomic.Bool
	var infos atomic.Int64 // STREAM.INFO requests relayed
	if _, err := pnc.Subscribe("$P.API.>", func(m *nats.Msg) {
		api := strings.TrimPrefix(m.Subject, "$P.API.")
		if strings.HasPrefix(api, "STREAM.INFO.") {
			infos.Add(1)
		}
		if strings.HasPrefix(api, "STREAM.INFO.") && bytes.Contains(m.Data, []byte(`"offset":`)) && !deleted.Swap(true) {
			if err := kv.DeleteKey(ctx, key(0)); err != nil {
				t.Error(err)
			}
		}
		resp, err := pnc.Request(jetstream.DefaultAPIPrefix+api, m.Data, 30*time.Second)
		if err != nil {
			if !listed.Load() { // not a try sent again that the listing no longer waits for
				t.Error(err)
			}
			return
		}
		_ = m.Respond(resp.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := pnc.Flush(); err != nil { // the relay listens before the listing asks
		t.Fatal(err)
	}
	pjs, err := jetstream.NewWithAPIPrefix(nc, "$P.API")
	if err != nil {
		t.Fatal(err)
	}
	relayed := &KV{kv: kv.kv, js: pjs, bucket: "meta"}
	keys, err := relayed.keys(ctx, "k-")
	listed.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %v, in %d STREAM.INFO requests", time.Since(start), infos.Load())
	if !deleted.Load() {
		t.Fatal("the listing asked for no second page")
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	var missing []string
	for i := 1; i < n; i++ {
		if !have[key(i)] {
			missing = append(missing, key(i))
		}
	}
	if len(missing) > 0 {
		t.Errorf("listing of %d keys (one deleted between its pages) left out %d that stayed: %v", n, len(missing), missing)
	}
}
