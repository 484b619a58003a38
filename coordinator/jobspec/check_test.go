package jobspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// goodJSON is the spec `good` as the job API carries it.
func goodJSON(t *testing.T) *Spec {
	t.Helper()
	s, err := Parse("good.yaml", []byte(good), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// A spec that reaches the job API as JSON gets every refusal Parse gives,
// each naming the field at fault, and no line (the caller may have no file).
func TestCheckRefusesWhatParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		path string
		edit func(s *Spec)
	}{
		{"name", func(s *Spec) { s.Name = "a b" }},
		{"sources", func(s *Spec) {
			s.Sources = nil
			s.Operators[0].Inputs = nil
			s.Operators[0].Inputs = []Input{{From: "count"}}
		}},
		{"sources[0].kind", func(s *Spec) { s.Sources[0].Kind = "kafka" }},
		{"sources[0].stream", func(s *Spec) { s.Sources[0].Stream = "A.B" }},
		{"sources[0].filter", func(s *Spec) { s.Sources[0].Filter = "a..b" }},
		{"sources[0].parallelism", func(s *Spec) { s.Sources[0].Parallelism = 0 }},
		{"sources[0].partitions", func(s *Spec) { s.Sources[0].Partitions = -1 }},
		{"sources[0].start", func(s *Spec) { s.Sources[0].Start = "yesterday" }},
		{"sources[0].key", func(s *Spec) { s.Sources[0].Key = "topic" }},
		{"sources[0].pending-messages", func(s *Spec) { s.Sources[0].PendingMessages = 1000 }}, // a jetstream source
		{"sources[0].pending-bytes", func(s *Spec) {
			s.Sources[0].Kind, s.Sources[0].Subject, s.Sources[0].Stream, s.Sources[0].Filter = KindNATS, "in", "", ""
			s.Sources[0].PendingBytes = 1000
		}},
		{"operators[1].name", func(s *Spec) { s.Operators[1].Name = "split" }},
		{"operators[0].module", func(s *Spec) { s.Operators[0].Module = "" }},
		{"operators[0].parallelism", func(s *Spec) { s.Operators[0].Parallelism = MaxParallelism + 1 }},
		{"operators[1].limits.memory", func(s *Spec) { s.Operators[1].Limits.Memory = 1000 }},
		{"operators[1].limits.timeout", func(s *Spec) { s.Operators[1].Limits.Timeout = time.Millisecond }},
		{"operators[1].limits.snapshot-timeout", func(s *Spec) { s.Operators[1].Limits.SnapshotTimeout = time.Millisecond }},
		{"operators[1].inputs[0].partition", func(s *Spec) { s.Operators[1].Inputs[0].Partition = "hash" }},
		{"operators[1].inputs[0].from", func(s *Spec) { s.Operators[0].Inputs[0].From = "count" }}, // a cycle
		{"operators[0].inputs", func(s *Spec) { s.Operators[0].Inputs = nil }},
		{"sinks[0].kind", func(s *Spec) { s.Sinks[0].Kind = "file" }},
		{"sinks[0].subject", func(s *Spec) { s.Sinks[0].Subject = "counts.>" }},
		{"sinks[0].subject", func(s *Spec) { s.Sinks[0].Subject = "counts.{key}.{key}" }},
		{"sinks[0].guarantee", func(s *Spec) { s.Sinks[0].Guarantee = "twice" }},
		{"sinks[0].publish", func(s *Spec) { s.Sinks[0].Publish = "slow" }},
		{"sinks[0].ack-timeout", func(s *Spec) { s.Sinks[0].AckTimeout = -time.Second }},
		{"sinks[0].input.from", func(s *Spec) { s.Sinks[0].Input.From = "nowhere" }},
		{"checkpointing.mode", func(s *Spec) { s.Checkpointing.Mode = "sometimes" }},
		{"checkpointing.aligned-timeout", func(s *Spec) { s.Checkpointing.Mode = ModeUnaligned }},
		{"checkpointing.interval", func(s *Spec) { s.Checkpointing.Interval = -time.Second }},
		{"checkpointing.timeout", func(s *Spec) { s.Checkpointing.Timeout = -time.Second }},
		{"checkpointing.interval", func(s *Spec) { s.Checkpointing.Interval = time.Nanosecond }},
		{"checkpointing.timeout", func(s *Spec) { s.Checkpointing.Timeout = time.Millisecond }},
		{"checkpointing.aligned-timeout", func(s *Spec) { s.Checkpointing.AlignedTimeout = s.Checkpointing.Timeout }},
		{"checkpointing.max-concurrent", func(s *Spec) { s.Checkpointing.Mode, s.Checkpointing.MaxConcurrent = ModeUnaligned, 2 }},
		{"checkpointing.max-concurrent", func(s *Spec) { s.Checkpointing.MinPause, s.Checkpointing.MaxConcurrent = time.Second, 2 }},
		{"checkpointing.max-concurrent", func(s *Spec) { s.Checkpointing.MaxConcurrent = -1 }},
		{"checkpointing.retained", func(s *Spec) { s.Checkpointing.Retained = -1 }},
		{"checkpointing.retained", func(s *Spec) { s.Checkpointing.Retained = MaxRetained + 1 }},
		{"restart.strategy", func(s *Spec) { s.Restart.Strategy = "pray" }},
		{"restart.multiplier", func(s *Spec) { s.Restart.Multiplier = 0.5 }},
		{"restart.max", func(s *Spec) { s.Restart.Max = time.Millisecond }},
		{"restart.attempts", func(s *Spec) { s.Restart.Attempts = -1 }},
	} {
		s := goodJSON(t)
		tc.edit(s)
		err := Check(s)
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("%s: Check = %v, want Errors", tc.path, err)
			continue
		}
		found := false
		for _, e := range es {
			found = found || e.Path == tc.path
			if e.Line != 0 || e.File != "" {
				t.Errorf("%s: error %q has a file or line", tc.path, e)
			}
		}
		if !found {
			t.Errorf("%s: Check = %v, want an error at %s", tc.path, err, tc.path)
		}
	}
}

