package host

import "time"

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
	return map[string]int64{
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
	}
}

// MetricsFromMap is the inverse of Map.
func MetricsFromMap(m map[string]int64) CheckpointMetrics {
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
	}
}
