package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// TestDrainToOneSequence drains a job whose JetStream source runs at
// parallelism 2 over one stream (its subtasks split it by subject) while
// input keeps arriving: both subtasks end at one stream sequence N, the
// status names it with the start that continues after it, and a job
// submitted with that start (stop: end) counts exactly the rest: per
// key, the two jobs' totals add up to the stream's, the first's are
// those of the stream's first N messages — no gap, no repeat.
func TestDrainToOneSequence(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end drain: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "wordcount")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	mustSinkStream(t, ctx, n.JS, "TOTALS", "totals")
	mustSinkStream(t, ctx, n.JS, "REST", "rest")
	job := func(name, start, sink string) *jobspec.Spec {
		spec, err := jobspec.Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
sources: [{name: in, kind: jetstream, stream: IN, parallelism: 2%[3]s}]
operators:
  - {name: total, module: %[2]s, parallelism: 2, inputs: [{from: in, partition: key}], config: {emit: final}}
sinks:
  - {name: out, kind: jetstream, stream: %[4]s, subject: %[5]s, input: {from: total}}
checkpointing: {interval: 50ms}
`, name, mods["wordcount"], start, strings.ToUpper(sink), sink)), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("counts", "", "totals")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "counts", "job running", running)
	in := newKeyedInput(t, ctx, n.JS, 7)
	in.send(300)
	var wg sync.WaitGroup
	flowing := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-flowing:
				return
			default:
			}
			k := fmt.Sprintf("k%02d", i%7)
			m := nats.NewMsg("in." + k)
			m.Header.Set("Weir-Key", k)
			m.Data = []byte(k)
			if _, err := n.JS.PublishMsg(ctx, m); err != nil {
				t.Error(err)
				return
			}
		}
	})
	time.Sleep(100 * time.Millisecond)
	cp, err := n.API.DrainJob(ctx, "counts")
	close(flowing)
	wg.Wait()
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	st, err := n.API.Job(ctx, "counts")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.DrainedAt) != 1 || !st.DrainedAt[0].Exact() || st.DrainedAt[0].Source != "in" || st.DrainedAt[0].Stream != "IN" || st.DrainedAt[0].Seq == 0 {
		t.Fatalf("drained with savepoint %d at %+v; want source in of stream IN at one sequence", cp.ID, st.DrainedAt)
	}
	seq := st.DrainedAt[0].Seq
	start := fmt.Sprintf("start: %d", seq+1)
	if h := control.ContinueHint(st.DrainedAt); !strings.Contains(h, start) {
		t.Errorf("continue hint %q; want it to say %s", h, start)
	}
	_, err = n.API.Restore(ctx, control.RestoreRequest{Job: "counts", From: fmt.Sprint(cp.ID)})
	if err == nil || !strings.Contains(err.Error(), start) {
		t.Errorf("restore of the drained job's final savepoint: %v; want it refused, saying %s", err, start)
	}
	// The follow-on job reads the rest, up to the stream's end.
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: job("rest", fmt.Sprintf(", start: %d, stop: end", seq+1), "rest")}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, n, "rest", "the follow-on job finished", func(st control.JobStatus) bool { return st.State == control.JobFinished })
	keys := readInputKeys(t, ctx, n.JS)
	first, all := map[string]int{}, map[string]int{}
	for i, k := range keys {
		if uint64(i) < seq {
			first[k]++
		}
		all[k]++
	}
	got := map[string]int{}
	for _, s := range []string{"TOTALS", "REST"} {
		for k, ts := range readKeyed(t, ctx, n.JS, s) {
			if len(ts) != 1 {
				t.Errorf("%s key %s: totals %v, want one", s, k, ts)
				continue
			}
			if s == "TOTALS" && ts[0] != first[k] {
				t.Errorf("key %s: the drained job counted %d, the stream's first %d messages hold %d", k, ts[0], seq, first[k])
			}
			got[k] += ts[0]
		}
	}
	for k, c := range all {
		if got[k] != c {
			t.Errorf("key %s: the two jobs counted %d, the stream holds %d", k, got[k], c)
		}
	}
	t.Logf("drained at sequence %d of %d; %s", seq, len(keys), control.ContinueHint(st.DrainedAt))
}
