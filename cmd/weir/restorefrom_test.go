package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// weir job restore takes the checkpoint after -from: a bare ID after the
// job is refused with the command that was meant, a missing -from names
// the job's latest savepoint, and -from latest restores that one, saying
// which it picked.
func TestJobRestoreFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec, err := jobspec.Parse("orig.yaml", []byte(`name: orig
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "orig", control.JobRunning)
	sp, err := n.API.StopJob(ctx, "orig")
	if err != nil {
		t.Fatal(err)
	}
	url := n.Server.ClientURL()
	weir := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"job", "restore", "-nats", url}, args...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	if code, _, errs := weir("orig", "494"); code != 2 ||
		errs != "weir: job restore: want 'weir job restore JOB -from ID': did you mean -from 494? (weir job restore orig -from 494)\n" {
		t.Errorf("an ID without -from: exit %d, stderr %q", code, errs)
	}
	want := fmt.Sprintf("weir: job restore: -from is required: weir job restore orig -from ID (or -from latest); its latest is savepoint %d (-from %d)\n", sp.ID, sp.ID)
	if code, _, errs := weir("orig"); code != 2 || errs != want {
		t.Errorf("no -from: exit %d, stderr %q, want %q", code, errs, want)
	}
	code, out, errs := weir("orig", "-from", "latest")
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("job orig: restoring from savepoint %d\n", sp.ID)) ||
		errs != fmt.Sprintf("-from latest: savepoint %d, the latest completed checkpoint or savepoint of orig\n", sp.ID) {
		t.Errorf("-from latest: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	awaitState(t, ctx, n, "orig", control.JobRunning)
	if _, err := n.API.CancelJob(ctx, "orig"); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := weir("nojob", "-from", "latest"); code != 1 || !strings.Contains(errs, "nojob") {
		t.Errorf("-from latest of no job: exit %d, stderr %q", code, errs)
	}
}
