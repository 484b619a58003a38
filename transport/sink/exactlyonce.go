package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/natsconn"
	"github.com/weirhq/weir/transport/subject"
)

// ExactlyOnceGuarantee is the delivery guarantee of ExactlyOnce. It says
// what carries a message id: a trial read "deduplicated by message id"
// and found 11 998 of a checkpoint's 12 000 messages without one, as
// they went out in one atomic batch (LargeCheckpoint), whose first and
// last messages alone carry one.
const ExactlyOnceGuarantee = "exactly-once: JetStream, output published when its checkpoint completes; " +
	"a re-commit is deduplicated by message id (each message's, or in atomic batches the first and last message's of each batch)"

// ErrDuplicateWindowTooShort is wrapped by the error that refuses a stream
// whose duplicate window cannot cover a re-commit after recovery.
var ErrDuplicateWindowTooShort = errors.New("stream duplicate window too short for exactly-once")

// ErrMalformedState is wrapped when Recover is given bytes PreCommit did not
// produce, or state whose staged output names a subject or stream that is
// none (out.{KEY}, staged before such subjects were refused). Retrying
// cannot help: the checkpoint holds the state.
var ErrMalformedState = errors.New("malformed exactly-once sink state")

// ErrStagedSubjectNotStored is wrapped by the error of a recovery whose
// staged output was staged on a subject its stream — the sink's, or the
// one the checkpoint was staged for — no longer stores (the stream's
// subjects changed since). A staged checkpoint is re-committed on the
// subjects it was staged with, in the stream it was staged for, where the
// commit a crash cut may have stored part of it: published anywhere else
// it would be split, or stored twice past the duplicate window. Every
// restore of the checkpoint meets it again; the stream's subjects need
// fixing.
var ErrStagedSubjectNotStored = errors.New("staged output's subject not stored by its stream")

// ErrStagedStreamNotFound is wrapped by the error of a recovery whose
// staged output was staged for a stream that no longer exists: a restore
// moved the sink to another stream (ExactlyOnceConfig.Stream), and the
// stream the checkpoint was staged for, where the commit a crash cut may
// have stored part of it, was deleted since. Every restore of the
// checkpoint meets it again; the stream needs creating.
var ErrStagedStreamNotFound = errors.New("staged output's stream not found")

// Atomic batch sizes.
const (
	// MaxAtomicBatch is the largest atomic batch nats-server accepts by
	// default (its max_batch_size), and the sink's default batch size; a
	// server may be configured for more (weir's embedded server takes
	// 20 000).
	MaxAtomicBatch = 1000
	// MaxAtomicChunk is the most messages the sink puts in one atomic
	// batch, whatever the server allows.
	MaxAtomicChunk = 100_000
	// MaxAtomicChunkBytes bounds the record bytes (keys and values) of one
	// atomic batch: the server holds a batch in memory while it commits it.
	MaxAtomicChunkBytes = 16 << 20
	// LargeCheckpoint is where PublishAuto switches to atomic batches: a
	// checkpoint with at least this many records is committed in atomic
	// batches, two message ids per batch, when the stream allows atomic
	// publish and the sink's batch size is at least this.
	LargeCheckpoint = 10_000
)

// EndCheckpointID labels the output staged after the last checkpoint and
// published at end of input.
const EndCheckpointID = math.MaxInt64

// ExactlyOnceConfig configures an exactly-once JetStream sink.
type ExactlyOnceConfig struct {
	// Name names the sink in its errors (the job spec's sink name): "exactly-once sink NAME (subject
	// SUBJECT, stream STREAM)"; empty: "exactly-once sink SUBJECT (stream STREAM)".
	Name string
	// Stream is the stream that captures Subject; its duplicate window is
	// checked and its AllowAtomicPublish decides the publish mode. The
	// staged state records it with each checkpoint: a checkpoint staged
	// for another Stream (a restore with a changed spec) is re-committed
	// to that stream, on the subjects it was staged with, and only output
	// staged since goes to this one.
	Stream string
	// Subject is where records are published: a subject of the stream, or
	// a keyed template ("out.{key}": each record on "out." and its key,
	// which Write checks against the stream's subjects before staging).
	// The staged state records it with each checkpoint: a checkpoint
	// staged under another Subject (a restore with a changed spec) is
	// re-committed on the subjects it was staged with, and only output
	// staged since goes to this one.
	Subject string
	// Job and Task make message ids unique: "<job>/<task>/<checkpoint>/<n>".
	// They must stay the same across recoveries of the job.
	Job, Task string
	// MinDuplicateWindow is the shortest duplicate window the stream may
	// have (see RequiredDuplicateWindow); 0 skips the check.
	MinDuplicateWindow time.Duration
	// Publish selects how a commit publishes; PublishAuto (the default)
	// picks the best mode the stream allows.
	Publish PublishMode
	// BatchSize is the most messages per atomic batch, up to
	// MaxAtomicChunk; 0 means MaxAtomicBatch. The server must accept
	// batches this large (its max_batch_size).
	BatchSize int
	// Timeout bounds the wait for one acknowledgement; default
	// DefaultExactlyOnceTimeout.
	Timeout time.Duration
	// Timestamps publishes each record's timestamp in TimeHeader (a
	// re-commit of output staged before it was set publishes it too).
	Timestamps bool
	// MaxStagedBytes bounds the output staged since the last checkpoint;
	// 0 means DefaultMaxStagedBytes, a negative value no bound (a job
	// without periodic checkpoints). See ErrStagedTooMuch.
	MaxStagedBytes int
}

// DefaultMaxStagedBytes is what an exactly-once sink stages between two
// checkpoints at the most (ExactlyOnceConfig.MaxStagedBytes).
const DefaultMaxStagedBytes = 1 << 30

// mib says n bytes in MiB, or KiB below one.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// ErrStagedTooMuch is wrapped by the error of an exactly-once sink that
// staged more output since its last checkpoint than MaxStagedBytes: its
// checkpoints are not completing (no coordinator, or each one failing),
// or come far apart for the output's rate. Output waits in memory for a
// checkpoint, so without the bound a worker's memory grew as long as
// that went on; failing the task stops its input where its latest
// checkpoint has it (a JetStream source's messages stay in their stream),
// and the job restores that checkpoint.
var ErrStagedTooMuch = errors.New("too much output staged since the last checkpoint")

// RequiredDuplicateWindow is the duplicate window exactly-once needs: a
// checkpoint's output may be published when the checkpoint completes and
// published again after a recovery that restores that checkpoint or the
// next one, which can be up to a checkpoint interval plus a checkpoint
// timeout later, plus the time recovery itself takes.
//
// A commit that waits out its stream's leader election publishes a record
// again at most natsconn.ElectionWait after the try that first failed, a
// try that began at most its acknowledgement wait before (Timeout;
// AtomicCommitWait for an atomic batch): with the defaults 30 s + 10 s +
// 20 s, within the recovery allowance weir's workers give the window (1
// min, and a longer ack timeout's excess over the default). A commit that
// gives up after that wait starts the recovery, and its re-commit, as much
// later, which may then come after the window: Recover reads back what is
// stored (for checkpoints staged longer ago than the window) rather than
// rely on the stream's deduplication, so nothing is stored twice either
// way; the window decides how often that slower path is taken.
func RequiredDuplicateWindow(interval, timeout, recovery time.Duration) time.Duration {
	return interval + timeout + recovery
}

// RecoveryAllowance is the time a recovery may take on top of a checkpoint
// interval and timeout before an exactly-once sink re-commits; the sink's
// stream must deduplicate message ids for at least their sum. It includes
// the up to MaxAtomicCommitExtra an atomic batch's commit waits past the
// sink's ack timeout before it fails (AtomicCommitWait), and covers a
// commit's tries through its stream's leader election: each publishes
// again what the one before may have stored within natsconn.ElectionWait
// (30 s) of that try's failure. A commit that gives up after that wait
// starts the recovery as much later; its re-commit, past the window, reads
// back what is stored (RequiredDuplicateWindow).
const RecoveryAllowance = time.Minute

// ExactlyOnceDuplicateWindow is how long the stream of an exactly-once
// sink whose acknowledgements wait up to ackTimeout (0: the default) must
// deduplicate message ids when checkpoints are taken every interval and
// may take timeout (RequiredDuplicateWindow): the two, RecoveryAllowance,
// and what ackTimeout adds over DefaultExactlyOnceTimeout — a commit may
// wait that long before it fails and the recovery that re-commits begins.
// Workers set up the sink with it (MinDuplicateWindow); the coordinator
// checks a job's streams against it when the job is submitted or
// restored.
func ExactlyOnceDuplicateWindow(interval, timeout, ackTimeout time.Duration) time.Duration {
	return RequiredDuplicateWindow(interval, timeout, RecoveryAllowance+max(0, ackTimeout-DefaultExactlyOnceTimeout))
}

// CheckDuplicateWindow fails with ErrDuplicateWindowTooShort when stream
// keeps message ids for less than need. While the stream has no leader
// (an election), its info is asked for again (lookupStream), within ctx's
// deadline or natsconn.ElectionWait.
func CheckDuplicateWindow(ctx context.Context, js jetstream.JetStream, stream string, need time.Duration) (jetstream.StreamConfig, error) {
	st, err := lookupStream(ctx, js, stream)
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("exactly-once sink: stream %s: %w", stream, err)
	}
	info := st.CachedInfo()
	if have := info.Config.Duplicates; need > 0 && have < need {
		return info.Config, fmt.Errorf("%w: stream %s deduplicates message ids for %s, but a re-commit after recovery can come up to %s later (checkpoint interval + timeout + recovery); raise it, e.g. `weir stream edit %s -dupe-window %s`, or shorten the checkpoint interval and timeout",
			ErrDuplicateWindowTooShort, stream, have, need, stream, need)
	}
	return info.Config, nil
}

// PublishMode is how the exactly-once sink publishes a checkpoint's output
// when the checkpoint completes. Every mode gives each message its
// deterministic Nats-Msg-Id, so a re-commit is deduplicated in all of them;
// they differ in cost and in what a server failure in the middle of a
// commit can leave behind.
type PublishMode string

