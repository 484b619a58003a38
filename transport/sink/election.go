package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

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

// Error codes of nats-server v2.15.2 (jetstream_errors_generated.go) that
// a batch or a publish with a message id gets when the stream's leader
// changed under it, or when an earlier try of the same publish is still
// being stored: the publish may be made again, its ids deduplicated.
const (
	// errCodeBatchUnknown is JSBatchPublishUnknownBatchIDErr ("batch
	// publish ID unknown"): the rest of an atomic batch, or its commit,
	// reached a leader that did not see its start (a new one).
	errCodeBatchUnknown jetstream.ErrorCode = 10208
	// errCodeDuplicateInProcess is JSStreamDuplicateMessageConflict
	// ("duplicate message id is in process"): a message id that an
	// earlier try proposed (a leader without a quorum kept it) and the
	// stream has not stored yet; the next try finds it stored (a
	// duplicate) or gone.
	errCodeDuplicateInProcess jetstream.ErrorCode = 10158
)

// leaderLost returns err, from a try of a sink's publish, marked
// natsconn.Leaderless when it is what a stream that lost its leader gives
// a batch besides nobody answering: a fast batch's or an atomic batch's
// id unknown to the leader that took over (the batch went with the old
// one), a message id that an earlier try's proposal still holds, a fast
// batch ended at a gap (messages lost on the way to a leader that went:
// seen on three servers losing two). A fast batch's acknowledgement that
// never came wraps nats.ErrTimeout (fastBatch), Leaderless already. An
// answer with another error code is the stream's, and wins.
func leaderLost(err error) error {
	if err == nil || natsconn.Leaderless(err) {
		return err
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeBatchUnknown, jetstreamext.JSErrCodeFastBatchUnknownID, errCodeDuplicateInProcess:
			return fmt.Errorf("%w (%w)", err, natsconn.ErrNoLeader)
		}
		return err
	}
	if errors.Is(err, jetstreamext.ErrFastBatchGapDetected) {
		return fmt.Errorf("%w (%w)", err, natsconn.ErrNoLeader)
	}
	return err
}

// commitThroughElection runs try, a try of a commit's publish to stream
// (the records of a staged checkpoint, or a run of them), again while the
// stream has no leader, each try taking up where the one before stopped
// (natsconn.ResumeThroughElection): within ctx's deadline or, without
// one, natsconn.ElectionWait from the first failure since a try last got
// further. A stream that lost its leader (its server gone) elects another
// in seconds, and a commit that failed meanwhile would fail the job over,
// its recovery re-committing the same output. Every record carries its
// deterministic message id, so whatever a failed try stored after all is
// dropped as a duplicate when the next one publishes it again.
//
// A stream that is gone answers as one without a leader does (nobody
// takes the message): after such a failure the stream is looked up, and a
// stream not found fails the commit at once, naming it. So does one that
// no stream stores the subjects of (unstored, given the subjects the
// stream found stores, returns an error: its subjects were changed while
// the job ran), which JetStream answers at once with no responders too.
// Any other answer (a wrong configuration, a message too large, a
// permission) fails it at once too. The lookup also waits, up to natsconn.ElectionTry, for the
// stream to name a leader (awaitLeader): a try sends the records again
// only once one may take them, not every natsconn.ElectionRetry of an
// election — an atomic batch's try is the whole batch.
func commitThroughElection(ctx context.Context, js jetstream.JetStream, stream string, unstored func(subjects []string) error, try func(context.Context) (bool, error)) error {
	return fullDetail(ctx, js, streamFull(stream, natsconn.ResumeThroughElection(ctx, js.Conn(), func(ctx context.Context) (bool, error) {
		progressed, err := try(ctx)
		if err = leaderLost(err); err == nil || !natsconn.Leaderless(err) || !js.Conn().IsConnected() {
			return progressed, err
		}
		cfg, lerr := awaitLeader(ctx, js, stream)
		if errors.Is(lerr, jetstream.ErrStreamNotFound) {
			// Not wrapped: it is no election's.
			return progressed, fmt.Errorf("%v: stream %s: %w", err, stream, lerr)
		}
		if cfg != nil && unstored != nil {
			if uerr := unstored(cfg.Subjects); uerr != nil {
				// Not wrapped either: nobody took the messages as no
				// stream stores their subject, not for an election.
				return progressed, fmt.Errorf("%v: %w", err, uerr)
			}
		}
		return progressed, err
	})))
}

// errCodeStoreFailed is nats-server v2.15.2's JSStreamStoreFailedF
// (jetstream_errors_generated.go): the stream failed to store a message,
// for the reason its description gives.
const errCodeStoreFailed jetstream.ErrorCode = 10077

// StreamFullError is a sink's commit that its stream refused for one of
// its limits, with discard new: the server's "maximum messages exceeded"
// named neither the stream nor the setting, and a job whose sink's stream
// is full fails over into the same refusal until its restart attempts run
// out.
type StreamFullError struct {
	Stream string
	// Limit is the stream's setting whose limit was reached:
	// max_msgs, max_bytes or max_msgs_per_subject.
	Limit string
	Err   error // the server's refusal
	// Batch is the number of messages of the atomic batch the stream
	// refused whole (0: not an atomic batch); Max and Held are the
	// limit's value and what the stream held of it when looked up after
	// the refusal (Max 0: not looked up).
	Batch     int
	Max, Held int64
}

