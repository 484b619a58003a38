package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/source"
)

// spreadWarning is how the status's warning of keyedcount's keyed state
// behind its round-robin input begins, up to the checkpoint it names.
const spreadWarning = "operator count keeps keyed state in its 2 subtasks (checkpoint "

// A newcomer's trial: keyed state (the WAT keyedcount, in the keyed
// layout) at parallelism 2 behind an input without partition: key, so
// each key's count restarts in each subtask. weir run prints the warning
// once as the first checkpoint shows it; weir job status shows it in its
// table and in -json's warnings; and so it does after a coordinator
// restart, without weir run printing it again. (The warning was made but
// never reached the status: the checkpoint metadata kept in memory had
// no inputs.) A job of the same operator behind partition: key has none;
// both write one subject, so each is warned of the other's sink beside
// it, until that job ends; ended, its -json says "warnings": [].
func TestStatusWarnsOfKeyedStateBehindAnUnkeyedInput(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a coordinator: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, coordinator := splitNode(t, ctx)
	c := coordinator()
	defer func() { c.Close() }()
	mod, err := filepath.Abs("../../guests/wat/keyedcount.wasm")
	if err != nil {
		t.Fatal(err)
	}
	spec := func(name, partition string) string {
		p := filepath.Join(t.TempDir(), name+".yaml")
		text := fmt.Sprintf(`name: %s
sources: [{name: in, kind: nats, subject: %s-in}]
operators: [{name: count, module: %s, parallelism: 2, inputs: [{from: in%s}]}]
sinks: [{name: out, kind: jetstream, stream: COUNTS, subject: counts, guarantee: at-least-once, input: {from: count}}]
checkpointing: {interval: 100ms}
`, name, name, mod, partition)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COUNTS", Subjects: []string{"counts"}}); err != nil {
		t.Fatal(err)
	}
	// publish sends a few records of keys a, b and c to job's source
	// (core NATS: those sent before its subtasks subscribe are lost, so
	// the callers publish until what they wait for came).
	publish := func(job string) {
		for i := range 6 {
			m := nats.NewMsg(job + "-in")
			m.Header.Set(source.KeyHeader, string(rune('a'+i%3)))
			m.Data = []byte("x")
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := func(job string, args ...string) string {
		t.Helper()
		code, out, errs := weir(t, "", append([]string{"job", "status", "-nats", url, job}, args...)...)
		if code != 0 {
			t.Fatalf("weir job status %s %v: exit %d, %s", job, args, code, errs)
		}
		return out
	}
	// warned is job's warnings as weir job status -json has them; it
	// fails the test if -json has no warnings field.
	warned := func(job string) []string {
		t.Helper()
		out := status(job, "-json")
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &fields); err != nil {
			t.Fatalf("weir job status %s -json: %v:\n%s", job, err, out)
		}
		raw, ok := fields["warnings"]
		if !ok {
			t.Fatalf("weir job status %s -json has no warnings field:\n%s", job, out)
		}
		var w []string
		if err := json.Unmarshal(raw, &w); err != nil || w == nil {
			t.Fatalf("weir job status %s -json: warnings %s (%v); want a list", job, raw, err)
		}
		return w
	}
	in := func(w []string, prefix string) string {
		for _, x := range w {
			if strings.HasPrefix(x, prefix) {
				return x
			}
		}
		return ""
	}
	spreadIn := func(w []string) string { return in(w, spreadWarning) }

	f := startFollowing(t, ctx, url, spec("spread", ""))
	a := f.running("spread", 0, 1)
	for !strings.Contains(f.errb.String(), "weir: warning: "+spreadWarning) {
		publish("spread")
		select {
		case code := <-f.done:
			t.Fatalf("weir run exited %d before it warned:\n%s\n%s", code, f.out.String(), f.errb.String())
		case <-ctx.Done():
			t.Fatalf("weir run never warned of the keyed state:\n%s\n%s", f.out.String(), f.errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.Contains(f.errb.String(), "but its input from in is not partitioned by key (round-robin): a key's records reach several subtasks") {
		t.Errorf("weir run's warning does not say what is wrong:\n%s", f.errb.String())
	}
	if out := status("spread"); !strings.Contains(out, "\nwarning: "+spreadWarning) {
		t.Errorf("weir job status spread has no warning of the keyed state:\n%s", out)
	}
	before := spreadIn(warned("spread"))
	if before == "" {
		t.Errorf("weir job status spread -json has no warning of the keyed state")
	}

	// The same operator behind partition: key, writing the same subject:
	// no warning of keyed state, and the shared-sink warnings come and go
	// beside the other, neither in place of it.
	const sharedWarning = "sink out writes stream COUNTS subject counts, which job keyed writes too"
	keyed := startFollowing(t, ctx, url, spec("keyed", ", partition: key"))
	keyed.running("keyed", 0, 1)
	f.saidErr("weir: warning: " + sharedWarning)
	if w := warned("spread"); spreadIn(w) == "" || in(w, sharedWarning) == "" {
		t.Errorf("job spread's warnings %q; want both of its keyed state and of job keyed's sink", w)
	}
	keyedStatus := func() control.JobStatus {
		t.Helper()
		var st control.JobStatus
		if err := json.Unmarshal([]byte(status("keyed", "-json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for counted := false; !counted; {
		publish("keyed")
		for _, ts := range keyedStatus().Tasks {
			counted = counted || strings.HasPrefix(ts.Task, "count-") && ts.Stats.RecordsIn > 0
		}
		if ctx.Err() != nil {
			t.Fatal("job keyed never counted a record")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Checkpoint from+2 is triggered after from+1 completed, which was
	// after the status said a record was counted: it holds its state.
	for from := keyedStatus().LatestCheckpoint; ; {
		st := keyedStatus()
		if st.LatestCheckpoint >= from+2 {
			if w := spreadIn(st.Warnings); w != "" {
				t.Errorf("a job whose input is partitioned by key warns %q", w)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("job keyed took no checkpoint after its first count")
		}
		time.Sleep(50 * time.Millisecond)
	}
	keyed.stop() // -cancel: it ends, and so does the subject's sharing
	if w := warned("keyed"); len(w) != 0 {
		t.Errorf("job keyed, canceled: warnings %q", w)
	}
	for {
		w := warned("spread")
		if spreadIn(w) == "" {
			t.Fatalf("job spread's warning of its keyed state went with job keyed: %q", w)
		}
		if in(w, sharedWarning) == "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("job spread still warns of job keyed, canceled: %q", w)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A coordinator restart: the resumed job warns on, from the
	// checkpoint it resumed from and those after it; weir run says
	// nothing more of it.
	c.Close()
	away := len(f.out.String())
	c = coordinator()
	f.running("spread", away, a+1)
	for {
		publish("spread")
		w := spreadIn(warned("spread"))
		if w == "" {
			t.Fatalf("after a coordinator restart, weir job status spread -json has no warning of the keyed state")
		}
		if w != before {
			break // a later checkpoint, taken after the restart
		}
		if ctx.Err() != nil {
			t.Fatal("no checkpoint after the coordinator restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := status("spread"); !strings.Contains(out, "\nwarning: "+spreadWarning) {
		t.Errorf("after a coordinator restart, weir job status spread has no warning of the keyed state:\n%s", out)
	}
	f.stop()
	if n := strings.Count(f.errb.String(), spreadWarning); n != 1 {
		t.Errorf("weir run warned %d times of the keyed state, want once:\n%s", n, f.errb.String())
	}
}
