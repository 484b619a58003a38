package job

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// restoreSpec is a job with a source, an operator and a sink of the given
// parallelisms; the source is a JetStream stream when js is set, else a
// core NATS subject.
func restoreSpec(t *testing.T, js bool, src, op, snk string) (*jobspec.Spec, *plan.Plan) {
	t.Helper()
	source := "{name: in, kind: nats, subject: in, parallelism: " + src + "}"
	if js {
		source = "{name: in, kind: jetstream, stream: IN, parallelism: " + src + "}"
	}
	s, err := jobspec.Parse("r.yaml", []byte(`name: r
sources: [`+source+`]
operators:
  - {name: count, module: count@1, parallelism: `+op+`, inputs: [{from: in, partition: round-robin}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: `+snk+`, input: {from: count, partition: round-robin}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// taskState is what a checkpointed task held.
type taskState struct{ state, chans int64 }

func metadata(tasks map[string]taskState) *checkpoint.Metadata {
	md := &checkpoint.Metadata{ID: 7, Handles: map[string]string{}, Metrics: map[string]map[string]int64{}}
	for id, s := range tasks {
		md.Handles[id] = "r/chk-7/" + id
		md.Metrics[id] = map[string]int64{control.MetricStateBytes: s.state, control.MetricChannelStateBytes: s.chans}
	}
	return md
}

func TestCheckRestore(t *testing.T) {
	stateless := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}}
	keyed := map[string]taskState{"in-0": {}, "count-0": {state: 40}, "count-1": {}, "out-0": {state: 9}}
	unaligned := map[string]taskState{"in-0": {}, "count-0": {chans: 300}, "count-1": {}, "out-0": {}}
	gone := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}, "enrich-0": {state: 3}}
	goneEmpty := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}, "enrich-0": {}}
	twoSinks := map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {state: 9}, "out-1": {state: 9}}
	for _, c := range []struct {
		name         string
		js           bool
		src, op, snk string
		tasks        map[string]taskState
		allow        bool
		want         string // "" accepted, else a part of the reason
	}{
		{"same plan", true, "1", "2", "1", keyed, false, ""},
		{"stateless operator rescaled", false, "1", "4", "1", stateless, false, ""},
		{"core source rescaled", false, "3", "2", "1", stateless, false, ""},
		{"stateful operator rescaled", false, "1", "3", "1", keyed, false, "operator count has parallelism 2 in the checkpoint and 3 in the spec and keeps state (task count-0)"},
		{"jetstream source rescaled", true, "2", "2", "1", stateless, false, "a JetStream source's offsets are kept per subtask"},
		{"in-flight data", false, "1", "4", "1", unaligned, false, "in-flight channel data (task count-0, unaligned)"},
		{"sink grows", false, "1", "2", "3", keyed, false, ""},
		{"sink shrinks", false, "1", "2", "1", twoSinks, false, "task out-1 would no longer exist"},
		{"vertex removed", false, "1", "2", "1", gone, false, "enrich is in the checkpoint but not in the spec"},
		{"vertex removed, allowed", false, "1", "2", "1", gone, true, ""},
		{"stateless vertex removed", false, "1", "2", "1", goneEmpty, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := restoreSpec(t, c.js, c.src, c.op, c.snk)
			err := checkRestore(s, p, metadata(c.tasks), c.allow)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatal("accepted")
			case c.want != "" && (!strings.Contains(err.Error(), c.want) || !errors.Is(err, control.ErrInvalid)):
				t.Fatalf("got %v, want ErrInvalid saying %q", err, c.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// A checkpoint without metrics (written before they were recorded) counts
// as holding state everywhere.
func TestCheckRestoreWithoutMetrics(t *testing.T) {
	s, p := restoreSpec(t, false, "1", "3", "1")
	md := metadata(map[string]taskState{"in-0": {}, "count-0": {}, "count-1": {}, "out-0": {}})
	md.Metrics = nil
	if err := checkRestore(s, p, md, false); err == nil {
		t.Fatal("rescale accepted without metrics")
	}
}
