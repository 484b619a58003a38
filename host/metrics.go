package host

import (
	"hash/fnv"
	"math"
	"time"
)

// CheckpointMetrics are one task's figures for one checkpoint.
type CheckpointMetrics struct {
	// AlignmentDuration runs from the first barrier seen to the snapshot.
	AlignmentDuration time.Duration
	// StartDelay runs from the trigger timestamp in the barrier to the first
	// barrier seen by this task.
	StartDelay time.Duration
	// BufferedBytes were held back from blocked channels during alignment;
	// SpilledBytes of them went to a temporary file.
	BufferedBytes, SpilledBytes int64
	// ChannelStateBytes is the in-flight data written with the snapshot
	// (input and output channel state).
	ChannelStateBytes int64
	// StateBytes is the size of the operator's state.
	StateBytes int64
	// SnapshotBytes is the size of the object written to storage.
	SnapshotBytes int64
	// SyncDuration is the time the task was busy snapshotting; AsyncDuration
	// the time writing to storage took in the background.
	SyncDuration, AsyncDuration time.Duration
	// Unaligned is true when the checkpoint ended unaligned (unaligned mode,
	// or aligned mode that timed out).
	Unaligned bool
	// KeyedState is true when the operator wrote its state in the keyed
	// layout (abi.KeyedStateMagic): it can be split by key on a rescale.
	KeyedState bool
	// EndedPorts are the input ports whose end the task handled (the
	// operator's EndOfInput ran, in this run or before the snapshot it
	// restored), as the snapshot records them: a bitmask made by
	// EndedPortsMask. Only a consistent snapshot records them (not under
	// at-least-once): 0 there, as for a task none of whose ports ended.
	EndedPorts int64
	// BoundedSource is true for a task whose source is a BoundedSource,
	// and SourceEnded then when the offset the snapshot recorded covers all
	// of the source's input (MetricSourceEnded, reported only for such
	// tasks).
	BoundedSource, SourceEnded bool
	// SourceDrained is true for a source task whose input EndInput ended
	// where it had read to (a drained job, MetricSourceDrained, reported
	// only when true): its source would read on from the offset, and a
	// restore that lets it is refused where a port downstream ended.
	SourceDrained bool
	// CommitReport is true for a task that reports, once the checkpoint
	// completed, when it handed the checkpoint's output to its sink's
	// commits (CommitListener; MetricCommitReport, reported only when
	// true).
	CommitReport bool
	// CommitWait is how long a sink task spent in its sink's Commit after
	// the checkpoint's trigger, before its barrier came: the barrier
	// waited behind the commits of earlier checkpoints (the sink takes no
	// input while it waits for room among its commits).
	CommitWait time.Duration
	// SourcePosition identifies a source task's offset in the snapshot
	// (SourcePosition of it; 0 for a source with no offset and for other
	// tasks, and then not reported): the same offset gives the same value.
	SourcePosition int64
	// SourceCaughtUp says a source task had processed everything its
	// source held when it snapshotted (UnreadCounter: 0 unread): an idle
	// job's checkpoints end a row of failures though its offset did not
	// move (coordinator/job progressed).
	SourceCaughtUp bool
	// SinkStateFrom is the oldest checkpoint whose snapshot of the task
	// the sink state names (IncrementalSink), which a restore reads too:
	// 0 when the snapshot holds all of it.
	SinkStateFrom int64
	// SourceSequenced is true for a task whose source is a
	// SequencedSource, and SourceReadSeq then the stream sequence up to
	// which the snapshot's offset read all of its input
	// (MetricSourceReadSeq, reported only for such tasks).
	SourceSequenced bool
	SourceReadSeq   uint64
	// SourceCovered is true for a task whose source is a CoveredSource,
	// and SourceCoveredSeq then the highest stream sequence the
	// snapshot's offset covered (MetricSourceCoveredSeq).
	SourceCovered    bool
	SourceCoveredSeq uint64
	// OutputBlocked is how much of the start delay (from the trigger to
	// the first barrier) the task spent blocked sending its output, held
	// up by a task downstream rather than processing input
	// (MetricOutputBlockedNanos, reported only when not 0). BlockedPort
	// and BlockedChannel then name the output channel it was blocked on
	// longest since its previous snapshot: an output port and the index
	// of the channel among the port's (its consumer's subtask, or 0 on a
	// forward edge; MetricBlockedPort, MetricBlockedChannel).
	OutputBlocked               time.Duration
	BlockedPort, BlockedChannel int
}

// SourcePosition returns a value that identifies offset, a source's offset,
// as MetricSourcePosition reports it: 0 for an empty offset, else a 63-bit
// hash of its bytes that is never 0.
func SourcePosition(offset []byte) int64 {
	if len(offset) == 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write(offset)
	return int64(h.Sum64()>>1) | 1
}

