package embeddedtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster starts n real nats-servers (named n0, n1, …) with JetStream,
// routed into one cluster on loopback, shut down when t ends; it returns
// them once JetStream answers through each and the meta leader counts
// every server as a peer it can place replicas on, or fails t when ctx
// ends first. WEIR_CLUSTER_LOG=1 lets the servers log.
func Cluster(t testing.TB, ctx context.Context, n int) []*server.Server {
	t.Helper()
	// Each server's cluster listener takes a port of its own choosing, and
	// each is told the routes of those started before it (the servers
	// gossip the rest): ports picked free beforehand could be taken by
	// another process before a server listened on them, and a cluster
	// missing a route may never elect a meta leader.
	servers := make([]*server.Server, n)
	var routes []string
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"), NoLog: os.Getenv("WEIR_CLUSTER_LOG") == "", NoSigs: true,
			Cluster: server.ClusterOpts{Name: "weir-test", Host: "127.0.0.1", Port: server.RANDOM_PORT},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		servers[i] = s
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", s.Name())
		}
		routes = append(routes, fmt.Sprintf("nats-route://%s", s.ClusterAddr()))
	}
	for _, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", s.Name())
		}
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		// The meta leader is elected once the routes are up.
		var last error
		for {
			c, cancel := context.WithTimeout(ctx, time.Second)
			_, last = js.AccountInfo(c)
			cancel()
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				nc.Close()
				t.Fatalf("JetStream through %s: %v", s.Name(), last)
			case <-time.After(20 * time.Millisecond):
			}
		}
		nc.Close()
	}
	AwaitPeers(t, ctx, servers)
	return servers
}

// AwaitPeers returns once a server of cluster leads its JetStream meta
// group and counts all of cluster's servers as peers with JetStream up,
// or fails t when ctx ends first. Until then, a stream or bucket with a
// replica on each is refused: "no suitable peers for placement" (seen
// right after the meta leader's election, and after a server's restart).
func AwaitPeers(t testing.TB, ctx context.Context, cluster []*server.Server) {
	t.Helper()
	for {
		for _, s := range cluster {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(cluster) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the meta leader of the cluster of %d servers does not count them all as peers: %v", len(cluster), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts s, one of cluster (as Cluster returned it), down and returns
// what starts it again as it was: its name, its cluster port and routes,
// and the streams it stored. The new server is shut down when t ends;
// start returns it once it is ready for connections, which is enough for
// the streams it replicates: they elect a leader once it is back. It does
// not wait for the meta leader to count it as a peer again (AwaitPeers):
// under NoQuorum and QuorumLoss another server is still down then, and
// all would never be counted. A test that places a new stream with a
// replica on every server after a restart calls AwaitPeers itself, with
// the cluster as it is now (the new server in the stopped one's place).
func Stop(t testing.TB, s *server.Server, cluster []*server.Server) (start func() *server.Server) {
	t.Helper()
	name, port := s.Name(), s.ClusterAddr().Port
	// The server's JetStream directory is the one it was given with
	// "jetstream" added.
	dir := filepath.Dir(s.StoreDir())
	var routes []string
	for _, c := range cluster {
		if addr := c.ClusterAddr(); addr != nil {
			routes = append(routes, fmt.Sprintf("nats-route://%s", addr))
		}
	}
	s.Shutdown()
	s.WaitForShutdown()
	return func() *server.Server {
		t.Helper()
		n, err := server.NewServer(&server.Options{
			ServerName: name, Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: dir, NoLog: os.Getenv("WEIR_CLUSTER_LOG") == "", NoSigs: true,
			Cluster: server.ClusterOpts{Name: "weir-test", Host: "127.0.0.1", Port: port},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			t.Fatal(err)
		}
		n.Start()
		t.Cleanup(n.Shutdown)
		if !n.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", name)
		}
		return n
	}
}

// ConnectTo opens a connection to the server at url (a cluster's, say),
// closed when t ends, and its JetStream context.
func ConnectTo(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// StreamLeader returns the name of the server of cluster that leads
// stream, and the client URLs of that server and of one that does not;
// t fails unless the stream has a leader and a replica on every other
// server.
func StreamLeader(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string, cluster []*server.Server) (leader, leaderURL, otherURL string) {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Cluster
	if c == nil || c.Leader == "" || len(c.Replicas) != len(cluster)-1 {
		t.Fatalf("stream %s: cluster %+v, want a leader and %d replicas", stream, c, len(cluster)-1)
	}
	for _, s := range cluster {
		if s.Name() == c.Leader {
			leaderURL = s.ClientURL()
		} else {
			otherURL = s.ClientURL()
		}
	}
	return c.Leader, leaderURL, otherURL
}

// NoQuorum stops the server of cluster that leads stream and one more
// (of three: the stream, and JetStream's meta layer, keep no quorum), so
// that the stream has no leader for as long as the test likes. It returns
// the server left, and what starts the other stopped one again (a quorum
// again: the stream elects a leader).
func NoQuorum(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string, cluster []*server.Server) (stay *server.Server, restart func() *server.Server) {
	t.Helper()
	stay, stop := QuorumLoss(t, ctx, js, stream, cluster)
	return stay, stop()
}

// QuorumLoss is NoQuorum in two steps, for a test that works through the
// server that stays before the others go: it returns that server (one
// that does not lead stream) and stop, which stops the leader and the
// other one and returns what starts the other one again.
func QuorumLoss(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string, cluster []*server.Server) (stay *server.Server, stop func() (restart func() *server.Server)) {
	t.Helper()
	if len(cluster) != 3 {
		t.Fatalf("QuorumLoss of %d servers; want 3", len(cluster))
	}
	leader, _, _ := StreamLeader(t, ctx, js, stream, cluster)
	var gone []*server.Server
	for _, s := range cluster {
		if stay == nil && s.Name() != leader {
			stay = s
		} else {
			gone = append(gone, s)
		}
	}
	return stay, func() (restart func() *server.Server) {
		t.Helper()
		for _, s := range gone {
			start := Stop(t, s, cluster)
			if s.Name() != leader {
				restart = start
			}
		}
		return restart
	}
}

// AwaitStreamLeader waits until stream has a leader again, as the
// stream's info through js says (while it has none, a replica answers
// without one, or nobody does), or fails t when ctx ends first.
func AwaitStreamLeader(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string) {
	t.Helper()
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		st, err := js.Stream(c, stream)
		cancel()
		if err == nil {
			if ci := st.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s has no leader: %v", stream, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
