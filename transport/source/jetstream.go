package source

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
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

	"github.com/weirhq/weir/transport/natsconn"
)

// JetStreamGuarantee is the delivery guarantee of a JetStream source.
const JetStreamGuarantee = "replayable: JetStream stream, offset = stream sequence, exactly-once with aligned or unaligned checkpoints"

// ErrOffsetGone is returned when the checkpointed offset is older than the
// stream's first message: the stream's retention dropped data the job has
// not processed.
var ErrOffsetGone = errors.New("checkpointed offset no longer in the stream")

// ErrMessagesLost is returned (wrapped) by Poll when messages of the
// source's input were removed from the stream (purged, or dropped by its
// max-age, max-msgs or max-bytes limits) before the source read them:
// the job read on past them, and would have skipped them without a word.
// The error names the sequences, the likely cause and what to do; a
// restore from a checkpoint taken before them is refused with
// ErrOffsetGone.
var ErrMessagesLost = errors.New("messages removed from the stream before the source read them")

// ErrOffsetAhead is returned when the checkpointed offset is past the
// stream's last message: the stream was deleted and created again, or lost
// messages it had acknowledged (memory storage, async persistence). Resuming
// would wait for the sequence to catch up and skip every message before it.
var ErrOffsetAhead = errors.New("checkpointed offset is past the end of the stream")

// ErrStreamGone is returned (wrapped) by Poll when the stream the source
// reads was deleted while it read it: nothing more comes, and a job whose
// source read on would sit idle, looking healthy (a trial's did for
// minutes, its backlog figures at 0).
var ErrStreamGone = errors.New("stream deleted")

// ErrStalled is returned (wrapped) by Poll when a consumer of the source
// delivered nothing for StallTimeout while the stream held a message for
// it: the consumer was lost (its server went away while the client's
// attempts to recreate it are bound to that server) and the source cannot
// go on; a new source resumes from the checkpoint.
var ErrStalled = errors.New("consumer stalled")

// ErrEnded is returned by Poll of a bounded source (JetStreamConfig.StopSeq)
// once it delivered everything up to its stop. It has the method
// InputEnded() bool (true), by which the task runtime (host) recognizes the
// end of a bounded input without importing this package.
var ErrEnded error = endedError{}

type endedError struct{}

func (endedError) Error() string {
	return "source ended: every message up to its stop sequence was read"
}
func (endedError) InputEnded() bool { return true }

// JetStreamConfig configures a JetStream stream source.
type JetStreamConfig struct {
	// Stream is the stream name.
	Stream string
	// FilterSubjects restricts the source to these subjects (wildcards
	// allowed); empty reads the whole stream.
	FilterSubjects []string
	// Key is where each record's key comes from: the Weir-Key header
	// (KeyFromHeader, the default) or the subject the stream stored the
	// message under (KeyFromSubject).
	Key KeyFrom
	// StartSeq is the first stream sequence a source with nothing read
	// yet reads (0 or 1: the stream's beginning): where it starts without
	// Seek, or after Seek to an offset that covers nothing (nil, or a
	// partition at 0, as in a checkpoint taken before the first batch).
	// Every subtask of a source must be given the same.
	StartSeq uint64
	// StopSeq bounds the source (0: unbounded): the last stream sequence it
	// reads. Every subtask of a source must be given the same. Once every lane
	// has covered everything up to StopSeq, Poll returns what it still holds,
	// then ErrEnded (with the final offset) on every later call.
	//
	// A lane (the whole stream, or one partition) has covered everything
	// up to StopSeq when it read or skipped the message at StopSeq, when it
	// received a message past it (which it drops: no batch holds a message
	// past StopSeq), or when the server confirms that none of its subjects'
	// messages up to StopSeq is left: the stream's last sequence is at
	// least StopSeq, and it stores no message of the lane's subjects after
	// the lane's offset up to StopSeq. That is asked at once when a
	// delivery says nothing follows it, and every 50 to 200 ms otherwise
	// (not after IdleCheck). While the stream has not reached StopSeq a
	// lane waits for more messages, and the stream is asked at most every
	// second (so a lane ends up to a second after the stream reached
	// StopSeq with another subtask's or filter's message). The final offset has every lane at
	// StopSeq (or where it was, if it started past it). A source that
	// starts past StopSeq (StartSeq > StopSeq, or Seek to an offset that
	// covers it) ends at once, without consumers; an empty range is not an
	// error.
	StopSeq uint64
	// Parallelism and Index split the stream among Parallelism source
	// subtasks. With Partitions set, the server does the split: subtask
	// Index reads the partitions p with p % Parallelism == Index, each
	// through the filter PartitionFilter names, and receives nothing else.
	// Without, every subtask reads the whole stream and keeps the messages
	// whose subject hashes (FNV-1a) to Index — the same split for any
	// stream, at the cost of each subtask receiving every message. Either
	// way the split is a pure function of the subject, so a replay hands
	// every message to the same subtask again, and the order per subject
	// is kept. Parallelism 0 or 1 reads everything.
	Parallelism, Index int
	// Partitions is the number of partitions the stream's subjects carry a
	// number for (0..Partitions-1), typically written by the stream's
	// subject transform with {{partition(n, ...)}}; 0 means none. It must
	// be at least Parallelism.
	Partitions int
	// PartitionFilter is the subject filter of one partition, with {p}
	// where its number goes, e.g. "orders.{p}.>". Required with
	// Partitions; it replaces FilterSubjects.
	PartitionFilter string
	// MaxBatchRecords and MaxBatchBytes bound one batch returned by Poll;
	// defaults 4096 records and 1 MiB.
	MaxBatchRecords, MaxBatchBytes int
	// PullMaxMessages is how many messages the consumer keeps requested
	// ahead; default 4096.
	PullMaxMessages int
	// PullMaxBytes bounds the bytes the source's pull requests ask for at
	// once, its lanes (partitions) together; default DefaultPullMaxBytes.
	// Each lane asks for its share, but never less than twice the
	// server's max_payload (a request smaller than one message would
	// never get it).
	PullMaxBytes int
	// IdleCheck is how often a filtered consumer (a partition, or
	// FilterSubjects) that delivered nothing is asked whether it is caught
	// up, so that its offset follows the stream while its subjects are
	// quiet; default 5s. (A bounded source asks whether its lanes reached
	// StopSeq far more often, see StopSeq.) Without it a quiet partition's
	// offset would stay behind, and once the stream's retention dropped other subjects'
	// older messages, a restore could not tell that none of them were its
	// own and would refuse with ErrOffsetGone.
	IdleCheck time.Duration
	// IdleCheckTimeout bounds the requests of one idle check (the stream's
	// info, then a message lookup per filter of the lane); default
	// IdleCheck. Close does not wait for them: it cancels them.
	IdleCheckTimeout time.Duration
	// StallTimeout is how long a lane's reader may wait on its consumer
	// while the stream holds a message of the lane's that it was not
	// given, before Poll fails with ErrStalled; default 20s, negative: no
	// watch. The lane's reader recreates a consumer it lost (missed
	// heartbeats, no responder after a reconnect, a deletion) within
	// seconds; the watch is for what that misses: a consumer that stays
	// but delivers nothing, or recreations that keep failing. Whether a lane
	// stalls is asked every quarter of StallTimeout, of the stream, only
	// while its reader waits and nothing came since the last ask. The same
	// asks notice messages of the lane's that the stream dropped unread
	// while nothing came after them (ErrMessagesLost), and refresh the
	// lane's pending count (Pending); a lane that receives messages notices
	// a drop by the gap in their sequences.
	StallTimeout time.Duration
}

// maxResetAttempts bounds how often in a row a lane's reader tries to
// recreate its consumer (backing off from 1 s to 10 s) before the source fails:
// about two and a half minutes, long enough to ride out a server restart,
// short enough that a deleted stream fails the task with a reason.
const maxResetAttempts = 20

// DefaultStallTimeout is JetStreamConfig.StallTimeout's default.
const DefaultStallTimeout = 20 * time.Second

// JetStream reads a JetStream stream through ordered readers (ephemeral
// pull consumers without acknowledgements, recreated at the next sequence
// after a gap, a deletion, a restart or missed heartbeats; orderedReader),
// each drained in order by a goroutine of its own: one consumer, or with Partitions one per partition
// the subtask reads. Its offset is the stream sequence of the last message
// covered — 8 bytes little-endian (EncodeOffset; after a change of
// parallelism EncodeStreamOffset), or one per partition
// (EncodePartitionOffsets) — and a restored source starts after it. With
// StopSeq it is bounded: it reads up to that sequence and ends (ErrEnded).
type JetStream struct {
	cfg   JetStreamConfig
	js    jetstream.JetStream
	lanes []*lane
	// rescaled holds a whole-stream source's pending rescale layers
	// (StreamOffset.Rescaled) and rescaledTo the highest sequence they
	// name, set by Seek and read-only afterwards: past it they say
	// nothing, and no message pays for them.
	rescaled   [][]uint64
	rescaledTo uint64
	// endAt is StopSeq, or MaxUint64 for an unbounded source, and
	// nudgeBelow 1 or 0: a message at or past endAt, or one the server
	// says nothing follows (num_pending < nudgeBelow), is all a bounded
	// source has to look at, and the only compare an unbounded one pays.
	// A drain (DrainTo) bounds an unbounded source as it reads.
	endAt, nudgeBelow atomic.Uint64
	// boundNow is closed by DrainTo: the watcher starts its end checks.
	boundNow chan struct{}
	// stream is the stream the consumers read (set as they start), and
	// watching whether watchIdle runs; both under mu.
	stream   jetstream.Stream
	watching bool
	// nudge asks watchIdle to check at once whether the lanes ended.
	nudge chan struct{}
	// streamLast is the stream's last sequence plus one as a bounded
	// source's latest end check read it while below the stop (0: not
	// read, or at or past the stop); see AwaitsStop.
	streamLast atomic.Uint64
	// created is when the stream read was created, set when the
	// consumers start: a consumer that recreates itself checks that the
	// stream is still that one.
	created time.Time
	// ctx is cancelled by Close: it ends the source's own requests.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	startErr error // a start that failed after some lanes delivered
	acc      *accumulator
	wg       sync.WaitGroup
	stopIdle chan struct{} // closed by Close: ends watchIdle
	idleDone sync.WaitGroup
	started  bool
	closed   bool
	// finished is set once Poll stopped the consumers of a source whose
	// lanes all ended; finishErr is what stopping them returned.
	finished  bool
	finishErr error
}

