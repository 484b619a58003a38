package control

import (
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
)

func ms(n int64) int64 { return n * int64(time.Millisecond) }

// wordcount is the example's topology: lines → count → counts.
var wordcount = map[string][]string{"lines": nil, "count": {"lines"}, "counts": {"count"}}

func TestSlowest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inputs map[string][]string
		tasks  map[string]map[string]int64
		want   TaskTime
		found  bool
	}{
		{name: "no metrics", found: false},
		{
			// Backpressure before a slow operator: its barrier queued in
			// count-0's input channel, and came as late to the idle sink
			// after it, whose start delay is the longest. The operator is
			// named, by what it spent itself: the sink spent 40ms.
			name:   "barriers queued before a slow operator",
			inputs: wordcount,
			tasks: map[string]map[string]int64{
				"lines-0":  {MetricStartDelayNanos: ms(1), MetricSyncNanos: 2000, MetricAsyncNanos: ms(2)},
				"count-0":  {MetricStartDelayNanos: ms(2700), MetricSyncNanos: ms(3), MetricAsyncNanos: ms(1)},
				"counts-0": {MetricStartDelayNanos: ms(2705), MetricAlignmentNanos: 4000, MetricSyncNanos: ms(18), MetricAsyncNanos: ms(22)},
			},
			want: TaskTime{Task: "count-0", Own: time.Duration(ms(2699) - 2000 + ms(4)), Phase: PhaseQueued,
				Duration: time.Duration(ms(2699) - 2000), Acked: 2704 * time.Millisecond},
			found: true,
		},
		{
			// Without the topology no part of a start delay is known to be
			// a task's own: the sink's upload is what it spent most on.
			name: "no topology",
			tasks: map[string]map[string]int64{
				"count-0":  {MetricStartDelayNanos: ms(2700), MetricSyncNanos: ms(3), MetricAsyncNanos: ms(1)},
				"counts-0": {MetricStartDelayNanos: ms(2705), MetricAlignmentNanos: 4000, MetricSyncNanos: ms(18), MetricAsyncNanos: ms(22)},
			},
			want: TaskTime{Task: "counts-0", Own: time.Duration(ms(40) + 4000), Phase: PhaseUpload, Duration: 22 * time.Millisecond,
				Acked: time.Duration(ms(2745) + 4000)},
			found: true,
		},
		{
			// The sink's barrier waited behind its earlier commits: its
			// own, and the start delay past it is what it queued.
			name:   "sink waiting for earlier commits",
			inputs: wordcount,
			tasks: map[string]map[string]int64{
				"lines-0":  {MetricSyncNanos: 2000, MetricAsyncNanos: ms(2)},
				"count-0":  {MetricStartDelayNanos: ms(5), MetricSyncNanos: ms(1)},
				"counts-0": {MetricStartDelayNanos: ms(9355), MetricCommitWaitNanos: ms(7714), MetricAlignmentNanos: ms(291), MetricSyncNanos: ms(18)},
			},
			want: TaskTime{Task: "counts-0", Own: time.Duration(ms(9355 - 6 + 291 + 18)), Phase: PhaseCommitWait,
				Duration: 7714 * time.Millisecond, Acked: time.Duration(ms(9355 + 291 + 18))},
			found: true,
		},
		{
			// A join's alignment is its own; the sink after it waited for
			// it, none of it in its channel.
			name:   "alignment",
			inputs: map[string][]string{"a": nil, "b": nil, "join": {"a", "b"}, "out": {"join"}},
			tasks: map[string]map[string]int64{
				"a-0":    {},
				"b-0":    {MetricStartDelayNanos: ms(2)},
				"join-0": {MetricStartDelayNanos: ms(1), MetricAlignmentNanos: ms(900), MetricSyncNanos: ms(1)},
				"out-0":  {MetricStartDelayNanos: ms(903)},
			},
			want:  TaskTime{Task: "join-0", Own: 901 * time.Millisecond, Phase: PhaseAlignment, Duration: 900 * time.Millisecond, Acked: 902 * time.Millisecond},
			found: true,
		},
		{
			// A source has no inputs: its start delay is its own.
			name:   "a source busy",
			inputs: wordcount,
			tasks: map[string]map[string]int64{
				"lines-0": {MetricStartDelayNanos: ms(300)},
				"count-0": {MetricStartDelayNanos: ms(301)},
			},
			want:  TaskTime{Task: "lines-0", Own: 300 * time.Millisecond, Phase: PhaseStartDelay, Duration: 300 * time.Millisecond, Acked: 300 * time.Millisecond},
			found: true,
		},
		{
			name: "upload, tie goes to the first name",
			tasks: map[string]map[string]int64{
				"b": {MetricAsyncNanos: ms(50)},
				"a": {MetricAsyncNanos: ms(50)},
			},
			want:  TaskTime{Task: "a", Own: 50 * time.Millisecond, Phase: PhaseUpload, Duration: 50 * time.Millisecond, Acked: 50 * time.Millisecond},
			found: true,
		},
		{
			name:  "all zero",
			tasks: map[string]map[string]int64{"src-0": {}},
			want:  TaskTime{Task: "src-0", Phase: PhaseQueued},
			found: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := CheckpointInfo{Tasks: tc.tasks, Inputs: tc.inputs}.Slowest()
			if found != tc.found || got != tc.want {
				t.Fatalf("Slowest() = %+v, %v; want %+v, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

func TestTaskTimeString(t *testing.T) {
	tt := TaskTime{Task: "count-0", Own: 2745123456, Phase: PhaseQueued, Duration: 2705123456}
	if got, want := tt.String(), "count-0 (queued 2.705s of its own 2.745s)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	tt = TaskTime{Task: "x", Own: 1500 * time.Microsecond, Phase: PhaseSnapshot, Duration: 1234567}
	if got, want := tt.String(), "x (snapshot 1.235ms of its own 1.5ms)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestTopology(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: a, kind: nats, subject: a}, {name: b, kind: nats, subject: b}]
operators: [{name: join, module: j@1, inputs: [{from: a}, {from: b}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: join}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := Topology(spec)
	if len(got) != 4 || got["a"] != nil || len(got["join"]) != 2 || got["join"][1] != "b" || got["out"][0] != "join" {
		t.Fatalf("Topology = %v", got)
	}
	if _, ok := got["b"]; !ok {
		t.Fatalf("Topology = %v: no source b", got)
	}
	if VertexOf("count-12") != "count" || VertexOf("my-op-0") != "my-op" || VertexOf("x") != "x" {
		t.Fatal("VertexOf")
	}
}
