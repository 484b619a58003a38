package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/registry"
	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
	"github.com/weirhq/weir/transport/storage"
)

// A weir node on a three-server NATS cluster (no embedded server) with
// weir's buckets and the job's streams kept by all three: the server the
// node is connected to goes away in the middle of the input, the node
// reconnects to another, and the keyed counts come out exactly once.
func TestClusterSurvivesTheLossOfAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A bucket made before with one replica (a coordinator started
	// without -replicas) is scaled to three.
	pre, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	preJS, _ := jetstream.New(pre)
	if _, err := storage.NewKV(ctx, preJS, "weir_jobs", 0); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: strings.Join(urls, ","), Name: "weir-test"},
		DataDir: dir, Coordinator: true, Workers: 1, WorkerID: "w1", Replicas: 3,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Server != nil || n.CheckpointStore() != StoreJetStream {
		t.Fatalf("node on a cluster: embedded server %v, checkpoint store %s", n.Server != nil, n.CheckpointStore())
	}
	// A worker started without the setting leaves them as they are.
	w2, err := Start(ctx, Options{NATS: &natsconn.Options{URL: strings.Join(urls, ","), Name: "weir-test-w2"},
		DataDir: t.TempDir(), Workers: 1, WorkerID: "w2", HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	for _, stream := range []string{"KV_weir_jobs", "OBJ_" + storage.DefaultStateBucket, "KV_" + storage.DefaultMetaBucket,
		"OBJ_" + registry.DefaultBucket, "KV_" + registry.DefaultBucket + "_versions"} {
		st, err := n.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("weir's bucket %s: %v", stream, err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("weir's bucket %s has %d replicas, want 3", stream, r)
		}
	}

	// The test's own client stays on a server that is not taken away.
	victim := n.Conn.ConnectedServerName()
	var other string
	for _, s := range servers {
		if s.Name() != victim {
			other = s.ClientURL()
			break
		}
	}
	in, before := submitClusterCounts(t, ctx, n, servers, other, mod)

	for _, srv := range servers {
		if srv.Name() == victim {
			t.Logf("shutting down %s, the server the node is connected to", victim)
			srv.Shutdown()
		}
	}
	in.send(400)
	waitUntil(t, ctx, "the node on another server", func() bool {
		return n.Conn.IsConnected() && n.Conn.ConnectedServerName() != victim
	})
	in.await()
	in.checkCounts()
	// Checkpoints go on with two servers of three: snapshots, metadata and
	// job records are written to buckets that lost a replica.
	st := waitJob(t, ctx, n, "counts", "a checkpoint after the loss of "+victim, func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint > before.LatestCheckpoint+1
	})
	t.Logf("job: attempt %d, restarts %d, latest checkpoint %d, failures %+v", st.Attempt, st.Restarts, st.LatestCheckpoint, st.Failures)
}

// A weir node whose server falls silent without closing its connection —
// a frozen server process (kill -STOP) or a partition between the two,
// here a proxy that stops forwarding — leaves it for another server of the
// cluster within seconds, and the job goes on: the keyed counts come out
// exactly once and checkpoints complete again. With nats.go's default
// pings the node, its coordinator and its worker stayed on the silent
// server for six minutes.
func TestClusterSurvivesASilentServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster: skipped in -short")
	}
	// Less than the six minutes nats.go's default pings take to notice,
	// and room for a loaded machine (112 s seen at load 27 on two cores).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	servers := embeddedtest.Cluster(t, ctx, 3)
	dir := t.TempDir()
	mod := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(mod, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The node knows the cluster through the path that falls silent only;
	// the servers tell it the others' addresses.
	quiet := natsconntest.NewSilencer(t, servers[0].Addr().String())
	n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: quiet.URL(), Name: "weir-test"},
		DataDir: dir, Coordinator: true, Workers: 1, WorkerID: "w1", Replicas: 3,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	in, before := submitClusterCounts(t, ctx, n, servers, servers[1].ClientURL(), mod)
	quiet.Silence()
	in.send(400)
	waitUntil(t, ctx, "the node on another path to the cluster", func() bool {
		return n.Conn.IsConnected() && n.Conn.ConnectedUrl() != quiet.URL()
	})
	in.await()
	in.checkCounts()
	st := waitJob(t, ctx, n, "counts", "a checkpoint after the server fell silent", func(st control.JobStatus) bool {
		return st.State == control.JobRunning && st.LatestCheckpoint > before.LatestCheckpoint+1
	})
	t.Logf("job: attempt %d, restarts %d, latest checkpoint %d, failures %+v", st.Attempt, st.Restarts, st.LatestCheckpoint, st.Failures)
}