// lane is one ordered consumer of a source.
type lane struct {
	part    int            // partition number; -1 without partitions
	filters []string       // subject filters; none = the whole stream
	start   uint64         // first sequence to read
	rd      *orderedReader // nil until its consumer was created
	// tried names the consumer a failed start's request may have created
	// (the request's answer did not come back, or its context ended
	// first): stopLocked deletes it.
	tried   string
	stopped *atomic.Bool // set before stopLocked stops it
	// consumer names the ordered consumer's server-side consumer that
	// delivered the lane's last message; only the lane's reader uses it.
	consumer string
	// pending is 1 + the num_pending of the lane's latest delivery (0:
	// none yet); written by the lane's reader, read by Pending. The
	// watcher refreshes it from the consumer's info while the reader waits
	// and nothing came (refreshPending): after a purge nothing comes that
	// would.
	pending atomic.Uint64
	// readTo and readPending are the stream sequence of the lane's latest
	// delivery and the num_pending that came with it (before the first:
	// where the consumer starts, and what it had to deliver when it was
	// created; readPending 0 when unknown). Written by the lane's reader,
	// read by the watcher while the reader waits; see checkGap and
	// checkQuiet.
	readTo, readPending atomic.Uint64
	// endReq is set by the watcher of a bounded source that found nothing
	// left for the lane up to the stop, before it stops the iterator: the
	// reader, done with any message it still had, ends the lane.
	endReq atomic.Bool
	// endReqAt is when (watcher only), kicked whether the watcher deleted
	// the consumer to wake a reader that did not end.
	endReqAt time.Time
	kicked   bool
	// waiting is set while the lane's reader waits in the iterator's
	// Next, and delivered counts what Next returned; the watcher reads
	// them to tell a stalled consumer (see watchStalls).
	waiting   atomic.Bool
	delivered atomic.Uint64
	// The watcher's own: what delivered was at its last look, and since
	// when (zero: not suspected) the stream held message suspectSeq of
	// the lane's while the reader waited and got nothing.
	watchDelivered uint64
	suspectAt      time.Time
	suspectSeq     uint64
}

// NewJetStream prepares a source on cfg.Stream; it starts consuming on the
// first Poll, from the beginning or from where Seek put it.
func NewJetStream(js jetstream.JetStream, cfg JetStreamConfig) (*JetStream, error) {
	if cfg.Stream == "" {
		return nil, errors.New("jetstream source: no stream")
	}
	if cfg.Parallelism > 1 && (cfg.Index < 0 || cfg.Index >= cfg.Parallelism) {
		return nil, fmt.Errorf("jetstream source %s: index %d outside parallelism %d", cfg.Stream, cfg.Index, cfg.Parallelism)
	}
	if err := cfg.Key.check(); err != nil {
		return nil, fmt.Errorf("jetstream source %s: %w", cfg.Stream, err)
	}
	var lanes []*lane
	if cfg.Partitions > 0 {
		if len(cfg.PartitionFilter) > maxFilterLen {
			return nil, fmt.Errorf("jetstream source %s: partition filter of %d bytes, at most %d", cfg.Stream, len(cfg.PartitionFilter), maxFilterLen)
		}
		// One consumer per partition, each with a single filter: a consumer
		// with several filters costs the server more than the whole stream
		// (measured, nats-server v2.15.2), and a partition's own sequence
		// keeps its offset independent of the others'.
		par := max(cfg.Parallelism, 1)
		filters, err := PartitionFilters(cfg.PartitionFilter, cfg.Partitions, par, cfg.Index)
		if err != nil {
			return nil, fmt.Errorf("jetstream source %s: %w", cfg.Stream, err)
		}
		for i, f := range filters {
			lanes = append(lanes, &lane{part: cfg.Index + i*par, filters: []string{f}, start: 1})
		}
	} else {
		lanes = []*lane{{part: -1, filters: cfg.FilterSubjects, start: 1}}
	}
	first := max(cfg.StartSeq, 1)
	for _, l := range lanes {
		l.start = first
	}
	if cfg.PullMaxMessages <= 0 {
		cfg.PullMaxMessages = 4096
	}
	if cfg.PullMaxBytes <= 0 {
		cfg.PullMaxBytes = DefaultPullMaxBytes
	}
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = 5 * time.Second
	}
	if cfg.IdleCheckTimeout <= 0 {
		cfg.IdleCheckTimeout = cfg.IdleCheck
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	acc := newAccumulator(cfg.MaxBatchRecords, cfg.MaxBatchBytes, len(lanes))
	for i := range lanes {
		acc.setOffset(i, first-1)
	}
	s := &JetStream{cfg: cfg, js: js, lanes: lanes, acc: acc, nudge: make(chan struct{}, 1),
		stopIdle: make(chan struct{}), boundNow: make(chan struct{}), ctx: ctx, cancel: cancel}
	s.endAt.Store(math.MaxUint64)
	if cfg.StopSeq > 0 {
		s.endAt.Store(cfg.StopSeq)
		s.nudgeBelow.Store(1)
	}
	return s, nil
}

// EncodeOffset encodes a stream sequence as a source offset.
func EncodeOffset(seq uint64) []byte { return binary.LittleEndian.AppendUint64(nil, seq) }

// DecodeOffset decodes a source offset; nil is sequence 0 (the beginning).
func DecodeOffset(off []byte) (uint64, error) {
	if len(off) == 0 {
		return 0, nil
	}
	if len(off) != 8 {
		return 0, fmt.Errorf("jetstream source offset of %d bytes, want 8", len(off))
	}
	return binary.LittleEndian.Uint64(off), nil
}

// Partition offset formats. "WPO1" count:u32 (partition:u32 seq:u64)*count
// did not say which partitioning it was taken under; "WPO2" does:
// partitions:u32 filterLen:u16 filter count:u32 (partition:u32
// seq:u64)*count, little-endian.
const (
	partitionOffsetMagicV1 = "WPO1"
	partitionOffsetMagic   = "WPO2"
)

// maxFilterLen bounds a partition filter template (offsets record it).
const maxFilterLen = 4096

// ErrOffsetMismatch is returned when a checkpointed offset was taken under
// another partitioning (partition count or filter) than the source's, or
// by a subtask that owned other partitions: applying it would re-read or
// skip messages.
var ErrOffsetMismatch = errors.New("checkpointed offset does not fit the source's partitioning")

// PartitionOffsets is a partitioned source's offset: the last sequence
// read of each partition, and the partitioning it was taken under.
type PartitionOffsets struct {
	// Partitions and Filter are the partition count and filter template
	// the offset was taken under; 0 and "" for the first format.
	Partitions int
	Filter     string
	// Seqs maps partition to the last sequence read (0: none yet).
	Seqs map[int]uint64
}

// EncodePartitionOffsets encodes o as a source offset, in increasing
// partition order; without Partitions, in the first format.
func EncodePartitionOffsets(o PartitionOffsets) []byte {
	parts := make([]int, 0, len(o.Seqs))
	for p := range o.Seqs {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out := make([]byte, 0, 14+len(o.Filter)+12*len(parts))
	if o.Partitions == 0 {
		out = append(out, partitionOffsetMagicV1...)
	} else {
		out = append(out, partitionOffsetMagic...)
		out = binary.LittleEndian.AppendUint32(out, uint32(o.Partitions))
		out = binary.LittleEndian.AppendUint16(out, uint16(len(o.Filter)))
		out = append(out, o.Filter...)
	}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(parts)))
	for _, p := range parts {
		out = binary.LittleEndian.AppendUint32(out, uint32(p))
		out = binary.LittleEndian.AppendUint64(out, o.Seqs[p])
	}
	return out
}

