package plan

import (
	"encoding/json"
	"errors"
	"fmt"
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
	as, err := Assign(p, []Worker{{ID: "w2"}, {ID: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(as["w1"]) != 6 || len(as["w2"]) != 5 || as["w1"][0] != "a-0" || as["w2"][0] != "a-1" {
		t.Errorf("assignment = %v", as)
	}
}

// tasks returns a plan of job j with the given task IDs.
func tasks(ids ...string) *Plan {
	p := &Plan{Job: "j"}
	for _, id := range ids {
		p.Tasks = append(p.Tasks, Task{ID: id})
	}
	return p
}

func TestAssign(t *testing.T) {
	five := tasks("a-0", "a-1", "b-0", "b-1", "c-0")
	many := make([]Worker, 12)
	for i := range many {
		many[i] = Worker{ID: fmt.Sprintf("w%02d", i), Slots: 1, Used: 1}
	}
	for _, c := range []struct {
		name    string
		plan    *Plan
		workers []Worker
		want    map[string][]string
		wantErr string
	}{
		{name: "empty workers take turns, in ID order", plan: five,
			workers: []Worker{{ID: "w2"}, {ID: "w1"}},
			want:    map[string][]string{"w1": {"a-0", "b-0", "c-0"}, "w2": {"a-1", "b-1"}}},
		{name: "ties go to the lowest ID", plan: tasks("a-0"),
			workers: []Worker{{ID: "w3"}, {ID: "w1"}, {ID: "w2"}},
			want:    map[string][]string{"w1": {"a-0"}}},
		{name: "other jobs' tasks count", plan: tasks("a-0", "a-1"),
			workers: []Worker{{ID: "w1", Used: 3}, {ID: "w2"}, {ID: "w3", Used: 1}},
			want:    map[string][]string{"w2": {"a-0"}, "w3": {"a-1"}}},
		{name: "a job is spread before the load is", plan: tasks("a-0", "a-1", "a-2"),
			workers: []Worker{{ID: "w1", Used: 4}, {ID: "w2"}},
			want:    map[string][]string{"w1": {"a-1"}, "w2": {"a-0", "a-2"}}},
		{name: "most free slots first, never more than the slots", plan: tasks("a-0", "a-1", "a-2", "a-3"),
			workers: []Worker{{ID: "w1", Slots: 2, Used: 1}, {ID: "w2", Slots: 4}},
			want:    map[string][]string{"w1": {"a-1"}, "w2": {"a-0", "a-2", "a-3"}}},
		{name: "a big worker does not take the whole job", plan: tasks("a-0", "a-1", "a-2", "a-3"),
			workers: []Worker{{ID: "w1", Slots: 2}, {ID: "w2", Slots: 8}},
			want:    map[string][]string{"w1": {"a-1", "a-3"}, "w2": {"a-0", "a-2"}}},
		{name: "a worker without a limit before one with", plan: tasks("a-0", "a-1", "a-2"),
			workers: []Worker{{ID: "w1", Slots: 4}, {ID: "w2", Used: 10}},
			want:    map[string][]string{"w1": {"a-1"}, "w2": {"a-0", "a-2"}}},
		{name: "exactly enough slots", plan: tasks("a-0", "a-1", "a-2"),
			workers: []Worker{{ID: "w1", Slots: 2, Used: 1}, {ID: "w2", Slots: 2}},
			want:    map[string][]string{"w1": {"a-1"}, "w2": {"a-0", "a-2"}}},
		{name: "a worker over its slots is full", plan: tasks("a-0"),
			workers: []Worker{{ID: "w1", Slots: 2, Used: 5}, {ID: "w2", Slots: 1}},
			want:    map[string][]string{"w2": {"a-0"}}},
		{name: "not enough free slots", plan: five,
			workers: []Worker{{ID: "w2", Slots: 4, Used: 2}, {ID: "w1", Slots: 2, Used: 2}},
			wantErr: "assign j: needs 5 tasks, workers have 2 free (w1 0 of 2, w2 2 of 4)"},
		{name: "over its slots counts as none free", plan: tasks("a-0", "a-1"),
			workers: []Worker{{ID: "w1", Slots: 2, Used: 5}, {ID: "w2", Slots: 1}},
			wantErr: "assign j: needs 2 tasks, workers have 1 free (w1 0 of 2, w2 1 of 1)"},
		{name: "ten workers named at most", plan: tasks("a-0"), workers: many,
			wantErr: "assign j: needs 1 task, workers have 0 free (w00 0 of 1, w01 0 of 1, w02 0 of 1, w03 0 of 1, w04 0 of 1, " +
				"w05 0 of 1, w06 0 of 1, w07 0 of 1, w08 0 of 1, w09 0 of 1, and 2 more)"},
		{name: "no workers", plan: five, wantErr: "assign j: no live workers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Assign(c.plan, c.workers)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("Assign = %v, %v; want error %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("Assign = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// The errors are typed: the job manager waits for a worker on
// ErrNoWorkers and for free slots on a *CapacityError.
func TestAssignErrors(t *testing.T) {
	if _, err := Assign(tasks("a-0"), nil); !errors.Is(err, ErrNoWorkers) {
		t.Errorf("no workers: %v, want ErrNoWorkers", err)
	}
	_, err := Assign(tasks("a-0", "a-1"), []Worker{{ID: "w1", Slots: 1}})
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.Tasks != 2 || ce.Free != 1 || ce.Shortfall() != "needs 2 tasks, workers have 1 free (w1 1 of 1)" {
		t.Errorf("too few slots: %#v", err)
	}
}

// Jobs placed one after another, each counting the tasks of those before
// (as the job manager does), spread over the workers: five single-task
// jobs on three workers take turns instead of all landing on the first.
func TestAssignAcrossJobs(t *testing.T) {
	used := map[string]int{}
	var got []string
	for range 5 {
		ws := []Worker{{ID: "w1", Used: used["w1"]}, {ID: "w2", Used: used["w2"]}, {ID: "w3", Used: used["w3"]}}
		as, err := Assign(tasks("x-0"), ws)
		if err != nil {
			t.Fatal(err)
		}
		for w, ts := range as {
			used[w] += len(ts)
			got = append(got, w)
		}
	}
	if want := []string{"w1", "w2", "w3", "w1", "w2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("five jobs went to %v, want %v", got, want)
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
		{"job name with wildcard", func(s *jobspec.Spec) { s.Name = "a.>" }, `plan: job: bad name "a.>"`},
		{"empty job name", func(s *jobspec.Spec) { s.Name = "" }, `plan: job: bad name ""`},
		{"vertex name with dot", func(s *jobspec.Spec) { s.Operators[0].Name = "c.*"; s.Sinks[0].Input.From = "c.*" },
			`plan j: operator: bad name "c.*"`},
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