const (
	// PublishAuto picks PublishFast when the stream allows batched
	// publish (allow_batched, nats-server 2.14+), else PublishAtomic when it
	// allows atomic publish, else PublishAsync. Under PublishFast it
	// commits a checkpoint of LargeCheckpoint records or more in atomic
	// batches instead, when the stream allows atomic publish too and the
	// server accepts batches that large: two message ids per batch (its
	// first and last message) instead of one per message, because the
	// server's duplicate check gets slower with every id it keeps.
	PublishAuto PublishMode = "auto"
	// PublishFast publishes a commit as one JetStream fast-ingest batch:
	// messages are stored as they arrive, the server acknowledges every few
	// hundred of them instead of each one, and a lost message ends the
	// batch (gap mode "fail"), so what a failed commit leaves stored is a
	// prefix of it and the stream keeps the output's order. The fastest
	// mode; needs allow_batched on the stream.
	PublishFast PublishMode = "fast"
	// PublishAtomic publishes chunks of up to BatchSize messages as atomic
	// batches, each stored all or nothing (allow_atomic on the stream), and
	// only the first message of a chunk carries a message id. On a
	// single-replica file stream each chunk costs the server a synced
	// staging store (a few milliseconds), so chunks of nats-server's
	// default 1000 are slow; with a raised max_batch_size (weir's embedded
	// server: 20 000) it is about as fast as PublishFast and, unlike it,
	// does not slow down as the stream's duplicate window fills.
	PublishAtomic PublishMode = "atomic"
	// PublishAsync publishes each message asynchronously and waits for
	// every acknowledgement. Works on any stream; a server failure in the
	// middle of a commit can store that checkpoint's messages out of order
	// (never twice, never lost).
	PublishAsync PublishMode = "async"
)

type staged struct {
	id    int64
	batch []byte // abi record batch
	// chunk is 0 when every record is published with its own message id
	// (fast or async publish); otherwise the records go out in atomic
	// batches of up to chunk records and chunkBytes record bytes (0: no
	// byte limit), each with one id. Decided when the checkpoint is staged
	// and kept in the state, so a re-commit after recovery cuts the same
	// batches with the same ids.
	chunk, chunkBytes uint32
	// legacy marks an entry of a version-1 state, which did not record how
	// it was published: it is published the way the sink's mode says, as
	// version 1 did.
	legacy bool
	// at is when the entry was staged (Unix nanoseconds; 0 in states
	// before version 3). Nothing of it can have been stored before.
	at int64
	// skip holds the indexes of records a re-commit leaves out because the
	// stream holds them already (Recover's read-back); nil normally.
	skip map[int]bool
	// subject is the sink's subject (ExactlyOnceConfig.Subject, a
	// template when keyed) when the entry was staged: its records are
	// published there, also when a restore changed the sink's subject
	// since ("" in states before version 4: the sink's subject now).
	subject string
	// rt is the route of subject, set by Recover when it differs from
	// the sink's; nil: the sink's route.
	rt *route
	// stream is the sink's stream (ExactlyOnceConfig.Stream) when the
	// entry was staged: its records are published there, also when a
	// restore moved the sink to another stream since ("" in states before
	// version 5: the sink's stream now).
	stream string
	// tgt is stream as Recover found it, set when it differs from the
	// sink's; nil: the sink's stream.
	tgt *target
	// inlined is the last checkpoint (not a savepoint) whose state held
	// the entry's records, and home, once that checkpoint completed (its
	// Commit came before the entry went into another state), the
	// checkpoint whose state a later one names for them
	// (PreCommitIncremental) instead of holding them again. 0: none yet.
	inlined, home int64
	// ref, in a decoded state (version 6), is the checkpoint whose state
	// holds the entry's records, which batch lacks until InlineState puts
	// them in; 0: the state holds them.
	ref int64
}

// target is a stream staged output is published to, as the sink found it:
// the sink's stream, or the one a restored checkpoint was staged for.
type target struct {
	stream string
	// subjects are the stream's subjects, which a staged checkpoint's
	// subject must be among when it is recovered.
	subjects []string
	// window is the stream's duplicate window: how long it recognizes a
	// message id it stored.
	window time.Duration
	// perSubject is the stream's max_msgs_per_subject (<= 0: no limit):
	// a read-back cannot find what the limit removed.
	perSubject  int64
	transformed bool // the stream stores the sink's subject transformed
	plan        PublishPlan
}

// newTarget is stream, configured as cfg, for a sink that publishes in
// mode, in atomic batches of up to batchSize messages.
func newTarget(cfg jetstream.StreamConfig, mode PublishMode, batchSize int) (target, error) {
	plan, err := PlanPublish(mode, cfg, batchSize)
	if err != nil {
		return target{}, err
	}
	return target{
		stream:     cfg.Name,
		subjects:   cfg.Subjects,
		window:     cfg.Duplicates,
		perSubject: cfg.MaxMsgsPerSubject,
		// A stream that transforms subjects stores the sink's messages
		// under another subject: a read-back then reads the whole stream.
		transformed: cfg.SubjectTransform != nil,
		plan:        plan,
	}, nil
}

// ExactlyOnce stages the records written between checkpoints n-1 and n as
// part of checkpoint n (PreCommit returns them for the task's snapshot) and
// publishes them only when checkpoint n completes (Commit), each with the
// message id "<job>/<task>/<n>/<index>" — in atomic batches only the
// batch's first message, which stands for the batch. A re-commit — after a crash
// between the checkpoint's completion and the end of its commit, or by a
// task of an earlier attempt still committing — repeats the same ids, and
// JetStream drops the duplicates. How a commit publishes is its
// PublishMode: with fast or atomic batches the stream keeps the output's
// order even when a server failure interrupts a commit; with plain async
// publish such a failure can store the interrupted checkpoint's messages
// out of order (the client flushes what it buffered when it reconnects,
// before the re-commit fills the holes) — never twice, never lost.
//
// A commit waits out its stream's leader election (a server's loss in a
// cluster): while nobody answers, or the answer is that the stream has no
// leader, it publishes again from the first record (or atomic batch) not
// confirmed stored, within natsconn.ElectionWait from the first failure
// since it last got further (commitThroughElection). So does the
// re-commit in Recover, which an election that caused a failover would
// otherwise fail a second time. A stream that is gone, or any other
// answer, fails the commit at once.
type ExactlyOnce struct {
	cfg    ExactlyOnceConfig
	name   string // "exactly-once sink <subject> (stream <name>)", for errors
	js     jetstream.JetStream
	pub    *asyncPublisher // js's async publishes (PublishAsync)
	target                 // the sink's stream
	prefix string
	// maxPayload is the server's max_payload: no record larger than a
	// message can hold is staged.
	maxPayload int64
	now        func() time.Time // the clock (a test moves it)
	batchID    func() string    // a new atomic batch's id: newBatchID (a test repeats one)
	route      route

	cur      []byte // records written since the last checkpoint, as a batch (count filled in when staged)
	curN     int    // how many
	sizeHint int    // capacity for the next cur: a little over the last staged batch
	staged   []staged
	jobs     []*commitJob // commits started and not yet reaped, oldest first
	handed   int          // how many of the first staged entries the commits in jobs publish
	// recovering is the other sink task whose state RecoverTask commits.
	recovering string

	bg   context.Context // for background commits; cancelled by Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu        sync.Mutex
	pubErr    error                       // an async publish's failure (asyncFailed)
	pubFirst  int                         // the lowest index of a record whose async publish failed
	committed func(task string, id int64) // OnCommitted's; set before the first Commit
}

// OnCommitted sets fn, called once everything that sink task task staged
// up to checkpoint id is stored in the stream: the task's own output
// (ExactlyOnceConfig.Task) or, in the commit RecoverTask starts, the
// other task's. It runs on the goroutine of the commit that stored it,
// after the commit ended, at most once per commit; the sink's Close waits
// for it. A task records it (host.CommitReporter), so that a later restore
// of checkpoint id need not publish again what the stream may no longer
// recognize as duplicates once its duplicate window has passed.
func (s *ExactlyOnce) OnCommitted(fn func(task string, id int64)) { s.committed = fn }