// DecodePartitionOffsets decodes what EncodePartitionOffsets made (and the
// first format); nil is no partition read yet.
func DecodePartitionOffsets(off []byte) (PartitionOffsets, error) {
	o := PartitionOffsets{Seqs: map[int]uint64{}}
	if len(off) == 0 {
		return o, nil
	}
	bad := func(format string, args ...any) (PartitionOffsets, error) {
		return PartitionOffsets{}, fmt.Errorf("jetstream source offset: "+format, args...)
	}
	if len(off) < 8 || (string(off[:4]) != partitionOffsetMagic && string(off[:4]) != partitionOffsetMagicV1) {
		return bad("%d bytes that are not a partitioned source's (was the source partitioned when the checkpoint was taken?)", len(off))
	}
	rest := off[4:]
	if string(off[:4]) == partitionOffsetMagic {
		if len(rest) < 6 {
			return bad("truncated header")
		}
		parts := binary.LittleEndian.Uint32(rest)
		flen := int(binary.LittleEndian.Uint16(rest[4:]))
		rest = rest[6:]
		if parts == 0 || parts > math.MaxInt32 || len(rest) < flen+4 {
			return bad("%d partitions, filter of %d bytes in %d", parts, flen, len(rest))
		}
		o.Partitions, o.Filter = int(parts), string(rest[:flen])
		rest = rest[flen:]
	}
	n := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(len(rest)) != uint64(n)*12 {
		return bad("%d partitions in %d bytes", n, len(rest))
	}
	for i := uint32(0); i < n; i++ {
		p := binary.LittleEndian.Uint32(rest[12*i:])
		if p > math.MaxInt32 || (o.Partitions > 0 && int(p) >= o.Partitions) {
			return bad("partition %d", p)
		}
		if _, dup := o.Seqs[int(p)]; dup {
			return bad("partition %d twice", p)
		}
		o.Seqs[int(p)] = binary.LittleEndian.Uint64(rest[12*i+4:])
	}
	return o, nil
}

// fits checks that offset o, taken under some partitioning, applies to
// this source: same partition count and filter (when o recorded them).
func (s *JetStream) fits(o PartitionOffsets) error {
	if o.Partitions != 0 && (o.Partitions != s.cfg.Partitions || o.Filter != s.cfg.PartitionFilter) {
		return fmt.Errorf("jetstream source %s: the checkpoint read %d partitions by %q, the source is set to %d by %q; the offsets of one partitioning say nothing about another: %w",
			s.cfg.Stream, o.Partitions, o.Filter, s.cfg.Partitions, s.cfg.PartitionFilter, ErrOffsetMismatch)
	}
	return nil
}

// MergeOffsets implements host.OffsetMerger: a source whose parallelism
// changed on restore resumes from the offsets of every old subtask
// together, given in subtask order. A whole-stream source resumes after
// the lowest of them and skips, until it has read past the highest, the
// messages whose old subtask had covered them (StreamOffset). In a
// partitioned source each partition was read by exactly one of them; the
// result names the last sequence of each of this subtask's partitions, to
// Seek to. A partition no offset names was not read yet, which only an
// old subtask that had not polled (an empty offset) explains; otherwise
// the offsets are incomplete and refused.
func (s *JetStream) MergeOffsets(offsets [][]byte) ([]byte, error) {
	if s.cfg.Partitions == 0 {
		o, err := mergeStreamOffsets(offsets)
		if err != nil {
			return nil, fmt.Errorf("jetstream source %s: %w (%w)", s.cfg.Stream, err, ErrOffsetMismatch)
		}
		return EncodeStreamOffset(o), nil
	}
	merged := PartitionOffsets{Partitions: s.cfg.Partitions, Filter: s.cfg.PartitionFilter, Seqs: map[int]uint64{}}
	empty := false
	for i, off := range offsets {
		if len(off) == 0 {
			empty = true
			continue
		}
		o, err := DecodePartitionOffsets(off)
		if err != nil {
			return nil, fmt.Errorf("jetstream source %s: offset %d of %d: %w (%w)", s.cfg.Stream, i+1, len(offsets), err, ErrOffsetMismatch)
		}
		if o.Partitions == 0 {
			return nil, fmt.Errorf("jetstream source %s: offset %d of %d does not record its partitioning (taken by an older weir): restore it at the parallelism it was taken with: %w", s.cfg.Stream, i+1, len(offsets), ErrOffsetMismatch)
		}
		if err := s.fits(o); err != nil {
			return nil, err
		}
		for p, seq := range o.Seqs {
			if _, dup := merged.Seqs[p]; dup {
				return nil, fmt.Errorf("jetstream source %s: partition %d in two subtasks' offsets: %w", s.cfg.Stream, p, ErrOffsetMismatch)
			}
			merged.Seqs[p] = seq
		}
	}
	for p := 0; p < s.cfg.Partitions; p++ {
		if _, ok := merged.Seqs[p]; !ok && !empty {
			return nil, fmt.Errorf("jetstream source %s: no offset names partition %d: %w", s.cfg.Stream, p, ErrOffsetMismatch)
		}
	}
	// The result names this subtask's partitions only, as its Poll would:
	// a checkpoint taken before the first Poll stores it as is.
	own := PartitionOffsets{Partitions: merged.Partitions, Filter: merged.Filter, Seqs: make(map[int]uint64, len(s.lanes))}
	for _, l := range s.lanes {
		own.Seqs[l.part] = merged.Seqs[l.part] // 0: not read yet
	}
	return EncodePartitionOffsets(own), nil
}

// Guarantee describes the source's delivery guarantee for the job status.
func (s *JetStream) Guarantee() string { return JetStreamGuarantee }

// PartitionOf is the subtask among parallelism that reads subject.
func PartitionOf(subject string, parallelism int) int {
	if parallelism <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(subject))
	return int(h.Sum32() % uint32(parallelism))
}

// PartitionToken is the placeholder for the partition number in a
// partition filter.
const PartitionToken = "{p}"

// PartitionFilters returns the subject filters subtask index of
// parallelism reads when the stream's subjects carry partitions 0..n-1:
// template with PartitionToken replaced by each p with p % parallelism ==
// index, in increasing order.
func PartitionFilters(template string, n, parallelism, index int) ([]string, error) {
	switch {
	case strings.Count(template, PartitionToken) != 1:
		return nil, fmt.Errorf("partition filter %q must contain %s once", template, PartitionToken)
	case n < 1:
		return nil, fmt.Errorf("%d partitions, want at least 1", n)
	case parallelism < 1 || index < 0 || index >= parallelism:
		return nil, fmt.Errorf("subtask %d of parallelism %d", index, parallelism)
	case n < parallelism:
		return nil, fmt.Errorf("%d partitions for %d subtasks: each subtask needs at least one", n, parallelism)
	}
	var out []string
	for p := index; p < n; p += parallelism {
		f := strings.Replace(template, PartitionToken, strconv.Itoa(p), 1)
		if !validFilter(f) {
			return nil, fmt.Errorf("partition filter %q gives the invalid subject filter %q", template, f)
		}
		out = append(out, f)
	}
	return out, nil
}

// validFilter reports whether f is a well-formed NATS subject filter: dot
// separated non-empty tokens without spaces, where "*" and ">" stand alone
// and ">" comes last.
func validFilter(f string) bool {
	toks := strings.Split(f, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return false
		}
		if (strings.Contains(t, "*") && t != "*") || (strings.Contains(t, ">") && (t != ">" || i != len(toks)-1)) {
			return false
		}
	}
	return true
}

// Seek positions the source after offset (nil = the beginning). Call it
// before the first Poll.
func (s *JetStream) Seek(ctx context.Context, offset []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("jetstream source %s: Seek after the first Poll", s.cfg.Stream)
	}
	if s.cfg.Partitions == 0 {
		o, err := DecodeStreamOffset(offset)
		if err != nil {
			return fmt.Errorf("jetstream source %s: %w (%w)", s.cfg.Stream, err, ErrOffsetMismatch)
		}
		s.lanes[0].start = s.startAfter(o.Seq)
		s.acc.setOffset(0, s.lanes[0].start-1)
		s.rescaled = o.Rescaled
		for _, l := range o.Rescaled {
			s.rescaledTo = max(s.rescaledTo, slices.Max(l))
		}
		return nil
	}
	o, err := DecodePartitionOffsets(offset)
	if err != nil {
		return fmt.Errorf("jetstream source %s: %w (%w)", s.cfg.Stream, err, ErrOffsetMismatch)
	}
	if err := s.fits(o); err != nil {
		return err
	}
	for i, l := range s.lanes {
		// Every offset a subtask takes names all its partitions (0: none
		// read yet); one that lacks one of ours was taken by a subtask
		// that owned other partitions.
		seq, ok := o.Seqs[l.part]
		if !ok && len(offset) > 0 {
			return fmt.Errorf("jetstream source %s: the offset does not name partition %d, which subtask %d of %d reads (was the parallelism changed?): %w",
				s.cfg.Stream, l.part, s.cfg.Index, max(s.cfg.Parallelism, 1), ErrOffsetMismatch)
		}
		l.start = s.startAfter(seq)
		s.acc.setOffset(i, l.start-1)
	}
	return nil
}

// EndsAt reports whether the source, sought to offset, would read nothing
// more (host.BoundedSource): it is bounded, and every lane would start
// past StopSeq, as its final offset (every lane at StopSeq) says. An
// unbounded source, and an offset Seek would refuse, report false. It reads
// only the source's configuration: Poll may run meanwhile.
func (s *JetStream) EndsAt(offset []byte) bool {
	if !s.bounded() {
		return false
	}
	if s.cfg.Partitions == 0 {
		o, err := DecodeStreamOffset(offset)
		return err == nil && s.startAfter(o.Seq) > s.endAt.Load()
	}
	o, err := DecodePartitionOffsets(offset)
	if err != nil || s.fits(o) != nil {
		return false
	}
	for _, l := range s.lanes {
		seq, ok := o.Seqs[l.part]
		if (!ok && len(offset) > 0) || s.startAfter(seq) <= s.endAt.Load() {
			return false
		}
	}
	return true
}

