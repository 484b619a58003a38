package job

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/host/partition"
)

// chanSpec is a job with two sources feeding an operator (port 0 by key
// from a, port 1 as given from b) and a sink, at the given parallelisms.
func chanSpec(t *testing.T, a, b, op, snk int, bPart, sinkPart string) (*jobspec.Spec, *plan.Plan) {
	t.Helper()
	return planned(t, fmt.Sprintf(`name: r
sources:
  - {name: a, kind: nats, subject: a, parallelism: %d}
  - {name: b, kind: nats, subject: b, parallelism: %d}
operators:
  - {name: op, module: op@1, parallelism: %d, inputs: [{from: a, partition: key}, {from: b, partition: %s}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: %d, input: {from: op, partition: %s}}]
`, a, b, op, bPart, snk, sinkPart))
}

// inflight is one record of the old run's channel state: the old channel
// it was on, its place there, and its key.
type inflight struct {
	channel string
	seq     int
	key     string
}

// oldChannelState gives every channel of old plan p three records of
// input channel state (at its consumer) and two of output channel state
// (at its producer), and returns the checkpoint's metadata and the
// states by handle.
func oldChannelState(p *plan.Plan) (*checkpoint.Metadata, map[string]map[bool]map[int][]inflight) {
	md := &checkpoint.Metadata{ID: 7, Handles: map[string]string{}, Metrics: map[string]map[string]int64{}, Edges: planEdges(p)}
	states := map[string]map[bool]map[int][]inflight{} // handle -> output? -> channel index -> records
	par := map[string]int{}
	for _, v := range p.Vertices {
		par[v.Name] = v.Parallelism
	}
	put := func(task string, output bool, index int, c plan.Channel, from int, n int) {
		ch := c.ID
		to, j, _ := splitTaskID(c.To)
		h := md.Handles[task]
		if states[h] == nil {
			states[h] = map[bool]map[int][]inflight{}
		}
		if states[h][output] == nil {
			states[h][output] = map[int][]inflight{}
		}
		for i := range n {
			key := fmt.Sprintf("k%d-%s", from+i, ch)
			for x := 0; c.Partition == jobspec.KeyHash && partition.KeyChannel([]byte(key), par[to]) != j; x++ {
				key = fmt.Sprintf("k%d-%s-%d", from+i, ch, x) // one the old partitioner sent on c
			}
			states[h][output][index] = append(states[h][output][index], inflight{channel: ch, seq: from + i, key: key})
		}
	}
	for _, t := range p.Tasks {
		md.Handles[t.ID] = "r/chk-7/" + t.ID
		md.Metrics[t.ID] = map[string]int64{control.MetricChannelStateBytes: 1}
	}
	byID := map[string]plan.Channel{}
	for _, c := range p.Channels {
		byID[c.ID] = c
	}
	for _, t := range p.Tasks {
		in := 0
		for _, chs := range t.Inputs {
			for _, ch := range chs {
				put(t.ID, false, in, byID[ch], 0, 3)
				in++
			}
		}
		out := 0
		for _, o := range t.Outputs {
			for _, ch := range o.Channels {
				put(t.ID, true, out, byID[ch], 3, 2)
				out++
			}
		}
	}
	return md, states
}

