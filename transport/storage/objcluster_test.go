package storage

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// clusterStores starts a three-server cluster with both buckets on all
// three servers (weir up -replicas 3) and returns a store of each kind
// connected to the server that leads the object store's stream (to write
// through), a store of each kind connected to a server that leads neither
// bucket's stream (to read through: its own replicas may lag), and the
// reader's connection.
func clusterStores(t *testing.T, ctx context.Context) (wo *ObjectStore, wk *KV, ro *ObjectStore, rk *KV, rnc *nats.Conn) {
	t.Helper()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := NewObjectStore(ctx, js, "state", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := NewKV(ctx, js, "meta", 3); err != nil {
		t.Fatal(err)
	}
	// The writer on the object store's leader, the reader on a server
	// that leads neither stream (of three, one at least).
	objLeader, leaderURL, _ := embeddedtest.StreamLeader(t, ctx, js, "OBJ_state", servers)
	kvLeader, _, _ := embeddedtest.StreamLeader(t, ctx, js, "KV_meta", servers)
	var followerURL string
	for _, s := range servers {
		if s.Name() != objLeader && s.Name() != kvLeader {
			followerURL = s.ClientURL()
		}
	}
	_, ljs := embeddedtest.ConnectTo(t, leaderURL)
	rnc, fjs := embeddedtest.ConnectTo(t, followerURL)
	var err error
	if wo, err = NewObjectStore(ctx, ljs, "state", 0); err != nil {
		t.Fatal(err)
	}
	if wk, err = NewKV(ctx, ljs, "meta", 0); err != nil {
		t.Fatal(err)
	}
	if ro, err = NewObjectStore(ctx, fjs, "state", 0); err != nil {
		t.Fatal(err)
	}
	if rk, err = NewKV(ctx, fjs, "meta", 0); err != nil {
		t.Fatal(err)
	}
	return wo, wk, ro, rk, rnc
}

// On a three-server cluster, a client connected to a server that does
// not lead the buckets' streams lists, reads and deletes what another
// client wrote through the leader's server right before, and none of its
// requests but an object's chunk batches is a direct get, none creates a
// consumer (a watch's, or the object store client's for an object's
// chunks): the server may answer a
// direct get from its own replica, and place a consumer on it, and the
// replica answers with what it has applied so far. A listing that misses
// a checkpoint just completed restores an older one (Catalog.IDs), or
// calls the newest corrupt (Catalog.Read); a read that misses a snapshot
// just written fails the restore.
func TestStoresOnAClusterReadFromTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wo, wk, ro, rk, rnc := clusterStores(t, ctx)

	reads := embeddedtest.WatchReplicaReads(t, rnc)

	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: three chunks
	const n = 10
	for i := range n {
		key := fmt.Sprintf("j/chk-%d/task-0", i)
		val := append([]byte(fmt.Sprint(i)), big...)
		if err := wo.Put(ctx, key, bytes.NewReader(val)); err != nil {
			t.Fatal(err)
		}
		if err := wk.Put(ctx, fmt.Sprintf("j/chk-%d/_metadata", i), strings.NewReader(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		keys, err := ro.List(ctx, fmt.Sprintf("j/chk-%d/", i))
		if err != nil || !reflect.DeepEqual(keys, []string{key}) {
			t.Fatalf("object store listing right after writing %s: %v, %v", key, keys, err)
		}
		got, err := ReadAll(ctx, ro, key)
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("read %d bytes, %v right after writing %d to %s", len(got), err, len(val), key)
		}
		keys, err = rk.List(ctx, "j/chk-")
		if err != nil || len(keys) != i+1 || keys[len(keys)-1] != fmt.Sprintf("j/chk-%d/_metadata", i) {
			t.Fatalf("kv listing right after writing checkpoint %d's metadata: %v, %v", i, keys, err)
		}
	}
	for i := range n {
		for _, s := range []Store{ro, rk} {
			if err := s.Delete(ctx, fmt.Sprintf("j/chk-%d/", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d, c := reads.Counts(); d != 0 || c != 0 {
		t.Errorf("the reader made %d direct gets but of chunk batches, and created %d consumers; want none", d, c)
	}
	for _, stream := range []string{"OBJ_state", "KV_meta"} {
		var resp struct {
			State struct {
				Msgs uint64 `json:"messages"`
			} `json:"state"`
		}
		if err := apiRequest(ctx, wo.js, "STREAM.INFO."+stream, nil, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.State.Msgs != 0 {
			t.Errorf("%s: %d messages left after deleting every object; want none", stream, resp.State.Msgs)
		}
	}
}

// A big object (ten chunks) read through a server that does not lead the
// bucket's stream, right after it was written through the leader's, is
// read whole, its size and digest verified, and the reads leave no
// consumer behind. (The client's read ends its chunk consumer once that
// has nothing pending, which on a lagging replica cuts the object short.)
func TestBigObjectOnAClusterReadsEveryChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wo, _, ro, _, _ := clusterStores(t, ctx)
	big := bytes.Repeat([]byte("0123456789abcdef"), 80000) // 1.25 MB: ten chunks
	const n = 10
	for i := range n {
		key := fmt.Sprintf("j/chk-%d/task-0", i)
		val := append([]byte(fmt.Sprint(i)), big...)
		if err := wo.Put(ctx, key, bytes.NewReader(val)); err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(ctx, ro, key)
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("read %d bytes, %v right after writing %d to %s", len(got), err, len(val), key)
		}
	}
	var resp struct {
		State struct {
			Consumers int `json:"consumer_count"`
		} `json:"state"`
	}
	if err := apiRequest(ctx, wo.js, "STREAM.INFO.OBJ_state", nil, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.State.Consumers != 0 {
		t.Errorf("%d consumers left on the bucket's stream after the reads; want none", resp.State.Consumers)
	}
}