// startAfter is where a lane whose offset is seq starts: after it, or at
// StartSeq when the offset covers nothing (0: nothing read yet, a
// checkpoint taken before the first batch). A source never reads below
// StartSeq, so no other offset lies below it.
func (s *JetStream) startAfter(seq uint64) uint64 {
	if seq == 0 {
		return max(s.cfg.StartSeq, 1)
	}
	return seq + 1
}

// bounded reports whether the source has a StopSeq.
func (s *JetStream) bounded() bool { return s.endAt.Load() != math.MaxUint64 }

func (s *JetStream) startLocked(ctx context.Context) error {
	// A lane that starts past the stop has nothing to read: it ended. A
	// source whose lanes all did asks the server nothing.
	for i, l := range s.lanes {
		if l.start > s.endAt.Load() {
			s.acc.end(i, s.endAt.Load())
		}
	}
	if s.acc.allEnded() {
		s.started = true
		return nil
	}
	// Every request here waits out an election of the stream's leader
	// (throughElection): a new attempt deployed while the stream elects
	// one would fail at once, and fail the job over a second time.
	var st jetstream.Stream
	err := s.throughElection(ctx, func(ctx context.Context) (err error) {
		st, err = s.js.Stream(ctx, s.cfg.Stream)
		return err
	})
	if err != nil {
		return fmt.Errorf("jetstream source %s: %w", s.cfg.Stream, err)
	}
	s.created = st.CachedInfo().Created
	var first, last uint64
	for i, l := range s.lanes {
		if _, ended := s.acc.state(i); ended {
			continue
		}
		// covered is the highest sequence the offset says was read: the
		// lane's, or an old subtask's before a rescale.
		covered := max(l.start-1, s.rescaledTo)
		if covered == 0 {
			continue
		}
		if first == 0 {
			err := s.throughElection(ctx, func(ctx context.Context) error {
				info, err := st.Info(ctx)
				if err != nil {
					return err
				}
				if c := info.Cluster; c != nil && c.Leader == "" {
					// A replica answers while the stream has none, with
					// the messages it has applied so far: its last
					// sequence may be below the offset, which a
					// stream's leader would refuse as ErrOffsetAhead.
					return fmt.Errorf("stream info from a replica: %w", natsconn.ErrNoLeader)
				}
				first, last = max(info.State.FirstSeq, 1), info.State.LastSeq
				return nil
			})
			if err != nil {
				return fmt.Errorf("jetstream source %s: stream info: %w", s.cfg.Stream, err)
			}
		}
		// An offset is never past the stream's last sequence (a quiet
		// lane's moves up to it, no further): a stream that ends before
		// it is not the stream the checkpoint read.
		if covered > last {
			return fmt.Errorf("jetstream source %s: resume after sequence %d, but the stream's last sequence is %d (was it deleted and created again, or did it lose messages?): %w", s.cfg.Stream, covered, last, ErrOffsetAhead)
		}
		// Messages from start on must still be there: a stream whose
		// retention (limits, age, purge) dropped some of them lost data this
		// job has not processed. (With filters the dropped ones may all have
		// been filtered out; the check cannot tell, and refuses.)
		if l.start > 1 && first > l.start {
			return fmt.Errorf("jetstream source %s: resume at sequence %d, stream starts at %d (what it held before was purged, or dropped by its limits while the job was behind; to accept the loss, submit the job again, under another name or after weir job rm, with start: %d on this source): %w",
				s.cfg.Stream, l.start, first, first, ErrOffsetGone)
		}
	}
	running := 0 // lanes whose consumers started
	for i, l := range s.lanes {
		if _, ended := s.acc.state(i); ended {
			continue
		}
		// One name for every try: a try that timed out may have created
		// the consumer, which the next one then takes over rather than
		// leaving it behind until it expires.
		prefix := nuid.Next()
		var rd *orderedReader
		err := s.throughElection(ctx, func(ctx context.Context) (err error) {
			// A task canceled as its source starts (its attempt failed
			// over, or was canceled) would cancel the request but not the
			// creation, and leave the consumer on the server until its
			// inactivity threshold: the request awaits its answer (within
			// the try's deadline), so that stopLocked deletes what it
			// created.
			dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadlineOf(ctx))
			defer cancel()
			r, err := newOrderedReader(dctx, s.js, s.cfg.Stream, l.filters, l.start, prefix)
			if err == nil {
				rd = r
			}
			return errors.Join(err, ctx.Err())
		})
		l.rd, l.stopped = rd, new(atomic.Bool)
		if err != nil && rd == nil {
			// No answer within the try: the server may have created it
			// all the same, under the reader's first name.
			l.tried = prefix + "_1"
		}
		if err == nil {
			err = rd.Start(s.cfg.PullMaxMessages, s.laneBytes())
			if info := rd.CachedInfo(); err == nil && info != nil {
				// What the consumer had to deliver when it was created:
				// known before its first message (pending counts it from
				// then on), so that a lane with nothing to read says so.
				l.pending.CompareAndSwap(0, info.NumPending+1)
				// A lane that resumes expects l.start first; one from the
				// stream's beginning whatever the stream held first when
				// the consumer started (the server starts it there).
				read := l.start - 1
				if l.start <= 1 {
					read = info.Delivered.Stream
				}
				l.readTo.Store(read)
				l.readPending.Store(info.NumPending)
			}
		}
		if err != nil {
			err = fmt.Errorf("jetstream source %s: ordered consumer at %d: %w", s.cfg.Stream, l.start, err)
			if running > 0 {
				// The lanes started before this one delivered into the
				// batch already: a retried start would read their messages
				// again. The source is done; a new one resumes from the
				// checkpoint.
				s.startErr = fmt.Errorf("%w (the source stopped; create a new one to resume)", err)
			}
			s.stopLocked()
			return err
		}
		s.wg.Add(1)
		running++
		go s.run(i, l.rd, l.stopped)
	}
	s.started = true
	// A bounded source's lanes, filtered or not, are watched for their
	// end; otherwise filtered ones only, for their idle offsets; and all
	// for a consumer that stalled.
	s.stream = st
	for _, l := range s.lanes {
		if len(l.filters) > 0 || s.bounded() || s.cfg.StallTimeout > 0 {
			s.watchLocked()
			break
		}
	}
	return nil
}

// DefaultPullMaxBytes is what a source's pull requests ask for at once
// by default (JetStreamConfig.PullMaxBytes). The server queues what a
// request asks for to the connection at once, and cuts a connection
// whose queue passes its max_pending (64 MiB by default) as a slow
// consumer: requests of 4096 messages alone asked for 400 MB of 100 KB
// records, and the connection of a worker reading them was cut every
// few seconds. A worker's connection carries the requests of all of its
// source subtasks, its sinks and channels, so one source asks for far
// less than the limit; 8 MiB is still 80 records of 100 KB a request,
// and as many records of 2 KiB as PullMaxMessages.
const DefaultPullMaxBytes = 8 << 20

// laneBytes is what each lane's pull requests ask for at most: its share
// of PullMaxBytes (PullBytes).
func (s *JetStream) laneBytes() int {
	return PullBytes(s.js.Conn(), s.cfg.PullMaxBytes/max(len(s.lanes), 1))
}

// PullBytes is what one pull request of a consumer on nc asks for at
// most (jetstream.PullMaxMessagesWithBytesLimit), for a consumer that
// should not ask for more than most: most, but room for two of the
// largest messages nc's server takes, as a request smaller than one
// message would never get it. Any consumer of a stream of large
// messages on a worker's connection — or, with weir run's embedded
// server, on the connection its coordinator and worker share — needs
// such a bound (see DefaultPullMaxBytes).
func PullBytes(nc *nats.Conn, most int) int {
	return max(most, 2*(int(nc.MaxPayload())+4<<10))
}

// watchLocked starts watchIdle, once. The caller holds mu.
func (s *JetStream) watchLocked() {
	if s.watching || s.stream == nil {
		return
	}
	s.watching = true
	s.idleDone.Add(1)
	go s.watchIdle(s.stream)
}

// DrainHold holds the source for a drain (weir job stop -drain) and
// returns the highest stream sequence it has covered: its lanes take in
// nothing more, and no offset moves, until DrainTo. Batches gathered
// already are still returned by Poll, so a task that goes on polling
// processes up to its offsets and no further. Every subtask of a source
// is held, the highest sequence among them chosen, and each given it with
// DrainTo: they all end at that one sequence. It may be called again (the
// same answer) and after the source ended or closed.
func (s *JetStream) DrainHold() uint64 {
	var top uint64
	for _, off := range s.acc.hold() {
		top = max(top, off)
	}
	return top
}

