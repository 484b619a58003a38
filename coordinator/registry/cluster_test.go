package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/modref"
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

// A push whose upload starts while the registry bucket's stream has no
// leader (its leader's server and another of three stopped) waits for
// one, and stores the module once a leader is back, with its digest and
// push time: the registry puts through storage.ObjectStore, not the
// object store client, whose put fails on the first chunk nobody stores.
// The put is the push's step after its listing and version claim, which
// find the stream and the versions' bucket led; here it starts on its own
// while they are not.
func TestRegistryPushWaitsOutAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := Open(ctx, js, "", 3); err != nil {
		t.Fatal(err)
	}
	stream := "OBJ_" + DefaultBucket
	stay, stop := embeddedtest.QuorumLoss(t, ctx, js, stream, servers)
	snc, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	reg, err := Open(ctx, sjs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	chunks := make(chan *nats.Msg, 64)
	if _, err := snc.ChanSubscribe("$O."+DefaultBucket+".C.>", chunks); err != nil {
		t.Fatal(err)
	}
	if err := snc.Flush(); err != nil {
		t.Fatal(err)
	}
	restart := stop()

	wasm := append(append([]byte(nil), minimal...), bytes.Repeat([]byte{7}, 300<<10)...)
	m := Module{Name: "op", Version: 1, Digest: Digest(wasm), Size: int64(len(wasm)), Pushed: time.Now().UTC()}
	put := make(chan error, 1)
	go func() { put <- reg.put(ctx, m, wasm) }()
	// A chunk goes out while the stream has no leader; the put goes on.
	select {
	case <-chunks:
	case err := <-put:
		t.Fatalf("the put ended (%v) with no leader to store it", err)
	}
	restart()
	if err := <-put; err != nil {
		t.Fatalf("put once a leader is back: %v", err)
	}
	embeddedtest.AwaitStreamLeader(t, ctx, sjs, stream)
	got, err := reg.Find(ctx, modref.Ref{Kind: modref.Registry, Name: "op", Version: 1})
	if err != nil || got[0].Digest != m.Digest || !got[0].Pushed.Equal(m.Pushed) || got[0].Size != m.Size {
		t.Fatalf("listed %v, %v; want %+v", got, err, m)
	}
	data, err := reg.Get(ctx, got[0])
	if err != nil || !bytes.Equal(data, wasm) {
		t.Fatalf("get %s: %d bytes, %v; want the %d pushed", m.Ref(), len(data), err, len(wasm))
	}
}

// A push's claim of its version waits out an election of the versions'
// bucket's stream leader (its leader's server and another of three
// stopped), as the upload does, and claims the version once a leader is
// back: nats.go's KV create, which the claim used alone, failed at once.
// The claim is the push's step after its listing, which finds the stream
// led; here it starts on its own while it is not.
func TestRegistryClaimWaitsOutAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := Open(ctx, js, "", 3); err != nil {
		t.Fatal(err)
	}
	stream := "KV_" + DefaultBucket + "_versions"
	stay, stop := embeddedtest.QuorumLoss(t, ctx, js, stream, servers)
	snc, sjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	reg, err := Open(ctx, sjs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	key := versionKey("op", 1)
	tries := make(chan *nats.Msg, 64)
	if _, err := snc.ChanSubscribe("$KV."+DefaultBucket+"_versions."+key, tries); err != nil {
		t.Fatal(err)
	}
	if err := snc.Flush(); err != nil {
		t.Fatal(err)
	}
	restart := stop()

	digest := Digest(minimal)
	claimed := make(chan error, 1)
	go func() { claimed <- reg.claim(ctx, key, digest) }()
	// A try goes out while the stream has no leader; the claim goes on.
	select {
	case <-tries:
	case err := <-claimed:
		t.Fatalf("the claim ended (%v) with no leader to store it", err)
	}
	restart()
	if err := <-claimed; err != nil {
		t.Fatalf("claim once a leader is back: %v", err)
	}
	if ours, err := reg.claimedFor(ctx, key, digest); err != nil || !ours {
		t.Fatalf("%s holds our digest: %v, %v; want true", key, ours, err)
	}
	// Another push of the version, with other content, conflicts.
	if err := reg.claim(ctx, key, Digest([]byte("other"))); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("a second claim of %s: %v; want %v", key, err, jetstream.ErrKeyExists)
	}
}
