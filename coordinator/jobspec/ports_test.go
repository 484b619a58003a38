package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
)

// The readers of an operator: those that give a port take it, the others
// the ports left in spec order; a spec that gives none numbers them as
// before ports could be given.
func TestOutputReadersPorts(t *testing.T) {
	const head = `name: j
sources: [{name: in, kind: nats, subject: in}]
`
	for _, c := range []struct {
		name, spec string
		want       string
	}{
		{"no ports: operators' inputs, then sinks", head + `operators:
  - {name: parse, module: m.wasm, inputs: [{from: in}]}
  - {name: audit, module: m.wasm, inputs: [{from: parse}]}
sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse}}
`, "operator audit,sink good,sink rejects"},
		{"pinned sinks, an operator added unpinned", head + `operators:
  - {name: parse, module: m.wasm, inputs: [{from: in}]}
  - {name: audit, module: m.wasm, inputs: [{from: parse}]}
sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: 0}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse, port: 1}}
`, "sink good,sink rejects,operator audit"},
		{"one pinned, the rest fill the gaps in order", head + `operators:
  - {name: parse, module: m.wasm, inputs: [{from: in}]}
  - {name: a, module: m.wasm, inputs: [{from: parse}]}
  - {name: b, module: m.wasm, inputs: [{from: parse, port: 0}]}
sinks:
  - {name: c, kind: nats, subject: c, input: {from: parse}}
`, "operator b,operator a,sink c"},
	} {
		s, err := Parse("job.yaml", []byte(c.spec), Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, r := range OutputReaders(s)["parse"] {
			got = append(got, r.String())
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: ports %q, want %s", c.name, got, c.want)
		}
	}
}

// A port that cannot be honoured is refused at the line of its input,
// naming the producer and why, by Parse and by Check (a JSON spec).
func TestPortRefused(t *testing.T) {
	const head = `name: j
sources: [{name: in, kind: nats, subject: in}]
operators:
  - {name: parse, module: m.wasm, inputs: [{from: in}]}
`
	for _, c := range []struct {
		name, spec, want string
	}{
		{"twice", head + `sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: 1}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse, port: 1}}
`, "job.yaml:7: sinks[1].input.port: port 1 of operator parse is sink good's too (sinks[0].input.port (line 6)): each reader of an operator takes a port of its own"},
		{"a gap", head + `sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: 2}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse}}
`, "job.yaml:6: sinks[0].input.port: port 2 of operator parse, which has 2 reader(s) and so ports 0 to 1: each reader takes one port, and the ports have no gaps"},
		{"from a source", head + `sinks:
  - {name: good, kind: nats, subject: g, input: {from: in, port: 0}}
`, "job.yaml:6: sinks[0].input.port: source in sends every record to each of its readers, so an input from it takes no port"},
		{"negative", head + `sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: -1}}
`, "job.yaml:6: sinks[0].input.port: must be at least 0, got -1"},
	} {
		_, err := Parse("job.yaml", []byte(c.spec), Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	// The job API's JSON: Check says the same, by path.
	port := 3
	s := &Spec{Name: "j",
		Sources:   []Source{{Name: "in", Kind: KindNATS, Subject: "in", Parallelism: 1}},
		Operators: []Operator{{Name: "parse", Module: "m.wasm", Parallelism: 1, Inputs: []Input{{From: "in"}}}},
		Sinks:     []Sink{{Name: "good", Kind: KindNATS, Subject: "g", Parallelism: 1, Input: Input{From: "parse", Port: &port}}},
	}
	if err := Check(s); err == nil || !strings.Contains(err.Error(), "sinks[0].input.port: port 3 of operator parse, which has 1 reader(s)") {
		t.Errorf("Check: %v", err)
	}
	// And the port survives the trip to a worker.
	port = 0
	b, _ := json.Marshal(s.Sinks[0].Input)
	var in Input
	if err := json.Unmarshal(b, &in); err != nil || in.Port == nil || *in.Port != 0 {
		t.Errorf("port through JSON %s: %v, %v", b, in.Port, err)
	}
}