// DrainTo bounds the source at stream sequence seq and lets it go on
// after DrainHold: it reads every message of its subjects (and its share,
// with Parallelism) up to seq, as a source with StopSeq seq does, and
// ends there (ErrEnded, with every lane's offset at seq). A lane already
// at seq ends at once. seq below what the source has covered (DrainHold)
// ends it where it is; a StopSeq below seq stays the stop. Called
// without DrainHold, what was read past seq in between stays read.
func (s *JetStream) DrainTo(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("jetstream source %s: drain to sequence %d: %w", s.cfg.Stream, seq, ErrClosed)
	}
	seq = min(seq, s.endAt.Load())
	s.endAt.Store(seq)
	s.nudgeBelow.Store(1)
	s.acc.release(seq)
	if !s.started || s.finished {
		return nil // startLocked ends the lanes at or past seq
	}
	for i, l := range s.lanes {
		if off, ended := s.acc.state(i); !ended && off >= seq && l.rd != nil {
			s.endLane(i)
		}
	}
	select {
	case <-s.boundNow:
	default:
		close(s.boundNow)
	}
	s.watchLocked()
	return nil
}

// watchIdle moves the offset of every filtered lane that delivered nothing
// for an IdleCheck up to the stream's last sequence, when the stream
// confirms nothing of the lane's is left: the stream's last sequence L is
// read first, then the next message of each of the lane's filters after
// its offset; if none is stored up to L, every message of the lane's
// subjects up to L has been read (a message delivered but not yet taken is
// still stored, and moves the offset itself, which the move then skips),
// so the offset can be L. (The consumer's state cannot tell: a filtered
// consumer's delivered sequence moves past messages it scanned without a
// match, so one that started behind other subjects' messages never looks
// caught up.)
//
// In a bounded source it also ends the lanes that read everything up to
// the stop (checkEnds), every lane, filtered or not: at once when a
// delivery said nothing follows it (onMsg nudges), at most every
// endCheckMin, and otherwise every endCheckMin to endCheckMax (backing off
// while nothing happens), or up to endWaitMax while the stream has not
// reached the stop (a job may wait hours for a stop ahead of the stream;
// a lane that reads the message at the stop ends without a check). It
// returns once every lane ended.
//
// With a StallTimeout it also fails the source when a lane's consumer
// stalled (watchStalls), and returns.
func (s *JetStream) watchIdle(st jetstream.Stream) {
	defer s.idleDone.Done()
	t := time.NewTicker(s.cfg.IdleCheck)
	defer t.Stop()
	var stallC <-chan time.Time
	if s.cfg.StallTimeout > 0 {
		stallT := time.NewTicker(max(s.cfg.StallTimeout/4, time.Millisecond))
		defer stallT.Stop()
		stallC = stallT.C
	}
	seen := make([]uint64, len(s.lanes))
	for i := range s.lanes {
		seen[i] = s.acc.offset(i)
	}
	var endC <-chan time.Time
	var nudge <-chan struct{}
	var endT *time.Timer
	var lastCheck time.Time
	reached := false // the stream's last sequence was at the stop
	wait := endCheckMin
	endSeen := make([]uint64, len(s.lanes))
	boundNow := s.boundNow
	if s.bounded() {
		endT = time.NewTimer(0) // first check at once
		endC, nudge, boundNow = endT.C, s.nudge, nil
	}
	defer func() {
		if endT != nil {
			endT.Stop()
		}
	}()
	for {
		select {
		case <-s.stopIdle:
			return
		case <-boundNow:
			// A drain bounded the source (DrainTo): its lanes end as a
			// bounded source's do.
			boundNow = nil
			endT = time.NewTimer(0)
			endC, nudge = endT.C, s.nudge
			continue
		case <-stallC:
			if s.watchStalls(st) {
				return
			}
			continue
		case <-t.C:
			for i, l := range s.lanes {
				if s.ctx.Err() != nil {
					return // closed
				}
				off, ended := s.acc.state(i)
				if ended || l.endReq.Load() || len(l.filters) == 0 || off != seen[i] {
					seen[i] = off
					continue
				}
				s.catchUp(st, i, l, off)
				seen[i] = s.acc.offset(i)
			}
			continue
		case <-nudge:
			// Checked at once, unless the last check was just now: a lane
			// that follows the stream's tail is nudged by every message.
			wait = endCheckMin
			if d := time.Since(lastCheck); d < endCheckMin {
				endT.Reset(endCheckMin - d)
				continue
			}
		case <-endC:
			limit := endCheckMax
			if !reached {
				limit = endWaitMax
			}
			wait = min(2*wait, limit)
		}
		if s.ctx.Err() != nil {
			return // closed
		}
		reached = s.checkEnds(st, endSeen)
		lastCheck = time.Now()
		if s.acc.allEnded() {
			return
		}
		endT.Reset(wait)
	}
}

// watchStalls looks at every lane whose reader waits on its consumer and
// got nothing since the last look: if the stream holds a message of the
// lane's after its offset (up to the stop), the lane is suspected from
// then on; still waiting with nothing delivered StallTimeout later, and
// the message (or a later one) still there, the consumer stalled, and the
// source fails with ErrStalled. A delivery clears the suspicion. It
// reports whether the source failed. (A reader that is not waiting, but
// held up handing a message on, is not stalled: its consumer waits for
// it.)
func (s *JetStream) watchStalls(st jetstream.Stream) bool {
	info, err := s.streamGone(st)
	if err != nil {
		s.acc.fail(err)
		return true
	}
	for i, l := range s.lanes {
		if s.ctx.Err() != nil {
			return true // closed
		}
		d := l.delivered.Load()
		off, ended := s.acc.state(i)
		if ended || l.endReq.Load() || !l.waiting.Load() || d != l.watchDelivered {
			l.watchDelivered, l.suspectAt = d, time.Time{}
			continue
		}
		// Quiet since the last look: did the stream drop what it had for
		// the lane, and how much does it hold for it now?
		if err := s.checkQuiet(st, info, l, d); err != nil {
			s.acc.fail(err)
			return true
		}
		s.refreshPending(l, d)
		if !l.suspectAt.IsZero() && time.Since(l.suspectAt) < s.cfg.StallTimeout {
			continue
		}
		seq, ok := s.nextFor(st, l, off)
		if !ok || l.delivered.Load() != d {
			l.suspectAt = time.Time{} // nothing left for it, or it moved
			continue
		}
		if l.suspectAt.IsZero() {
			l.suspectAt, l.suspectSeq = time.Now(), seq
			continue
		}
		where := ""
		if l.part >= 0 {
			where = fmt.Sprintf(" (partition %d)", l.part)
		}
		s.acc.fail(fmt.Errorf("jetstream source %s%s: %w: nothing delivered for %v while the stream holds message %d after sequence %d (the consumer lost with its server?)",
			s.cfg.Stream, where, ErrStalled, s.cfg.StallTimeout, l.suspectSeq, off))
		return true
	}
	return false
}

// streamGone returns the error of a stream that was deleted, or deleted
// and created again (its creation time is another), since the consumers
// started, and nil when it is the same one or the server could not say
// (an election, a slow server: the next look asks again). A consumer
// on a deleted stream delivers nothing and says nothing; recreated, it
// waits for a sequence the new stream may never reach.
// It returns the stream's info too, nil when the server could not say.
func (s *JetStream) streamGone(st jetstream.Stream) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	info, err := st.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("jetstream source %s: %w while the job read it: the job reads nothing more (its checkpoints' offsets are the deleted stream's)", s.cfg.Stream, ErrStreamGone)
	case err != nil:
		return nil, nil
	case s.created.IsZero():
		return info, nil
	case !info.Created.Equal(s.created):
		return nil, fmt.Errorf("jetstream source %s: the stream was deleted and created again while the job read it (created %s, was %s): its sequences start over, and the source's offset means nothing in it: %w",
			s.cfg.Stream, info.Created.Format(time.RFC3339Nano), s.created.Format(time.RFC3339Nano), ErrStreamGone)
	}
	return info, nil
}

// A lane's reader expects, after its latest delivery at readTo, the
// message at readTo+1; a filtered lane, or one over interior deletes, gets
// a later one as a matter of course. Messages the lane had not read that
// the stream removed (a purge; its max-age, max-msgs or max-bytes limits
// while the job is behind: removal from the stream's front) show in two
// ways, which checkGap and checkQuiet look for:
//
//   - a delivery past readTo+1 (the consumer moved on to what the stream
//     holds now), while readTo's delivery said messages of the lane's
//     followed it (readPending > 0; none did, and the gap is messages
//     stored since, removed before they could be sent, or others'), and
//     the stream's first sequence is now past readTo+1. A lane that reads
//     the whole stream has nothing in between but messages it would have
//     read. A filtered lane's gap is mostly other subjects' messages,
//     which the stream may drop as it likes: it needs the server's count
//     to show that some of its own went too — fewer of its messages
//     pending after this delivery than were after readTo, less the one
//     delivered (messages stored meanwhile raise the count, and can hide
//     a removal from it);
//   - a reader that waits, and got nothing for a whole look of the
//     watcher (watchStalls), while its latest delivery said messages of
//     its followed, none of its subjects is stored after readTo any more,
//     and the stream's first sequence is past readTo+1: the stream dropped
//     them, and sends nothing more (after a purge of everything nothing
//     would come to show a gap).
//
// What the stream deleted one by one (nats stream rmm, a per-subject
// limit) leaves its first sequence where it was and is not taken for a
// loss — unless its first sequence passed the gap before the check, a
// window of one request.

