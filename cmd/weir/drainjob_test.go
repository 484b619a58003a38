package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
)

// weir job stop -drain drains a running job: it says what it does, and
// what its core NATS source misses from now on, on stderr, and on stdout
// that the job finished with its final savepoint; a second drain, of the
// finished job, and one of a job that is not there are refused in one
// line, exit 1.
func TestJobStopDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, HeartbeatInterval: 50 * time.Millisecond}, "checkpointing: {interval: 20ms}\n")
	for st, _ := n.API.Job(ctx, "tap"); st.LatestCheckpoint == 0; st, _ = n.API.Job(ctx, "tap") {
		if ctx.Err() != nil {
			t.Fatal("no checkpoint completed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	url := n.Server.ClientURL()
	weir := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	code, out, errs := weir("job", "stop", "-drain", "-nats", url, "tap")
	if code != 0 {
		t.Fatalf("weir job stop -drain: exit %d: %s%s", code, out, errs)
	}
	st, err := n.API.Job(ctx, "tap")
	if err != nil || st.State != control.JobFinished || !st.Drained || st.DrainedWithSavepoint == 0 {
		t.Fatalf("after the drain: %+v, %v", st, err)
	}
	if got, want := jobStatus(t, ctx, n, "tap"), fmt.Sprintf("\ndrained (weir job stop -drain): its operators' end-of-input output is committed with final savepoint %d; more input needs a new job\n", st.DrainedWithSavepoint); !strings.Contains(got, want) {
		t.Errorf("weir job status lacks %q:\n%s", want, got)
	}
	wantErr := "draining tap: its sources end their input where they have read to; the operators' end-of-input output and a final savepoint follow …\n" +
		"source in (core NATS) reads no more: what is published to in from now on is not read by this job\n"
	if errs != wantErr {
		t.Errorf("stderr %q, want %q", errs, wantErr)
	}
	wantOut := fmt.Sprintf("job tap drained: finished with final savepoint %d (", st.DrainedWithSavepoint)
	if !strings.HasPrefix(out, wantOut) || !strings.HasSuffix(out, "), its operators' end-of-input output committed with it; more input needs a new job\n") {
		t.Errorf("stdout %q, want %q…", out, wantOut)
	}
	ended := fmt.Sprintf("weir: job tap already finished at %s; nothing to drain (it was drained with savepoint %d; submit a new job for more input)\n",
		st.Updated.UTC().Format(time.DateTime+" MST"), st.DrainedWithSavepoint)
	if code, out, errs := weir("job", "stop", "-drain", "-nats", url, "tap"); code != 1 || out != "" || errs != ended {
		t.Errorf("drain again: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errs, ended)
	}
	code, out, errs = weir("job", "restore", "-nats", url, "tap", "-from", fmt.Sprint(st.DrainedWithSavepoint))
	wantRestore := fmt.Sprintf("weir: restore tap from checkpoint %d: job tap was drained with it (weir job stop -drain): its input ended there, and its operators' end-of-input output is out, committed with it; submit a new job for more input (task out-0's input port 0 ended in the checkpoint, but source in would give it more records: it was drained: task in-0's input ended where it had read to, and it would read on from there)\n", st.DrainedWithSavepoint)
	if code != 1 || out != "" || errs != wantRestore {
		t.Errorf("restore of the drained job's final savepoint: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errs, wantRestore)
	}
	// weir run of it again would read from the start: refused, as for a
	// stopped job, before anything is built.
	t.Chdir(t.TempDir())
	if err := os.WriteFile("tap.yaml", []byte("name: tap\nsources: [{name: in, kind: nats, subject: in}]\nsinks: [{name: out, kind: nats, subject: out, input: {from: in}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRun := fmt.Sprintf("weir: job tap was drained with savepoint %d: a new run reads its streams from the start and would repeat the output it committed; "+
		"give the spec another name to start over (with start: new on a JetStream source, it reads what is stored from its submit on)\n", st.DrainedWithSavepoint)
	if code, out, errs := weir("run", "-nats", url, "-for", "1s", "tap.yaml"); code != 1 || out != "" || errs != wantRun {
		t.Errorf("weir run of the drained job: exit %d, stdout %q, stderr %q; want exit 1, %q", code, out, errs, wantRun)
	}
	if code, _, errs := weir("job", "stop", "-nats", url, "-drain", "tapp"); code != 1 || !strings.HasPrefix(errs, `weir: no job "tapp" (did you mean tap?)`) || strings.Count(errs, "\n") != 1 {
		t.Errorf("drain of no job: exit %d, stderr %q", code, errs)
	}
}

// weir job status says a job is being drained, and that a finished one
// was; of others it says nothing of the kind.
func TestDrainingLine(t *testing.T) {
	for _, c := range []struct {
		st   control.JobStatus
		want string
	}{
		{control.JobStatus{State: control.JobRunning}, ""},
		{control.JobStatus{State: control.JobFinished}, ""},
		{control.JobStatus{State: control.JobRunning, Drained: true}, "draining (weir job stop -drain): its sources end their input"},
		{control.JobStatus{State: control.JobRestarting, Drained: true}, "draining (weir job stop -drain): its sources end their input"},
		{control.JobStatus{State: control.JobFinished, Drained: true, DrainedWithSavepoint: 9}, "drained (weir job stop -drain): its operators' end-of-input output is committed with final savepoint 9; more input needs a new job"},
		{control.JobStatus{State: control.JobCanceled, Drained: true}, ""},
	} {
		if got := drainingLine(c.st); !strings.HasPrefix(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("%s, drained %v: %q, want %q…", c.st.State, c.st.Drained, got, c.want)
		}
	}
}
