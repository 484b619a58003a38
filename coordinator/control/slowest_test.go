package control

import (
	"testing"
	"time"
)

func ms(n int64) int64 { return n * int64(time.Millisecond) }

func TestSlowest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks map[string]map[string]int64
		want  TaskTime
		found bool
	}{
		{name: "no metrics", found: false},
		{
			// The volume run of the wordcount example: the sink's barrier
			// waited behind its previous commit.
			name: "sink behind its commit",
			tasks: map[string]map[string]int64{
				"lines-0":  {MetricSyncNanos: 2000, MetricAsyncNanos: ms(2)},
				"count-0":  {MetricStartDelayNanos: ms(7), MetricSyncNanos: 275000, MetricAsyncNanos: ms(1)},
				"counts-0": {MetricStartDelayNanos: ms(2705), MetricAlignmentNanos: 4000, MetricSyncNanos: ms(18), MetricAsyncNanos: ms(22)},
			},
			want:  TaskTime{Task: "counts-0", Total: time.Duration(ms(2745) + 4000), Phase: PhaseStartDelay, Duration: 2705 * time.Millisecond},
			found: true,
		},
		{
			// The same, the sink's commit wait reported: it is named, and
			// the start delay is what is left of it.
			name: "sink waiting for earlier commits",
			tasks: map[string]map[string]int64{
				"lines-0":  {MetricSyncNanos: 2000, MetricAsyncNanos: ms(2)},
				"counts-0": {MetricStartDelayNanos: ms(9355), MetricCommitWaitNanos: ms(7714), MetricAlignmentNanos: ms(291), MetricSyncNanos: ms(18)},
			},
			want:  TaskTime{Task: "counts-0", Total: time.Duration(ms(9355 + 291 + 18)), Phase: PhaseCommitWait, Duration: 7714 * time.Millisecond},
			found: true,
		},
		{
			name: "alignment",
			tasks: map[string]map[string]int64{
				"join-0": {MetricStartDelayNanos: ms(1), MetricAlignmentNanos: ms(900), MetricSyncNanos: ms(1)},
			},
			want:  TaskTime{Task: "join-0", Total: 902 * time.Millisecond, Phase: PhaseAlignment, Duration: 900 * time.Millisecond},
			found: true,
		},
		{
			name: "upload, tie goes to the first name",
			tasks: map[string]map[string]int64{
				"b": {MetricAsyncNanos: ms(50)},
				"a": {MetricAsyncNanos: ms(50)},
			},
			want:  TaskTime{Task: "a", Total: 50 * time.Millisecond, Phase: PhaseUpload, Duration: 50 * time.Millisecond},
			found: true,
		},
		{
			name:  "all zero",
			tasks: map[string]map[string]int64{"src-0": {}},
			want:  TaskTime{Task: "src-0", Phase: PhaseStartDelay},
			found: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := CheckpointInfo{Tasks: tc.tasks}.Slowest()
			if found != tc.found || got != tc.want {
				t.Fatalf("Slowest() = %+v, %v; want %+v, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

func TestTaskTimeString(t *testing.T) {
	tt := TaskTime{Task: "counts-0", Total: 2745123456, Phase: PhaseStartDelay, Duration: 2705123456}
	if got, want := tt.String(), "counts-0 (start delay 2.705s of 2.745s)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	tt = TaskTime{Task: "x", Total: 1500 * time.Microsecond, Phase: PhaseSnapshot, Duration: 1234567}
	if got, want := tt.String(), "x (snapshot 1.235ms of 1.5ms)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