// checkGap is lane l's reader's check of a delivery at seq, with pending
// after it, past readTo+1 (readPending after it): it returns
// ErrMessagesLost when messages the lane had not read were removed in
// between (see above), and nil when they were not or the stream could not
// say. Only a gap that may be a loss costs a request.
func (s *JetStream) checkGap(l *lane, readTo, readPending, seq, pending uint64) error {
	if readPending == 0 || (len(l.filters) > 0 && pending+1 >= readPending) {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	st, err := s.js.Stream(ctx, s.cfg.Stream) // its info, in one request
	if err != nil {
		return nil
	}
	info := st.CachedInfo()
	return s.lost(l, info, readTo, min(info.State.FirstSeq, seq)-1)
}

// checkQuiet is the watcher's check of lane l, whose reader waits and got
// nothing (d deliveries) since the last look, against info, the stream's
// state read at the start of this look: it returns ErrMessagesLost when
// the messages of the lane's that followed its latest delivery were
// removed (see above).
func (s *JetStream) checkQuiet(st jetstream.Stream, info *jetstream.StreamInfo, l *lane, d uint64) error {
	readTo, readPending := l.readTo.Load(), l.readPending.Load()
	if info == nil || readPending == 0 || info.State.FirstSeq <= readTo+1 || !l.waiting.Load() || l.delivered.Load() != d {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	if !s.nothingLeft(ctx, st, l, readTo, math.MaxUint64) {
		return nil // still stored (the stall watch looks at that), or no answer
	}
	return s.lost(l, info, readTo, info.State.FirstSeq-1)
}

// lost returns ErrMessagesLost, in one line, for lane l, which read up to
// readTo while the stream (info) dropped what followed up to to (capped at
// the stop); nil when that is nothing.
func (s *JetStream) lost(l *lane, info *jetstream.StreamInfo, readTo, to uint64) error {
	to = min(to, s.endAt.Load())
	if to <= readTo {
		return nil
	}
	where := ""
	switch {
	case l.part >= 0:
		where = fmt.Sprintf(" (subtask %d of %d, partition %d)", s.cfg.Index, max(s.cfg.Parallelism, 1), l.part)
	case s.cfg.Parallelism > 1:
		where = fmt.Sprintf(" (subtask %d of %d)", s.cfg.Index, s.cfg.Parallelism)
	}
	what := fmt.Sprintf("messages %d..%d", readTo+1, to)
	if len(l.filters) > 0 {
		what = fmt.Sprintf("messages of %s among %d..%d", strings.Join(l.filters, " "), readTo+1, to)
	}
	first := info.State.FirstSeq
	cause, fix := removalCause(s.cfg.Stream, info.Config)
	return fmt.Errorf("jetstream source %s%s: %s were removed from the stream before the source read them (it had read up to %d, the stream starts at %d now): %s; %s, or accept the loss: submit the job again (under another name, or after weir job rm) with start: %d on this source, as a restore resumes at %d and is refused: %w",
		s.cfg.Stream, where, what, readTo, first, cause, fix, first, readTo+1, ErrMessagesLost)
}

// removalCause says what likely removed messages from the front of a
// stream configured as cfg, and what keeps it from happening again.
func removalCause(stream string, cfg jetstream.StreamConfig) (cause, fix string) {
	var limits, flags []string
	if cfg.Discard != jetstream.DiscardNew {
		if cfg.MaxAge > 0 {
			limits, flags = append(limits, "max-age "+cfg.MaxAge.String()), append(flags, "-max-age D")
		}
		if cfg.MaxMsgs > 0 {
			limits, flags = append(limits, fmt.Sprintf("max-msgs %d", cfg.MaxMsgs)), append(flags, "-max-msgs N")
		}
		if cfg.MaxBytes > 0 {
			limits, flags = append(limits, fmt.Sprintf("max-bytes %d", cfg.MaxBytes)), append(flags, "-max-bytes SIZE")
		}
	}
	if len(limits) == 0 {
		return "purged (no limit of the stream drops messages)", "purge a stream only once the jobs reading it are past what it holds"
	}
	return fmt.Sprintf("purged, or dropped by the stream's limits (%s) while the job was behind", strings.Join(limits, ", ")),
		fmt.Sprintf("raise them (weir stream edit %s %s) or make the job keep up", stream, strings.Join(flags, " "))
}

// refreshPending sets lane l's pending count from its consumer's info,
// when its reader waits and got nothing (d deliveries) since the last
// look: the count of the latest delivery goes stale when the stream drops
// messages and nothing comes after (a purge). Errors leave it.
func (s *JetStream) refreshPending(l *lane, d uint64) {
	old := l.pending.Load()
	if old <= 1 || l.rd == nil {
		return // nothing pending: a message stored now is sent at once
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	ci, err := l.rd.Info(ctx)
	if err != nil || !l.waiting.Load() || l.delivered.Load() != d {
		return
	}
	l.pending.CompareAndSwap(old, ci.NumPending+1)
}

// nextFor returns the sequence of the stream's first message of lane l's
// subjects after off, up to the stop; ok is false when there is none or
// the stream could not tell.
func (s *JetStream) nextFor(st jetstream.Stream, l *lane, off uint64) (seq uint64, ok bool) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	filters := l.filters
	if len(filters) == 0 {
		filters = []string{">"}
	}
	for _, f := range filters {
		m, err := st.GetMsg(ctx, off+1, jetstream.WithGetMsgSubject(f))
		if err != nil {
			continue
		}
		if m.Sequence <= s.endAt.Load() && (!ok || m.Sequence < seq) {
			seq, ok = m.Sequence, true
		}
	}
	return seq, ok
}

// Bounds of how often a bounded source checks whether its lanes ended
// (watchIdle): a check costs a stream info request and, once the stream
// reached the stop, a message lookup per filter of each lane that may
// have ended; endWaitMax bounds it instead while the stream has not
// reached the stop. endCheckTimeout bounds the requests of one check.
const (
	endCheckMin     = 50 * time.Millisecond
	endCheckMax     = 200 * time.Millisecond
	endWaitMax      = time.Second
	endCheckTimeout = 5 * time.Second
)

// checkEnds ends the lanes of a bounded source that read everything up to
// the stop: once the stream's last sequence, read first, is at or past the
// stop, a lane whose subjects have no message stored after its offset up
// to the stop has read them all. (The consumer's state cannot tell: its
// delivered sequence moves past messages it scanned without a match.) A
// message the server sent the lane but the reader did not take yet is
// still stored, unless deleted since; either way the reader takes it
// before it ends the lane (requestEnd). It asks only about lanes that may
// be done: whose latest delivery said nothing follows, that delivered
// nothing yet, or whose offset did not move since the last check (seen).
// It reports whether the stream reached the stop (true also when its
// state could not be read: the next check then comes soon).
func (s *JetStream) checkEnds(st jetstream.Stream, seen []uint64) bool {
	ctx, cancel := context.WithTimeout(s.ctx, endCheckTimeout)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		return true // the next check asks again
	}
	if info.State.LastSeq < s.endAt.Load() {
		s.streamLast.Store(info.State.LastSeq + 1)
		return false
	}
	s.streamLast.Store(0)
	for i, l := range s.lanes {
		off, ended := s.acc.state(i)
		if ended {
			continue
		}
		if l.endReq.Load() {
			// Asked to end and did not: its reader may wait on an
			// iterator that missed the stop (see stopLocked); deleting
			// the consumer wakes it.
			if !l.kicked && time.Since(l.endReqAt) > stopGrace {
				l.kicked = true
				_ = s.js.DeleteConsumer(ctx, s.cfg.Stream, l.rd.Name())
			}
			continue
		}
		if l.pending.Load() > 1 && off != seen[i] {
			seen[i] = off // busy: more is coming
			continue
		}
		seen[i] = off
		if s.nothingLeft(ctx, st, l, off, s.endAt.Load()) {
			s.requestEnd(l)
		}
	}
	return true
}

// nothingLeft reports whether the stream stores no message of lane l's
// subjects after off up to upTo.
func (s *JetStream) nothingLeft(ctx context.Context, st jetstream.Stream, l *lane, off, upTo uint64) bool {
	filters := l.filters
	if len(filters) == 0 {
		filters = []string{">"}
	}
	for _, f := range filters {
		m, err := st.GetMsg(ctx, off+1, jetstream.WithGetMsgSubject(f))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil || m.Sequence <= upTo:
			return false
		}
	}
	return true
}

// requestEnd asks lane l's reader to end the lane: it stops the iterator,
// and the reader, once its Next returns, ends the lane (run). No message
// the reader takes comes after the lane's end.
func (s *JetStream) requestEnd(l *lane) {
	l.endReqAt = time.Now()
	l.endReq.Store(true)
	l.stopped.Store(true)
	l.rd.Stop()
}

// catchUp advances lane i from offset off to the stream's last sequence if
// nothing of the lane's is stored in between (see watchIdle); in a bounded
// source up to the stop at most, where the lane ends. Errors leave it
// where it is.
func (s *JetStream) catchUp(st jetstream.Stream, i int, l *lane, off uint64) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.IdleCheckTimeout)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		return
	}
	last := info.State.LastSeq
	if last <= off || !s.nothingLeft(ctx, st, l, off, last) {
		return
	}
	if last >= s.endAt.Load() {
		s.requestEnd(l)
		return
	}
	s.acc.advance(i, off, last)
}

