package storage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// On a three-server cluster with the bucket on all three (weir up
// -replicas 3), a client connected to a server that does not lead the
// bucket's stream reads each value it reads right after another client
// wrote it through the leader's server, and its reads all go to the
// leader (STREAM.MSG.GET), none to the replica on its own server (a
// direct get, which that replica would answer with what it has applied
// so far).
func TestKVGetOnAClusterReadsFromTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := NewKV(ctx, js, "meta", 3); err != nil {
		t.Fatal(err)
	}
	_, leaderURL, followerURL := embeddedtest.StreamLeader(t, ctx, js, "KV_meta", servers)
	_, ljs := embeddedtest.ConnectTo(t, leaderURL)
	writer, err := NewKV(ctx, ljs, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	fnc, fjs := embeddedtest.ConnectTo(t, followerURL)
	reader, err := NewKV(ctx, fjs, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := fnc.SubscribeSync(jetstream.DefaultAPIPrefix + "DIRECT.GET.>")
	if err != nil {
		t.Fatal(err)
	}
	get, err := fnc.SubscribeSync(jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.KV_meta")
	if err != nil {
		t.Fatal(err)
	}
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}

	const n = 50
	for i := range n {
		want := fmt.Sprint("revision ", i)
		if err := writer.Put(ctx, "jobs/j", strings.NewReader(want)); err != nil {
			t.Fatal(err)
		}
		rc, err := reader.Get(ctx, "jobs/j")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v right after writing %q", got, err, want)
		}
	}
	// The reader's requests went through its own server, as did the
	// subscriptions: once the flush is answered, they have all arrived.
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := direct.Pending(); d != 0 {
		t.Errorf("%d direct gets; want none", d)
	}
	if g, _, _ := get.Pending(); g < n {
		t.Errorf("%d message gets (STREAM.MSG.GET); want one a read (%d), or more where a read was sent again", g, n)
	}
}

// A read while the bucket's stream has no leader — its leader's server
// gone, the others electing another — waits for the new leader's answer:
// it was sent once, to a cluster where nobody answers it (the replicas
// left do not lead) or a replica answers that there is no leader, and
// failed, where a direct get would have read the value from a replica: a
// coordinator's restart skipped the job whose record it could not read,
// and a failover burned a restart attempt, or restored from an older
// checkpoint. Here the leader and one more server are stopped (no
// quorum: no leader for as long as the test likes), the read is seen
// going out, and only then is the second server started again.
func TestKVGetWaitsForALeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := NewKV(ctx, js, "meta", 3); err != nil {
		t.Fatal(err)
	}
	// The reader stays on a server that does not lead; the leader and
	// one other go.
	stay, stopQuorum := embeddedtest.QuorumLoss(t, ctx, js, "KV_meta", servers)
	rnc, rjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	reader, err := NewKV(ctx, rjs, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Put(ctx, "jobs/j", strings.NewReader("running")); err != nil {
		t.Fatal(err)
	}
	get, err := rnc.SubscribeSync(jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.KV_meta")
	if err != nil {
		t.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		t.Fatal(err)
	}

	restart := stopQuorum()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rc, err := reader.Get(ctx, "jobs/j")
		if err != nil {
			done <- result{err: err}
			return
		}
		data, err := io.ReadAll(rc)
		done <- result{data, err}
	}()
	if _, err := get.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("no read went out: %v", err)
	}
	restart()
	r := <-done
	if r.err != nil || string(r.data) != "running" {
		t.Fatalf("read %q, %v through a leader election; want running", r.data, r.err)
	}
}

// A put while the bucket's stream has no leader (its leader's server gone,
// and a second one, so that the one left cannot elect one) waits for one
// and stores the value once one is elected. The client alone gives up
// after half a second when nobody listens ("no response from stream"), or
// waits out its context for an acknowledgement that never comes: that
// failed a checkpoint's metadata write, or a job record's, at each loss
// of a server that led weir's buckets, and the job over when that made
// more checkpoint failures in a row than it tolerates (4 in 4 s, with
// checkpoints every second, seen on three nats-server processes).
func TestKVPutWaitsForALeader(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	_, js := embeddedtest.ConnectTo(t, servers[0].ClientURL())
	if _, err := NewKV(ctx, js, "meta", 3); err != nil {
		t.Fatal(err)
	}
	stay, stopQuorum := embeddedtest.QuorumLoss(t, ctx, js, "KV_meta", servers)
	wnc, wjs := embeddedtest.ConnectTo(t, stay.ClientURL())
	writer, err := NewKV(ctx, wjs, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Put(ctx, "jobs/j", strings.NewReader("created")); err != nil {
		t.Fatal(err)
	}
	puts, err := wnc.SubscribeSync("$KV.meta.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}

	restart := stopQuorum()
	done := make(chan error, 1)
	go func() { done <- writer.Put(ctx, "jobs/j", strings.NewReader("running")) }()
	// The put went out while one server of three is up: nobody stores it
	// (this subscription is the only interest, so the client waits out its
	// timeout for an acknowledgement, as it does from a leader that fell
	// silent, rather than hearing at once that nobody listens), and the
	// stream gets a leader again only after the restart.
	if _, err := puts.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("no put went out: %v", err)
	}
	restart()
	if err := <-done; err != nil {
		t.Fatalf("put through a leader election: %v", err)
	}
	rc, err := writer.Get(ctx, "jobs/j")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	if err != nil || string(data) != "running" {
		t.Fatalf("read %q, %v after the put; want running", data, err)
	}
}