// submitClusterCounts creates the R3 streams IN and OUT through the server
// at url (the test's own client stays there), submits the keyed count of
// module mod to n with an exactly-once sink, and publishes 400 records of
// 8 keys; it returns the input and the job's status then.
func submitClusterCounts(t *testing.T, ctx context.Context, n *Node, servers []*server.Server, url, mod string) (*keyedInput, control.JobStatus) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}, Replicas: 3})
	mustStream(t, ctx, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Replicas: 3,
		Duplicates: 5 * time.Minute, AllowBatchPublish: true, AllowAtomicPublish: true})
	s, err := jobspec.Parse("counts.yaml", []byte(fmt.Sprintf(`name: counts
sources:
  - {name: in, kind: jetstream, stream: IN}
operators:
  - {name: count, module: %s, inputs: [{from: in, partition: key}]}
sinks:
  - {name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}
checkpointing: {interval: 200ms, timeout: 20s}
restart: {strategy: fixed-delay, delay: 200ms, attempts: 100}
`, mod)), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	in := newKeyedInput(t, ctx, js, 8)
	in.diagnose = func() string { return describeClusterJob(n, js, servers) }
	in.publish(400)
	before, err := n.API.Job(ctx, "counts")
	if err != nil {
		t.Fatal(err)
	}
	return in, before
}

// describeClusterJob tells what a cluster test's job and streams are doing,
// for a test that timed out (its own context has ended, so this one is
// fresh).
func describeClusterJob(n *Node, js jetstream.JetStream, servers []*server.Server) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "node connected %v to %s", n.Conn.IsConnected(), n.Conn.ConnectedServerName())
	if st, err := n.API.Job(ctx, "counts"); err != nil {
		fmt.Fprintf(&b, "; job: %v", err)
	} else {
		fmt.Fprintf(&b, "; job %s (%s), attempt %d, %d restarts, latest checkpoint %d, failures %+v",
			st.State, st.Reason, st.Attempt, st.Restarts, st.LatestCheckpoint, st.Failures)
	}
	for _, name := range []string{"IN", "OUT"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "; stream %s: %v", name, err)
			continue
		}
		info := s.CachedInfo()
		fmt.Fprintf(&b, "; stream %s: %d msgs, last seq %d, leader %q", name, info.State.Msgs, info.State.LastSeq, leaderOf(info.Cluster))
	}
	// Each server that runs tells what it holds of IN's consumers.
	for _, srv := range servers {
		if !srv.Running() {
			continue
		}
		jsz, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
		if err != nil {
			fmt.Fprintf(&b, "; %s: %v", srv.Name(), err)
			continue
		}
		fmt.Fprintf(&b, "; %s (meta leader %v):", srv.Name(), jsz.Meta != nil && jsz.Meta.Leader == srv.Name())
		for _, a := range jsz.AccountDetails {
			for _, sd := range a.Streams {
				if sd.Name != "IN" {
					continue
				}
				for _, c := range sd.Consumer {
					fmt.Fprintf(&b, " consumer %s (created %s) delivered %d pending %d waiting %d leader %q;",
						c.Name, c.Created.Format("15:04:05.000"), c.Delivered.Stream, c.NumPending, c.NumWaiting, leaderOfServer(c.Cluster))
				}
			}
		}
	}
	fmt.Fprintf(&b, " (now %s)", time.Now().Format("15:04:05.000"))
	// And where the sources' readers wait.
	var all strings.Builder
	pprof.Lookup("goroutine").WriteTo(&all, 2)
	for _, g := range strings.Split(all.String(), "\n\n") {
		if strings.Contains(g, "orderedConsumer") || strings.Contains(g, "source.(*JetStream)") {
			b.WriteString("\n" + g)
		}
	}
	return b.String()
}

func leaderOfServer(c *server.ClusterInfo) string {
	if c == nil {
		return ""
	}
	return c.Leader
}

func leaderOf(c *jetstream.ClusterInfo) string {
	if c == nil {
		return ""
	}
	return c.Leader
}