// endLane ends lane i of a bounded source, which read everything up to the
// stop, with its offset at the stop, and stops its iterator; only the
// lane's reader calls it, and returns. Poll deletes the consumers once
// every lane ended.
func (s *JetStream) endLane(i int) {
	s.acc.end(i, s.endAt.Load())
	if l := s.lanes[i]; l.rd != nil {
		l.stopped.Store(true)
		l.rd.Stop()
	}
}

// run moves messages from lane's iterator into the accumulator, in order,
// from one goroutine; it ends when the iterator is stopped.
func (s *JetStream) run(lane int, rd *orderedReader, stopped *atomic.Bool) {
	defer s.wg.Done()
	l := s.lanes[lane]
	for {
		l.waiting.Store(true)
		m, a, err := rd.Next()
		l.waiting.Store(false)
		if err != nil {
			switch {
			case s.lanes[lane].endReq.Load():
				// The watcher found nothing left up to the stop
				// (requestEnd) and stopped the iterator.
				s.acc.end(lane, s.endAt.Load())
			case !errors.Is(err, jetstream.ErrMsgIteratorClosed):
				s.acc.fail(fmt.Errorf("jetstream source %s: %w", s.cfg.Stream, err))
			case !stopped.Load():
				// Not stopped by stopLocked: the client ended the
				// iteration itself, as it does when the connection
				// closed for good. Nothing more will come.
				if nc := s.js.Conn(); nc != nil && nc.IsClosed() {
					err = nats.ErrConnectionClosed
				}
				s.acc.fail(fmt.Errorf("jetstream source %s: the consumer stopped: %w", s.cfg.Stream, err))
			}
			return
		}
		l.delivered.Add(1)
		if !s.onMsg(lane, m, a) {
			return
		}
	}
}

func (s *JetStream) onMsg(lane int, m *nats.Msg, a ackInfo) bool {
	seq, tsNanos, pending, consumer := a.seq, a.ts, a.pending, a.consumer
	s.lanes[lane].pending.Store(pending + 1)
	if l := s.lanes[lane]; consumer != l.consumer {
		// The ordered consumer recreated itself (server restart, missed
		// heartbeats, consumer deleted) after the last message it
		// delivered. On a stream that was deleted and created again
		// meanwhile, that sequence means nothing: the new stream's
		// messages before it would be skipped unseen.
		if l.consumer != "" {
			if err := s.sameStream(seq); err != nil {
				s.acc.fail(err)
				return false
			}
		}
		l.consumer = consumer
	}
	// A message past the one after the lane's last: the ones between may
	// have been removed unread (checkGap).
	if l := s.lanes[lane]; seq > l.readTo.Load()+1 {
		if err := s.checkGap(l, l.readTo.Load(), l.readPending.Load(), seq, pending); err != nil {
			s.acc.fail(err)
			return false
		}
	}
	s.lanes[lane].readTo.Store(seq)
	s.lanes[lane].readPending.Store(pending)
	// The one compare an unbounded source pays (endAt is MaxUint64,
	// nudgeBelow 0).
	end := false
	endAt := s.endAt.Load()
	if seq >= endAt || pending < s.nudgeBelow.Load() {
		if seq > endAt {
			// Everything of the lane's subjects up to the stop was
			// delivered before this: the lane ended, without it.
			s.endLane(lane)
			return false
		}
		end = seq == endAt
		if !end {
			// Nothing follows it for now: maybe nothing up to the stop.
			select {
			case s.nudge <- struct{}{}:
			default:
			}
		}
	}
	if s.cfg.Partitions == 0 && ((s.cfg.Parallelism > 1 && PartitionOf(m.Subject, s.cfg.Parallelism) != s.cfg.Index) ||
		(seq <= s.rescaledTo && (StreamOffset{Rescaled: s.rescaled}).processed(seq, m.Subject))) {
		if !s.acc.skip(lane, seq) {
			return false // closed, or past a drain's stop: the lane ended
		}
		if end || seq == s.endAt.Load() {
			s.endLane(lane)
			return false
		}
		return true
	}
	// As in Core.onMsg, the conversions copy nothing.
	var key []byte
	ts := int64(tsNanos / 1e6) // the time the stream stored it
	if s.cfg.Key == KeyFromSubject {
		key = []byte(m.Subject)
	}
	if h := m.Header; h != nil {
		if k := h.Get(KeyHeader); k != "" && s.cfg.Key != KeyFromSubject {
			key = []byte(k)
		}
		if t := headerTime(h); t != 0 {
			ts = t
		}
	}
	if !s.acc.add(lane, key, m.Data, ts, seq) {
		return false // closed, or past a drain's stop: the lane ended
	}
	// A drain may have bounded the source while add waited (DrainTo).
	if end || seq == s.endAt.Load() {
		s.endLane(lane)
		return false
	}
	return true
}

// Pending reports how many messages the stream holds that the source's
// consumers have not delivered yet: the count the server gave with each
// consumer's latest delivery (num_pending: messages after it that match
// the consumer's filter), summed; for a consumer whose reader waits and
// got nothing for a look of the stall watch (StallTimeout), the count its
// info gives then, which follows a purge or a drop by the stream's limits. Delivered messages that no Poll took yet
// (a few thousand at most) are not among them. ok is false until a
// consumer delivered. A subtask that reads the whole stream and keeps its
// share by subject hash counts every subtask's messages.
//
// A bounded source (StopSeq) counts what it will still read: a lane that
// ended has nothing pending (known, even if it never delivered), and one
// still reading at most StopSeq minus its offset (the server's count takes
// in messages past the stop, the cap leaves most of them out). An ended
// source reports 0.
func (s *JetStream) Pending() (n uint64, ok bool) {
	return s.pending(s.acc.state)
}

// pending is Pending, reading a lane's offset and whether it ended with
// state.
func (s *JetStream) pending(state func(lane int) (uint64, bool)) (n uint64, ok bool) {
	endAt := s.endAt.Load()
	bounded := endAt != math.MaxUint64
	for i, l := range s.lanes {
		var off uint64
		if bounded {
			var ended bool
			if off, ended = state(i); ended {
				ok = true
				continue
			}
		}
		if p := l.pending.Load(); p > 0 {
			p--
			if bounded {
				p = min(p, endAt-min(off, endAt))
			}
			n, ok = n+p, true
		}
	}
	return n, ok
}

// Unread reports how many messages of its input a task of the source
// whose offset is offset (what Poll returned with the last batch the task
// processed) has not processed yet: those the source's consumers have
// not delivered (Pending), and those they delivered that the task has
// not processed — gathered for the next Poll, or polled and not yet
// processed (the task processes one batch while its poller holds the
// next). Pending alone read 0 while the source held a few batches of
// fetched records that the task had not taken; this counts them as well.
// A message whose delivery waits for room in the next batch is not
// counted (one per lane at most). ok is false until a consumer
// started (its creation says what it has to deliver) or delivered. It
// may be called while Poll runs: both parts are read under
// the accumulator's lock, which a delivered message takes to join the
// next batch, so that none moving meanwhile is counted twice (read one
// after the other, a burst of deliveries between the reads was).
func (s *JetStream) Unread(offset []byte) (n uint64, ok bool) {
	processed := s.laneOffsets(offset)
	var held int
	s.acc.locked(func() {
		n, ok = s.pending(s.acc.stateLocked)
		held = s.acc.unprocessedLocked(processed)
	})
	if !ok {
		return 0, false
	}
	return n + uint64(held), true
}

// laneOffsets returns each lane's offset in offset (a task's, as Poll
// returned it), nil for none or one the source cannot read.
func (s *JetStream) laneOffsets(offset []byte) []uint64 {
	if len(offset) == 0 {
		return nil
	}
	if s.cfg.Partitions == 0 {
		o, err := DecodeStreamOffset(offset)
		if err != nil {
			return nil
		}
		return []uint64{o.Seq}
	}
	o, err := DecodePartitionOffsets(offset)
	if err != nil {
		return nil
	}
	offs := make([]uint64, len(s.lanes))
	for i, l := range s.lanes {
		offs[i] = o.Seqs[l.part]
	}
	return offs
}

// ReadThrough reports the stream sequence up to which a task of the
// source whose offset is offset (what Poll returned with the last batch
// the task processed) has read every message of its input: the lowest of
// its lanes' offsets. A lane's offset is the last message it covered; a
// filtered lane's (a partition's) also moves up to the stream's last
// sequence once nothing of its subjects is left there (IdleCheck), so
// every lane reaches the stream's end. ok is false for an offset the
// source cannot read. It reads only the source's configuration: Poll may
// run meanwhile.
func (s *JetStream) ReadThrough(offset []byte) (seq uint64, ok bool) {
	if s.cfg.Partitions == 0 {
		o, err := DecodeStreamOffset(offset)
		return o.Seq, err == nil
	}
	o, err := DecodePartitionOffsets(offset)
	if err != nil {
		return 0, false
	}
	for i, l := range s.lanes {
		if p := o.Seqs[l.part]; i == 0 || p < seq {
			seq = p
		}
	}
	return seq, true
}

