package node

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
)

// TestWorkerRefusesTasksBeyondItsSlots: a worker enforces its -slots
// itself. Asked by a confused coordinator to run more tasks than its
// slots, w1 (-slots 2) refuses, naming itself, its slots and what it
// runs. Then it runs, beside the job's placement on w2, two more tasks of
// the job handover that only another coordinator would know of (a
// handover): its heartbeats report them, and the coordinator counts them
// on w1 (weir worker ls: 2 of 2 used), so the next job is placed on w2,
// where there is room, at once — no refusal, no restart, no failure (it
// counted them on w2 alone and put a task on w1, which refused it) — and
// handover runs on, untouched.
func TestWorkerRefusesTasksBeyondItsSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, startWorker := upWithoutWorkers(t, ctx)
	parse := func(name, ops, from string) *jobspec.Spec {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in.`+name+`}]
`+ops+`sinks: [{name: out, kind: nats, subject: out.`+name+`, input: {from: `+from+`}}]
checkpointing: {disabled: true}
restart: {strategy: none}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	// deploy sends w1 a deploy of spec's attempt 1, all its tasks, as a
	// coordinator would, and returns the reply.
	deploy := func(spec *jobspec.Spec) control.Reply {
		t.Helper()
		p, err := plan.Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		d := control.Deploy{Job: spec.Name, Attempt: 1, Spec: spec, Plan: p, Assignment: map[string]string{}}
		for _, task := range p.Tasks {
			d.Tasks = append(d.Tasks, task.ID)
			d.Assignment[task.ID] = "w1"
		}
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		m, err := up.Conn.RequestWithContext(ctx, control.Subjects{}.Worker("w1", control.OpDeploy), data)
		if err != nil {
			t.Fatal(err)
		}
		var r control.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	flows := func(name string) {
		t.Helper()
		sub, err := up.Conn.SubscribeSync("out." + name)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		for {
			if err := up.Conn.Publish("in."+name, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			m, err := sub.NextMsgWithContext(wait)
			cancel()
			if err == nil {
				if string(m.Data) != "hi" && string(m.Data) != "HI" {
					t.Fatalf("out.%s: %q", name, m.Data)
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("no output of %s", name)
			}
		}
	}

	startWorker("w2", StoreDir, 5)
	handover := parse("handover", "", "in")
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: handover}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, up, "handover", "handover running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	startWorker("w1", StoreDir, 2)
	waitUntil(t, ctx, "w1 live", func() bool {
		ws, err := up.API.Workers(ctx)
		return err == nil && len(ws) == 2
	})

	big := parse("big", "operators: [{name: upper, module: "+mod+", inputs: [{from: in}]}]\n", "upper")
	if r := deploy(big); r.Code != "no_slots" || r.Error != "worker w1 has 2 slots and runs no task: no room for the 3 tasks of job big attempt 1" {
		t.Errorf("deploy of 3 tasks to w1: %+v", r)
	}
	if r := deploy(handover); r.Error != "" {
		t.Fatalf("deploy of handover's 2 tasks to w1: %+v", r)
	}
	waitUntil(t, ctx, "w1's heartbeats to report handover's tasks there", func() bool {
		ws, err := up.API.Workers(ctx)
		for _, w := range ws {
			if w.ID == "w1" {
				return err == nil && w.Used == 2
			}
		}
		return false
	})

	counts := parse("counts", "operators: [{name: upper, module: "+mod+", inputs: [{from: in}]}]\n", "upper")
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: counts}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, up, "counts", "counts running", func(st control.JobStatus) bool {
		return st.State == control.JobRunning || st.State.Terminal()
	})
	perWorker := map[string]int{}
	for _, w := range st.Assignment {
		perWorker[w]++
	}
	if st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 || len(st.Failures) != 0 ||
		!maps.Equal(perWorker, map[string]int{"w2": 3}) {
		t.Errorf("counts: %s, attempt %d, %d restarts, failures %v, tasks per worker %v; want running on w2 (3), attempt 1, no restart or failure",
			st.State, st.Attempt, st.Restarts, st.Failures, perWorker)
	}
	flows("counts")
	flows("handover")
	if st, err := up.API.Job(ctx, "handover"); err != nil || st.State != control.JobRunning || st.Attempt != 1 || st.Restarts != 0 {
		t.Errorf("handover: %+v, %v; want running its first attempt", st, err)
	}
}
