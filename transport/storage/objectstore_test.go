package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// cancelAfter yields n reads of data, then cancels the put's context and
// goes on yielding.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	if c.n == 0 {
		c.cancel()
	} else {
		c.n--
	}
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// failAfter yields n reads of data, then fails.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("encoder failed")
	}
	f.n--
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// A Put that fails halfway — its context canceled (a task canceled during
// its snapshot upload) or its reader failing — leaves neither an object nor
// the chunks it had uploaded: nothing would ever delete them.
func TestObjectStoreFailedPutLeavesNothing(t *testing.T) {
	_, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	s, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		t.Helper()
		st, err := js.Stream(ctx, "OBJ_"+DefaultStateBucket)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}
	for _, tc := range []struct {
		name string
		r    func(context.CancelFunc) io.Reader
	}{
		{"failed", func(context.CancelFunc) io.Reader { return &failAfter{n: 5} }},
		{"canceled", func(c context.CancelFunc) io.Reader { return &cancelAfter{n: 5, cancel: c} }},
	} {
		name, r := tc.name, tc.r
		pctx, cancel := context.WithCancel(ctx)
		err := s.Put(pctx, "j/chk-1/"+name, r(cancel))
		cancel()
		if err == nil {
			t.Fatalf("%s put succeeded", name)
		}
		if _, err := s.Get(ctx, "j/chk-1/"+name); err == nil {
			t.Errorf("%s put: object visible", name)
		}
		if n := stored(); n != 0 {
			t.Errorf("%s put: %d messages left in the bucket's stream", name, n)
		}
	}
	// The store still works, and holds exactly one object's messages.
	if err := s.Put(ctx, "j/chk-2/a", bytes.NewReader([]byte("ok"))); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadAll(ctx, s, "j/chk-2/a"); err != nil || string(got) != "ok" {
		t.Fatalf("after failed puts: %q %v", got, err)
	}
}

// A snapshot written a few bytes at a time (an encoder behind a pipe) is
// stored in whole chunks, not a chunk per Read: each chunk is a message,
// and an upload of thousands of them fails once the client has 4000
// unacknowledged.
func TestObjectStorePutFillsChunks(t *testing.T) {
	_, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	s, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 128 << 10 // the client's default chunk size
	data := bytes.Repeat([]byte("0123456789abcdef"), (chunk+chunk/2)/16)
	if err := s.Put(ctx, "j/chk-1/t-0", iotest.OneByteReader(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	bucket, err := js.ObjectStore(ctx, DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := bucket.GetInfo(ctx, "j/chk-1/t-0")
	if err != nil {
		t.Fatal(err)
	}
	if info.Chunks != 2 || info.Size != uint64(len(data)) {
		t.Errorf("stored %d bytes in %d chunks; want %d bytes in 2", info.Size, info.Chunks, len(data))
	}
	if got, err := ReadAll(ctx, s, "j/chk-1/t-0"); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read back %d bytes (%v); want the %d put", len(got), err, len(data))
	}
}

// Discarding checkpoints leaves nothing of them in the buckets' streams:
// a delete marker per object kept for good would make the streams, and
// every List (each catalog read lists), grow with every checkpoint ever
// taken.
func TestJetStreamDeleteLeavesNoMarkers(t *testing.T) {
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
	for _, tc := range []struct {
		s      Store
		stream string
	}{{obj, "OBJ_" + DefaultStateBucket}, {kv, "KV_" + DefaultMetaBucket}} {
		for id := 1; id <= 5; id++ {
			for _, task := range []string{"a-0", "b-0"} {
				if err := tc.s.Put(ctx, fmt.Sprintf("j/chk-%d/%s", id, task), bytes.NewReader([]byte("state"))); err != nil {
					t.Fatal(err)
				}
			}
			if id > 1 {
				if err := tc.s.Delete(ctx, fmt.Sprintf("j/chk-%d/", id-1)); err != nil {
					t.Fatal(err)
				}
			}
		}
		keys, err := tc.s.List(ctx, "")
		if err != nil || len(keys) != 2 {
			t.Fatalf("%s: keys %v, %v", tc.stream, keys, err)
		}
		st, err := js.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		// Two objects left: the object store keeps a meta and a chunk
		// message for each, the KV one message.
		want := uint64(2)
		if tc.s == Store(obj) {
			want = 4
		}
		if n := st.CachedInfo().State.Msgs; n != want {
			t.Errorf("%s: %d messages for %d objects, want %d", tc.stream, n, len(keys), want)
		}
	}
}

// Delete reads each object's last meta message, to tell whether it is the
// delete marker to drop, from the stream's leader: a direct get may be
// answered by a lagging replica that still has the object, and the marker
// would then stay for good.
func TestObjectDeleteReadsTheMarkerFromTheLeader(t *testing.T) {
	nc, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"j/chk-1/a-0", "j/chk-1/b-0"} {
		if err := obj.Put(ctx, k, bytes.NewReader([]byte("state"))); err != nil {
			t.Fatal(err)
		}
	}
	get, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.OBJ_" + DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := obj.Delete(ctx, "j/chk-1/"); err != nil {
		t.Fatal(err)
	}
	// The server delivers in order: once the flush is answered, every
	// request Delete made has reached the subscription.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := get.Pending(); err != nil || n != 2 {
		t.Errorf("%d message gets from the leader (%v); want 2, one per deleted object", n, err)
	}
	st, err := js.Stream(ctx, "OBJ_"+DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d messages left after deleting every object, want none", n)
	}
}

// PutObject stores the metadata, description and headers it is given in
// the object's info, where the object store client and Infos read them;
// a put of the same key without them replaces them.
func TestObjectStorePutObjectKeepsItsMeta(t *testing.T) {
	_, js := embeddedtest.Connect(t, embeddedtest.Server(t, embedded.Config{}))
	ctx := context.Background()
	s, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	meta := jetstream.ObjectMeta{Name: "mod/1", Description: "a module",
		Headers: map[string][]string{"X-Weir": {"h"}}, Metadata: map[string]string{"weir-sha256": "abc"}}
	data := bytes.Repeat([]byte("m"), 3*chunkSize/2)
	if err := s.PutObject(ctx, meta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, DefaultStateBucket)
	if err != nil {
		t.Fatal(err)
	}
	got, err := obs.GetBytes(ctx, "mod/1")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("client read %d bytes, %v; want the %d put", len(got), err, len(data))
	}
	info, err := obs.GetInfo(ctx, "mod/1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata["weir-sha256"] != "abc" || info.Description != "a module" || info.Headers.Get("X-Weir") != "h" ||
		info.Opts == nil || info.Opts.ChunkSize != chunkSize {
		t.Fatalf("client's info %+v; want the put's metadata, description, header and chunk size", info.ObjectMeta)
	}
	infos, err := s.Infos(ctx, "mod/")
	if err != nil || len(infos) != 1 || infos[0].Metadata["weir-sha256"] != "abc" {
		t.Fatalf("infos %v, %v; want mod/1 with its metadata", infos, err)
	}
	if err := s.Put(ctx, "mod/1", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if infos, err = s.Infos(ctx, "mod/"); err != nil || len(infos) != 1 || len(infos[0].Metadata) != 0 {
		t.Fatalf("infos after a put without metadata %v, %v; want mod/1 without", infos, err)
	}
}