// NewExactlyOnce checks the stream (existence, duplicate window, atomic
// publish) and returns the sink. Call it when the job starts: a stream with
// a too-short duplicate window is refused with ErrDuplicateWindowTooShort.
// While the stream has no leader (an election) its lookup is made again,
// within ctx's deadline or natsconn.ElectionWait; a stream that does not
// exist fails at once.
func NewExactlyOnce(ctx context.Context, nc *nats.Conn, cfg ExactlyOnceConfig) (*ExactlyOnce, error) {
	if cfg.Subject == "" || cfg.Stream == "" || cfg.Job == "" || cfg.Task == "" {
		return nil, errors.New("exactly-once sink: stream, subject, job and task are required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = MaxAtomicBatch
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultExactlyOnceTimeout
	}
	switch {
	case cfg.MaxStagedBytes == 0:
		cfg.MaxStagedBytes = DefaultMaxStagedBytes
	case cfg.MaxStagedBytes < 0:
		cfg.MaxStagedBytes = math.MaxInt
	}
	s := &ExactlyOnce{cfg: cfg, prefix: cfg.Job + "/" + cfg.Task + "/", maxPayload: nc.MaxPayload(), now: time.Now, batchID: newBatchID,
		name: sinkName("exactly-once", cfg.Name, cfg.Subject, cfg.Stream)}
	js, err := jetstream.New(nc,
		jetstream.WithDefaultTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { s.asyncFailed(m, err) }))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	s.js, s.pub = js, newAsyncPublisher(js)
	scfg, err := CheckDuplicateWindow(ctx, js, cfg.Stream, cfg.MinDuplicateWindow)
	if err != nil {
		return nil, err
	}
	if err := CheckDurable(scfg); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if s.route, err = newRoute(cfg.Subject, cfg.Stream, scfg.Subjects); err != nil {
		return nil, fmt.Errorf("exactly-once sink: %w", err)
	}
	if s.target, err = newTarget(scfg, cfg.Publish, cfg.BatchSize); err != nil {
		return nil, fmt.Errorf("exactly-once sink: %w", err)
	}
	s.bg, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// PublishPlan is how an exactly-once sink publishes on its stream.
type PublishPlan struct {
	// Mode is the resolved mode (never PublishAuto).
	Mode PublishMode
	// AtomicMax is the largest atomic batch the sink can publish on the
	// stream: new checkpoints use it under PublishAtomic and Large, and a
	// re-commit of a checkpoint staged for atomic batches (under another
	// mode before a restore) uses it under any mode. 0 when the stream
	// allows no atomic publish.
	AtomicMax int
	// Large is true when checkpoints of LargeCheckpoint records or more
	// are committed in atomic batches although Mode is PublishFast.
	Large bool
}

// String reads e.g. "publish mode fast, checkpoints of 10000+ records in
// atomic batches of up to 20000".
func (p PublishPlan) String() string { return "publish mode " + string(p.Mode) + p.Detail() }

// Detail is what String says after the mode: "" or e.g. ", batches of up
// to 1000".
func (p PublishPlan) Detail() string {
	switch {
	case p.Large:
		return fmt.Sprintf(", checkpoints of %d+ records in atomic batches of up to %d", LargeCheckpoint, p.AtomicMax)
	case p.Mode == PublishAtomic:
		return fmt.Sprintf(", batches of up to %d", p.AtomicMax)
	}
	return ""
}

// PlanPublish decides how a sink configured with mode and atomic batches
// of batchSize messages (0: MaxAtomicBatch; at most MaxAtomicChunk)
// publishes on a stream configured as stream (see ResolvePublishMode and
// PublishAuto).
func PlanPublish(mode PublishMode, stream jetstream.StreamConfig, batchSize int) (PublishPlan, error) {
	resolved, err := ResolvePublishMode(mode, stream)
	if err != nil {
		return PublishPlan{}, err
	}
	p := PublishPlan{Mode: resolved}
	if !stream.AllowAtomicPublish {
		return p, nil
	}
	if batchSize <= 0 {
		batchSize = MaxAtomicBatch
	}
	p.AtomicMax = min(batchSize, MaxAtomicChunk)
	p.Large = (mode == "" || mode == PublishAuto) && resolved == PublishFast && p.AtomicMax >= LargeCheckpoint
	return p, nil
}

// errCodeAtomicBatchTooLarge is nats-server's JSAtomicPublishTooLargeBatchErrF
// ("atomic publish batch is too large: {size}").
const errCodeAtomicBatchTooLarge = 10199

// errCodeAtomicIncomplete is nats-server's JSAtomicPublishIncompleteBatchErr
// (jetstream_errors_generated.go): a commit of a batch the server does not
// hold whole, such as one it dropped after its batch timeout.
const errCodeAtomicIncomplete = 10176

// Plan reports how the sink publishes.
func (s *ExactlyOnce) Plan() PublishPlan {
	return s.plan
}

// ResolvePublishMode is the mode a sink configured with mode publishes in
// on a stream configured as stream: PublishAuto becomes the best mode the
// stream allows; a mode the stream does not allow is an error.
func ResolvePublishMode(mode PublishMode, stream jetstream.StreamConfig) (PublishMode, error) {
	switch mode {
	case "", PublishAuto:
		switch {
		case stream.AllowBatchPublish:
			return PublishFast, nil
		case stream.AllowAtomicPublish:
			return PublishAtomic, nil
		}
		return PublishAsync, nil
	case PublishFast:
		if !stream.AllowBatchPublish {
			return "", fmt.Errorf("stream %s does not allow batched publish, which publish mode fast needs: set allow_batched on the stream (nats-server 2.14+), or use publish mode auto", stream.Name)
		}
	case PublishAtomic:
		if !stream.AllowAtomicPublish {
			return "", fmt.Errorf("stream %s does not allow atomic publish, which publish mode atomic needs: set allow_atomic on the stream, or use publish mode auto", stream.Name)
		}
	case PublishAsync:
	default:
		return "", fmt.Errorf("publish mode %q, want auto, fast, atomic or async", mode)
	}
	return mode, nil
}

// Guarantee describes the sink's delivery guarantee for the job status.
func (s *ExactlyOnce) Guarantee() string { return ExactlyOnceGuarantee }

// String names the sink in its errors: "exactly-once sink <subject>
// (stream <name>)".
func (s *ExactlyOnce) String() string { return s.name }

// checkpointName names the output staged for checkpoint id in errors:
// "checkpoint <id>", or "end-of-input output" for EndCheckpointID.
func checkpointName(id int64) string {
	if id == EndCheckpointID {
		return "end-of-input output"
	}
	return "checkpoint " + strconv.FormatInt(id, 10)
}

// Mode reports how commits publish (never PublishAuto: the mode it chose).
func (s *ExactlyOnce) Mode() PublishMode { return s.plan.Mode }

// Write stages the records of batch for the next checkpoint.
func (s *ExactlyOnce) Write(ctx context.Context, batch []byte) error {
	n, err := abi.ValidateBatch(batch)
	if err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	if n == 0 {
		return nil
	}
	if err := s.checkSizes(batch); err != nil {
		return err
	}
	if err := s.route.check(batch); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	if s.curN+n > math.MaxUint32 {
		return fmt.Errorf("%s: more than %d records staged for one checkpoint; checkpoint more often", s, uint32(math.MaxUint32))
	}
	if staged := len(s.cur) + len(batch) - abi.BatchHeaderSize; s.cur != nil && staged > s.cfg.MaxStagedBytes {
		return fmt.Errorf("%s: %w: %d records, %s, past the bound of %s: its checkpoints are not completing (is a coordinator running? see weir job status) or come too far apart for the output's rate (checkpointing.interval); the job restores its latest checkpoint, so nothing is lost",
			s, ErrStagedTooMuch, s.curN+n, mib(staged), mib(s.cfg.MaxStagedBytes))
	}
	// The staged batch is the records of every written batch back to back
	// under one count; it starts as large as the previous checkpoint's, so
	// it rarely grows (a copy) on the way.
	if s.cur == nil {
		s.cur = make([]byte, abi.BatchHeaderSize, max(s.sizeHint, len(batch)))
	}
	s.cur = append(s.cur, batch[abi.BatchHeaderSize:]...)
	s.curN += n
	return nil
}

// MessageOverhead bounds the headers an exactly-once sink adds to a
// record's key and value (message id, batch headers).
const MessageOverhead = 1024

// ErrRecordTooLarge is wrapped by the error of a sink given a record that
// no NATS message can carry.
var ErrRecordTooLarge = errors.New("record too large for a NATS message")

// headerBytes bounds what a message of the sink takes besides its key and
// value: the headers' names, the message id's prefix, a timestamp, and
// MessageOverhead.
func (s *ExactlyOnce) headerBytes() int64 {
	return jetStreamHeaders(s.cfg.Timestamps) + int64(len(s.prefix))
}

// checkSizes refuses a batch with a record that would not fit in a message
// (the server's max_payload): staged, it would be part of a checkpoint
// whose commit can never succeed, and every recovery from that checkpoint
// would fail again.
func (s *ExactlyOnce) checkSizes(batch []byte) error {
	h := s.headerBytes()
	if err := checkSizes(batch, s.maxPayload, h, true, func(abi.Record) int64 { return h }); err != nil {
		return fmt.Errorf("%s: %w", s, err)
	}
	return nil
}

// PreCommit closes the records written since the previous checkpoint into
// checkpoint id and returns every staged checkpoint not yet known to be
// committed — including those whose commits are still pending — as the
// state for the task's snapshot. The state holds every record it stages:
// PreCommitIncremental names those an earlier checkpoint's state holds.
func (s *ExactlyOnce) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	state, _, err := s.PreCommitIncremental(ctx, id, true)
	return state, err
}

// PreCommitIncremental implements host.IncrementalSink: it is PreCommit,
// but the state names, instead of holding them again, the records of each
// staged checkpoint that the state of an earlier completed checkpoint
// holds — one whose Commit came before the records went into another
// state, so its snapshot is stored — and returns the oldest checkpoint it
// names as from (0: none). A checkpoint's records go into the state of
// every checkpoint taken until one holding them completes, and are named
// from then on: with commits slower than the checkpoint interval (a
// backlog), each record is written into one or two snapshots rather than
// into every one taken while its commit is pending. With selfContained
// (a savepoint, which must restore on its own) the state holds every
// record and names nothing, and does not count as holding them for later
// states. InlineState makes a state that names others whole again.
func (s *ExactlyOnce) PreCommitIncremental(ctx context.Context, id int64, selfContained bool) (state []byte, from int64, err error) {
	if err := s.reap(); err != nil {
		return nil, 0, err
	}
	if n := len(s.staged); n > 0 && s.staged[n-1].id >= id {
		return nil, 0, fmt.Errorf("%s: checkpoint %d pre-committed after %d", s, id, s.staged[n-1].id)
	}
	s.stageCurrent(id)
	if selfContained {
		return appendState(nil, s.staged, false), 0, nil
	}
	for i := range s.staged {
		e := &s.staged[i]
		if e.home == 0 {
			e.inlined = id
		} else if from == 0 || e.home < from {
			from = e.home
		}
	}
	return appendState(nil, s.staged, true), from, nil
}

// completed notes that checkpoint id completed: the entries whose records
// its state was the last to hold (PreCommitIncremental) are named by later
// states from now on.
func (s *ExactlyOnce) completed(id int64) {
	for i := range s.staged {
		if e := &s.staged[i]; e.home == 0 && e.inlined == id {
			e.home = id
		}
	}
}

// InlineState implements host.IncrementalSink: it returns state, a result
// of PreCommitIncremental, with the records it names in the states of
// earlier checkpoints, which load reads, put in: a state Recover and
// RecoverTask take. A state that names nothing is returned as it is, and
// so is one that does not decode: Recover refuses it, naming the
// checkpoint.
func (s *ExactlyOnce) InlineState(ctx context.Context, state []byte, load func(ctx context.Context, checkpoint int64) ([]byte, error)) ([]byte, error) {
	st, err := decodeState(state)
	if err != nil {
		return state, nil
	}
	loaded := map[int64][]staged{}
	named := false
	for i := range st {
		e := &st[i]
		if e.ref == 0 {
			continue
		}
		named = true
		held, ok := loaded[e.ref]
		if !ok {
			b, err := load(ctx, e.ref)
			if err != nil {
				return nil, fmt.Errorf("%s: the records staged for %s: %w", s, checkpointName(e.id), err)
			}
			if held, err = decodeState(b); err != nil {
				return nil, fmt.Errorf("%s: the records staged for %s, in checkpoint %d's state: %w", s, checkpointName(e.id), e.ref, err)
			}
			loaded[e.ref] = held
		}
		j := slices.IndexFunc(held, func(h staged) bool { return h.id == e.id })
		if j < 0 || held[j].ref != 0 {
			return nil, fmt.Errorf("%s: the records staged for %s are not in checkpoint %d's state, which the state names for them: %w", s, checkpointName(e.id), e.ref, ErrMalformedState)
		}
		e.batch, e.ref = held[j].batch, 0
	}
	if !named {
		return state, nil
	}
	return appendState(nil, st, false), nil
}

