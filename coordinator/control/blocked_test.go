package control

import (
	"reflect"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// The trial's pipeline: src → keyer (3) → slow (3, by key) → out (3,
// forward from slow).
var (
	keyerIns  = map[string][]string{"src": nil, "keyer": {"src"}, "slow": {"keyer"}, "out": {"slow"}}
	keyerOuts = map[string][]OutputPort{"src": {{To: "keyer"}}, "keyer": {{To: "slow"}}, "slow": {{To: "out", Forward: true}}}
)

// A task whose barrier queued while it was blocked sending its output is
// not named as slower than its input: the time went to the task it was
// blocked on (an SRE trial named keyer-0 "queued 8.786s of its own
// 8.787s" while it was 100% backpressured by slow-0).
func TestSlowestBlockedOnOutput(t *testing.T) {
	src := map[string]int64{MetricStartDelayNanos: ms(2), MetricSyncNanos: ms(1)}
	for _, tc := range []struct {
		name  string
		tasks map[string]map[string]int64
		outs  map[string][]OutputPort
		want  TaskTime
		said  string
	}{
		{
			// keyer-0 blocked sending to slow-0 all but the first 3ms of
			// its start delay: 8.78s of its 8.787s queued were slow-0's.
			name: "blocked on a slower task",
			tasks: map[string]map[string]int64{
				"src-0":   src,
				"keyer-0": {MetricStartDelayNanos: ms(8790), MetricSyncNanos: ms(1), MetricOutputBlockedNanos: ms(8783), MetricBlockedPort: 0, MetricBlockedChannel: 0},
				"slow-0":  {MetricStartDelayNanos: ms(8795), MetricSyncNanos: ms(2)},
			},
			outs: keyerOuts,
			want: TaskTime{Task: "keyer-0", Own: 8788 * time.Millisecond, Phase: PhaseBlocked, Duration: 8780 * time.Millisecond,
				Acked: 8791 * time.Millisecond, BlockedOn: "slow-0", Behind: "slow-0"},
			said: "keyer-0 (blocked 8.78s of its own 8.788s sending to slow-0: slow-0 is slower than its input)",
		},
		{
			// The channel to slow-2; slow-2 was itself blocked most of its
			// start delay sending to out-2, on a forward edge.
			name: "blocked on a task blocked in turn",
			tasks: map[string]map[string]int64{
				"src-0":   src,
				"keyer-0": {MetricStartDelayNanos: ms(5000), MetricOutputBlockedNanos: ms(4990), MetricBlockedPort: 0, MetricBlockedChannel: 2},
				"slow-2":  {MetricStartDelayNanos: ms(5003), MetricOutputBlockedNanos: ms(4000), MetricBlockedPort: 0, MetricBlockedChannel: 0},
				"out-2":   {MetricStartDelayNanos: ms(5004)},
			},
			outs: keyerOuts,
			want: TaskTime{Task: "keyer-0", Own: 4997 * time.Millisecond, Phase: PhaseBlocked, Duration: 4987 * time.Millisecond,
				Acked: 5000 * time.Millisecond, BlockedOn: "slow-2", Behind: "out-2"},
			said: "keyer-0 (blocked 4.987s of its own 4.997s sending to slow-2, itself blocked sending to out-2: out-2 is slower than its input)",
		},
		{
			// Blocked only a little (before the barrier reached it, as
			// far as the figures tell): the queued time is its own.
			name: "queued, hardly blocked",
			tasks: map[string]map[string]int64{
				"src-0":   src,
				"keyer-0": {MetricStartDelayNanos: ms(3000), MetricOutputBlockedNanos: ms(3), MetricBlockedPort: 0, MetricBlockedChannel: 1},
			},
			outs: keyerOuts,
			want: TaskTime{Task: "keyer-0", Own: 2997 * time.Millisecond, Phase: PhaseQueued, Duration: 2997 * time.Millisecond,
				Acked: 3000 * time.Millisecond},
			said: "keyer-0 (queued 2.997s of its own 2.997s)",
		},
		{
			// A source blocked on its output; a coordinator that sends no
			// output topology: the task downstream is not known.
			name: "source, no output topology",
			tasks: map[string]map[string]int64{
				"src-0": {MetricStartDelayNanos: ms(2000), MetricOutputBlockedNanos: ms(1900), MetricBlockedPort: 0, MetricBlockedChannel: 1},
			},
			want: TaskTime{Task: "src-0", Own: 2000 * time.Millisecond, Phase: PhaseBlocked, Duration: 1900 * time.Millisecond,
				Acked: 2000 * time.Millisecond},
			said: "src-0 (blocked 1.9s of its own 2s sending its output: a task after it is slower than its input)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := CheckpointInfo{Tasks: tc.tasks, Inputs: keyerIns, Outputs: tc.outs}.Slowest()
			if !ok || got != tc.want {
				t.Fatalf("Slowest() = %+v, %v; want %+v", got, ok, tc.want)
			}
			if s := got.String(); s != tc.said {
				t.Fatalf("String() = %q, want %q", s, tc.said)
			}
		})
	}
}

func TestOutputTopology(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: a, kind: nats, subject: a, parallelism: 2}, {name: b, kind: nats, subject: b}]
operators:
  - {name: join, module: j@1, parallelism: 2, inputs: [{from: a}, {from: b}]}
  - {name: tap, module: t@1, inputs: [{from: a}]}
sinks: [{name: out, kind: nats, subject: out, parallelism: 2, input: {from: join}}, {name: raw, kind: nats, subject: raw, input: {from: a}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]OutputPort{
		"a":    {{To: "join", Forward: true}, {To: "tap"}, {To: "raw"}},
		"b":    {{To: "join"}},
		"join": {{To: "out", Forward: true}},
	}
	if got := OutputTopology(spec); !reflect.DeepEqual(got, want) {
		t.Fatalf("OutputTopology = %v, want %v", got, want)
	}
}
