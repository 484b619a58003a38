package registry

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// On a three-server cluster with the registry on all three (weir up
// -replicas 3), a worker connected to a server that does not lead the
// registry's stream resolves each module right after it was pushed
// through the leader's server, and its lookups make no direct get (but
// for a module's chunks, whose count the leader's info gives) and
// create no consumer, which its own server may answer from a replica
// that has not applied the push yet: the job would fail with "not in the
// module registry". A removal through it leaves nothing listed.
func TestRegistryOnAClusterReadsFromTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := Open(ctx, js, "", 3); err != nil {
		t.Fatal(err)
	}
	_, leaderURL, followerURL := embeddedtest.StreamLeader(t, ctx, js, "OBJ_"+DefaultBucket, servers)
	_, ljs := embeddedtest.ConnectTo(t, leaderURL)
	pusher, err := Open(ctx, ljs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	wnc, wjs := embeddedtest.ConnectTo(t, followerURL)
	worker, err := Open(ctx, wjs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	reads := embeddedtest.WatchReplicaReads(t, wnc)

	const n = 10
	for i := range n {
		wasm := append(append([]byte(nil), minimal...), bytes.Repeat([]byte{byte(i)}, 1000)...)
		name := fmt.Sprintf("op%d", i)
		m, err := pusher.Push(ctx, name, wasm, 0, checkMagic)
		if err != nil {
			t.Fatal(err)
		}
		data, got, err := Resolve(ctx, worker, name)
		if err != nil || got.Ref() != m.Ref() || !bytes.Equal(data, wasm) {
			t.Fatalf("resolve %s right after pushing %s: %s, %d bytes, %v", name, m.Ref(), got.Ref(), len(data), err)
		}
	}
	if _, err := worker.Remove(ctx, "op0"); err != nil {
		t.Fatal(err)
	}
	if all, err := worker.List(ctx); err != nil || len(all) != n-1 {
		t.Errorf("after removing op0: %v, %v; want the %d others", all, err, n-1)
	}
	if d, c := reads.Counts(); d != 0 || c != 0 {
		t.Errorf("the worker made %d direct gets but of chunk batches, and created %d consumers; want none", d, c)
	}
}
