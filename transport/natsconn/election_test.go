package natsconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An answer that is no election's — a stream that does not exist — is
// returned from the first try, as it was.
func TestThroughElectionKeepsAGenuineErrorImmediate(t *testing.T) {
	ns := startServer(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tries := 0
	err = ThroughElection(context.Background(), nc, ElectionTry, func(ctx context.Context) error {
		tries++
		_, err := js.Stream(ctx, "MISSING")
		return err
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, ErrNoLeader) || tries != 1 {
		t.Fatalf("%d tries, %v; want one, stream not found", tries, err)
	}
}

// A request that fails while the client's own connection is down (its
// server gone) is no election: it is not tried again, so that a process
// stopping while its servers are gone is not held up.
func TestThroughElectionDoesNotWaitForItsOwnConnection(t *testing.T) {
	ns := startServer(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
	down := make(chan struct{}, 1)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	<-down
	tries := 0
	err = ThroughElection(context.Background(), nc, time.Second, func(ctx context.Context) error {
		tries++
		_, err := js.Stream(ctx, "ANY")
		return err
	})
	if err == nil || errors.Is(err, ErrNoLeader) || tries != 1 {
		t.Fatalf("%d tries, %v; want one, failed", tries, err)
	}
}

// While the answer is that the cluster has no leader, the request is made
// again until the caller's deadline; then the error says so in one line,
// and wraps the deadline and the last answer.
func TestThroughElectionEndsAtTheDeadlineSayingSo(t *testing.T) {
	ns := startServer(t, &server.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// What nats-server answers while JetStream's meta layer or a stream
	// has no leader.
	notAvailable := &jetstream.APIError{Code: 503, ErrorCode: ErrCodeClusterNotAvailable,
		Description: "JetStream system temporarily unavailable"}
	tries := 0
	err = ThroughElection(ctx, nc, ElectionTry, func(context.Context) error {
		tries++
		return notAvailable
	})
	if !errors.Is(err, ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, notAvailable) {
		t.Fatalf("%v; want no leader, deadline exceeded and the last answer", err)
	}
	if tries < 2 {
		t.Errorf("%d tries; want the request made again", tries)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") {
		t.Errorf("error %q on more than one line", msg)
	}
	t.Log(err)
}

// A resumed publish's tries are not cut by a per-try timeout (a long
// commit is no election), are made again while they fail for want of a
// leader, and a genuine answer ends them at once.
func TestResumeThroughElection(t *testing.T) {
	ns := startServer(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	notAvailable := &jetstream.APIError{Code: 503, ErrorCode: ErrCodeClusterNotAvailable,
		Description: "JetStream system temporarily unavailable"}

	// A try that gets further each time is taken up again until it is
	// done; none has a deadline of its own.
	tries := 0
	err = ResumeThroughElection(context.Background(), nc, func(ctx context.Context) (bool, error) {
		tries++
		if _, ok := ctx.Deadline(); ok {
			t.Errorf("try %d has a deadline", tries)
		}
		if tries < 4 {
			return true, fmt.Errorf("publish: %w", nats.ErrNoResponders)
		}
		return false, nil
	})
	if err != nil || tries != 4 {
		t.Fatalf("%d tries, %v; want 4, done", tries, err)
	}

	// A stream that does not exist is no election.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tries = 0
	err = ResumeThroughElection(context.Background(), nc, func(ctx context.Context) (bool, error) {
		tries++
		_, err := js.Stream(ctx, "MISSING")
		return false, err
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, ErrNoLeader) || tries != 1 {
		t.Fatalf("%d tries, %v; want one, stream not found", tries, err)
	}

	// An asynchronous publish's acknowledgement that never came is no
	// answer, as a request's timeout is.
	if !Leaderless(fmt.Errorf("publish: %w", jetstream.ErrAsyncPublishTimeout)) {
		t.Error("an async publish's timeout is not Leaderless")
	}

	// The caller's deadline ends the wait, saying so in one line.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = ResumeThroughElection(ctx, nc, func(context.Context) (bool, error) { return false, notAvailable })
	if !errors.Is(err, ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, notAvailable) ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("%v; want no leader, deadline exceeded and the last answer, on one line", err)
	}
}