// CoveredThrough reports the highest stream sequence a task of the source
// whose offset is offset has covered: its lanes' highest offset (a
// source without partitions has one lane: ReadThrough). It is what
// DrainHold answers for a source held at that offset: a drain that
// restores the offsets of every subtask and ends each at the highest of
// their sequences (DrainTo) has them read on to it, none of them past it.
// ok is false for an offset the source cannot read. It reads only the
// source's configuration: Poll may run meanwhile.
func (s *JetStream) CoveredThrough(offset []byte) (seq uint64, ok bool) {
	if s.cfg.Partitions == 0 {
		return s.ReadThrough(offset)
	}
	o, err := DecodePartitionOffsets(offset)
	if err != nil {
		return 0, false
	}
	for _, l := range s.lanes {
		seq = max(seq, o.Seqs[l.part])
	}
	return seq, true
}

// AwaitsStop reports whether a bounded source waits for its stream to
// reach its stop: its latest check (at most a second ago, see StopSeq)
// read the stream's last sequence, last, below StopSeq, and some lane has
// not ended. An unbounded source, one whose stream reached the stop, and
// one that has not checked yet report false.
func (s *JetStream) AwaitsStop() (stop, last uint64, ok bool) {
	l := s.streamLast.Load()
	if !s.bounded() || l == 0 || s.acc.allEnded() {
		return 0, 0, false
	}
	return s.endAt.Load(), l - 1, true
}

// sameStream checks that the stream is the one the consumers started on,
// before a recreated consumer's first message (at seq) is taken.
// The consumer recreated itself after its server went, say, and its
// stream may be electing a leader still: the request waits that out
// (throughElection).
func (s *JetStream) sameStream(seq uint64) error {
	var st jetstream.Stream
	err := s.throughElection(s.ctx, func(ctx context.Context) (err error) {
		st, err = s.js.Stream(ctx, s.cfg.Stream)
		return err
	})
	if err != nil {
		return fmt.Errorf("jetstream source %s: stream info after the consumer was recreated: %w", s.cfg.Stream, err)
	}
	if c := st.CachedInfo().Created; !c.Equal(s.created) {
		return fmt.Errorf("jetstream source %s: the stream was deleted and created again while it was read (created %s, was %s): its messages before sequence %d would be skipped: %w",
			s.cfg.Stream, c.Format(time.RFC3339Nano), s.created.Format(time.RFC3339Nano), seq, ErrOffsetAhead)
	}
	return nil
}

// throughElection runs try, a request about the stream, again while the
// stream has no leader (natsconn.ThroughElection): within ctx's deadline
// or, without one, natsconn.ElectionWait, and no longer than the source
// is open (Close ends the wait).
func (s *JetStream) throughElection(ctx context.Context, try func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	return natsconn.ThroughElection(ctx, s.js.Conn(), natsconn.ElectionTry, try)
}

// Poll starts the consumers on first use, then returns every message that
// arrived since the last Poll (up to the batch limits) as one record batch
// and the offset after it. The start's requests (the stream's info, each
// consumer's creation) are made again while the stream, or JetStream's
// meta layer, has no leader (natsconn.ThroughElection), within ctx's
// deadline or, without one, natsconn.ElectionWait; a stream that does not
// exist fails it at once. A bounded source whose lanes all ended returns
// what it still holds, then no batch, its final offset and ErrEnded on this
// and every later call, having stopped and deleted its consumers.
func (s *JetStream) Poll(ctx context.Context) ([]byte, []byte, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if s.startErr != nil {
		s.mu.Unlock()
		return nil, nil, s.startErr
	}
	if !s.started {
		if err := s.startLocked(ctx); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
	}
	s.mu.Unlock()
	b, last, err := s.acc.take(ctx)
	if err == ErrEnded {
		s.finish()
		return nil, s.encodeOffset(last), ErrEnded
	}
	if err != nil {
		return nil, nil, err
	}
	return b, s.encodeOffset(last), nil
}

// encodeOffset encodes the lanes' offsets last as the source's offset.
func (s *JetStream) encodeOffset(last []uint64) []byte {
	if s.cfg.Partitions == 0 {
		if last[0] >= s.rescaledTo {
			return EncodeOffset(last[0])
		}
		return EncodeStreamOffset(StreamOffset{Seq: last[0], Rescaled: s.rescaled}.pending())
	}
	o := PartitionOffsets{Partitions: s.cfg.Partitions, Filter: s.cfg.PartitionFilter, Seqs: make(map[int]uint64, len(s.lanes))}
	for i, l := range s.lanes {
		o.Seqs[l.part] = last[i]
	}
	return EncodePartitionOffsets(o)
}

// finish releases what a bounded source whose lanes all ended still holds,
// once: its watcher, and its consumers, on the server too. Close does the
// rest.
func (s *JetStream) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.finished {
		return
	}
	s.finished = true
	s.cancel() // ends the watcher's requests
	close(s.stopIdle)
	s.idleDone.Wait()
	s.finishErr = s.stopLocked()
}

// LimitBatch bounds the records of the batches Poll returns from now on
// (n <= 0: MaxBatchRecords), for a task whose operator is slow per record
// (host.BatchLimiter). Messages wait in the consumer meanwhile.
func (s *JetStream) LimitBatch(n int) { s.acc.setLimit(n) }

// CheckpointComplete does nothing: the ordered consumer acknowledges
// nothing, and the stream's own retention decides what to keep.
func (s *JetStream) CheckpointComplete(ctx context.Context, id int64, offset []byte) error {
	return nil
}

// Close stops the consumers and deletes them on the server (not when the
// connection is down); a blocked Poll returns.
func (s *JetStream) Close() error {
	// Ends a start that waits out an election of the stream's leader
	// (holding mu) first.
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.acc.close()
	if s.finished {
		return s.finishErr // stopped when the source ended
	}
	close(s.stopIdle)
	s.idleDone.Wait()
	return s.stopLocked()
}

// stopLocked stops every consumer started, waits for their readers and
// deletes the consumers on the server.
func (s *JetStream) stopLocked() error {
	for _, l := range s.lanes {
		if l.rd != nil {
			l.stopped.Store(true)
			l.rd.Stop()
		}
	}
	if s.waitRun(stopGrace) {
		// Stopping an ordered consumer's iterator leaves the consumer on
		// the server until its inactivity threshold (five minutes): those
		// of canceled and failed-over attempts would count against the
		// stream's and the account's consumer limits. A server that is
		// down is not waited for: it lets them expire.
		if nc := s.js.Conn(); nc != nil && nc.IsConnected() {
			s.deleteConsumers()
		}
		return nil
	}
	// A reader that did not end within the grace is held up elsewhere
	// (a request to a server that went away, in a recreation of its
	// consumer): deleting the consumers, best effort, leaves nothing
	// behind when it ends.
	s.deleteConsumers()
	if !s.waitRun(closeTimeout) {
		return fmt.Errorf("jetstream source %s: the consumers did not stop within %s", s.cfg.Stream, stopGrace+closeTimeout)
	}
	return nil
}

// deadlineOf is ctx's deadline, or, without one, natsconn.ElectionTry
// from now.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(natsconn.ElectionTry)
}

// deleteConsumers deletes the lanes' consumers on the server, best
// effort, within stopGrace.
func (s *JetStream) deleteConsumers() {
	dctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	for _, l := range s.lanes {
		if l.tried != "" {
			_ = s.js.DeleteConsumer(dctx, s.cfg.Stream, l.tried)
			l.tried = ""
		}
		if l.rd != nil {
			_ = s.js.DeleteConsumer(dctx, s.cfg.Stream, l.rd.Name())
		}
	}
}

// stopGrace is how long Close waits for the reader after stopping the
// iterator before it deletes the consumer; closeTimeout how long it waits
// after that before it gives up (leaving the reader goroutine behind).
const (
	stopGrace    = time.Second
	closeTimeout = 10 * time.Second
)

// waitRun waits up to d for the reader goroutine to end.
func (s *JetStream) waitRun(d time.Duration) bool {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// parseAck reads a JetStream delivery's reply subject without
// allocating:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
//	$JS.ACK.<domain>.<acchash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<random>
func parseAck(reply string) (a ackInfo, ok bool) {
	var starts [13]int
	n := 0
	starts[0] = 0
	n = 1
	for i := 0; i < len(reply); i++ {
		if reply[i] == '.' {
			if n == len(starts) {
				return ackInfo{}, false
			}
			starts[n] = i + 1
			n++
		}
	}
	tok := func(i int) string {
		end := len(reply)
		if i+1 < n {
			end = starts[i+1] - 1
		}
		return reply[starts[i]:end]
	}
	if n < 9 || tok(0) != "$JS" || tok(1) != "ACK" {
		return ackInfo{}, false
	}
	base := 2
	if n >= 12 {
		base = 4
	} else if n != 9 {
		return ackInfo{}, false
	}
	seq, okS := parseUint(tok(base + 3))
	cseq, okC := parseUint(tok(base + 4))
	ts, okT := parseUint(tok(base + 5))
	pending, okP := parseUint(tok(base + 6))
	if !okS || !okC || !okT || !okP {
		return ackInfo{}, false
	}
	return ackInfo{consumer: tok(base + 1), seq: seq, cseq: cseq, ts: ts, pending: pending}, true
}

func parseUint(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false // overflows uint64
		}
		v = v*10 + d
	}
	return v, true
}
