package storage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"reflect"
	"testing"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// The listings take a bucket's subjects from its stream's leader, and a
// key whose last message is a delete marker has a subject too: the
// client's deletes leave one (as weir's own deletes did, when a crash cut
// them short before the marker was dropped). Such a key is not listed
// and not read, and Delete removes its marker.
func TestListsLeaveOutDeleteMarkers(t *testing.T) {
	_, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(ctx, js, DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"j/chk-1/a-0", "j/chk-1/b-0"} {
		for _, s := range []Store{obj, kv} {
			if err := s.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Delete a-0 through the clients: each leaves a marker.
	client, err := js.ObjectStore(ctx, DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(ctx, "j/chk-1/a-0"); err != nil {
		t.Fatal(err)
	}
	if err := kv.kv.Delete(ctx, "j/chk-1/a-0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s      Store
		stream string
	}{{obj, "OBJ_" + DefaultStateBucket}, {kv, "KV_" + DefaultMetaBucket}} {
		keys, err := tc.s.List(ctx, "j/")
		if err != nil || !reflect.DeepEqual(keys, []string{"j/chk-1/b-0"}) {
			t.Errorf("%s: list %v, %v; want only the live key", tc.stream, keys, err)
		}
		if _, err := tc.s.Get(ctx, "j/chk-1/a-0"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: get of a deleted key: %v; want fs.ErrNotExist", tc.stream, err)
		}
		if err := tc.s.Delete(ctx, "j/chk-1/"); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			t.Errorf("%s: %d messages left after Delete, markers among them; want none", tc.stream, n)
		}
	}
}
