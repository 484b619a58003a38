package jobspec

import (
	"strings"
	"testing"
)

func TestFeedbackLoops(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		want       []string
	}{
		{"jetstream into its own source's stream", `name: j
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: IN, subject: "in.{key}", input: {from: in}}]
`, []string{"sink out writes in.> in stream IN, which source in reads (all its subjects): every record the sink writes is read again, a loop without end unless an operator drops what it has seen"}},
		{"another filter of the same stream", `name: j
sources: [{name: in, kind: jetstream, stream: S, filter: "raw.>"}]
sinks: [{name: out, kind: jetstream, stream: S, subject: "clean.{key}", input: {from: in}}]
`, nil},
		{"the same filter of the same stream", `name: j
sources: [{name: in, kind: jetstream, stream: S, filter: "raw.*"}]
sinks: [{name: out, kind: jetstream, stream: S, subject: raw.x, input: {from: in}}]
`, []string{"sink out writes raw.x in stream S, which source in reads (raw.*)"}},
		{"core on core", `name: j
sources: [{name: in, kind: nats, subject: "a.>"}]
sinks: [{name: out, kind: nats, subject: a.b, input: {from: in}}]
`, []string{"sink out writes a.b, which source in reads (a.>)"}},
		{"jetstream onto a core source's subject", `name: j
sources: [{name: in, kind: nats, subject: "ev"}]
sinks: [{name: out, kind: jetstream, stream: EV, subject: ev, input: {from: in}}]
`, []string{"sink out writes ev in stream EV, which source in reads (ev)"}},
		{"apart", `name: j
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: in}}]
`, nil},
	} {
		s, err := Parse("job.yaml", []byte(c.spec), Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := FeedbackLoops(s)
		if len(got) != len(c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("%s: %q, want it to start %q", c.name, got[i], c.want[i])
			}
		}
	}
}

func TestUnread(t *testing.T) {
	s, err := Parse("job.yaml", []byte(`name: j
sources: [{name: a, kind: nats, subject: a}, {name: b, kind: nats, subject: b}]
operators:
  - {name: used, module: m.wasm, inputs: [{from: a}]}
  - {name: idle, module: m.wasm, inputs: [{from: a}]}
sinks: [{name: out, kind: nats, subject: out, input: {from: used}}]
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := Unread(s)
	want := []string{
		"source b: nothing reads it (no operator or sink has an input from it): what it reads is dropped",
		"operator idle: nothing reads it (no operator or sink has an input from it): what it emits is dropped",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// An operator with several readers is told to emit to each port: a
// second sink of an operator written for one port gets nothing. A
// source's readers each get every record, and one reader is one port.
func TestOutputPorts(t *testing.T) {
	s, err := Parse("job.yaml", []byte(`name: j
sources: [{name: in, kind: jetstream, stream: IN}]
operators:
  - {name: tag, module: m, inputs: [{from: in}]}
  - {name: more, module: m, inputs: [{from: tag}]}
  - {name: one, module: m, inputs: [{from: in}]}
sinks:
  - {name: alo, kind: jetstream, stream: A, subject: a, input: {from: tag}}
  - {name: eo, kind: jetstream, stream: E, subject: e, input: {from: tag}}
  - {name: other, kind: jetstream, stream: O, subject: o, input: {from: one}}
  - {name: last, kind: jetstream, stream: L, subject: l, input: {from: more}}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := OutputPorts(s)
	want := "operator tag has 3 readers, each on an output port of its own (port 0 to operator more, port 1 to sink alo, port 2 to sink eo): " +
		"each gets only what the operator emits to its port, not every record; emit a record to each port that should have it"
	if len(got) != 1 || got[0] != want {
		t.Errorf("OutputPorts = %q; want [%q]", got, want)
	}
}
