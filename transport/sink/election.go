package sink

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/natsconn"
)

// throughElection runs try, a JetStream API request about a stream, again
// while the stream (or JetStream's meta layer) has no leader, each try
// bounded by natsconn.ElectionTry, within ctx's deadline or, without one,
// natsconn.ElectionWait (natsconn.ThroughElection). A sink is built when a
// job's attempt is deployed, often right after a failover that a server's
// loss caused: its streams may be electing a leader then, and a sink that
// failed at once would fail the job over a second time. A stream that
// does not exist, or any other answer, fails at once.
func throughElection(ctx context.Context, js jetstream.JetStream, try func(context.Context) error) error {
	return natsconn.ThroughElection(ctx, js.Conn(), natsconn.ElectionTry, try)
}

// lookupStream is js.Stream(ctx, name) through an election
// (throughElection). The info it caches may be a replica's, answered while
// the stream has no leader: its configuration is the stream's, its state
// what the replica has applied so far.
func lookupStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := throughElection(ctx, js, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, name)
		return err
	})
	return st, err
}