// stageCurrent moves the records written since the last checkpoint into a
// staged entry for checkpoint id, handing the builder's buffer over.
func (s *ExactlyOnce) stageCurrent(id int64) {
	if s.curN == 0 {
		return
	}
	binary.LittleEndian.PutUint32(s.cur, uint32(s.curN))
	e := staged{id: id, batch: s.cur, at: s.now().UnixNano(), subject: s.cfg.Subject, stream: s.cfg.Stream}
	if s.plan.Mode == PublishAtomic || (s.plan.Large && s.curN >= LargeCheckpoint) {
		e.chunk, e.chunkBytes = uint32(s.plan.AtomicMax), MaxAtomicChunkBytes
	}
	s.staged = append(s.staged, e)
	s.sizeHint = len(s.cur) + len(s.cur)/8
	s.cur, s.curN = nil, 0
}

// Commit publishes what was staged for every checkpoint up to id, in order,
// and is idempotent. It starts the commit in the background and returns:
// the task goes on processing while JetStream acknowledges. A commit
// started while an earlier one is still running publishes after it (and
// not at all if it fails), so the stream keeps the checkpoints' order; up
// to MaxPendingCommits commits may run or wait so, after which Commit
// waits for the oldest to finish. Until its commit is confirmed a
// checkpoint stays in the state PreCommit returns, so a crash re-commits
// it. Wait waits for every commit started; EndOfInput and Recover do so
// themselves.
func (s *ExactlyOnce) Commit(ctx context.Context, id int64) error {
	s.completed(id)
	if err := s.reap(); err != nil {
		return err
	}
	first, n := s.unhanded(id)
	if n == first {
		// Nothing new to publish: everything up to id is stored once the
		// commits still running are.
		if id == EndCheckpointID {
			return nil // no checkpoint to record
		}
		if k := len(s.jobs); k > 0 {
			s.jobs[k-1].mark.Store(id)
		} else if s.committed != nil {
			s.committed(s.task(), id)
		}
		return nil
	}
	if len(s.jobs) >= MaxPendingCommits {
		for len(s.jobs) >= MaxPendingCommits {
			if err := s.waitOldest(ctx); err != nil {
				return err
			}
		}
		first, n = s.unhanded(id) // the commits waited for dropped theirs
	}
	var prev *commitJob
	if len(s.jobs) > 0 {
		prev = s.jobs[len(s.jobs)-1]
	}
	job := &commitJob{done: make(chan struct{}), upTo: s.staged[n-1].id}
	job.mark.Store(id)
	entries := append([]staged(nil), s.staged[first:n]...)
	// The ids are fixed now: RecoverTask sets the prefix of another task
	// only for the commits it starts, and one that outlives it (its context
	// ended) must not go on under the sink's own ids.
	prefix, task, committed := s.prefix, s.task(), s.committed
	s.jobs = append(s.jobs, job)
	s.handed = n
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if prev != nil {
			<-prev.done
			if prev.err != nil {
				job.err = prev.err
				close(job.done)
				return
			}
		}
		job.err = s.publish(s.bg, prefix, entries)
		close(job.done)
		if mark := job.mark.Load(); job.err == nil && committed != nil && mark != EndCheckpointID {
			committed(task, mark)
		}
	}()
	return nil
}

// task is the sink task whose ids the commits started now use: the one
// RecoverTask lends its prefix from, or the sink's own.
func (s *ExactlyOnce) task() string {
	if s.recovering != "" {
		return s.recovering
	}
	return s.cfg.Task
}

// unhanded returns the staged entries up to checkpoint id not handed to
// a commit yet: s.staged[first:n].
func (s *ExactlyOnce) unhanded(id int64) (first, n int) {
	first, n = s.handed, s.handed
	for n < len(s.staged) && s.staged[n].id <= id {
		n++
	}
	return first, n
}

// MaxPendingCommits is how many commits an exactly-once sink runs or
// keeps waiting behind the running one before Commit waits: the next
// checkpoint's output is ready when a commit ends, so the stream is kept
// busy, while the staged state (and with it every snapshot) holds at most
// this many checkpoints besides the current one.
const MaxPendingCommits = 2

// commitJob is a commit running (or waiting for the one before it) in the
// background.
type commitJob struct {
	done chan struct{}
	upTo int64 // the last checkpoint it commits
	// mark is the checkpoint reported to OnCommitted when it succeeds: the
	// one Commit was called for, or a later one that added nothing.
	mark atomic.Int64
	err  error // valid after done
}