// Every in-flight record of the old run reaches, once, the new consumer
// subtask the edge's partitioning sends it to now — by key for a keyed
// edge, a whole old channel to one subtask otherwise — on the right port,
// each old channel's records in their order.
func TestChannelMoves(t *testing.T) {
	for _, c := range []struct {
		name              string
		bPart, sinkPart   string
		old, now          [4]int // a, b, op, out
		keyedB, keyedSink bool
	}{
		{name: "operator up", bPart: "round-robin", sinkPart: "round-robin", old: [4]int{2, 1, 2, 1}, now: [4]int{2, 1, 3, 1}},
		{name: "operator down", bPart: "round-robin", sinkPart: "round-robin", old: [4]int{2, 1, 3, 2}, now: [4]int{2, 1, 1, 2}},
		{name: "sources and sink", bPart: "key", sinkPart: "forward", old: [4]int{2, 2, 2, 2}, now: [4]int{3, 1, 2, 2}, keyedB: true},
		{name: "everything", bPart: "key", sinkPart: "key", old: [4]int{1, 3, 2, 4}, now: [4]int{2, 2, 5, 3}, keyedB: true, keyedSink: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sinkNow := c.sinkPart
			if sinkNow == "forward" && c.now[2] != c.now[3] {
				sinkNow = "round-robin"
			}
			_, oldPlan := chanSpec(t, c.old[0], c.old[1], c.old[2], c.old[3], c.bPart, c.sinkPart)
			spec, p := chanSpec(t, c.now[0], c.now[1], c.now[2], c.now[3], c.bPart, sinkNow)
			md, states := oldChannelState(oldPlan)
			if err := checkRestore(spec, p, md, false); err != nil {
				t.Fatal(err)
			}
			r := restoreFor(spec, p, md)
			if !r.ChannelPlan {
				t.Fatal("no channel plan")
			}
			oldCh := map[string]plan.Channel{}
			for _, ch := range oldPlan.Channels {
				oldCh[ch.ID] = ch
			}
			vertex := map[string]plan.Vertex{}
			for _, v := range p.Vertices {
				vertex[v.Name] = v
			}
			type landed struct {
				task string
				port int
			}
			got := map[inflight]landed{}
			order := map[string][]int{} // old channel -> seqs in the order replayed
			for _, task := range p.Tasks {
				for _, pc := range r.Channels[task.ID] {
					for _, rec := range states[pc.Handle][pc.Output][pc.Channel] {
						if pc.ByKey && partition.KeyChannel([]byte(rec.key), task.Parallelism) != task.Index {
							continue
						}
						if prev, ok := got[rec]; ok {
							t.Fatalf("%+v replayed by %s and %s", rec, prev.task, task.ID)
						}
						got[rec] = landed{task.ID, pc.Port}
						order[rec.channel+"@"+task.ID] = append(order[rec.channel+"@"+task.ID], rec.seq)
					}
				}
			}
			total := 0
			for _, byOut := range states {
				for _, byCh := range byOut {
					for _, recs := range byCh {
						for _, rec := range recs {
							total++
							l, ok := got[rec]
							if !ok {
								t.Fatalf("%+v lost", rec)
							}
							ch := oldCh[rec.channel]
							v, _, _ := splitTaskID(ch.To)
							keyed := ch.InPort == 0 && v == "op" || ch.InPort == 1 && v == "op" && c.keyedB || v == "out" && c.keyedSink
							_, j, _ := splitTaskID(ch.To)
							want := plan.TaskID(v, j%vertex[v].Parallelism)
							if keyed {
								want = plan.TaskID(v, partition.KeyChannel([]byte(rec.key), vertex[v].Parallelism))
							}
							if l.task != want || l.port != ch.InPort {
								t.Fatalf("%+v replayed by %s on port %d, want %s on port %d", rec, l.task, l.port, want, ch.InPort)
							}
						}
					}
				}
			}
			for k, seqs := range order {
				if !slices.IsSorted(seqs) {
					t.Errorf("%s replays its records in the order %v", k, seqs)
				}
			}
			t.Logf("%d records placed", total)
		})
	}
}

// What cannot be redistributed is refused with its reason: a checkpoint
// without its channels' layout, a broadcast edge that changes
// parallelism, an input the spec no longer has.
func TestChannelMovesRefused(t *testing.T) {
	_, oldPlan := chanSpec(t, 1, 1, 2, 1, "round-robin", "round-robin")
	md, _ := oldChannelState(oldPlan)
	for _, c := range []struct {
		name string
		yaml string
		edit func(*checkpoint.Metadata)
		want string
	}{
		{"older metadata", "", func(md *checkpoint.Metadata) { md.Edges = nil }, "but not which channels it was on"},
		{"broadcast", `name: r
sources: [{name: a, kind: nats, subject: a}, {name: b, kind: nats, subject: b}]
operators:
  - {name: op, module: op@1, parallelism: 3, inputs: [{from: a, partition: key}, {from: b, partition: broadcast}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
`, func(md *checkpoint.Metadata) {
			for i := range md.Edges {
				if md.Edges[i].From == "b" {
					md.Edges[i].Partition = jobspec.Broadcast
				}
			}
		}, "broadcast from b to op"},
		{"input gone", `name: r
sources: [{name: a, kind: nats, subject: a}, {name: b, kind: nats, subject: b}]
operators:
  - {name: op, module: op@1, parallelism: 3, inputs: [{from: a, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
`, nil, "op's input 1 from b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := c.yaml
			if yaml == "" {
				yaml = `name: r
sources: [{name: a, kind: nats, subject: a}, {name: b, kind: nats, subject: b}]
operators:
  - {name: op, module: op@1, parallelism: 3, inputs: [{from: a, partition: key}, {from: b}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: op}}]
`
			}
			spec, p := planned(t, yaml)
			m := *md
			m.Edges = slices.Clone(md.Edges)
			if c.edit != nil {
				c.edit(&m)
			}
			err := checkRestore(spec, p, &m, false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
			t.Log(err)
			if r := restoreFor(spec, p, &m); r.ChannelPlan {
				t.Error("restoreFor plans what checkRestore refuses")
			}
		})
	}
}
