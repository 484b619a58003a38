package plan

import (
	"testing"

	"github.com/weirhq/weir/coordinator/jobspec"
)

// A reader that gives its port takes it: the operator's output ports,
// and each of its tasks' channels, go where the spec pins them, whatever
// the order of the readers.
func TestBuildPinnedPorts(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: nats, subject: in}]
operators:
  - {name: parse, module: m, inputs: [{from: in}]}
  - {name: audit, module: m, inputs: [{from: parse}]}
sinks:
  - {name: good, kind: nats, subject: g, input: {from: parse, port: 0}}
  - {name: rejects, kind: nats, subject: r, input: {from: parse, port: 1}}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"good", "rejects", "audit"}
	var parse Vertex
	for _, v := range p.Vertices {
		if v.Name == "parse" {
			parse = v
		}
	}
	if len(parse.Outputs) != len(want) {
		t.Fatalf("parse's outputs %+v, want to %v", parse.Outputs, want)
	}
	for port, to := range want {
		if e := parse.Outputs[port]; e.To != to || e.OutPort != port {
			t.Errorf("parse's output port %d: %+v, want to %s", port, e, to)
		}
	}
	for _, task := range p.Tasks {
		if task.Vertex != "parse" {
			continue
		}
		for port, to := range want {
			if got := task.Outputs[port].Channels; len(got) != 1 || got[0] != ChannelID("parse-0", to+"-0", 0) {
				t.Errorf("task %s port %d: channels %q, want the one to %s", task.ID, port, got, to)
			}
		}
	}
}