// A client that leaves settings out gets Parse's defaults, not a job that
// never checkpoints or never restarts.
func TestCheckFillsDefaults(t *testing.T) {
	s := goodJSON(t)
	s.Checkpointing = Checkpointing{}
	s.Restart = Restart{Strategy: RestartExponentialBackoff}
	s.Sinks[0].Guarantee = ""
	s.Operators[1].Inputs[0].Partition = ""
	s.Sources[0].Key = ""
	if err := Check(s); err != nil {
		t.Fatal(err)
	}
	c := s.Checkpointing
	if c.Mode != ModeExactlyOnce || c.Interval != DefaultInterval || c.Timeout != DefaultTimeout ||
		c.MaxConcurrent != DefaultMaxConcurrent || c.Retained != DefaultRetained {
		t.Errorf("checkpointing = %+v, want the defaults", c)
	}
	r := s.Restart
	if r.Initial != DefaultBackoffInitial || r.Max != DefaultBackoffMax || r.Multiplier != DefaultBackoffMultiplier {
		t.Errorf("restart = %+v, want the backoff defaults", r)
	}
	if s.Sinks[0].Guarantee != ExactlyOnce {
		t.Errorf("jetstream sink guarantee = %q, want %s", s.Sinks[0].Guarantee, ExactlyOnce)
	}
	if k := s.Sources[0].Key; k != KeyFromHeader {
		t.Errorf("source key = %q, want %s", k, KeyFromHeader)
	}
	if p := s.Operators[1].Inputs[0].Partition; p != RoundRobin {
		t.Errorf("partition between parallelisms 2 and 3 = %q, want %s", p, RoundRobin)
	}
	if err := Check(nil); err == nil || !strings.Contains(err.Error(), "no job spec") {
		t.Errorf("Check(nil) = %v", err)
	}
}

// A spec decoded from JSON gets the restart Parse gives the same spec in
// YAML, for each way of writing the restart block or leaving it out; and
// a spec Parse returned comes back from JSON as it was.
func TestJSONRestartAsParse(t *testing.T) {
	const body = `"name": "r", "sources": [{"name": "in", "kind": "nats", "subject": "in"}],
"sinks": [{"name": "out", "kind": "nats", "subject": "out", "input": {"from": "in"}}]`
	for yml, js := range map[string]string{
		``:                                     ``,
		`restart: {attempts: 0}`:               `, "restart": {"attempts": 0}`,
		`restart: {strategy: fixed-delay}`:     `, "restart": {"strategy": "fixed-delay"}`,
		`restart: {delay: 0s}`:                 `, "restart": {"delay": 0}`,
		`restart: {delay: 2s, attempts: 3}`:    `, "restart": {"delay": 2000000000, "attempts": 3}`,
		`restart: {strategy: none}`:            `, "restart": {"strategy": "none"}`,
		`restart: {initial: 2s}`:               `, "restart": {"initial": 2000000000}`,
		`checkpointing: {interval: 1s}`:        `, "checkpointing": {"interval": 1000000000}`,
		`checkpointing: {mode: at-least-once}`: `, "checkpointing": {"mode": "at-least-once"}`,
	} {
		want, err := Parse("r.yaml", []byte(`name: r
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`+yml), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var got Spec
		if err := json.Unmarshal([]byte("{"+body+js+"}"), &got); err != nil {
			t.Fatal(err)
		}
		if err := Check(&got); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		if got.Restart != want.Restart || got.Checkpointing != want.Checkpointing {
			t.Errorf("JSON {%s}: restart %+v, checkpointing %+v; want Parse's %+v, %+v", js, got.Restart, got.Checkpointing, want.Restart, want.Checkpointing)
		}
		if got.Sources[0].Parallelism != 1 || got.Sinks[0].Parallelism != 1 || got.Sources[0].Key != KeyFromHeader {
			t.Errorf("JSON {%s}: source %+v, sink %+v; want parallelism 1, key from the header", js, got.Sources[0], got.Sinks[0])
		}
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Restart != want.Restart || back.Checkpointing != want.Checkpointing {
			t.Errorf("%q through JSON: restart %+v, checkpointing %+v; want %+v, %+v", yml, back.Restart, back.Checkpointing, want.Restart, want.Checkpointing)
		}
	}
}