// EndedPortsMask encodes the ended input ports of a task with ports input
// ports (0..ports-1) as MetricEndedPorts carries them: bit i set when port
// i < 63 ended, and bit 63 (the sign bit) when ports 63 and up all ended —
// a task with more than 63 ports whose later ports ended only in part
// records none of them. The coordinator reads it to refuse a restore that
// would give an ended port more records (a finished job restored with more
// input) before it starts, instead of at the first record (ErrPortEnded).
func EndedPortsMask(ended []int, ports int) int64 {
	var mask int64
	high := 0 // ended ports from 63 on
	for _, p := range ended {
		switch {
		case p < 0:
		case p < 63:
			mask |= 1 << p
		default:
			high++
		}
	}
	if ports > 63 && high >= ports-63 {
		mask |= math.MinInt64
	}
	return mask
}

// Map returns the metrics keyed by the Metric* names, as CheckpointListener
// takes them.
func (m CheckpointMetrics) Map() map[string]int64 {
	u, k := int64(0), int64(0)
	if m.Unaligned {
		u = 1
	}
	if m.KeyedState {
		k = 1
	}
	out := map[string]int64{
		MetricKeyedState:        k,
		MetricAlignmentNanos:    int64(m.AlignmentDuration),
		MetricStartDelayNanos:   int64(m.StartDelay),
		MetricBufferedBytes:     m.BufferedBytes,
		MetricSpilledBytes:      m.SpilledBytes,
		MetricChannelStateBytes: m.ChannelStateBytes,
		MetricStateBytes:        m.StateBytes,
		MetricSnapshotBytes:     m.SnapshotBytes,
		MetricSyncNanos:         int64(m.SyncDuration),
		MetricAsyncNanos:        int64(m.AsyncDuration),
		MetricUnaligned:         u,
		MetricEndedPorts:        m.EndedPorts,
	}
	if m.CommitReport {
		out[MetricCommitReport] = 1
	}
	if m.CommitWait > 0 {
		out[MetricCommitWaitNanos] = int64(m.CommitWait)
	}
	if m.SourcePosition != 0 {
		out[MetricSourcePosition] = m.SourcePosition
	}
	if m.SourceCaughtUp {
		out[MetricSourceCaughtUp] = 1
	}
	if m.SinkStateFrom != 0 {
		out[MetricSinkStateFrom] = m.SinkStateFrom
	}
	if m.SourceDrained {
		out[MetricSourceDrained] = 1
	}
	if m.SourceSequenced {
		out[MetricSourceReadSeq] = int64(min(m.SourceReadSeq, math.MaxInt64))
	}
	if m.SourceCovered {
		out[MetricSourceCoveredSeq] = int64(min(m.SourceCoveredSeq, math.MaxInt64))
	}
	if m.OutputBlocked > 0 {
		out[MetricOutputBlockedNanos] = int64(m.OutputBlocked)
		out[MetricBlockedPort], out[MetricBlockedChannel] = int64(m.BlockedPort), int64(m.BlockedChannel)
	}
	if m.BoundedSource {
		out[MetricSourceEnded] = 0
		if m.SourceEnded {
			out[MetricSourceEnded] = 1
		}
	}
	return out
}

// MetricsFromMap is the inverse of Map.
func MetricsFromMap(m map[string]int64) CheckpointMetrics {
	ended, bounded := m[MetricSourceEnded]
	readSeq, sequenced := m[MetricSourceReadSeq]
	coveredSeq, covered := m[MetricSourceCoveredSeq]
	return CheckpointMetrics{
		AlignmentDuration: time.Duration(m[MetricAlignmentNanos]),
		StartDelay:        time.Duration(m[MetricStartDelayNanos]),
		BufferedBytes:     m[MetricBufferedBytes],
		SpilledBytes:      m[MetricSpilledBytes],
		ChannelStateBytes: m[MetricChannelStateBytes],
		StateBytes:        m[MetricStateBytes],
		SnapshotBytes:     m[MetricSnapshotBytes],
		SyncDuration:      time.Duration(m[MetricSyncNanos]),
		AsyncDuration:     time.Duration(m[MetricAsyncNanos]),
		Unaligned:         m[MetricUnaligned] != 0,
		KeyedState:        m[MetricKeyedState] != 0,
		EndedPorts:        m[MetricEndedPorts],
		BoundedSource:     bounded,
		SourceEnded:       ended == 1,
		SourceDrained:     m[MetricSourceDrained] != 0,
		CommitReport:      m[MetricCommitReport] != 0,
		CommitWait:        time.Duration(m[MetricCommitWaitNanos]),
		SourcePosition:    m[MetricSourcePosition],
		SourceCaughtUp:    m[MetricSourceCaughtUp] != 0,
		SinkStateFrom:     m[MetricSinkStateFrom],
		SourceSequenced:   sequenced,
		SourceReadSeq:     uint64(max(readSeq, 0)),
		SourceCovered:     covered,
		SourceCoveredSeq:  uint64(max(coveredSeq, 0)),
		OutputBlocked:     time.Duration(m[MetricOutputBlockedNanos]),
		BlockedPort:       int(m[MetricBlockedPort]),
		BlockedChannel:    int(m[MetricBlockedChannel]),
	}
}
