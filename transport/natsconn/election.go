package natsconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoLeader is wrapped by ThroughElection's error when its wait ended
// while the stream (or JetStream's meta layer) still had no leader; a
// caller that finds a stream without one (a replica's answer, whose
// cluster info names no leader) may return it to ThroughElection too,
// which then asks again.
var ErrNoLeader = errors.New("no leader elected")

// How ThroughElection waits out a leader election.
const (
	// ElectionWait bounds the wait of a caller without a deadline: well
	// past a raft election after a leader's loss (its replicas notice in
	// 4 to 9 s).
	ElectionWait = 30 * time.Second
	// ElectionRetry is the pause after a try that failed for want of a
	// leader, while the replicas elect one.
	ElectionRetry = 250 * time.Millisecond
	// ElectionTry bounds one try of a JetStream API request (nats.go's
	// default timeout): the leader that is gone answers none.
	ElectionTry = 5 * time.Second
	// ErrCodeClusterNotAvailable is nats-server's "JetStream system
	// temporarily unavailable" (JSClusterNotAvailErr): a stream, or
	// JetStream's meta layer, without a leader. nats-server v2.15.2 has
	// no other error code for it ("not current", "no leader").
	ErrCodeClusterNotAvailable jetstream.ErrorCode = 10008
)

// Leaderless reports whether err, from a JetStream API request or a
// publish to a stream, is what a stream or JetStream's meta layer without
// a leader gives while its replicas elect one: nobody answers (no
// responders, no response from the stream, a timeout, an asynchronous
// publish's acknowledgement that never came, the try's deadline), the
// server answers that the cluster is not available, or the caller found
// no leader (ErrNoLeader). A stream that does not exist, a wrong
// configuration, a permission denied, a message too large are not: the
// server says so at once.
func Leaderless(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, ErrNoLeader) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeClusterNotAvailable
}

// ThroughElection calls try, a JetStream request about a stream (its info,
// a consumer's creation, a publish), until it succeeds or fails for
// another reason than the stream's want of a leader (Leaderless). A stream
// whose leader is gone has none for a while: its replicas notice only when
// the leader's heartbeats stop, and elect another (seconds; longer while
// too few of its servers are up for a quorum). Meanwhile a request finds
// nobody to answer it, or is answered that the cluster is not available,
// where a moment later it would succeed.
//
// Each try is bounded by tryTimeout (ElectionTry for an API request), and
// the next comes ElectionRetry after a failure, until ctx is done; without
// a deadline, ElectionWait (or tryTimeout, if longer) bounds the wait.
// Then the error wraps ErrNoLeader, ctx's error and the last try's. A
// failure while nc is not connected is returned at once: that is no
// election, and a process stopping while its servers are gone is not held
// up. try may run more than once, and a try that timed out may have taken
// effect: it must be one that may be done twice.
func ThroughElection(ctx context.Context, nc *nats.Conn, tryTimeout time.Duration, try func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(ElectionWait, tryTimeout))
		defer cancel()
	}
	start := time.Now()
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := try(tctx)
		cancel()
		if err == nil || !Leaderless(err) || !nc.IsConnected() {
			return err
		}
		if !pause(ctx) {
			return fmt.Errorf("%w in %s: %w (last try: %w)", ErrNoLeader, waited(start), context.Cause(ctx), err)
		}
	}
}

// ResumeThroughElection is ThroughElection for a long publish that a try
// takes up where the one before it stopped — a sink's commit of a
// checkpoint's output, its records given deterministic message ids, so
// that the stream drops what a try that failed had stored after all. A
// try is not bounded here (its own acknowledgements are: a commit of
// hundreds of thousands of records is no election), and reports whether
// it got further than the tries before it (progressed: more of the
// publish confirmed stored). The wait is for an election, not for the
// publish: within ctx's deadline or, without one, ElectionWait from the
// first failure since a try last progressed. Then the error wraps
// ErrNoLeader, ctx's error (or context.DeadlineExceeded) and the last
// try's. As with ThroughElection, a failure that is not Leaderless, or
// one while nc is not connected, is returned at once.
func ResumeThroughElection(ctx context.Context, nc *nats.Conn, try func(context.Context) (progressed bool, err error)) error {
	_, bounded := ctx.Deadline()
	var start time.Time // of this run of failures
	for {
		progressed, err := try(ctx)
		if err == nil || !Leaderless(err) || !nc.IsConnected() {
			return err
		}
		if progressed || start.IsZero() {
			// A new run of failures: the election (another one, after a
			// try that got further) is waited for afresh.
			start = time.Now()
		}
		if ctx.Err() == nil && !bounded && time.Since(start) >= ElectionWait {
			return fmt.Errorf("%w in %s: %w (last try: %w)", ErrNoLeader, waited(start), context.DeadlineExceeded, err)
		}
		if !pause(ctx) {
			return fmt.Errorf("%w in %s: %w (last try: %w)", ErrNoLeader, waited(start), context.Cause(ctx), err)
		}
	}
}

// pause waits ElectionRetry before the next try, and reports false when
// ctx ends first (or has ended).
func pause(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(ElectionRetry)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waited is the time since start, rounded for a message.
func waited(start time.Time) time.Duration {
	return time.Since(start).Round(100 * time.Millisecond)
}
