package storage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// exercise runs the Store contract against s.
func exercise(t *testing.T, s Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB: several object chunks
	put := func(k string, v []byte) {
		t.Helper()
		if err := s.Put(ctx, k, bytes.NewReader(v)); err != nil {
			t.Fatal(err)
		}
	}
	put("j/chk-1/a-0", []byte("one"))
	put("j/chk-1/b-0", big)
	put("j/chk-2/a-0", []byte("two"))
	put("k/chk-1/a-0", []byte("other job"))
	put("j/chk-2/a-0", []byte("two again"))
	got, err := ReadAll(ctx, s, "j/chk-1/b-0")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big object: %d bytes, %v", len(got), err)
	}
	if got, _ := ReadAll(ctx, s, "j/chk-2/a-0"); string(got) != "two again" {
		t.Errorf("replaced object = %q", got)
	}
	if _, err := s.Get(ctx, "j/chk-9/a-0"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing get = %v, want fs.ErrNotExist", err)
	}
	keys, err := s.List(ctx, "j/")
	if err != nil || !reflect.DeepEqual(keys, []string{"j/chk-1/a-0", "j/chk-1/b-0", "j/chk-2/a-0"}) {
		t.Errorf("list j/ = %v %v", keys, err)
	}
	if keys, _ := s.List(ctx, "j/chk-1/"); len(keys) != 2 {
		t.Errorf("list j/chk-1/ = %v", keys)
	}
	if keys, _ := s.List(ctx, "nothing/"); len(keys) != 0 {
		t.Errorf("list nothing = %v", keys)
	}
	if err := s.Delete(ctx, "j/chk-1/"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.List(ctx, ""); !reflect.DeepEqual(keys, []string{"j/chk-2/a-0", "k/chk-1/a-0"}) {
		t.Errorf("after delete: %v", keys)
	}
	if err := s.Put(ctx, "../x", strings.NewReader("")); !errors.Is(err, ErrBadKey) {
		t.Errorf("bad key put = %v", err)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	s, err := NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s)
	// No temporary files or emptied directories left behind.
	if _, err := os.Stat(filepath.Join(dir, "j", "chk-1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted checkpoint dir still there: %v", err)
	}
}

func TestJetStream(t *testing.T) {
	_, nc := embeddedtest.Start(t, embedded.Config{MaxPayload: 2 << 20})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Run("ObjectStore", func(t *testing.T) {
		s, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, s)
	})
	t.Run("KV", func(t *testing.T) {
		s, err := NewKV(ctx, js, DefaultMetaBucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, s)
	})
}

// Locations tell apart the stores a coordinator and a worker may be
// configured with, and agree for the same one however it was named.
func TestLocation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := t.TempDir()
	t.Chdir(root)
	a, err := NewDir(filepath.Join(root, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewDir("checkpoints") // the same directory, relative
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewDir(filepath.Join(root, "other"))
	if err != nil {
		t.Fatal(err)
	}
	_, js := embeddedtest.JetStream(t)
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(ctx, js, DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	if Location(a) == "" || Location(a) != Location(b) {
		t.Errorf("one directory: %q and %q", Location(a), Location(b))
	}
	all := map[string]bool{}
	for _, s := range []Store{a, c, obj, kv} {
		all[Location(s)] = true
	}
	if len(all) != 4 {
		t.Errorf("locations not distinct: %v", all)
	}
	if got := Location(struct{ Store }{a}); got != "" {
		t.Errorf("a store that does not name its location: %q", got)
	}
}

// A bucket is created with the replicas asked for (at least one); an
// existing one is left as it is without a setting, and a scale the server
// cannot do (three replicas on a single server) fails naming the bucket.
func TestBucketReplicas(t *testing.T) {
	_, nc := embeddedtest.Start(t, embedded.Config{})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	replicas := func(stream string) int {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.Replicas
	}
	if _, err := NewKV(ctx, js, "meta", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := NewObjectStore(ctx, js, "state", 1); err != nil {
		t.Fatal(err)
	}
	if r, o := replicas("KV_meta"), replicas("OBJ_state"); r != 1 || o != 1 {
		t.Fatalf("new buckets with %d and %d replicas, want 1", r, o)
	}
	// Opened again, with the setting or without: as they were.
	for _, n := range []int{0, 1} {
		if _, err := NewKV(ctx, js, "meta", n); err != nil {
			t.Fatalf("reopen with replicas %d: %v", n, err)
		}
		if _, err := NewObjectStore(ctx, js, "state", n); err != nil {
			t.Fatalf("reopen with replicas %d: %v", n, err)
		}
	}
	_, err = NewKV(ctx, js, "meta", 3)
	if err == nil || !strings.Contains(err.Error(), "kv meta: scale from 1 to 3 replicas") {
		t.Fatalf("three replicas on one server: %v", err)
	}
	_, err = NewObjectStore(ctx, js, "new", 3)
	if err == nil || !strings.Contains(err.Error(), "object store new") {
		t.Fatalf("a new bucket of three replicas on one server: %v", err)
	}
}

// The JetStream stores are unreachable while their connection is down,
// saying which store and why; a directory always is reachable.
func TestReachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := embeddedtest.Server(t, embedded.Config{})
	nc, js := embeddedtest.Connect(t, srv)
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(ctx, js, DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Store{dir, obj, kv} {
		if err := Reachable(s); err != nil {
			t.Errorf("%s with the server up: %v", Location(s), err)
		}
	}
	srv.Shutdown()
	for nc.IsConnected() {
		select {
		case <-ctx.Done():
			t.Fatal("the connection did not notice the server's shutdown")
		case <-time.After(time.Millisecond):
		}
	}
	if err := Reachable(dir); err != nil {
		t.Errorf("a directory: %v", err)
	}
	for _, s := range []Store{obj, kv} {
		if err := Reachable(s); !errors.Is(err, ErrUnreachable) || !strings.HasPrefix(err.Error(), Location(s)+": ") {
			t.Errorf("%s with the server down: %v", Location(s), err)
		}
	}
}