// Wait waits until every commit started has finished, and drops the
// checkpoints they committed from the staged state.
func (s *ExactlyOnce) Wait(ctx context.Context) error {
	for len(s.jobs) > 0 {
		if err := s.waitOldest(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitOldest waits for the oldest commit started and reaps it.
func (s *ExactlyOnce) waitOldest(ctx context.Context) error {
	job := s.jobs[0]
	select {
	case <-job.done:
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for the commit of %s: %w", s, checkpointName(job.upTo), ctx.Err())
	}
	return s.reapOldest()
}

// reap reaps, without waiting, the commits that have finished, oldest
// first, and reports the error of a failed one.
func (s *ExactlyOnce) reap() error {
	for len(s.jobs) > 0 {
		select {
		case <-s.jobs[0].done:
		default:
			return nil
		}
		if err := s.reapOldest(); err != nil {
			return err
		}
	}
	return nil
}

// reapOldest drops the checkpoints the oldest commit, which has finished,
// committed. When it failed, the commits after it fail too (they publish
// nothing); all are dropped, and what they were to publish stays staged
// for a later Commit or for the snapshot a recovery re-commits.
func (s *ExactlyOnce) reapOldest() error {
	job := s.jobs[0]
	if job.err != nil {
		for _, j := range s.jobs {
			<-j.done // each ends at once: it waits only for the one before
		}
		clear(s.jobs)
		s.jobs, s.handed = s.jobs[:0], 0
		return job.err
	}
	s.jobs[0] = nil
	s.jobs = s.jobs[1:]
	n := 0
	for n < len(s.staged) && s.staged[n].id <= job.upTo {
		s.staged[n] = staged{}
		n++
	}
	s.staged = append(s.staged[:0], s.staged[n:]...)
	s.handed -= n
	return nil
}

// Recover publishes (again) what state — the result of PreCommit(id) —
// staged, waits until it is stored, and drops everything written or staged
// since. Each staged checkpoint goes to the subject it was staged with, in
// the stream it was staged for, where the commit it repeats went, also
// when the sink's subject or stream has changed since. One whose stream no
// longer exists fails the recovery with ErrStagedStreamNotFound, one whose
// subject its stream no longer stores with ErrStagedSubjectNotStored,
// before anything is published.
func (s *ExactlyOnce) Recover(ctx context.Context, id int64, state []byte) error {
	st, err := decodeState(state)
	if err != nil {
		return fmt.Errorf("%s: recover checkpoint %d: %w", s, id, err)
	}
	for _, e := range st {
		if e.ref != 0 {
			return fmt.Errorf("%s: recover checkpoint %d: the state names checkpoint %d's for the records staged for %s (InlineState puts them in): %w", s, id, e.ref, checkpointName(e.id), ErrMalformedState)
		}
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}
	s.cur, s.curN = nil, 0
	targets := map[string]*target{} // the streams of st other than the sink's, looked up once each
	for i := range st {
		if st[i].legacy && s.plan.Mode == PublishAtomic {
			st[i].chunk = MaxAtomicBatch
		}
		if err := s.stagedTarget(ctx, &st[i], targets); err != nil {
			return fmt.Errorf("%s: recover checkpoint %d: %w", s, id, err)
		}
		if err := s.stagedRoute(&st[i]); err != nil {
			return fmt.Errorf("%s: recover checkpoint %d: %w", s, id, err)
		}
	}
	s.staged = st
	if err := s.skipStored(ctx, st); err != nil {
		return fmt.Errorf("%s: recover checkpoint %d: %w", s, id, err)
	}
	if err := s.Commit(ctx, id); err != nil {
		return err
	}
	return s.Wait(ctx)
}

// stagedTarget sets the stream e is re-committed to: the one it was
// staged for, which a restore with a changed spec may have moved the sink
// away from since (stream OUT → ORDERS). The commit a crash cut stored
// part of it there, so the re-commit completes it there — in the sink's
// publish mode if that stream allows it, else in the best one it does
// (PublishAuto) — and a read-back past that stream's duplicate window
// reads that stream. Output staged after the restore goes to the
// sink's new stream. State from before version 5 recorded no stream: it is
// re-committed to the sink's. targets holds the streams looked up so far,
// so that each is looked up once.
//
// A stream that no longer exists fails the recovery with
// ErrStagedStreamNotFound before anything is published; one that is not
// durable, with ErrStreamNotDurable.
func (s *ExactlyOnce) stagedTarget(ctx context.Context, e *staged, targets map[string]*target) error {
	if e.stream == "" || e.stream == s.cfg.Stream {
		return nil
	}
	if t := targets[e.stream]; t != nil {
		e.tgt = t
		return nil
	}
	st, err := lookupStream(ctx, s.js, e.stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		subj := e.subject
		if tm, err := subject.Parse(e.subject); err == nil {
			subj = tm.Filter()
		}
		return fmt.Errorf("%w: staged checkpoint %d goes to stream %s (the stream it was staged for), which does not exist; create it, storing subjects %s",
			ErrStagedStreamNotFound, e.id, e.stream, subj)
	case errors.Is(err, jetstream.ErrInvalidStreamName):
		return fmt.Errorf("%w: staged checkpoint %d: %w", ErrMalformedState, e.id, err)
	case err != nil:
		return fmt.Errorf("staged checkpoint %d: stream %s (the stream it was staged for): %w", e.id, e.stream, err)
	}
	cfg := st.CachedInfo().Config
	if err := CheckDurable(cfg); err != nil {
		return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
	}
	t, err := newTarget(cfg, s.cfg.Publish, s.cfg.BatchSize)
	if err != nil { // the sink's mode is one the stream does not allow
		if t, err = newTarget(cfg, PublishAuto, s.cfg.BatchSize); err != nil {
			return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
		}
	}
	targets[e.stream], e.tgt = &t, &t
	return nil
}

// targetOf is the stream e is published to: the one Recover found for it,
// or the sink's.
func (s *ExactlyOnce) targetOf(e *staged) *target {
	if e.tgt != nil {
		return e.tgt
	}
	return &s.target
}

// stagedRoute sets the route e is re-committed on: that of the subject it
// was staged with, which a restore with a changed spec may have changed
// since (out.{key} → orders.{key}.created), in the stream it was staged
// for (stagedTarget, called first). The commit a crash cut published
// there, so the re-commit does what it would have done: a reader of the
// old subjects gets the whole checkpoint, none of it lands on the new
// ones, and a read-back past the duplicate window finds what the cut
// commit stored where it stored it. Output staged after the restore goes
// to the sink's new subject. State from before version 4 recorded no
// subject: it is re-committed on the sink's.
//
// A record whose subject its stream does not store (the stream's subjects
// changed too) fails the recovery before anything is published — rather
// than every commit of the checkpoint, or a publish that another stream
// storing that subject now would take. Messages are addressed by subject
// alone (the sink sets no Nats-Expected-Stream): JetStream lets one
// stream at most store a subject, so a subject the stream stores lands
// in that stream.
func (s *ExactlyOnce) stagedRoute(e *staged) error {
	tg := s.targetOf(e)
	rt, subj, on, in := &s.route, s.cfg.Subject, "", ""
	if e.subject != "" && e.subject != s.cfg.Subject {
		subj, on = e.subject, " (the subject it was staged with)"
	}
	if tg != &s.target {
		in = " (the stream it was staged for)"
	}
	if subj != s.cfg.Subject || tg != &s.target {
		r, err := newRoute(subj, tg.stream, tg.subjects)
		if err != nil {
			return fmt.Errorf("%w: staged checkpoint %d: subject %s: %w", ErrMalformedState, e.id, subj, err)
		}
		rt = &r
	}
	if rt.unstoredSubject(tg.subjects, nil) != "" {
		// Not a record's: none of the subject's (a fixed one, or any of a
		// keyed one's) is stored.
		return fmt.Errorf("%w: staged checkpoint %d goes to subject %s%s, which stream %s%s does not store (its subjects: %s): %s",
			ErrStagedSubjectNotStored, e.id, subj, on, tg.stream, in, strings.Join(tg.subjects, ", "), rt.addBack(tg.subjects))
	}
	if err := rt.check(e.batch); err != nil {
		if e.subject == "" {
			return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
		}
		return fmt.Errorf("%w: staged checkpoint %d goes to subject %s%s: %w", ErrStagedSubjectNotStored, e.id, subj, on, err)
	}
	e.rt = rt
	return nil
}

// routeOf is the route e is published on: the one Recover resolved for
// it, or the sink's.
func (s *ExactlyOnce) routeOf(e *staged) *route {
	if e.rt != nil {
		return e.rt
	}
	return &s.route
}

// clockSkew is how far apart the clocks of the machine that staged a
// checkpoint and the one recovering it may be.
const clockSkew = 5 * time.Second

// skipStored finds, for each staged entry its stream may no longer
// deduplicate — staged longer ago than that stream's duplicate window, as
// when a crashed worker or `weir up` came back after several minutes —
// which of its records the stream already holds, and marks them to be
// skipped: a commit cut by the crash had stored part of the checkpoint,
// and publishing that part again would store it twice, its ids forgotten.
// It reads each stream those entries were staged for (readBack), then
// extends what it found (skipRemoved). Entries within the window are left
// to JetStream's deduplication, which also covers a task of the earlier
// attempt still publishing; past the window that task has long been
// canceled.
func (s *ExactlyOnce) skipStored(ctx context.Context, st []staged) error {
	need := map[int64]*staged{}
	var targets []*target // the streams of the entries in need, in order
	for i := range st {
		e := &st[i]
		tg := s.targetOf(e)
		if e.at == 0 || s.now().Sub(time.Unix(0, e.at))+clockSkew < tg.window {
			continue
		}
		need[e.id] = e
		if !slices.Contains(targets, tg) {
			targets = append(targets, tg)
		}
	}
	for _, tg := range targets {
		if err := s.readBack(ctx, tg, need); err != nil {
			return err
		}
	}
	if len(need) == 0 {
		return nil
	}
	return s.skipRemoved(st, need)
}

// readBack marks the records of the entries in need staged for stream tg
// that the stream holds. It reads the subjects those entries were staged
// with (every subject of a keyed sink; the sink's subject may have changed
// since) from the time the oldest of them was staged (headers only) for
// message ids of this task.
func (s *ExactlyOnce) readBack(ctx context.Context, tg *target, need map[int64]*staged) error {
	var (
		since   int64
		filters []string // the subject filters of the entries
		whole   bool     // two of them overlap: read the whole stream
	)
	for _, e := range need {
		if s.targetOf(e) != tg {
			continue
		}
		if since == 0 || e.at < since {
			since = e.at
		}
		if f := s.routeOf(e).tmpl.Filter(); !slices.Contains(filters, f) {
			for _, g := range filters {
				whole = whole || subject.Overlap(f, g) // a consumer refuses overlapping filters
			}
			filters = append(filters, f)
		}
	}
	stream, err := lookupStream(ctx, s.js, tg.stream)
	if err != nil {
		return fmt.Errorf("read back stream %s: %w", tg.stream, err)
	}
	// The last message the read-back must reach: the subject's, or the
	// stream's when the stream transforms subjects.
	var (
		lastSeq  uint64
		lastTime time.Time
		filter   []string
	)
	if tg.transformed || whole {
		var info *jetstream.StreamInfo
		err := throughElection(ctx, s.js, func(ctx context.Context) (err error) {
			info, err = stream.Info(ctx)
			if err == nil && info.Cluster != nil && info.Cluster.Leader == "" {
				// A replica's, with what it has applied so far.
				return fmt.Errorf("stream info from a replica: %w", natsconn.ErrNoLeader)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("read back stream %s: %w", tg.stream, err)
		}
		lastSeq, lastTime = info.State.LastSeq, info.State.LastTime
	} else {
		slices.Sort(filters) // need is a map: the same consumer for the same entries
		for _, f := range filters {
			var last *jetstream.RawStreamMsg
			err := throughElection(ctx, s.js, func(ctx context.Context) (err error) {
				last, err = stream.GetLastMsgForSubject(ctx, f)
				return err
			})
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // nothing stored on these subjects at all
			}
			if err != nil {
				return fmt.Errorf("read back stream %s subjects %s: %w", tg.stream, f, err)
			}
			if last.Sequence > lastSeq {
				lastSeq, lastTime = last.Sequence, last.Time
			}
		}
		filter = filters
	}
	start := time.Unix(0, since).Add(-clockSkew)
	if lastSeq == 0 || lastTime.Before(start) {
		return nil
	}
	ccfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: filter,
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
		HeadersOnly:    true,
		// One name for every try: one that timed out may have
		// created the consumer, which the next takes over.
		NamePrefix: nuid.Next(),
	}
	var cons jetstream.Consumer
	err = throughElection(ctx, s.js, func(ctx context.Context) (err error) {
		cons, err = s.js.OrderedConsumer(ctx, tg.stream, ccfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("read back stream %s: %w", tg.stream, err)
	}
	// Stopping the iterator leaves the consumer on the server until its
	// inactivity threshold (five minutes), counting against the stream's
	// and the account's consumer limits: each recovery that reads back —
	// a job failing over again and again past its window — would leave
	// one.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.js.DeleteConsumer(dctx, tg.stream, info.Name)
			cancel()
		}
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("read back stream %s: %w", tg.stream, err)
	}
	defer it.Stop()
	for {
		// The timeout is per message: a read-back can be long.
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		m, err := it.Next(jetstream.NextContext(rctx))
		cancel()
		if err != nil {
			return fmt.Errorf("read back stream %s up to sequence %d: %w", tg.stream, lastSeq, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read back stream %s: %w", tg.stream, err)
		}
		ckpt, index, ok := s.parseID(m.Headers().Get(jetstream.MsgIDHeader))
		if e := need[ckpt]; ok && e != nil && s.targetOf(e) == tg {
			if e.skip == nil {
				e.skip = map[int]bool{}
			}
			e.skip[index] = true
		}
		if md.Sequence.Stream >= lastSeq {
			return nil
		}
	}
}

// skipRemoved extends the skips the read-backs found (in need, entries of
// st) to records their stream may hold no longer although they were
// stored, so that a re-commit does not bring them back over newer ones.
// Entries are published in order, each once the one before it is stored
// whole (every message acknowledged) — also when they go to different
// streams —, so:
//   - an entry before the last one with a record found is stored whole;
//   - in that entry, an atomic batch up to the last one found, by its first
//     id or its last, is stored (each batch is committed once the one
//     before it is);
//   - with an id on every record (fast or async publish), on a stream that
//     keeps at most M messages per subject, a record with M records after
//     it on its subject found stored: stored or not, the stream would not
//     hold it now.
func (s *ExactlyOnce) skipRemoved(st []staged, need map[int64]*staged) error {
	last := -1
	for i := range st {
		if e := need[st[i].id]; e != nil && len(e.skip) > 0 {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		e := need[st[i].id]
		if e == nil {
			continue
		}
		recs, err := abi.DecodeBatch(e.batch)
		if err != nil {
			return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
		}
		if e.skip == nil {
			e.skip = map[int]bool{}
		}
		switch {
		case i < last:
			for j := range recs {
				e.skip[j] = true
			}
		case e.chunk > 0:
			// A batch is found by its first id or its last.
			cuts, err := e.cuts()
			if err != nil {
				return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
			}
			for k := len(cuts) - 1; k >= 0; k-- {
				if c := cuts[k]; e.skip[c.first] || e.skip[c.end-1] {
					for _, c := range cuts[:k+1] {
						e.skip[c.first] = true
					}
					break
				}
			}
		case s.targetOf(e).perSubject > 0:
			after := map[string]int64{} // records found after, per subject
			for j := len(recs) - 1; j >= 0; j-- {
				subj, err := s.routeOf(e).subject(recs[j].Key)
				if err != nil {
					return fmt.Errorf("staged checkpoint %d: %w", e.id, err)
				}
				switch {
				case e.skip[j]:
					after[subj]++
				case after[subj] >= s.targetOf(e).perSubject:
					e.skip[j] = true
				}
			}
		}
	}
	return nil
}

// parseID reads "<prefix><checkpoint>/<index>", an id msgID made for the
// task whose ids start with s.prefix.
func (s *ExactlyOnce) parseID(id string) (ckpt int64, index int, ok bool) {
	rest, found := strings.CutPrefix(id, s.prefix)
	if !found {
		return 0, 0, false
	}
	c, i, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	index, err := strconv.Atoi(i)
	if err != nil {
		return 0, 0, false
	}
	if c == "end" {
		return EndCheckpointID, index, true
	}
	if ckpt, err = strconv.ParseInt(c, 10, 64); err != nil {
		return 0, 0, false
	}
	return ckpt, index, true
}

// RecoverTask implements host.SinkMerger: it re-commits what sink task
// task (another subtask of this sink, gone after a rescale) staged for
// checkpoint id, under that task's message ids, so that whatever of it the
// stream already holds is deduplicated.
func (s *ExactlyOnce) RecoverTask(ctx context.Context, task string, id int64, state []byte) error {
	own := s.prefix
	s.prefix, s.recovering = s.cfg.Job+"/"+task+"/", task
	defer func() { s.prefix, s.recovering = own, "" }()
	// The commit Recover starts takes the prefix with it, so one still
	// running when Recover returns early (ctx ended) keeps task's ids.
	return s.Recover(ctx, id, state)
}

// EndOfInput publishes everything staged and the records written since the
// last checkpoint (under EndCheckpointID), and waits until it is stored.
func (s *ExactlyOnce) EndOfInput(ctx context.Context) error {
	if err := s.Wait(ctx); err != nil {
		return err
	}
	s.stageCurrent(EndCheckpointID)
	if err := s.Commit(ctx, EndCheckpointID); err != nil {
		return err
	}
	return s.Wait(ctx)
}

// closeGrace is how long Close lets a running commit finish before it
// cancels it.
const closeGrace = 5 * time.Second

// Close lets a running commit finish (up to a few seconds, then cancels
// it) and drops what is staged: that belongs to the task's snapshot, and a
// job that restores it re-commits it.
func (s *ExactlyOnce) Close() error {
	if n := len(s.jobs); n > 0 {
		t := time.NewTimer(closeGrace)
		select {
		case <-s.jobs[n-1].done:
		case <-t.C:
		}
		t.Stop()
	}
	s.stop()
	s.wg.Wait()
	// Async publishes subscribed to their acknowledgements on the
	// caller's connection, with a goroutine listening to its status:
	// they outlive the sink unless dropped.
	s.js.CleanupPublisher()
	return nil
}

// msgID is the message id of record index of checkpoint ckpt of the task
// whose ids start with prefix ("<job>/<task>/").
func msgID(prefix string, ckpt int64, index int) string {
	if ckpt == EndCheckpointID {
		return prefix + "end/" + strconv.Itoa(index)
	}
	return prefix + strconv.FormatInt(ckpt, 10) + "/" + strconv.Itoa(index)
}

func (s *ExactlyOnce) msg(rt *route, r abi.Record, id string) (*nats.Msg, error) {
	subj, err := rt.subject(r.Key)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	if id != "" {
		h[jetstream.MsgIDHeader] = []string{id}
	}
	if len(r.Key) > 0 {
		h[KeyHeader] = []string{string(r.Key)}
	}
	if s.cfg.Timestamps {
		stamp(h, r.Timestamp, nil)
	}
	return &nats.Msg{Subject: subj, Data: r.Value, Header: h}, nil
}

// publish publishes entries in order: each run of entries for the same
// stream whose records carry a message id each as one fast batch (or by
// async publish, when the stream does not allow batched publish), each
// entry staged for atomic batches batch by batch; each entry's records on
// the subjects of its route (routeOf), in the stream it was staged for
// (targetOf). Each waits out its stream's leader election
// (commitThroughElection), taking up the publish from the first record
// (or atomic batch) not confirmed stored, so that the stream keeps the
// output's order.
func (s *ExactlyOnce) publish(ctx context.Context, prefix string, entries []staged) error {
	for i := 0; i < len(entries); {
		tg := s.targetOf(&entries[i])
		if entries[i].chunk > 0 {
			j := i + 1
			for j < len(entries) && entries[j].chunk > 0 && s.targetOf(&entries[j]) == tg {
				j++
			}
			if err := s.publishChunks(ctx, tg, prefix, entries[i:j]); err != nil {
				return err
			}
			i = j
			continue
		}
		j := i + 1
		for j < len(entries) && entries[j].chunk == 0 && s.targetOf(&entries[j]) == tg {
			j++
		}
		if tg.plan.Mode == PublishFast {
			if err := s.publishFast(ctx, tg, prefix, entries[i:j]); err != nil {
				return err
			}
		} else {
			for _, e := range entries[i:j] {
				recs, err := abi.DecodeBatch(e.batch)
				if err != nil {
					return fmt.Errorf("%s: staged %s: %w", s, checkpointName(e.id), err)
				}
				if err := s.publishAsync(ctx, tg, s.routeOf(&e), prefix, e.id, recs, e.skip); err != nil {
					return err
				}
			}
		}
		i = j
	}
	return nil
}

// publishChunks publishes the records of entries, each staged for atomic
// batches and for stream tg, as atomic batches cut the way each entry
// records: up to e.chunk records and e.chunkBytes record bytes each, so a
// re-commit repeats the batches and their ids. While the server stores one
// batch, the next is streamed to it (its commit held back): the stream's
// one storing goroutine is not left idle while a batch is on its way. The
// next commit is sent only once the one before is stored, so the stream
// keeps the order; a batch streamed ahead of a commit that failed is never
// committed (the server drops it after its batch timeout) and is streamed
// again with the next try.
func (s *ExactlyOnce) publishChunks(ctx context.Context, tg *target, prefix string, entries []staged) error {
	// Where each batch is cut, entry by entry, found by walking the staged
	// bytes: each batch's records are read from them as it is streamed, so
	// a commit decodes no checkpoint's output into records of its own (a
	// large allocation that held up the stream at every commit's start).
	type cut struct {
		e *staged
		chunkCut
	}
	var cuts []cut
	for i := range entries {
		e := &entries[i]
		if int(e.chunk) > tg.plan.AtomicMax {
			now := fmt.Sprintf("stream %s does not allow atomic publish", tg.stream)
			if tg.plan.AtomicMax > 0 {
				now = fmt.Sprintf("the sink's batch size is %d", tg.plan.AtomicMax)
			}
			return fmt.Errorf("%s: %s was staged for atomic batches of up to %d messages, but %s; publishing it in other batches could store some of it twice (allow atomic publish and batches of %d: the sink's batch size and the server's max_batch_size)",
				s, checkpointName(e.id), e.chunk, now, e.chunk)
		}
		ecuts, err := e.cuts()
		if err != nil {
			return fmt.Errorf("%s: staged %s: %w", s, checkpointName(e.id), err)
		}
		for _, c := range ecuts {
			if e.skip[c.first] { // a batch is stored whole: its first id stands for it (skipRemoved marks it for its last too)
				continue
			}
			cuts = append(cuts, cut{e, c})
		}
	}
	chunk := func(k int) atomicChunk {
		c := cuts[k]
		return atomicChunk{rt: s.routeOf(c.e), ckpt: c.e.id, batch: c.e.batch, chunkCut: c.chunkCut}
	}
	var ahead *pendingBatch // cuts[k]'s, streamed while cuts[k-1] was stored
	for k := range cuts {
		c := chunk(k)
		// A batch that got no answer may be stored or not: sent again,
		// it is stored, or refused whole for its first id, a duplicate.
		// Each is a try of its own; the one after it is committed once it
		// is stored.
		unstored := func(subjects []string) error { return c.rt.unstored(subjects, c.keys()) }
		var next func() *pendingBatch
		if k+1 < len(cuts) {
			next = func() *pendingBatch {
				b, err := s.stageChunk(prefix, chunk(k+1))
				if err != nil {
					return nil // streamed again in its turn, which reports the error
				}
				return b
			}
		}
		err := commitThroughElection(ctx, s.js, tg.stream, unstored, func(ctx context.Context) (bool, error) {
			b := ahead
			ahead = nil
			var err error
			ahead, err = s.commitChunk(ctx, prefix, c, b, next)
			return false, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// atomicChunk is one atomic batch of a commit: records [first, end) of
// checkpoint ckpt's output, which its staged batch holds in bytes
// [from, to), on the subjects of rt.
type atomicChunk struct {
	rt    *route
	ckpt  int64
	batch []byte // the checkpoint's staged output
	chunkCut
}

// len is the number of records in c.
func (c atomicChunk) len() int { return c.end - c.first }

// records returns an iterator over c's records.
func (c atomicChunk) records() (abi.Iter, error) {
	return abi.NewRangeIter(c.batch, c.from, c.to, c.len())
}

// keys yields the keys of c's records, as far as they decode.
func (c atomicChunk) keys() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		it, err := c.records()
		if err != nil {
			return
		}
		for it.Next() {
			if !yield(it.Record().Key) {
				return
			}
		}
	}
}

// recordKeys yields the keys of recs.
func recordKeys(recs []abi.Record) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for _, r := range recs {
			if !yield(r.Key) {
				return
			}
		}
	}
}

// batchKeys yields the keys of the records of batch (an encoded batch),
// as far as it decodes.
func batchKeys(batch []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		it, err := abi.NewIter(batch)
		if err != nil {
			return
		}
		for it.Next() {
			if !yield(it.Record().Key) {
				return
			}
		}
	}
}

// chunkCut is one atomic batch of a staged entry: records [first, end)
// of its output, which its batch holds in bytes [from, to).
type chunkCut struct {
	first, end int
	from, to   int
}

// cuts cuts e's output into the atomic batches e records: up to e.chunk
// records (at least one) and e.chunkBytes record bytes each (where
// e.chunkBytes is set; a larger record is a batch of its own). A
// re-commit must cut the same way, for the batches' ids.
func (e staged) cuts() ([]chunkCut, error) {
	it, err := abi.NewIter(e.batch)
	if err != nil {
		return nil, err
	}
	var out []chunkCut
	c := chunkCut{from: abi.BatchHeaderSize}
	size, off := 0, abi.BatchHeaderSize // off: where the record read next begins
	for it.Next() {
		r, i := it.Record(), it.Index()
		n := len(r.Key) + len(r.Value)
		if i > c.first && (i-c.first >= int(e.chunk) || e.chunkBytes > 0 && size+n > int(e.chunkBytes)) {
			c.end, c.to = i, off
			out = append(out, c)
			c, size = chunkCut{first: i, from: off}, 0
		}
		size += n
		off = it.Offset()
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	if n := it.Count(); n > c.first {
		c.end, c.to = n, off
		out = append(out, c)
	}
	return out, nil
}

// commitChunk publishes chunk c as one atomic batch: b, when it was
// streamed ahead (stageChunk), else streamed now. Once its commit is sent,
// and while the server stores it, next (if any) streams the batch after
// it, which commitChunk returns once c is stored. A batch that was
// committed before is refused as a whole for its duplicate ids, which
// means it is already stored.
//
// A batch the server dropped before its commit came, nothing of it
// stored, is streamed once more under a new batch id: one streamed ahead
// can outlast the server's batch timeout, and one whose id another batch
// open on the stream drew too is dropped with it (newBatchID).
func (s *ExactlyOnce) commitChunk(ctx context.Context, prefix string, c atomicChunk, b *pendingBatch, next func() *pendingBatch) (*pendingBatch, error) {
	ahead, err := s.commitBatch(ctx, prefix, c, b, next)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicIncomplete {
		// (The batch streamed after it, if any, is left to the server's
		// batch timeout: next streams another.)
		ahead, err = s.commitBatch(ctx, prefix, c, nil, next)
	}
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID {
		return ahead, nil
	}
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicBatchTooLarge {
		return nil, fmt.Errorf("%s: atomic publish of %s records %d..%d: %w (the server's max_batch_size is below this batch of %d messages: lower the sink's atomic batch size or raise the server's limit)",
			s, checkpointName(c.ckpt), c.first, c.end-1, err, c.len())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: atomic publish of %s records %d..%d: %w", s, checkpointName(c.ckpt), c.first, c.end-1, err)
	}
	return ahead, nil
}

// commitBatch is one try of commitChunk: it streams c unless b is c
// streamed ahead, sends the commit, streams the next batch ahead (next),
// and waits for the server's answer.
func (s *ExactlyOnce) commitBatch(ctx context.Context, prefix string, c atomicChunk, b *pendingBatch, next func() *pendingBatch) (ahead *pendingBatch, err error) {
	if b == nil {
		b, err = s.stageChunk(prefix, c)
	}
	if err == nil {
		err = b.send()
	}
	if err == nil {
		if next != nil {
			ahead = next()
		}
		err = b.wait(ctx, s.cfg.Timeout)
	}
	return ahead, err
}

// stageChunk streams chunk c as an atomic batch but for its commit. Only
// the chunk's first and last messages carry a message id: the batch is
// stored all or nothing, so a repeated chunk is refused as a whole for its
// first, duplicate id. The last one is for a read-back past the duplicate
// window: newest of its batch, no later record of the batch replaces it on
// a stream with per-subject limits. Chunks are cut the way the staged
// entry recorded (publishChunks), so a re-commit repeats the same ids.
func (s *ExactlyOnce) stageChunk(prefix string, c atomicChunk) (*pendingBatch, error) {
	it, err := c.records()
	if err != nil {
		return nil, fmt.Errorf("%s: staged %s: %w", s, checkpointName(c.ckpt), err)
	}
	rec := func(int) ([]byte, []byte, int64) { // called once for each record, in order
		it.Next()
		r := it.Record()
		return r.Key, r.Value, r.Timestamp
	}
	b, err := stageAtomicBatch(s.js.Conn(), s.batchID(), c.rt, c.len(), rec, s.cfg.Timestamps, msgID(prefix, c.ckpt, c.first), msgID(prefix, c.ckpt, c.end-1))
	if err != nil {
		return nil, err
	}
	// Past the last record: the run must end where its cut does. Never
	// otherwise for a batch cuts walked; a batch left uncommitted is
	// dropped by the server.
	if it.Next(); it.Err() != nil {
		return nil, fmt.Errorf("%s: staged %s: %w", s, checkpointName(c.ckpt), it.Err())
	}
	return b, nil
}

// AtomicCommitWait is how long the commit of an atomic batch of n messages
// waits for the server's answer: the sink's ack timeout, and
// AtomicCommitPerMessage for each message of the batch, at most
// MaxAtomicCommitExtra more. The server stages every message of the batch
// and then stores them all before it answers the commit, so the answer to
// a batch of 20 000 messages takes a busy server (or a busy cluster) far
// longer than one message's acknowledgement: with the ack timeout alone,
// large checkpoints failed over in a row on a loaded machine, each
// recovery re-committing the same batch.
func AtomicCommitWait(timeout time.Duration, n int) time.Duration {
	return timeout + min(time.Duration(n)*AtomicCommitPerMessage, MaxAtomicCommitExtra)
}

// AtomicCommitPerMessage and MaxAtomicCommitExtra size an atomic batch's
// commit wait (AtomicCommitWait). The extra wait delays a recovery from a
// commit that hangs by as much at most; it is part of the recovery
// allowance an exactly-once sink's duplicate window is sized with
// (RequiredDuplicateWindow's recovery).
const (
	AtomicCommitPerMessage = time.Millisecond
	MaxAtomicCommitExtra   = 20 * time.Second
)

// Fast-batch flow control: the server acknowledges every fastFlow messages
// (at most; it may ask for acknowledgements more often when several
// batches share the stream) and the publisher stalls with fastOutstanding
// acknowledgements missing.
const (
	fastFlow        = 500
	fastOutstanding = 16
)

// publishFast publishes the records of entries, in order, as fast-ingest
// batches on stream tg, and returns once the server acknowledged the last
// one. A batch runs in gap mode "fail": a message lost on the way (e.g. a
// reconnect) ends the batch at the gap, so the stream holds a prefix of
// the commit. While the stream elects a leader a batch fails so too, and
// the next try is a new batch from the first message the server had not
// acknowledged (commitThroughElection): the stream drops what it stored
// of the rest by the messages' ids and appends what is missing, in order.
// A commit that fails otherwise is re-committed after recovery the same
// way.
func (s *ExactlyOnce) publishFast(ctx context.Context, tg *target, prefix string, entries []staged) error {
	total := 0
	for _, e := range entries {
		n, err := abi.BatchCount(e.batch)
		if err != nil {
			return fmt.Errorf("%s: staged %s: %w", s, checkpointName(e.id), err)
		}
		total += n - len(e.skip)
	}
	done := 0 // the first messages of the commit, acknowledged
	unstored := func(subjects []string) error {
		for i := range entries {
			if err := s.routeOf(&entries[i]).unstored(subjects, batchKeys(entries[i].batch)); err != nil {
				return err
			}
		}
		return nil
	}
	return commitThroughElection(ctx, s.js, tg.stream, unstored, func(ctx context.Context) (bool, error) {
		n, err := s.fastTry(ctx, prefix, entries, done, total)
		progressed := n > done
		done = max(done, n)
		return progressed, err
	})
}

// fastTry publishes the messages of entries after the first from (of
// total) as one fast-ingest batch, and returns how many of the commit's
// first messages the server acknowledged: all but those of a batch that
// failed after its last acknowledgement.
func (s *ExactlyOnce) fastTry(ctx context.Context, prefix string, entries []staged, from, total int) (acked int, err error) {
	if from >= total {
		return total, nil
	}
	stream, berr := s.targetOf(&entries[0]).stream, &batchErr{}
	fp := newFastBatch(s.js.Conn(), stream, fastFlow, fastOutstanding, s.cfg.Timeout, berr.set)
	var ackSeq uint64 // the batch's messages up to here are stored
	fail := func(ckpt int64, index int, err error) (int, error) {
		return from + int(ackSeq), fmt.Errorf("%s: publish %s record %d: %w", s, checkpointName(ckpt), index, berr.with(err))
	}
	// A commit that fails on the way still ends the batch, so that its
	// acknowledgement subscription leaves the connection.
	defer fp.release()
	id, key, ts := []string{""}, []string{""}, []string{""}
	m := &nats.Msg{Header: nats.Header{jetstream.MsgIDHeader: id}}
	sent, seen := 0, 0 // messages of this batch; messages of the commit before it
	for _, e := range entries {
		rt := s.routeOf(&e)
		it, err := abi.NewIter(e.batch)
		if err != nil {
			return from, fmt.Errorf("%s: staged %s: %w", s, checkpointName(e.id), err)
		}
		for i := 0; it.Next(); i++ {
			// The publisher encodes a message before AddMsg returns and
			// keeps nothing of it, so one message and one header map serve
			// the whole commit: no allocation per record but the id.
			if e.skip[i] {
				continue
			}
			if seen < from {
				seen++
				continue // acknowledged in an earlier try
			}
			if sent%1024 == 0 && ctx.Err() != nil {
				return fail(e.id, i, ctx.Err())
			}
			r := it.Record()
			subj, err := rt.subject(r.Key)
			if err != nil {
				return fail(e.id, i, err)
			}
			m.Subject, m.Data = subj, r.Value
			id[0] = msgID(prefix, e.id, i)
			if len(r.Key) > 0 {
				key[0] = string(r.Key)
				m.Header[KeyHeader] = key
			} else {
				delete(m.Header, KeyHeader)
			}
			if s.cfg.Timestamps {
				stamp(m.Header, r.Timestamp, ts)
			}
			sent++
			if from+sent < total {
				acked, err := fp.AddMsg(ctx, m)
				if err != nil {
					return fail(e.id, i, err)
				}
				ackSeq = max(ackSeq, acked)
				continue
			}
			ack, err := fp.CommitMsg(ctx, m)
			if err != nil {
				return fail(e.id, i, err)
			}
			// The server ends a batch early at a gap or an error and
			// acknowledges what it stored up to there.
			if ack.BatchSize != uint64(sent) {
				ackSeq = max(ackSeq, ack.BatchSize)
				return fail(e.id, i, fmt.Errorf("the server stored %d of the batch's %d messages (the commit's %d to %d): %w",
					ack.BatchSize, sent, from+1, total, jetstreamext.ErrFastBatchGapDetected))
			}
		}
	}
	return total, nil
}

// publishAsync publishes recs, the records of checkpoint ckpt, with message
// ids on the subjects of rt in stream tg, and waits for every ack; a
// duplicate is acknowledged as such, not refused. While the stream elects
// a leader the records are published again from the first one not
// acknowledged (commitThroughElection); a record after it that was stored
// is acknowledged as a duplicate. Plain async publish keeps no order
// within a try: a leader lost in the middle of it can leave later records
// stored before earlier ones (never twice, never lost).
func (s *ExactlyOnce) publishAsync(ctx context.Context, tg *target, rt *route, prefix string, ckpt int64, recs []abi.Record, skip map[int]bool) error {
	from := 0 // the records before it are acknowledged
	unstored := func(subjects []string) error { return rt.unstored(subjects, recordKeys(recs)) }
	return commitThroughElection(ctx, s.js, tg.stream, unstored, func(ctx context.Context) (bool, error) {
		next, err := s.asyncTry(ctx, tg.stream, rt, prefix, ckpt, recs, skip, from)
		progressed := next > from
		from = max(from, next)
		return progressed, err
	})
}

// asyncTry publishes recs from index from on to stream, as publishAsync,
// and returns the index of the first record not acknowledged (len(recs):
// all were). A stream found gone fails it at once (asyncPublisher).
func (s *ExactlyOnce) asyncTry(ctx context.Context, stream string, rt *route, prefix string, ckpt int64, recs []abi.Record, skip map[int]bool, from int) (int, error) {
	s.mu.Lock()
	s.pubErr, s.pubFirst = nil, len(recs)
	s.mu.Unlock()
	for i := from; i < len(recs); i++ {
		if skip[i] {
			continue
		}
		m, err := s.msg(rt, recs[i], msgID(prefix, ckpt, i))
		if err == nil {
			err = s.pub.publish(ctx, stream, m)
		}
		if err != nil {
			// The ones before it were handed over; some may fail yet.
			// A stream gone fails the commit whatever they do. (The
			// wait's own error says no more than err: ctx ended, or the
			// stream is gone.)
			if !errors.Is(err, jetstream.ErrStreamNotFound) {
				_ = s.pub.awaitAcks(ctx, stream)
			}
			s.mu.Lock()
			first := min(i, s.pubFirst)
			s.mu.Unlock()
			return first, fmt.Errorf("%s: publish %s record %d: %w", s, checkpointName(ckpt), i, err)
		}
	}
	if err := s.pub.awaitAcks(ctx, stream); err != nil {
		return from, fmt.Errorf("%s: commit of %s: %w", s, checkpointName(ckpt), err)
	}
	s.mu.Lock()
	err, first := s.pubErr, s.pubFirst
	s.pubErr = nil
	s.mu.Unlock()
	if err != nil {
		return first, fmt.Errorf("%s: commit of %s record %d: %w", s, checkpointName(ckpt), first, err)
	}
	return len(recs), nil
}

// asyncFailed records err, the failure of the async publish of m, for
// asyncTry: the first error that is no election's (natsconn.Leaderless,
// leaderLost) wins over those that are, and the lowest record index failed is kept,
// from the index that ends m's message id.
func (s *ExactlyOnce) asyncFailed(m *nats.Msg, err error) {
	s.pub.publishFailed(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err = leaderLost(err); s.pubErr == nil || natsconn.Leaderless(s.pubErr) && !natsconn.Leaderless(err) {
		s.pubErr = err
	}
	if m == nil {
		return
	}
	id := m.Header.Get(jetstream.MsgIDHeader)
	if i, err := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:]); err == nil {
		s.pubFirst = min(s.pubFirst, i)
	}
}

// State layout: "WEOS" version:u8 count:u32, then count entries; version 6:
// (id:i64 at:i64 chunk:u32 chunkBytes:u32 subjectLen:u16 subject
// streamLen:u16 stream ref:i64 len:u32 batch), subject and stream the
// sink's subject and stream when the entry was staged ("": not recorded),
// ref 0 when the entry's records follow as batch, else the checkpoint
// whose state holds them and len 0 (PreCommitIncremental); versions 5
// (version 6 without ref), 4 (id:i64 at:i64 chunk:u32 chunkBytes:u32 subjectLen:u16
// subject len:u32 batch), 3 (id:i64 at:i64 chunk:u32 chunkBytes:u32
// len:u32 batch), 2 (id:i64 chunk:u32 chunkBytes:u32 len:u32 batch) and 1
// (id:i64 len:u32 batch) are read, not written.
var stateMagic = []byte("WEOS")

const stateVersion = 6

// encodeState encodes st, each entry with its records or, where it has a
// ref, naming the checkpoint whose state holds them.
func encodeState(st []staged) []byte { return appendState(nil, st, false) }

// appendState appends st's encoding to out; with named, an entry with a
// home is written as naming it instead of with its records.
func appendState(out []byte, st []staged, named bool) []byte {
	size := len(stateMagic) + 5
	for _, e := range st {
		size += 40 + len(e.subject) + len(e.stream)
		if e.ref == 0 && (!named || e.home == 0) {
			size += len(e.batch)
		}
	}
	out = slices.Grow(out, size)
	out = append(out, stateMagic...)
	out = append(out, stateVersion)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(st)))
	for _, e := range st {
		ref := e.ref
		if named && e.home != 0 {
			ref = e.home
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(e.id))
		out = binary.LittleEndian.AppendUint64(out, uint64(e.at))
		out = binary.LittleEndian.AppendUint32(out, e.chunk)
		out = binary.LittleEndian.AppendUint32(out, e.chunkBytes)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(e.subject))) // at most subject.MaxLen
		out = append(out, e.subject...)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(e.stream))) // a stream's name has at most 255 bytes
		out = append(out, e.stream...)
		out = binary.LittleEndian.AppendUint64(out, uint64(ref))
		if ref != 0 {
			out = binary.LittleEndian.AppendUint32(out, 0)
			continue
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.batch)))
		out = append(out, e.batch...)
	}
	return out
}

