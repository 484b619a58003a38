package jobspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/modref"
	"github.com/weirhq/weir/host/wasm"
)

const good = `name: wordcount
sources:
  - name: lines
    kind: jetstream
    stream: LINES
    filter: lines.>
    parallelism: 2
operators:
  - name: split
    module: splitter@2
    parallelism: 2
    config: "sep= "
    inputs:
      - from: lines
  - name: count
    module: ./wordcount.wasm
    parallelism: 3
    config:
      window: 10
      names: [a, b]
    limits: {memory: 64MiB, timeout: 2s}
    inputs:
      - from: split
        partition: key
sinks:
  - name: out
    kind: jetstream
    stream: COUNTS
    subject: counts
    publish: fast
    ack-timeout: 45s
    timestamps: true
    input: {from: count}
checkpointing:
  mode: exactly-once
  aligned-timeout: 200ms
  interval: 1s
  timeout: 30s
  min-pause: 100ms
  max-concurrent: 1
  tolerable-failures: 1
  retained: 2
restart:
  strategy: exponential-backoff
  initial: 100ms
  max: 2s
  multiplier: 3
  attempts: 5
`

// A jetstream source's start: all, new, a sequence or a time.
func TestParseStart(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want StartPoint
	}{
		{"", StartPoint{}},
		{"all", StartPoint{}},
		{"new", StartPoint{New: true}},
		{"1042", StartPoint{Seq: 1042}},
		{"2026-11-30T09:00:00Z", StartPoint{Time: at}},
		{"2026-11-30T10:00:00+01:00", StartPoint{Time: at.In(time.FixedZone("", 3600))}},
	} {
		got, err := ParseStart(c.in)
		if err != nil || got.New != c.want.New || got.Seq != c.want.Seq || !got.Time.Equal(c.want.Time) {
			t.Errorf("ParseStart(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-1", "latest", "2026-11-30", "NEW"} {
		if _, err := ParseStart(bad); err == nil {
			t.Errorf("ParseStart(%q) took it", bad)
		}
	}
	spec := strings.Replace(good, "    filter: lines.>\n", "    filter: lines.>\n    start: 2026-11-30T09:00:00Z\n", 1)
	s, err := Parse("job.yaml", []byte(spec), Options{CheckModule: func(modref.Ref) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sources[0].Start; got != "2026-11-30T09:00:00Z" {
		t.Fatalf("start %q", got)
	}
}

// A jetstream source's stop: end, a sequence or a time.
func TestParseStop(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in      string
		want    StopPoint
		bounded bool
	}{
		{"", StopPoint{}, false},
		{"end", StopPoint{End: true}, true},
		{"5000", StopPoint{Seq: 5000}, true},
		{"2026-11-30T09:00:00Z", StopPoint{Time: at}, true},
	} {
		got, err := ParseStop(c.in)
		if err != nil || got.End != c.want.End || got.Seq != c.want.Seq || !got.Time.Equal(c.want.Time) || got.Bounded() != c.bounded {
			t.Errorf("ParseStop(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-1", "all", "new", "latest", "2026-11-30", "END"} {
		if _, err := ParseStop(bad); err == nil {
			t.Errorf("ParseStop(%q) took it", bad)
		}
	}
	spec := strings.Replace(good, "    filter: lines.>\n", "    filter: lines.>\n    stop: end\n", 1)
	s, err := Parse("job.yaml", []byte(spec), Options{CheckModule: func(modref.Ref) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sources[0].Stop; got != "end" {
		t.Fatalf("stop %q", got)
	}
	for _, c := range []struct{ name, src, want string }{
		{"bad stop", "{name: in, kind: jetstream, stream: S, stop: latest}", `job.yaml:3: sources[0].stop: want end, a stream sequence (1 or more) or an RFC 3339 time`},
		{"stop on a nats source", "{name: in, kind: nats, subject: a, stop: end}", `job.yaml:3: sources[0].stop: stop applies to jetstream sources only (this one is kind nats)`},
	} {
		_, err := Parse("job.yaml", []byte("name: j\nsources:\n  - "+c.src+"\n"), Options{CheckModule: func(modref.Ref) error { return nil }})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A JSON spec's resolved sequences: a stop before the start is refused.
	js := Spec{Name: "j", Sources: []Source{{Name: "in", Kind: KindJetStream, Stream: "S", Parallelism: 1, StartSequence: 10, StopSequence: 5}}}
	if err := Check(&js); err == nil || !strings.Contains(err.Error(), "stop_sequence: 5 is before start_sequence 10: the source would read nothing") {
		t.Errorf("stop before start: %v", err)
	}
	js.Sources[0].StopSequence = 9
	if err := Check(&js); err == nil || !strings.Contains(err.Error(), "stop_sequence: 9 is before start_sequence 10") {
		t.Errorf("stop just before start: %v", err)
	}
	js.Sources[0].StopSequence = 10
	if err := Check(&js); err != nil && strings.Contains(err.Error(), "stop_sequence") {
		t.Errorf("stop at the start: %v", err)
	}
}

// A sink subject may end in {key}: each record goes to the subject of its
// key (transport/subject).
func TestParseKeyedSinkSubject(t *testing.T) {
	spec := strings.Replace(good, "subject: counts\n", "subject: counts.{key}\n", 1)
	s, err := Parse("job.yaml", []byte(spec), Options{CheckModule: func(modref.Ref) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sinks[0].Subject; got != "counts.{key}" {
		t.Fatalf("sink subject %q", got)
	}
	if err := Check(s); err != nil {
		t.Fatalf("Check of a parsed spec: %v", err)
	}
}

// An at-least-once sink may publish in any mode, atomic batches too.
func TestParseAtLeastOncePublishModes(t *testing.T) {
	for _, mode := range []string{PublishAuto, PublishFast, PublishAtomic, PublishAsync} {
		spec := strings.Replace(good, "publish: fast\n", "guarantee: at-least-once\n    publish: "+mode+"\n", 1)
		s, err := Parse("job.yaml", []byte(spec), Options{CheckModule: func(modref.Ref) error { return nil }})
		if err != nil {
			t.Fatalf("publish %s: %v", mode, err)
		}
		if sk := s.Sinks[0]; sk.Guarantee != AtLeastOnce || sk.Publish != mode {
			t.Fatalf("publish %s: sink %+v", mode, sk)
		}
		if err := Check(s); err != nil {
			t.Fatalf("publish %s: Check of a parsed spec: %v", mode, err)
		}
	}
}

func TestParseGood(t *testing.T) {
	var refs []string
	s, err := Parse("job.yaml", []byte(good), Options{Dir: "/jobs", CheckModule: func(r modref.Ref) error {
		refs = append(refs, r.String())
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "wordcount" || len(s.Sources) != 1 || len(s.Operators) != 2 || len(s.Sinks) != 1 {
		t.Fatalf("spec = %+v", s)
	}
	if got := strings.Join(refs, ","); got != "splitter@2,/jobs/wordcount.wasm" {
		t.Errorf("checked modules %s", got)
	}
	split, count := s.Operators[0], s.Operators[1]
	if string(split.Config) != "sep= " {
		t.Errorf("string config = %q", split.Config)
	}
	if string(count.Config) != `{"names":["a","b"],"window":10}` {
		t.Errorf("yaml config = %s", count.Config)
	}
	if count.Limits.Memory != 64<<20 || count.Limits.Timeout != 2*time.Second {
		t.Errorf("limits = %+v", count.Limits)
	}
	if split.Inputs[0].Partition != Forward || count.Inputs[0].Partition != KeyHash {
		t.Errorf("partitions %q %q", split.Inputs[0].Partition, count.Inputs[0].Partition)
	}
	if s.Sinks[0].Input.Partition != RoundRobin || s.Sinks[0].Guarantee != ExactlyOnce || s.Sinks[0].Publish != PublishFast ||
		s.Sinks[0].AckTimeout != 45*time.Second || !s.Sinks[0].Timestamps {
		t.Errorf("sink = %+v", s.Sinks[0])
	}
	c := s.Checkpointing
	if c.Interval != time.Second || c.AlignedTimeout != 200*time.Millisecond || c.MaxConcurrent != 1 ||
		c.TolerableFailures != 1 || c.Retained != 2 || c.MinPause != 100*time.Millisecond || c.Timeout != 30*time.Second {
		t.Errorf("checkpointing = %+v", c)
	}
	r := s.Restart
	if r.RestartDelay(1) != 100*time.Millisecond || r.RestartDelay(2) != 300*time.Millisecond || r.RestartDelay(4) != 2*time.Second {
		t.Errorf("backoff delays %v %v %v", r.RestartDelay(1), r.RestartDelay(2), r.RestartDelay(4))
	}
}

func TestPartitionedSource(t *testing.T) {
	s, err := Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: jetstream, stream: ORDERS, parallelism: 2, partitions: 8, partition-filter: "orders.{p}.>"}]
sinks: [{name: out, kind: nats, subject: b, input: {from: in}}]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if src := s.Sources[0]; src.Partitions != 8 || src.PartitionFilter != "orders.{p}.>" || src.Filter != "" {
		t.Errorf("source = %+v", src)
	}
}

// A nats source's pending limits are read; left out, they are 0: the
// worker's defaults.
func TestSourcePendingLimits(t *testing.T) {
	s, err := Parse("j.yaml", []byte(`name: j
sources:
  - {name: fast, kind: nats, subject: a, pending-messages: 20000, pending-bytes: 16MiB}
  - {name: plain, kind: nats, subject: b}
operators: [{name: op, module: m, inputs: [{from: fast}, {from: plain}]}]
sinks: [{name: out, kind: nats, subject: c, input: {from: op}}]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if src := s.Sources[0]; src.PendingMessages != 20000 || src.PendingBytes != 16<<20 {
		t.Errorf("source fast = %+v", src)
	}
	if src := s.Sources[1]; src.PendingMessages != 0 || src.PendingBytes != 0 {
		t.Errorf("source plain = %+v", src)
	}
}

// A source's key comes from the Weir-Key header unless it says subject,
// for either kind of source.
func TestSourceKey(t *testing.T) {
	s, err := Parse("j.yaml", []byte(`name: j
sources:
  - {name: orders, kind: jetstream, stream: ORDERS, filter: orders.>, key: subject}
  - {name: clicks, kind: nats, subject: clicks.>, key: subject}
  - {name: lines, kind: nats, subject: lines, key: header}
  - {name: other, kind: nats, subject: other}
operators:
  - {name: op, module: m, inputs: [{from: orders, partition: key}, {from: clicks}, {from: lines}, {from: other}]}
sinks: [{name: out, kind: nats, subject: b, input: {from: op}}]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{KeyFromSubject, KeyFromSubject, KeyFromHeader, KeyFromHeader} {
		if got := s.Sources[i].Key; got != want {
			t.Errorf("source %s: key %q, want %q", s.Sources[i].Name, got, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	s, err := Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: nats, subject: a}]
operators: [{name: op, module: m, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: b, input: {from: op}}]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Checkpointing
	if c.Mode != ModeExactlyOnce || c.Interval != DefaultInterval || c.Timeout != DefaultTimeout ||
		c.MaxConcurrent != 1 || c.Retained != DefaultRetained || c.TolerableFailures != 0 {
		t.Errorf("checkpointing defaults = %+v", c)
	}
	if r := s.Restart; r.Strategy != RestartExponentialBackoff || r.Initial != DefaultBackoffInitial || r.Max != DefaultBackoffMax ||
		r.Multiplier != DefaultBackoffMultiplier || r.Attempts != DefaultRestartAttempts {
		t.Errorf("restart defaults = %+v", s.Restart)
	}
	// A restart block with a delay and no strategy: fixed-delay, the one
	// strategy a delay belongs to; with neither, the defaults.
	for body, want := range map[string]Restart{
		"restart: {delay: 5ms}": {Strategy: RestartFixedDelay, Delay: 5 * time.Millisecond, Attempts: DefaultRestartAttempts},
		"restart: {attempts: 3}": {Strategy: RestartExponentialBackoff, Initial: DefaultBackoffInitial, Max: DefaultBackoffMax,
			Multiplier: DefaultBackoffMultiplier, Attempts: 3},
		"restart: {strategy: fixed-delay}": {Strategy: RestartFixedDelay, Delay: DefaultRestartDelay, Attempts: DefaultRestartAttempts},
	} {
		s, err := Parse("r.yaml", []byte("name: r\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n"+body+"\n"), Options{})
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if s.Restart != want {
			t.Errorf("%s: restart = %+v, want %+v", body, s.Restart, want)
		}
	}
	if s.Sinks[0].Guarantee != AtMostOnce || s.Operators[0].Parallelism != 1 || s.Sources[0].Key != KeyFromHeader {
		t.Errorf("defaults: %+v %+v %+v", s.Sinks[0], s.Operators[0], s.Sources[0])
	}
}

func TestErrors(t *testing.T) {
	base := func(ops string) string {
		return "name: j\nsources:\n  - {name: in, kind: nats, subject: a, parallelism: 2}\noperators:\n" + ops +
			"sinks:\n  - {name: out, kind: nats, subject: b, input: {from: in}}\n"
	}
	cases := []struct {
		name, spec string
		want       []string
	}{
		{"unknown operator", base("  - name: a\n    module: m\n    inputs:\n      - from: cnt\n"),
			[]string{`job.yaml:8: operators[0].inputs[0].from: unknown operator or source "cnt" (the job has: in, a)`}},
		// No close match: the names it could read are listed.
		{"unknown short input", base("  - name: op\n    module: m\n    inputs:\n      - from: inp\n"),
			[]string{`job.yaml:8: operators[0].inputs[0].from: unknown operator or source "inp" (the job has: in, op)`}},
		{"unknown option", base("  - name: a\n    module: m\n    paralelism: 2\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].paralelism: unknown option "paralelism" (did you mean parallelism?)`}},
		{"unknown option far from any", base("  - name: a\n    module: m\n    speed: 2\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].speed: unknown option "speed" (valid: config, inputs, limits, module, name, parallelism)`}},
		{"an operator limit there is not", base("  - name: a\n    module: m\n    limits: {max-batch: 16MiB}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.max-batch: unknown option "max-batch" (valid: log-rate, memory, snapshot-timeout, timeout)`}},
		{"missing input", base("  - name: a\n    module: m\n"),
			[]string{`job.yaml:5: operators[0].inputs: missing input: operator "a" has no inputs`}},
		{"forward parallelism", base("  - name: a\n    module: m\n    inputs: [{from: in, partition: forward}]\n"),
			[]string{`job.yaml:7: operators[0].inputs[0].partition: forward edge between different parallelisms: source "in" has 2, "a" has 1`}},
		{"cycle", base("  - name: a\n    module: m\n    inputs: [{from: in}, {from: b}]\n  - name: b\n    module: m\n    inputs: [{from: a}]\n"),
			[]string{`job.yaml:10: operators[1].inputs[0].from: cycle: a -> b -> a`}},
		{"self cycle", base("  - name: a\n    module: m\n    inputs: [{from: a}]\n"),
			[]string{`job.yaml:7: operators[0].inputs[0].from: cycle: a reads its own output`}},
		{"bad duration", "name: j\ncheckpointing:\n  interval: 10 secs\n  timeout: -1s\n",
			[]string{`job.yaml:3: checkpointing.interval: bad duration "10 secs" (want e.g. 500ms, 10s, 1m)`,
				`job.yaml:4: checkpointing.timeout: -1s is less than 50ms, the shortest checkpoint timeout: a checkpoint takes a few ms even on one machine; the default is 60s`}},
		{"duration without a unit", "name: j\ncheckpointing:\n  interval: 5\n  timeout: 2.5\n",
			[]string{`job.yaml:3: checkpointing.interval: bad duration "5": a duration needs a unit (5s or 5ms?)`,
				`job.yaml:4: checkpointing.timeout: bad duration "2.5": a duration needs a unit (2.5s or 2.5ms?)`}},
		{"interval 0s", "name: j\ncheckpointing:\n  interval: 0s\n",
			[]string{`job.yaml:3: checkpointing.interval: 0s is less than 10ms, the shortest checkpoint interval (as in Flink); to take no periodic checkpoints, write disabled: true`}},
		{"interval 0", "name: j\ncheckpointing:\n  interval: 0\n",
			[]string{`job.yaml:3: checkpointing.interval: 0 is less than 10ms, the shortest checkpoint interval (as in Flink); to take no periodic checkpoints, write disabled: true`}},
		// A trial's 1ns ran 37 checkpoints a second; a negative one said
		// "0 or more", which 0 is not.
		{"interval 1ns", "name: j\ncheckpointing:\n  interval: 1ns\n",
			[]string{`job.yaml:3: checkpointing.interval: 1ns is less than 10ms, the shortest checkpoint interval (as in Flink); to take no periodic checkpoints, write disabled: true`}},
		{"interval negative", "name: j\ncheckpointing:\n  interval: -5s\n",
			[]string{`job.yaml:3: checkpointing.interval: -5s is less than 10ms, the shortest checkpoint interval (as in Flink); to take no periodic checkpoints, write disabled: true`}},
		// A trial's 1ms expired every checkpoint, failing the job over in
		// a loop.
		{"timeout 1ms", "name: j\ncheckpointing:\n  timeout: 1ms\n",
			[]string{`job.yaml:3: checkpointing.timeout: 1ms is less than 50ms, the shortest checkpoint timeout: a checkpoint takes a few ms even on one machine; the default is 60s`}},
		{"aligned-timeout past the timeout", "name: j\ncheckpointing:\n  timeout: 30s\n  aligned-timeout: 2m\n",
			[]string{`job.yaml:4: checkpointing.aligned-timeout: 2m0s is not less than checkpointing.timeout (30s): a checkpoint expires before it turns unaligned; make it shorter than the timeout, or 0 for never`}},
		{"aligned-timeout past the default timeout", "name: j\ncheckpointing:\n  aligned-timeout: 60s\n",
			[]string{`job.yaml:3: checkpointing.aligned-timeout: 1m0s is not less than checkpointing.timeout (1m0s)`}},
		{"concurrent unaligned", "name: j\ncheckpointing:\n  mode: unaligned\n  max-concurrent: 2\n",
			[]string{`job.yaml:4: checkpointing.max-concurrent: 2: unaligned checkpoints (mode: unaligned) are taken one at a time, as in Flink: a task records one checkpoint's in-flight data at a time, and the next one's barrier, which nothing holds back, aborts it there; leave max-concurrent out (1)`}},
		{"concurrent aligned-timeout", "name: j\ncheckpointing:\n  aligned-timeout: 1s\n  max-concurrent: 3\n",
			[]string{`job.yaml:4: checkpointing.max-concurrent: 3: unaligned checkpoints (aligned-timeout turns them so) are taken one at a time`}},
		{"concurrent with min-pause", "name: j\ncheckpointing:\n  min-pause: 5s\n  max-concurrent: 4\n",
			[]string{`job.yaml:4: checkpointing.max-concurrent: 4 has no effect with min-pause 5s: each checkpoint waits for the one before to end, and min-pause more, so one is pending at a time (as in Flink); leave max-concurrent out (1), or min-pause`}},
		{"bad mode", "name: j\ncheckpointing:\n  mode: twice\n",
			[]string{`job.yaml:3: checkpointing.mode: unknown value "twice" (want exactly-once, at-least-once, unaligned)`}},
		{"unknown top-level option", "name: j\nsourcez: []\n", []string{`job.yaml:2: sourcez: unknown option "sourcez" (did you mean sources?)`}},
		{"bad module ref", base("  - name: a\n    module: a@x\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:6: operators[0].module: module reference "a@x": version must be a positive integer`}},
		{"unknown module", base("  - name: a\n    module: nosuch@1\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:6: operators[0].module: unknown module "nosuch@1": not in the registry`}},
		{"nats exactly-once", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  - name: o\n    kind: nats\n    subject: x\n    guarantee: exactly-once\n    input: {from: in}\n",
			[]string{`job.yaml:7: sinks[0].guarantee: a nats sink is at-most-once; use kind jetstream for exactly-once`}},
		{"publish on a nats sink", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  - name: o\n    kind: nats\n    subject: x\n    publish: fast\n    input: {from: in}\n",
			[]string{`job.yaml:7: sinks[0].publish: publish applies to at-least-once and exactly-once jetstream sinks only`}},
		{"ack-timeout on a nats sink", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  - {name: o, kind: nats, subject: x, ack-timeout: 5s, input: {from: in}}\n",
			[]string{`job.yaml:4: sinks[0].ack-timeout: ack-timeout applies to at-least-once and exactly-once jetstream sinks only`}},
		{"zero ack-timeout", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  - {name: o, kind: jetstream, stream: S, subject: x, ack-timeout: 0, input: {from: in}}\n",
			[]string{`job.yaml:4: sinks[0].ack-timeout: must be greater than 0`}},
		{"bad publish mode", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  - {name: o, kind: jetstream, stream: S, subject: x, publish: eventually, input: {from: in}}\n",
			[]string{`job.yaml:4: sinks[0].publish: unknown value "eventually" (want auto, fast, atomic, async)`}},
		{"partitions without filter", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, partitions: 4}\n",
			[]string{`job.yaml:3: sources[0]: partitions and partition-filter go together`}},
		{"filter and partition-filter", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, filter: a.>, partitions: 4, partition-filter: \"a.{p}.>\"}\n",
			[]string{`job.yaml:3: sources[0]: give either filter or partition-filter`}},
		{"fewer partitions than subtasks", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, parallelism: 3, partitions: 2, partition-filter: \"a.{p}.>\"}\n",
			[]string{`job.yaml:3: sources[0].partition-filter: 2 partitions for 3 subtasks: each subtask needs at least one`}},
		{"partition filter without {p}", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, partitions: 2, partition-filter: a.>}\n",
			[]string{`job.yaml:3: sources[0].partition-filter: partition filter "a.>" must contain {p} once`}},
		{"channel buffer too small", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nchannels: {buffer: 1KiB}\n",
			[]string{`job.yaml:3: channels.buffer: 1KiB is less than 16KiB (a frame of the channel must fit in half of it)`}},
		{"channel buffer 0", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nchannels: {buffer: 0}\n",
			[]string{`job.yaml:3: channels.buffer: 0 is less than 16KiB (leave it out for the workers' defaults: 1MiB within a worker, up to 4MiB between workers)`}},
		{"channel buffer too large", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nchannels: {buffer: 1GiB}\n",
			[]string{`job.yaml:3: channels.buffer: 1GiB is more than 16MiB (a worker's connection holds 64 MiB of its channels' data)`}},
		{"unknown source key", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, key: topic}\n",
			[]string{`job.yaml:3: sources[0].key: unknown value "topic" (want header, subject)`}},
		{"start on a nats source", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, start: new}\n",
			[]string{`job.yaml:3: sources[0].start: start applies to jetstream sources only (this one is kind nats)`}},
		{"bad start", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, start: latest}\n",
			[]string{`job.yaml:3: sources[0].start: want all, new, a stream sequence (1 or more) or an RFC 3339 time (2026-11-30T09:00:00Z), got "latest"`}},
		{"start at sequence 0", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, start: 0}\n",
			[]string{`job.yaml:3: sources[0].start: want all, new, a stream sequence (1 or more)`}},
		{"pending limits on a jetstream source", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, pending-messages: 1000}\n",
			[]string{`job.yaml:3: sources[0].pending-messages: pending-messages applies to nats sources only (a jetstream source drops nothing: its consumers wait for it)`}},
		{"pending-messages 0", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, pending-messages: 0}\n",
			[]string{`job.yaml:3: sources[0].pending-messages: must be at least 1, got 0`}},
		{"pending-bytes under a message", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, pending-bytes: 64KiB}\n",
			[]string{`job.yaml:3: sources[0].pending-bytes: 64KiB is less than 1MiB: a message of the server's default max_payload would never fit, and every one would be dropped`}},
		{"pending-bytes past the bound", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, pending-bytes: 1TiB}\n",
			[]string{`job.yaml:3: sources[0].pending-bytes: 1TiB is more than 16GiB: the buffer is the worker's memory`}},
		{"partitions on a nats source", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, partitions: 2, partition-filter: \"a.{p}\"}\n",
			[]string{`job.yaml:3: sources[0]: partitions and partition-filter apply to jetstream sources only (this one is kind nats)`}},
		{"stream, start and stop on a nats source", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, stream: S, start: new, stop: end}\n",
			[]string{`job.yaml:3: sources[0]: stream, start and stop apply to jetstream sources only (this one is kind nats)`}},
		{"memory over wasm32", base("  - name: a\n    module: m\n    limits: {memory: 1TiB}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.memory: 1TiB is more than a wasm32 module can address (4GiB)`}},
		{"memory just over wasm32", base("  - name: a\n    module: m\n    limits: {memory: 4294967297}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.memory: 4294967297 bytes is more than a wasm32 module can address (4GiB)`}},
		{"memory under a page", base("  - name: a\n    module: m\n    limits: {memory: 1KiB}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.memory: 1KiB is less than one wasm page (64KiB); leave it out for the host's default`}},
		{"memory not whole pages", base("  - name: a\n    module: m\n    limits: {memory: 100KiB}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.memory: 100KiB is not a whole number of 64KiB wasm pages (the host would use 64KiB; say 64KiB or 128KiB)`}},
		{"timeout below the watchdog", base("  - name: a\n    module: m\n    limits:\n      timeout: 1ns\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:8: operators[0].limits.timeout: 1ns is below the 10ms the host can time a call to (it checks call deadlines every 10ms)`}},
		{"log-rate negative", base("  - name: a\n    module: m\n    limits: {log-rate: -1}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.log-rate: must be at least 0, got -1`}},
		{"log-rate over the most", base("  - name: a\n    module: m\n    limits: {log-rate: 1000000}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.log-rate: must be at most 100000, got 1000000`}},
		{"misspelled from and partition", "name: j\nsources: [{name: events, kind: nats, subject: e}]\noperators:\n  - {name: a, module: m, inputs: [{from: evnts, partition: keyed}]}\nsinks: [{name: out, kind: nats, subject: o, input: {from: a}}]\n",
			[]string{`job.yaml:4: operators[0].inputs[0].partition: unknown value "keyed" (did you mean key? want forward, key, broadcast, round-robin)`,
				`job.yaml:4: operators[0].inputs[0].from: unknown operator or source "evnts" (did you mean events?)`}},
		{"negative min-pause", "name: j\ncheckpointing:\n  min-pause: -1s\n",
			[]string{`job.yaml:3: checkpointing.min-pause: -1s: a duration must not be negative (0 or more: 500ms, 10s, 1m)`}},
		{"timeout 9ms", base("  - name: a\n    module: m\n    limits: {timeout: 9ms}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.timeout: 9ms is below the 10ms`}},
		{"snapshot-timeout 9ms", base("  - name: a\n    module: m\n    limits: {snapshot-timeout: 9ms}\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:7: operators[0].limits.snapshot-timeout: 9ms is below the 10ms`}},
		{"aligned-timeout outside exactly-once", "name: j\ncheckpointing:\n  mode: unaligned\n  aligned-timeout: 100ms\n",
			[]string{`job.yaml:4: checkpointing.aligned-timeout: applies to mode exactly-once only (mode is unaligned)`}},
		{"delay with exponential-backoff", "name: j\nrestart:\n  strategy: exponential-backoff\n  delay: 1s\n",
			[]string{`job.yaml:4: restart.delay: delay applies to fixed-delay only (use initial)`}},
		{"max under initial", "name: j\nrestart:\n  strategy: exponential-backoff\n  initial: 2s\n  max: 1s\n",
			[]string{`job.yaml:5: restart.max: max (1s) is less than initial (2s)`}},
		{"multiplier with fixed-delay", "name: j\nrestart:\n  delay: 1s\n  multiplier: 2\n",
			[]string{`job.yaml:4: restart: initial, max and multiplier apply to exponential-backoff only`}},
		{"bad yaml", "name: [\n", []string{"job.yaml:1: bad YAML"}},
		{"duplicate name", base("  - name: in\n    module: m\n    inputs: [{from: in}]\n"),
			[]string{`job.yaml:5: operators[0].name: duplicate name "in" (also sources[0])`}},
		// A parallelism or partition count no job could run would make the
		// coordinator plan (and allocate) that many tasks or filters.
		{"parallelism over the maximum", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, parallelism: 1000000000}\n",
			[]string{`job.yaml:3: sources[0].parallelism: must be at most 65536, got 1000000000`}},
		// One past what an int holds is out of range too, not "not an
		// integer".
		{"parallelism past an int", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, parallelism: 100000000000000000000}\n",
			[]string{`job.yaml:3: sources[0].parallelism: must be at most 65536, got 100000000000000000000`}},
		{"negative parallelism past an int", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, parallelism: -100000000000000000000}\n",
			[]string{`job.yaml:3: sources[0].parallelism: must be at least 1, got -100000000000000000000`}},
		// Subjects and streams NATS refuses: without a check here, the job
		// was submitted and restarted on "nats: invalid subject".
		{"source subject with a space", "name: j\nsources:\n  - {name: in, kind: nats, subject: \"a b\"}\n",
			[]string{`job.yaml:3: sources[0].subject: bad subject "a b"`}},
		{"jetstream filter with an empty token", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, filter: \"a..b\"}\n",
			[]string{`job.yaml:3: sources[0].filter: bad subject "a..b"`}},
		{"sink subject with a wildcard", "name: j\nsinks:\n  - {name: o, kind: nats, subject: \"b.>\", input: {from: x}}\n",
			[]string{`job.yaml:3: sinks[0].subject: bad subject "b.>" (a sink publishes to one subject: no wildcards)`}},
		{"sink subject with {key} first", "name: j\nsinks:\n  - {name: o, kind: nats, subject: \"{key}\", input: {from: x}}\n",
			[]string{`job.yaml:3: sinks[0].subject: bad subject "{key}" ({key} is a whole token, once, after at least one other: e.g. out.{key} or orders.{key}.created)`}},
		{"sink subject with {key} in a token", "name: j\nsinks:\n  - {name: o, kind: nats, subject: \"a.b{key}\", input: {from: x}}\n",
			[]string{`job.yaml:3: sinks[0].subject: bad subject "a.b{key}" ({key} is a whole token`}},
		{"stream with a dot", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: A.B}\n",
			[]string{`job.yaml:3: sources[0].stream: bad stream name "A.B"`}},
		// Thousands retained at a short interval filled the checkpoint
		// bucket, and the job's removal took minutes.
		{"retained over the maximum", "name: j\ncheckpointing:\n  retained: 100000\n",
			[]string{`job.yaml:3: checkpointing.retained: must be at most 1000, got 100000`}},
		{"partitions over the maximum", "name: j\nsources:\n  - {name: in, kind: jetstream, stream: S, partitions: 1000000000, partition-filter: \"a.{p}\"}\n",
			[]string{`job.yaml:3: sources[0].partitions: must be at most 65536, got 1000000000`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(c.spec), Options{CheckModule: func(r modref.Ref) error {
				if r.Name == "nosuch" {
					return errors.New("not in the registry")
				}
				return nil
			}})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want Errors", err)
			}
			for _, w := range c.want {
				found := false
				for _, e := range es {
					if strings.HasPrefix(e.Error(), w) {
						found = true
					}
				}
				if !found {
					t.Errorf("missing error %q in:\n%v", w, err)
				}
			}
		})
	}
}

// The shortest interval and timeout pass, and so do concurrent aligned
// checkpoints, and a min-pause or aligned-timeout alone.
func TestCheckpointingAtItsBounds(t *testing.T) {
	for _, c := range []string{
		"{interval: 10ms, timeout: 50ms}",
		"{max-concurrent: 4}",
		"{min-pause: 5s}",
		"{timeout: 30s, aligned-timeout: 29s}",
		"{mode: unaligned, max-concurrent: 1}",
	} {
		spec := "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\ncheckpointing: " + c + "\n"
		s, err := Parse("job.yaml", []byte(spec), Options{})
		if err != nil {
			t.Errorf("checkpointing: %s: %v", c, err)
			continue
		}
		if err := Check(s); err != nil {
			t.Errorf("checkpointing: %s: Check: %v", c, err)
		}
	}
}

func TestMultipleErrorsReportedTogether(t *testing.T) {
	_, err := Parse("job.yaml", []byte("name: j\nsources: [{name: in, kind: nats}]\noperators:\n  - {name: a, module: m, inputs: [{from: x}], bogus: 1}\nsinks: [{name: o, kind: nats, subject: s, input: {from: a}}]\n"), Options{})
	var es Errors
	if !errors.As(err, &es) || len(es) < 3 {
		t.Fatalf("want >= 3 errors, got %v", err)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Line < es[i-1].Line {
			t.Errorf("errors not in line order:\n%v", err)
		}
	}
}

// TestOneErrorPerMistake checks that a value decoding refused is not
// reported a second time as missing, and that each mistake gets exactly
// the one line that names it.
func TestOneErrorPerMistake(t *testing.T) {
	ok := "sources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n"
	cases := []struct {
		name, spec string
		want       []string
	}{
		{"name is a list", "name: [a]\n" + ok,
			[]string{`job.yaml:1: name: want a string, got a list`}},
		{"name is null", "name:\n" + ok,
			[]string{`job.yaml:1: name: want a string, got nothing`}},
		{"no name", ok,
			[]string{`job.yaml: name: a job needs a name`}},
		{"unknown kind", "name: j\nsources: [{name: in, kind: kafka, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n",
			[]string{`job.yaml:2: sources[0].kind: unknown value "kafka" (want nats, jetstream)`}},
		{"unknown source key", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, key: subjects}\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n",
			[]string{`job.yaml:3: sources[0].key: unknown value "subjects" (did you mean subject? want header, subject)`}},
		{"source key not a string", "name: j\nsources:\n  - {name: in, kind: nats, subject: a, key: [subject]}\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n",
			[]string{`job.yaml:3: sources[0].key: want one of header, subject, got a list`}},
		{"inputs not a list", "name: j\n" + ok + "operators: [{name: a, module: m, inputs: {from: in}}]\n",
			[]string{`job.yaml:4: operators[0].inputs: want a list, got a mapping (write each input as a list item: - from: NAME)`}},
		// As some other tools write them: the name as the key.
		{"sources by name", "name: j\nsources:\n  in: {kind: nats, subject: a}\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n",
			[]string{`job.yaml:3: sources: want a list, got a mapping (write each source as a list item with its name: - name: in)`}},
		{"sinks by name", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks:\n  out: {kind: nats, subject: b, input: {from: in}}\n",
			[]string{`job.yaml:4: sinks: want a list, got a mapping (write each sink as a list item with its name: - name: out)`}},
		// The decoder's own "yaml:" prefix is not passed on.
		{"bad tagged config", "name: j\n" + ok + "operators: [{name: a, module: m, config: {n: !!float x}, inputs: [{from: in}]}]\n",
			[]string{"job.yaml:4: operators[0].config: bad config: cannot decode !!str `x` as a !!float"}},
		{"input a bare name", "name: j\n" + ok + "operators: [{name: a, module: m, inputs: [in]}]\n",
			[]string{`job.yaml:4: operators[0].inputs[0]: want a mapping like {from: in}, got "in"`}},
		{"source not a mapping", "name: j\nsources: [in]\nsinks: [{name: out, kind: nats, subject: b, input: {from: x}}]\n",
			[]string{`job.yaml:2: sources[0]: want a mapping, got "in"`, `job.yaml:3: sinks[0].input.from: unknown operator or source "x"`}},
		{"sink input not a mapping", "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: in}]\n",
			[]string{`job.yaml:3: sinks[0].input: want a mapping like {from: in}, got "in"`}},
		{"operator named like a source", "name: j\n" + ok + "operators: [{name: in, module: m, inputs: [{from: in}]}]\n",
			[]string{`job.yaml:4: operators[0].name: duplicate name "in" (also sources[0])`}},
		// The sink reads the operator it shares a name with: that is no
		// cycle, only a duplicate name.
		{"sink named like an operator", "name: j\nsources: [{name: in, kind: nats, subject: a}]\noperators: [{name: out, module: m, inputs: [{from: in}]}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: out}}]\n",
			[]string{`job.yaml:4: sinks[0].name: duplicate name "out" (also operators[0])`}},
		// The misspelt key is the mistake; what reads the source is not.
		{"source name key misspelt", "name: j\nsources: [{nmae: in, kind: nats, subject: a}]\nsinks: [{name: out, kind: nats, subject: b, input: {from: in}}]\n",
			[]string{`job.yaml:2: sources[0].nmae: unknown option "nmae" (did you mean name?)`}},
		{"operator name key misspelt", "name: j\n" + ok + "operators:\n  - {nam: a, module: m, inputs: [{from: in}]}\n  - {name: b, module: m, inputs: [{from: a}, {from: c}]}\n",
			[]string{`job.yaml:5: operators[0].nam: unknown option "nam" (did you mean name?)`,
				`job.yaml:6: operators[1].inputs[1].from: unknown operator or source "c" (the job has: in, b)`}},
		{"reads a sink", "name: j\n" + ok + "operators: [{name: a, module: m, inputs: [{from: out}]}]\n",
			[]string{`job.yaml:4: operators[0].inputs[0].from: "out" is a sink, and a sink produces nothing (want an operator or source)`}},
		{"two documents", "name: j\n" + ok + "---\nname: k\n",
			[]string{`job.yaml:5: a second YAML document: a job spec is one document (one job per file)`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(c.spec), Options{})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
	// A document separator with nothing after it is fine.
	if _, err := Parse("job.yaml", []byte("name: j\n"+ok+"---\n"), Options{}); err != nil {
		t.Errorf("trailing ---: %v", err)
	}
}

// TestYAMLSyntaxErrors checks that a syntax error names the line of the
// mistake (or of the construct it left unfinished) and says what is
// likely wrong, for the mistakes hand-written specs make.
func TestYAMLSyntaxErrors(t *testing.T) {
	for _, c := range []struct{ name, spec, want string }{
		{"tab indentation", "name: j\n\tsources: []\n",
			"job.yaml:2: bad YAML: found a tab character that violates indentation (indent with spaces: YAML does not allow tabs)"},
		{"tab before a list item", "name: j\nsources:\n\t- a\n",
			"job.yaml:3: bad YAML: found character that cannot start any token (indent with spaces: YAML does not allow tabs)"},
		{"value starting with @", "name: @j\n",
			"job.yaml:1: bad YAML: found character that cannot start any token (quote a value that starts with @, ` or %)"},
		{"unclosed quote", "name: j\nsources:\n  - name: \"in\n    kind: nats\n",
			"job.yaml:3: bad YAML: found unexpected end of stream (a quote left open?)"},
		{"missing colon", "name: j\nsources:\n  - name: in\n    kind nats\n    subject: a\n",
			"job.yaml:4: bad YAML: could not find expected ':' (a key without its colon?)"},
		{"second colon on the first line", "name: j: k\n",
			"job.yaml:1: bad YAML: mapping values are not allowed in this context (a colon missing on the line before, a line indented too deep, or a value holding \": \" to quote?)"},
		{"unclosed bracket", "name: j\nsources: [a, b\nsinks: []\n",
			"job.yaml:2: bad YAML: did not find expected ',' or ']' (a bracket left open?)"},
		{"keyed subject unquoted in a flow mapping", "name: j\nsinks:\n  - {name: out, kind: nats, subject: out.{key}, input: {from: in}}\n",
			"job.yaml:3: bad YAML: did not find expected ',' or '}' (quote a value holding braces inside {…} or […]: \"out.{key}\")"},
		{"partition filter unquoted in a flow mapping", "name: j\nsources: [{name: in, kind: jetstream, stream: S, partitions: 2, partition-filter: s.{p}.>}]\n",
			"job.yaml:2: bad YAML: did not find expected ',' or '}' (quote a value holding braces inside {…} or […]: \"s.{p}.>\")"},
		{"bracket too many", "name: j\nconfig: {a: 1}}\n",
			"job.yaml:2: bad YAML: did not find expected key (a line indented differently from the ones before it, or a bracket too many?)"},
		{"list item without its dash", "name: j\ncheckpointing:\n  - mode: unaligned\n  interval: 1s\n",
			"job.yaml:3: bad YAML: did not find expected '-' indicator (a list item without its '-', or a line indented like one?)"},
		{"unknown anchor", "name: j\nsources:\n  - *src\n",
			"job.yaml:3: bad YAML: unknown anchor 'src' referenced (an alias *src needs an anchor &src before it)"},
		{"bad JSON", "{\"name\": \"j\",\n \"sources\": [}\n",
			"job.yaml:2: bad YAML: did not find expected node content"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(c.spec), Options{})
			if err == nil || err.Error() != c.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, c.want)
			}
		})
	}
}

// TestParseFileModulePathsAbsolute checks that a module file path relative
// to the spec becomes absolute even when the spec's own path is relative:
// the coordinator and workers that read the module may run in another
// directory.
func TestParseFileModulePathsAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll("jobs", 0o755); err != nil {
		t.Fatal(err)
	}
	spec := "name: j\nsources: [{name: in, kind: nats, subject: a}]\n" +
		"operators: [{name: a, module: ./op.wasm, inputs: [{from: in}]}]\n" +
		"sinks: [{name: out, kind: nats, subject: b, input: {from: a}}]\n"
	if err := os.WriteFile(filepath.Join("jobs", "job.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ParseFile(filepath.Join("jobs", "job.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "jobs", "op.wasm")
	if real, err := filepath.EvalSymlinks(dir); err == nil && !strings.HasPrefix(s.Operators[0].Module, dir) {
		want = filepath.Join(real, "jobs", "op.wasm")
	}
	if got := s.Operators[0].Module; got != want {
		t.Errorf("module = %q, want %q", got, want)
	}
}

// TestLimitsAtTheBounds: the smallest and largest limits the host honours
// as written pass, and 0 still means the host's default.
func TestLimitsAtTheBounds(t *testing.T) {
	for _, c := range []struct {
		limits string
		want   Limits
	}{
		{"{memory: 64KiB, timeout: 10ms}", Limits{Memory: 64 << 10, Timeout: 10 * time.Millisecond}},
		{"{memory: 4GiB, timeout: 1h}", Limits{Memory: 4 << 30, Timeout: time.Hour}},
		{"{memory: 4194304, timeout: 1s}", Limits{Memory: 4 << 20, Timeout: time.Second}},
		{"{memory: 0, timeout: 0}", Limits{}},
		{"{log-rate: 1}", Limits{LogRate: 1}},
		{"{log-rate: 0}", Limits{}},
		{"{log-rate: 100000}", Limits{LogRate: 100_000}},
		{"{snapshot-timeout: 10ms}", Limits{SnapshotTimeout: 10 * time.Millisecond}},
		{"{timeout: 60s, snapshot-timeout: 5m}", Limits{Timeout: time.Minute, SnapshotTimeout: 5 * time.Minute}},
		{"{snapshot-timeout: 0}", Limits{}},
	} {
		spec := "name: j\nsources: [{name: in, kind: nats, subject: a}]\noperators:\n" +
			"  - {name: a, module: m, limits: " + c.limits + ", inputs: [{from: in}]}\n" +
			"sinks: [{name: out, kind: nats, subject: b, input: {from: a}}]\n"
		s, err := Parse("job.yaml", []byte(spec), Options{})
		if err != nil {
			t.Errorf("%s: %v", c.limits, err)
			continue
		}
		if got := s.Operators[0].Limits; got != c.want {
			t.Errorf("%s: limits %+v, want %+v", c.limits, got, c.want)
		}
	}
}

// TestLimitsMatchTheHost: the bounds validation enforces are the ones
// host/wasm applies; if the host changes, validation must follow.
func TestLimitsMatchTheHost(t *testing.T) {
	if WasmPage != wasm.PageSize || MaxMemory != wasm.MaxMemoryBytes {
		t.Errorf("page %d, max memory %d; host/wasm has %d, %d", WasmPage, MaxMemory, wasm.PageSize, wasm.MaxMemoryBytes)
	}
	if MinTimeout != wasm.DefaultWatchdogInterval {
		t.Errorf("MinTimeout %s, host/wasm checks deadlines every %s", MinTimeout, wasm.DefaultWatchdogInterval)
	}
}

// A misspelt option is named with the option it most likely means, and
// that option is not also reported missing: the one error is the typo's.
func TestMisspeltOptionIsTheOnlyError(t *testing.T) {
	for spec, want := range map[string]string{
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\noperators:\n  - name: op\n    module: m@1\n    inptus: [{from: in}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: op}}]\n": `job.yaml:6: operators[0].inptus: unknown option "inptus" (did you mean inputs?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, inptu: {from: in}}]\n":                                                                      `job.yaml:3: sinks[0].inptu: unknown option "inptu" (did you mean input?)`,
		"nmae: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\n":                                                                      `job.yaml:1: nmae: unknown option "nmae" (did you mean name?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {frmo: in}}]\n":                                                                      `job.yaml:3: sinks[0].input.frmo: unknown option "frmo" (did you mean from?)`,
		// Shortened, lengthened, or another system's word.
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\ncheckpoint: {interval: 1s}\n":  `job.yaml:4: checkpoint: unknown option "checkpoint" (did you mean checkpointing?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\ncheckpoints: {interval: 1s}\n": `job.yaml:4: checkpoints: unknown option "checkpoints" (did you mean checkpointing?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a, parallel: 2}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\n":                 `job.yaml:2: sources[0].parallel: unknown option "parallel" (did you mean parallelism?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in, partitioning: key}}]\n":           `job.yaml:3: sinks[0].input.partitioning: unknown option "partitioning" (did you mean partition?)`,
		"name: j\nsources: [{name: in, type: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\n":                              `job.yaml:2: sources[0].type: unknown option "type" (did you mean kind?)`,
		"name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {source: in}}]\n":                            `job.yaml:3: sinks[0].input.source: unknown option "source" (did you mean from?)`,
	} {
		_, err := Parse("job.yaml", []byte(spec), Options{})
		if err == nil || err.Error() != want {
			t.Errorf("Parse = %v\nwant only %s", err, want)
		}
	}
	// With the option present as well, the stray key gets no guess.
	_, err := Parse("job.yaml", []byte("name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}, inptu: 1}]\n"), Options{})
	if err == nil || !strings.HasPrefix(err.Error(), `job.yaml:3: sinks[0].inptu: unknown option "inptu" (valid: `) {
		t.Errorf("Parse = %v", err)
	}
}

// channels.buffer bounds each channel's bytes; Check refuses a value out
// of its range as Parse does.
func TestChannelBuffer(t *testing.T) {
	s, err := Parse("job.yaml", []byte("name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\nchannels: {buffer: 64KiB}\n"), Options{})
	if err != nil || s.Channels.Buffer != 64<<10 {
		t.Fatalf("parse: %+v, %v", s, err)
	}
	s.Channels.Buffer = -1
	if err := Check(s); err == nil || !strings.Contains(err.Error(), "channels.buffer: must not be negative") {
		t.Errorf("check of a negative buffer: %v", err)
	}
}

func TestChannelDebloat(t *testing.T) {
	const base = "name: j\nsources: [{name: in, kind: nats, subject: a}]\nsinks: [{name: o, kind: nats, subject: b, input: {from: in}}]\n"
	for _, c := range []struct {
		yaml string
		want time.Duration // DebloatTarget
		err  string
	}{
		{"", DefaultDebloat, ""},
		{"channels: {debloat: 250ms}\n", 250 * time.Millisecond, ""},
		{"channels: {debloat: off}\n", 0, ""},
		{"channels: {debloat: 0}\n", 0, ""},
		{"channels: {debloat: 1ms}\n", 0, "channels.debloat: 1ms is less than 10ms (or off)"},
		{"channels: {debloat: fast}\n", 0, "channels.debloat"},
	} {
		s, err := Parse("job.yaml", []byte(base+c.yaml), Options{})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one with %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if got := s.Channels.DebloatTarget(); got != c.want {
			t.Errorf("%q: debloat target %v, want %v", c.yaml, got, c.want)
		}
		if err := Check(s); err != nil {
			t.Errorf("%q: check: %v", c.yaml, err)
		}
	}
	s, _ := Parse("job.yaml", []byte(base), Options{})
	s.Channels.Debloat = time.Millisecond
	if err := Check(s); err == nil || !strings.Contains(err.Error(), "channels.debloat") {
		t.Errorf("check of a 1ms target: %v", err)
	}
}

// Sizes are powers of 1024 whether written MB or MiB (KB/KiB, GB/GiB).
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"65536": 65536, "100B": 100, "512KiB": 512 << 10, "512KB": 512 << 10, "512K": 512 << 10,
		"600MB": 600 << 20, "600MiB": 600 << 20, "600 MiB": 600 << 20, "1GB": 1 << 30, "1Gi": 1 << 30, "2TiB": 2 << 40,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64mb", "1.5GiB", "-1", "64XB", "99999999999999TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