// Error returns one line: the refusal, the stream, the limit and what to
// change. An atomic batch is refused whole by a stream that holds none of
// it: the line says the batch, not a full stream, was too large for the
// room left — or for the limit itself.
func (e *StreamFullError) Error() string {
	if e.Batch > 0 && e.Max > 0 {
		if e.TooLarge() {
			return fmt.Sprintf("%v (stream %s refused an atomic batch of %d messages whole: the batch is larger than the stream's %s limit of %d, so it never fits however often it is sent; "+
				"raise the limit to %d or more: weir stream edit %s %s %d)",
				e.Err, e.Stream, e.Batch, e.Limit, e.Max, e.Batch, e.Stream, limitFlag(e.Limit), e.Batch)
		}
		return fmt.Sprintf("%v (stream %s refused an atomic batch of %d messages whole: it holds %d of its %s limit of %d and discards new messages, leaving room for %d; "+
			"raise the limit (weir stream edit %s %s N), or make it discard old ones)",
			e.Err, e.Stream, e.Batch, e.Held, e.Limit, e.Max, max(e.Max-e.Held, 0), e.Stream, limitFlag(e.Limit))
	}
	return fmt.Sprintf("%v (stream %s is full: it reached its %s limit and discards new messages; raise the limit, or make it discard old ones)",
		e.Err, e.Stream, e.Limit)
}

// TooLarge reports whether the refusal was of an atomic batch of more
// messages than the stream's max_msgs limit allows at all: every commit
// of it meets the same refusal until the limit is raised (the batches a
// checkpoint's output is committed in are fixed when it is staged).
func (e *StreamFullError) TooLarge() bool {
	return e.Batch > 0 && e.Limit == "max_msgs" && e.Max > 0 && int64(e.Batch) > e.Max
}

// limitFlag is weir stream edit's flag for a stream's limit setting.
func limitFlag(limit string) string { return "-" + strings.ReplaceAll(limit, "_", "-") }

// Unwrap returns the server's refusal.
func (e *StreamFullError) Unwrap() error { return e.Err }

// fullDetail fills in, for err a *StreamFullError of an atomic batch, the
// limit's value and what the stream holds of it, looked up in js for up
// to natsconn.ElectionTry (left unknown when the lookup fails). Other
// errors are returned as they are.
func fullDetail(ctx context.Context, js jetstream.JetStream, err error) error {
	var full *StreamFullError
	if !errors.As(err, &full) || full.Batch == 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), natsconn.ElectionTry)
	defer cancel()
	st, lerr := js.Stream(ctx, full.Stream)
	if lerr != nil {
		return err
	}
	in := st.CachedInfo()
	switch full.Limit {
	case "max_msgs":
		full.Max, full.Held = in.Config.MaxMsgs, int64(in.State.Msgs)
	case "max_bytes":
		full.Max, full.Held = in.Config.MaxBytes, int64(in.State.Bytes)
	}
	if full.Max <= 0 {
		full.Max = 0
	}
	return err
}

// streamFull returns err, a commit's failure on stream, as a
// *StreamFullError when the stream refused messages for a limit.
func streamFull(stream string, err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeStoreFailed {
		return err
	}
	// The server answers every limit with the one code, and a message it
	// failed to store for another reason (too large, a store closed) too:
	// only the description, the text of the server's store errors
	// (ErrMaxMsgs, ErrMaxBytes, ErrMaxMsgsPerSubject in its store.go),
	// says which limit. The server has no code per limit.
	for _, l := range []struct{ text, field string }{
		{"maximum messages per subject exceeded", "max_msgs_per_subject"},
		{"maximum messages exceeded", "max_msgs"},
		{"maximum bytes exceeded", "max_bytes"},
	} {
		if apiErr.Description == l.text {
			full := &StreamFullError{Stream: stream, Limit: l.field, Err: err}
			if rb := (*refusedBatch)(nil); errors.As(err, &rb) {
				full.Batch = rb.n
			}
			return full
		}
	}
	return err
}

// awaitLeader looks stream up until an answer names its leader (or the
// stream has no cluster: one server), for up to natsconn.ElectionTry
// within ctx. It returns the stream's configuration from the last answer
// (nil: none came) and the last lookup's error: nil once a leader is
// named or the time is up with answers that name none,
// jetstream.ErrStreamNotFound for a stream that is gone.
func awaitLeader(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamConfig, error) {
	ctx, cancel := context.WithTimeout(ctx, natsconn.ElectionTry)
	defer cancel()
	var cfg *jetstream.StreamConfig
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			info := st.CachedInfo()
			cfg = &info.Config
			if c := info.Cluster; c == nil || c.Leader != "" {
				return cfg, nil
			}
		} else if !natsconn.Leaderless(err) {
			return cfg, err
		}
		t := time.NewTimer(natsconn.ElectionRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return cfg, err
		}
	}
}