func decodeState(b []byte) ([]staged, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < len(stateMagic)+5 || string(b[:4]) != string(stateMagic) {
		return nil, fmt.Errorf("%w: bad header", ErrMalformedState)
	}
	version := b[4]
	var head int // an entry's bytes before its batch (version 4: and its subject; 5: and its stream)
	switch version {
	case 1:
		head = 12 // id, len
	case 2:
		head = 20 // id, chunk, chunkBytes, len
	case 3:
		head = 28 // id, at, chunk, chunkBytes, len
	case 4:
		head = 30 // id, at, chunk, chunkBytes, subjectLen, len
	case 5:
		head = 32 // id, at, chunk, chunkBytes, subjectLen, streamLen, len
	case stateVersion:
		head = 40 // id, at, chunk, chunkBytes, subjectLen, streamLen, ref, len
	default:
		return nil, fmt.Errorf("%w: version %d", ErrMalformedState, version)
	}
	n := binary.LittleEndian.Uint32(b[5:])
	off := 9
	if uint64(n)*uint64(head) > uint64(len(b)-off) {
		return nil, fmt.Errorf("%w: count %d exceeds %d bytes", ErrMalformedState, n, len(b)-off)
	}
	out := make([]staged, 0, n)
	var prev int64 = math.MinInt64
	for i := uint32(0); i < n; i++ {
		if len(b)-off < head {
			return nil, fmt.Errorf("%w: entry %d header passes the end", ErrMalformedState, i)
		}
		e := staged{id: int64(binary.LittleEndian.Uint64(b[off:])), legacy: version == 1}
		switch version {
		case 2:
			e.chunk = binary.LittleEndian.Uint32(b[off+8:])
			e.chunkBytes = binary.LittleEndian.Uint32(b[off+12:])
		case 3, 4, 5, stateVersion:
			e.at = int64(binary.LittleEndian.Uint64(b[off+8:]))
			e.chunk = binary.LittleEndian.Uint32(b[off+16:])
			e.chunkBytes = binary.LittleEndian.Uint32(b[off+20:])
		}
		if version >= 4 {
			sl := int(binary.LittleEndian.Uint16(b[off+24:]))
			if sl > len(b)-off-head {
				return nil, fmt.Errorf("%w: entry %d subject of %d bytes passes the end", ErrMalformedState, i, sl)
			}
			// Checked where it is used (stagedRoute), not here: a subject
			// rule made stricter later must not make the state of a sink
			// whose subject never changed unreadable.
			e.subject = string(b[off+26 : off+26+sl])
			off += sl // the subject is in the middle of the entry's head
		}
		if version >= 5 {
			tl := int(binary.LittleEndian.Uint16(b[off+26:]))
			if tl > len(b)-off-head {
				return nil, fmt.Errorf("%w: entry %d stream of %d bytes passes the end", ErrMalformedState, i, tl)
			}
			// Checked where it is used (stagedTarget), as the subject is.
			e.stream = string(b[off+28 : off+28+tl])
			off += tl // so is the stream
		}
		if version >= 6 {
			if e.ref = int64(binary.LittleEndian.Uint64(b[off+28:])); e.ref < 0 || e.ref == EndCheckpointID {
				return nil, fmt.Errorf("%w: entry %d names checkpoint %d for %s's records", ErrMalformedState, i, e.ref, checkpointName(e.id))
			}
		}
		id := e.id
		l := uint64(binary.LittleEndian.Uint32(b[off+head-4:]))
		off += head
		if l > uint64(len(b)-off) {
			return nil, fmt.Errorf("%w: entry %d of %d bytes passes the end", ErrMalformedState, i, l)
		}
		if id <= prev {
			return nil, fmt.Errorf("%w: checkpoint ids not increasing at entry %d", ErrMalformedState, i)
		}
		prev = id
		if e.ref != 0 {
			if l != 0 {
				return nil, fmt.Errorf("%w: entry %d names checkpoint %d and holds %d bytes", ErrMalformedState, i, e.ref, l)
			}
			out = append(out, e)
			continue
		}
		batch := b[off : off+int(l) : off+int(l)]
		if _, err := abi.ValidateBatch(batch); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %w", ErrMalformedState, i, err)
		}
		e.batch = batch
		out = append(out, e)
		off += int(l)
	}
	if off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformedState, len(b)-off)
	}
	return out, nil
}
