package job

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A client of the raw job API (JSON over NATS, no weir CLI) that leaves
// fields out gets the defaults a YAML spec that leaves them out gets:
// restart attempts, the restart strategy, checkpointing, parallelism,
// keys, partitioning. A trial's job submitted without a restart block was
// not restarted at all (attempts 0).
func TestRawAPISpecGetsParseDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	const raw = `{"spec": {"name": "raw",
		"sources": [{"name": "in", "kind": "jetstream", "stream": "IN"}],
		"operators": [{"name": "count", "module": "count@1", "inputs": [{"from": "in"}]}],
		"sinks": [{"name": "out", "kind": "jetstream", "stream": "OUT", "subject": "out", "input": {"from": "count"}}]}}`
	msg, err := e.fleet.nc.RequestWithContext(ctx, control.Subjects{}.API(control.APISubmit), []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	var reply control.Reply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Error != "" {
		t.Fatalf("submit: %s (%v)", msg.Data, err)
	}
	j, err := e.mgr.job("raw")
	if err != nil {
		t.Fatal(err)
	}
	want, err := jobspec.Parse("raw.yaml", []byte(`name: raw
sources: [{name: in, kind: jetstream, stream: IN}]
operators: [{name: count, module: count@1, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := *j.spec
	if got.Restart.Attempts != jobspec.DefaultRestartAttempts || got.Restart.Strategy != jobspec.RestartExponentialBackoff {
		t.Errorf("restart %+v, want %d attempts of exponential backoff", got.Restart, jobspec.DefaultRestartAttempts)
	}
	if !reflect.DeepEqual(got.Restart, want.Restart) {
		t.Errorf("restart %+v, want Parse's %+v", got.Restart, want.Restart)
	}
	if !reflect.DeepEqual(got.Checkpointing, want.Checkpointing) {
		t.Errorf("checkpointing %+v, want Parse's %+v", got.Checkpointing, want.Checkpointing)
	}
	if !reflect.DeepEqual(got.Channels, want.Channels) {
		t.Errorf("channels %+v, want Parse's %+v", got.Channels, want.Channels)
	}
	for i := range want.Sources {
		g, w := got.Sources[i], want.Sources[i]
		g.Line, w.Line = 0, 0
		g.StartSequence, w.StartSequence = 0, 0 // resolved at start
		if !reflect.DeepEqual(g, w) {
			t.Errorf("source %+v, want Parse's %+v", g, w)
		}
	}
	for i := range want.Operators {
		g, w := got.Operators[i], want.Operators[i]
		g.Line, w.Line = 0, 0
		for k := range g.Inputs {
			g.Inputs[k].Line = 0
		}
		for k := range w.Inputs {
			w.Inputs[k].Line = 0
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("operator %+v, want Parse's %+v", g, w)
		}
	}
	for i := range want.Sinks {
		g, w := got.Sinks[i], want.Sinks[i]
		g.Line, w.Line, g.Input.Line, w.Input.Line = 0, 0, 0, 0
		if !reflect.DeepEqual(g, w) {
			t.Errorf("sink %+v, want Parse's %+v", g, w)
		}
	}
}
