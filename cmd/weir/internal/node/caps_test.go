package node

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/natsconn"
)

// TestWorkerCaps: the bounds whoever runs a worker sets (weir worker
// -memory, -max-task-memory, -max-call-timeout, -max-log-rate) hold
// whatever a job's spec asks. A job asking more than a cap is refused at
// submit, and by the worker at deploy, in one line naming the job, the
// operator, the setting, what it asks and the cap; the memory budget is
// placed as slots are: a job whose operators' memory does not fit beside
// another's waits, saying memory is short, and runs once the other ends.
func TestWorkerCaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	up, mod, _ := upWithoutWorkers(t, ctx)
	caps := control.Caps{Memory: 128 << 20, MaxTaskMemory: 128 << 20, MaxCallTimeout: 10 * time.Second, MaxLogRate: 1000}
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: up.Server.ClientURL()}, Workers: 1, WorkerID: "w1",
		WorkerCaps: caps, DataDir: filepath.Dir(mod), CheckpointStore: StoreDir, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	waitUntil(t, ctx, "w1 live", func() bool {
		ws, err := up.API.Workers(ctx)
		return err == nil && len(ws) == 1
	})
	parse := func(name, op string) *jobspec.Spec {
		t.Helper()
		spec, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in.`+name+`}]
operators: [{name: upper, module: `+mod+`, inputs: [{from: in}], `+op+`}]
sinks: [{name: out, kind: nats, subject: out.`+name+`, input: {from: upper}}]
checkpointing: {disabled: true}
restart: {strategy: none}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}

	for _, c := range []struct{ op, want string }{
		{"limits: {memory: 1GiB}", "job big operator upper: limits.memory 1GiB is over worker w1's cap of 128MiB (-max-task-memory): ask for less, or run the job where the cap is higher"},
		{"limits: {timeout: 1000h}", "job big operator upper: limits.timeout 1000h0m0s is over worker w1's cap of 10s (-max-call-timeout): ask for less, or run the job where the cap is higher"},
		{"limits: {snapshot-timeout: 1h}", "job big operator upper: limits.snapshot-timeout 1h0m0s is over worker w1's cap of 10s (-max-call-timeout): ask for less, or run the job where the cap is higher"},
		{"limits: {log-rate: 100000}", "job big operator upper: limits.log-rate 100000 is over worker w1's cap of 1000 (-max-log-rate): ask for less, or run the job where the cap is higher"},
	} {
		big := parse("big", c.op)
		_, err := up.API.Submit(ctx, control.SubmitRequest{Spec: big})
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("submit with %s: %v\nwant one ending %q", c.op, err, c.want)
		}
		// A coordinator that knew other caps deploys it: the worker
		// refuses it itself.
		p, err := plan.Build(big)
		if err != nil {
			t.Fatal(err)
		}
		d := control.Deploy{Job: big.Name, Attempt: 1, Spec: big, Plan: p, Assignment: map[string]string{}}
		for _, task := range p.Tasks {
			d.Tasks = append(d.Tasks, task.ID)
			d.Assignment[task.ID] = "w1"
		}
		data, _ := json.Marshal(d)
		m, err := up.Conn.RequestWithContext(ctx, control.Subjects{}.Worker("w1", control.OpDeploy), data)
		if err != nil {
			t.Fatal(err)
		}
		var r control.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != c.want {
			t.Errorf("deploy with %s: %+v, %v\nwant the error %q", c.op, r, err, c.want)
		}
	}

	// Two tasks of 64 MiB (the default) fill w1's 128 MiB.
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: parse("first", "parallelism: 2")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, up, "first", "first running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: parse("second", "limits: {memory: 32MiB}")}); err != nil {
		t.Fatal(err)
	}
	want := "waiting for free slots: needs 32MiB of operator memory (limits.memory), workers have 0 bytes free (w1 0 bytes of 128MiB)"
	st := waitJob(t, ctx, up, "second", "second waiting for memory", func(st control.JobStatus) bool { return st.Reason != "" || st.State != control.JobCreated })
	if st.State != control.JobCreated || st.Reason != want {
		t.Errorf("second: %s, %q; want created, %q", st.State, st.Reason, want)
	}
	if _, err := up.API.CancelJob(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, up, "second", "second running once first ended", func(st control.JobStatus) bool { return st.State == control.JobRunning })
}
