package plan

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/jobspec"
)

func TestBuild(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources:
  - {name: a, kind: nats, subject: a, parallelism: 2}
  - {name: b, kind: nats, subject: b}
operators:
  - name: m
    module: m
    parallelism: 2
    inputs: [{from: a}, {from: b, partition: broadcast}]
  - name: k
    module: k
    parallelism: 3
    inputs: [{from: m, partition: key}]
sinks:
  - {name: out, kind: nats, subject: o, input: {from: k}}
  - {name: tap, kind: nats, subject: t, parallelism: 2, input: {from: m}}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tasks) != 2+1+2+3+1+2 {
		t.Fatalf("%d tasks", len(p.Tasks))
	}
	m0, _ := p.Task("m-0")
	if !reflect.DeepEqual(m0.Inputs, [][]string{{"a-0_m-0_0"}, {"b-0_m-0_1"}}) {
		t.Errorf("m-0 inputs = %v", m0.Inputs)
	}
	// m's outputs: port 0 to k (declared first), port 1 to sink tap.
	want := []Output{
		{Partition: "key", Channels: []string{"m-0_k-0_0", "m-0_k-1_0", "m-0_k-2_0"}},
		{Partition: "forward", Channels: []string{"m-0_tap-0_0"}},
	}
	if !reflect.DeepEqual(m0.Outputs, want) {
		t.Errorf("m-0 outputs = %+v", m0.Outputs)
	}
	k1, _ := p.Task("k-1")
	if !reflect.DeepEqual(k1.Inputs, [][]string{{"m-0_k-1_0", "m-1_k-1_0"}}) {
		t.Errorf("k-1 inputs = %v", k1.Inputs)
	}
	b0, _ := p.Task("b-0")
	if len(b0.Outputs) != 1 || len(b0.Outputs[0].Channels) != 2 {
		t.Errorf("broadcast b-0 outputs = %+v", b0.Outputs)
	}
	c, ok := p.Channel("m-1_k-2_0")
	if !ok || c.OutPort != 0 || c.InPort != 0 || c.Partition != "key" {
		t.Errorf("channel = %+v", c)
	}
	if got := p.SourceTasks(); !reflect.DeepEqual(got, []string{"a-0", "a-1", "b-0"}) {
		t.Errorf("sources = %v", got)
	}
	// JSON round trip.
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(&back, p) {
		t.Errorf("json round trip differs: %v", err)
	}
	as, err := Assign(p, []string{"w2", "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(as["w1"]) != 6 || len(as["w2"]) != 5 || as["w1"][0] != "a-0" || as["w2"][0] != "a-1" {
		t.Errorf("assignment = %v", as)
	}
	if _, err := Assign(p, nil); err == nil {
		t.Error("assign to no workers succeeded")
	}
}

// TestSelfJoin: one producer feeding two input ports of the same consumer
// gets two output ports and distinct channels.
func TestSelfJoin(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: a, kind: nats, subject: a, parallelism: 2}]
operators:
  - {name: join, module: m, parallelism: 2, inputs: [{from: a, partition: key}, {from: a, partition: key}]}
sinks: [{name: out, kind: nats, subject: o, input: {from: join}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range p.Channels {
		if seen[c.ID] {
			t.Errorf("duplicate channel %s", c.ID)
		}
		seen[c.ID] = true
	}
	a0, _ := p.Task("a-0")
	if len(a0.Outputs) != 2 || a0.Outputs[1].Channels[1] != "a-0_join-1_1" {
		t.Errorf("a-0 outputs %+v", a0.Outputs)
	}
	j1, _ := p.Task("join-1")
	if !reflect.DeepEqual(j1.Inputs, [][]string{{"a-0_join-1_0", "a-1_join-1_0"}, {"a-0_join-1_1", "a-1_join-1_1"}}) {
		t.Errorf("join-1 inputs %v", j1.Inputs)
	}
}

// Build refuses a spec that did not come from jobspec.Parse (the job API
// decodes it from JSON) when its plan would be unusable: IDs that are not
// NATS subject tokens, vertices without tasks, or more tasks and channels
// than any job can run.
func TestBuildRefusesAnInvalidSpec(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(s *jobspec.Spec)
		want string
	}{
		{"job name with wildcard", func(s *jobspec.Spec) { s.Name = "a.>" }, `plan "a.>": bad job name`},
		{"empty job name", func(s *jobspec.Spec) { s.Name = "" }, `plan "": bad job name`},
		{"vertex name with dot", func(s *jobspec.Spec) { s.Operators[0].Name = "c.*"; s.Sinks[0].Input.From = "c.*" },
			`plan j: operator "c.*": bad name`},
		{"zero parallelism", func(s *jobspec.Spec) { s.Sources[0].Parallelism = 0 }, `plan j: source in: parallelism 0`},
		{"negative parallelism", func(s *jobspec.Spec) { s.Sinks[0].Parallelism = -2 }, `plan j: sink out: parallelism -2`},
		{"huge parallelism", func(s *jobspec.Spec) { s.Sources[0].Parallelism = 1 << 30 }, `plan j: source in: parallelism 1073741824`},
		{"huge partitions", func(s *jobspec.Spec) { s.Sources[0].Partitions = 1 << 30 }, `plan j: source in: 1073741824 partitions`},
		{"too many channels", func(s *jobspec.Spec) {
			s.Sources[0].Parallelism, s.Operators[0].Parallelism = jobspec.MaxParallelism, jobspec.MaxParallelism
			s.Operators[0].Inputs[0].Partition = jobspec.RoundRobin
		}, `plan j: count reads in over 4294967296 channels`},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: nats, subject: a}]
operators: [{name: count, module: m, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: o, input: {from: count}}]
`), jobspec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c.edit(spec)
			p, err := Build(spec)
			if err == nil {
				t.Fatalf("Build = %d tasks, want an error", len(p.Tasks))
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("err = %q, want it to start with %q", err, c.want)
			}
		})
	}
}
