package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/storage"
)

// weir checkpoint rm deletes a checkpoint of an earlier run from the
// store the coordinator uses — a directory or JetStream — so that it is no
// longer listed or restorable; it refuses the one the running job would
// restore, says that one removed already is gone and that one never taken
// is not there, each on its own line, and exits 1.
func TestCheckpointRemove(t *testing.T) {
	for _, kind := range []string{node.StoreDir, node.StoreJetStream} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := t.TempDir()
			n, err := node.Start(ctx, node.Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1, CheckpointStore: kind,
				HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(n.Close)
			// The coordinator's stores, as it opened them.
			var stores []storage.Store
			if kind == node.StoreDir {
				d, err := storage.NewDir(filepath.Join(dir, "checkpoints"))
				if err != nil {
					t.Fatal(err)
				}
				stores = append(stores, d)
			} else {
				obj, err := storage.NewObjectStore(ctx, n.JS, storage.DefaultStateBucket, 0)
				if err != nil {
					t.Fatal(err)
				}
				kv, err := storage.NewKV(ctx, n.JS, storage.DefaultMetaBucket, 0)
				if err != nil {
					t.Fatal(err)
				}
				stores = append(stores, obj, kv)
			}
			objects := func(id int64) []string {
				t.Helper()
				var keys []string
				for _, s := range stores {
					k, err := s.List(ctx, checkpoint.StatePrefix("tap", id))
					if err != nil {
						t.Fatal(err)
					}
					keys = append(keys, k...)
				}
				return keys
			}
			spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			running := func() {
				t.Helper()
				for st, _ := n.API.Job(ctx, "tap"); st.State != control.JobRunning; st, _ = n.API.Job(ctx, "tap") {
					if ctx.Err() != nil {
						t.Fatalf("job not running: %+v", st)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			savepoint := func() int64 {
				t.Helper()
				sp, err := n.API.Savepoint(ctx, "tap")
				if err != nil {
					t.Fatal(err)
				}
				return sp.ID
			}
			if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
				t.Fatal(err)
			}
			running()
			first, second := savepoint(), savepoint()
			if _, err := n.API.CancelJob(ctx, "tap"); err != nil {
				t.Fatal(err)
			}
			if _, err := n.API.Restore(ctx, control.RestoreRequest{Job: "tap", From: fmt.Sprint(first)}); err != nil {
				t.Fatal(err)
			}
			running()
			if keys := objects(second); len(keys) != 3 {
				t.Fatalf("stored of savepoint %d: %v; want its metadata and two snapshots", second, keys)
			}

			url := n.Server.ClientURL()
			weir := func(args ...string) (int, string, string) {
				var out, errb bytes.Buffer
				code := run(ctx, append(args[:2:2], append([]string{"-nats", url}, args[2:]...)...),
					Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
				return code, out.String(), errb.String()
			}
			code, out, errs := weir("checkpoint", "rm", "tap", fmt.Sprint(second))
			if want := regexp.MustCompile(fmt.Sprintf(`^removed savepoint %d of tap \(earlier run, \d+ B\): 3 storage objects\n$`, second)); code != 0 || !want.MatchString(out) {
				t.Errorf("rm: exit %d, stdout %q, stderr %q; want %s", code, out, errs, want)
			}
			if keys := objects(second); len(keys) != 0 {
				t.Errorf("left in storage of the removed savepoint: %v", keys)
			}
			code, out, errs = weir("checkpoint", "rm", "tap", fmt.Sprint(first), fmt.Sprint(second), "7")
			want := fmt.Sprintf("weir: cannot remove savepoint %d of job tap: job tap is running, and a failover restores it "+
				"(the job started from it and has completed no checkpoint of its own since)\n", first) +
				fmt.Sprintf("weir: checkpoint %d of job tap is gone: it was removed already\n", second) +
				fmt.Sprintf("weir: there is no checkpoint 7 of job tap to remove (discarded, or never taken); tap can be restored from %d\n", first)
			if code != 1 || out != "" || errs != want {
				t.Errorf("refused rm: exit %d, stdout %q, stderr\n%s\nwant exit 1, stderr\n%s", code, out, errs, want)
			}
			if len(objects(first)) != 3 {
				t.Errorf("the refused savepoint %d lost objects: %v", first, objects(first))
			}
			if _, out, _ := weir("checkpoint", "ls", "tap"); regexp.MustCompile(fmt.Sprintf(`(?m)^%d `, second)).MatchString(out) {
				t.Errorf("weir checkpoint ls lists the removed savepoint:\n%s", out)
			}
			if _, err := n.API.CancelJob(ctx, "tap"); err != nil {
				t.Fatal(err)
			}
			if code, _, errs := weir("job", "restore", "tap", "-from", fmt.Sprint(second)); code != 1 || !strings.Contains(errs, "there is no such checkpoint") {
				t.Errorf("restore from the removed savepoint: exit %d, %s", code, errs)
			}
			if code, out, errs := weir("checkpoint", "rm", "-earlier", "tap"); code != 0 || out != "tap: no checkpoints of earlier runs are stored\n" {
				t.Errorf("rm -earlier: exit %d, stdout %q, stderr %q", code, out, errs)
			}
			for _, args := range [][]string{{"checkpoint", "rm", "tap"}, {"checkpoint", "rm", "-earlier", "tap", "3"}, {"checkpoint", "rm", "tap", "x"}} {
				if code, _, _ := weir(args...); code != 2 {
					t.Errorf("%v: exit %d, want 2 (usage)", args, code)
				}
			}

			// weir job rm takes the ended job with what is left of it.
			code, out, errs = weir("job", "rm", "tap")
			want = fmt.Sprintf(`^removed savepoint %d of tap \(\d+ B\): 3 storage objects\n`+
				`removed job tap \(with its 1 checkpoint\); a job submitted under its name numbers its attempts and checkpoints on past it\n$`, first)
			if code != 0 || !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("job rm: exit %d, stdout %q, stderr %q; want %s", code, out, errs, want)
			}
			if keys := objects(first); len(keys) != 0 {
				t.Errorf("left in storage of the removed job's savepoint: %v", keys)
			}
			if _, out, _ := weir("job", "ls", "tap"[:0]); strings.Contains(out, "tap") {
				t.Errorf("weir job ls lists the removed job:\n%s", out)
			}
			if code, _, errs := weir("job", "status", "tap"); code != 1 || errs != "weir: no job \"tap\"\n" {
				t.Errorf("status of the removed job: exit %d, stderr %q", code, errs)
			}
		})
	}
}

// weir checkpoint ls shows a checkpoint whose removal was cut short as
// being removed, as it was taken (aligned) and with the reason, and weir
// checkpoint rm done again says it removed the rest of it.
func TestCheckpointPartlyRemoved(t *testing.T) {
	c := control.CheckpointInfo{ID: 12, Savepoint: true, Status: control.CheckpointRemoving, Size: 25, Acked: 5, Total: 5,
		Reason: "partly removed: a removal began and did not finish, so it is not restored; weir checkpoint rm wc 12 finishes it"}
	var ls bytes.Buffer
	printCheckpoints(&ls, []control.CheckpointInfo{c})
	rows := strings.Split(strings.TrimSpace(ls.String()), "\n")
	if f := strings.Fields(rows[len(rows)-1]); len(f) < 10 || f[2] != "removing" || f[8] != "aligned" || !strings.HasSuffix(rows[1], c.Reason) {
		t.Errorf("checkpoint ls:\n%s", ls.String())
	}
	var rm bytes.Buffer
	printRemoved(&rm, "wc", control.Removed{Checkpoints: []control.RemovedCheckpoint{{CheckpointInfo: c, Objects: 5}}}, "")
	if want := "removed savepoint 12 of wc (the rest of it: an earlier removal was cut short): 5 storage objects\n"; rm.String() != want {
		t.Errorf("checkpoint rm:\n%q\nwant\n%q", rm.String(), want)
	}
}

// weir checkpoint ls shows, for a checkpoint that expired before most
// tasks acked it, how many never did, not the one task that acked at
// once as its slowest: the slowest are those that did not ack, and the
// acked task's upload of a few milliseconds sent the user looking at the
// wrong task. Completed ones still name their slowest task.
func TestCheckpointListSlowestOfUnackedCheckpoints(t *testing.T) {
	acked := map[string]map[string]int64{"lines-0": {control.MetricAsyncNanos: int64(2 * time.Millisecond)}}
	var ls bytes.Buffer
	printCheckpoints(&ls, []control.CheckpointInfo{
		{ID: 4, Status: control.CheckpointPending, Acked: 1, Total: 5, Tasks: acked},
		{ID: 2, Status: control.CheckpointFailed, Duration: 5 * time.Second, Acked: 1, Total: 5, Tasks: acked,
			Reason: "expired after 5s; no snapshot from first-0, slowop-0, last-0 and 1 more"},
		{ID: 1, Status: control.CheckpointCompleted, Acked: 1, Total: 1, Tasks: acked},
	})
	rows := strings.Split(strings.TrimSpace(ls.String()), "\n")
	for i, want := range []string{
		`^4 +checkpoint +pending .* 1/5 +4 of 5 tasks not acked yet *$`,
		`^2 +checkpoint +failed .* 1/5 +4 of 5 tasks never acked +expired after 5s; no snapshot from first-0`,
		`^1 +checkpoint +completed .* 1/1 +lines-0 \(upload 2ms of its own 2ms\) *$`,
	} {
		if len(rows) != 4 || !regexp.MustCompile(want).MatchString(rows[i+1]) {
			t.Errorf("checkpoint ls:\n%s\nrow %d does not match %s", ls.String(), i+1, want)
		}
	}
}

// weir checkpoint rm of what a job that has ended was to be restored from
// removes it, and says on one line after it, for each such job, what it
// is restored from now: the newest checkpoint of its own left, or none
// (it starts afresh) for a job started from the removed one of another.
// weir job ls names no removed checkpoint from then on, and the restore
// the line prints works.
func TestCheckpointRemoveSaysWhatEndedJobsAreRestoredFromNow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec := func(name string) *jobspec.Spec {
		t.Helper()
		s, err := jobspec.Parse(name+".yaml", []byte(`name: `+name+`
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {disabled: true}
`), jobspec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec("orig")}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "orig", control.JobRunning)
	var sp [2]int64
	for i := range sp {
		cp, err := n.API.Savepoint(ctx, "orig")
		if err != nil {
			t.Fatal(err)
		}
		sp[i] = cp.ID
	}
	if _, err := n.API.CancelJob(ctx, "orig"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec("copy"), RestoreFrom: fmt.Sprintf("orig/%d", sp[1])}); err != nil {
		t.Fatal(err)
	}
	awaitState(t, ctx, n, "copy", control.JobRunning)
	if _, err := n.API.CancelJob(ctx, "copy"); err != nil {
		t.Fatal(err)
	}

	url := n.Server.ClientURL()
	weir := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append(args[:2:2], append([]string{"-nats", url}, args[2:]...)...),
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	code, out, errs := weir("checkpoint", "rm", "orig", fmt.Sprint(sp[1]))
	want := regexp.MustCompile("^" + regexp.QuoteMeta(fmt.Sprintf("removed savepoint %d of orig (", sp[1])) + `\d+ B\): 3 storage objects\n` +
		regexp.QuoteMeta(fmt.Sprintf("job copy (canceled) was to be restored from it; none of its checkpoints is left: weir run -nats %s SPEC starts it afresh\n", url)+
			fmt.Sprintf("job orig (canceled) was to be restored from it; now from checkpoint %d, its newest left: weir job restore -nats %s orig -from %d\n", sp[0], url, sp[0])) + "$")
	if code != 0 || !want.MatchString(out) {
		t.Errorf("rm: exit %d, stdout\n%s\nstderr %q; want\n%s", code, out, errs, want)
	}
	_, out, _ = weir("job", "ls")
	for job, cp := range map[string]string{"copy": "-", "orig": fmt.Sprint(sp[0])} {
		if !regexp.MustCompile(`(?m)^` + job + ` +canceled +\d+ +\d+ +` + regexp.QuoteMeta(cp) + ` `).MatchString(out) {
			t.Errorf("weir job ls: want %s's CHECKPOINT %s:\n%s", job, cp, out)
		}
	}
	if code, _, errs := weir("job", "restore", "orig", "-from", fmt.Sprint(sp[0])); code != 0 {
		t.Errorf("the restore the rm printed: exit %d: %s", code, errs)
	}
}

// The line weir checkpoint rm prints for a job that has ended that was to
// be restored from the removed checkpoint names what it is restored from
// now: its newest checkpoint left, the one of another job it started
// from, or none.
func TestReadvisedLine(t *testing.T) {
	for _, c := range []struct {
		r    control.Readvised
		want string
	}{
		{control.Readvised{Job: "wc", State: control.JobCanceled, LatestCheckpoint: 7},
			"job wc (canceled) was to be restored from it; now from checkpoint 7, its newest left: weir job restore -nats nats://h:1 wc -from 7"},
		{control.Readvised{Job: "wc", State: control.JobFailed, StartedFrom: "old/3"},
			"job wc (failed) was to be restored from it; now from old/3, the checkpoint it started from: weir job restore -nats nats://h:1 wc -from old/3"},
		{control.Readvised{Job: "wc", State: control.JobFinished},
			"job wc (finished) was to be restored from it; none of its checkpoints is left: weir run -nats nats://h:1 SPEC starts it afresh"},
	} {
		if got := readvisedLine(c.r, " -nats nats://h:1"); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.r, got, c.want)
		}
	}
}

// weir checkpoint rm of a checkpoint that another one given in the same
// command names (an exactly-once sink's snapshot naming output staged in
// it) removes both, whatever their order: the named one is refused while
// the other is stored, and tried again once it went.
func TestCheckpointRemoveANamedOneAndTheOneNamingIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, err := node.Start(ctx, node.Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 1,
		HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
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
	for st, _ := n.API.Job(ctx, "tap"); st.State != control.JobRunning; st, _ = n.API.Job(ctx, "tap") {
		if ctx.Err() != nil {
			t.Fatalf("job not running: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ids []int64
	for range 2 {
		sp, err := n.API.Savepoint(ctx, "tap")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sp.ID)
	}
	if _, err := n.API.CancelJob(ctx, "tap"); err != nil {
		t.Fatal(err)
	}
	// The second names output staged in the first, as a sink's would.
	st, err := storage.NewDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	cat := &checkpoint.Catalog{Meta: st, State: st}
	md, err := cat.Read(ctx, "tap", ids[1])
	if err != nil {
		t.Fatal(err)
	}
	md.Savepoint = false
	md.Metrics["out-0"][control.MetricSinkStateFrom] = ids[0]
	if err := cat.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(ctx, []string{"checkpoint", "rm", "-nats", n.Server.ClientURL(), "tap", fmt.Sprint(ids[0]), fmt.Sprint(ids[1])},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	want := regexp.MustCompile(fmt.Sprintf(`^removed checkpoint %d of tap \(\d+ B\): 3 storage objects\n.*\nremoved savepoint %d of tap \(\d+ B\): 3 storage objects\n`, ids[1], ids[0]))
	if code != 0 || !want.MatchString(out.String()) || errb.Len() != 0 {
		t.Errorf("rm: exit %d, stdout %q, stderr %q; want %s", code, out.String(), errb.String(), want)
	}
	if left, err := cat.IDs(ctx, "tap"); err != nil || len(left) != 0 {
		t.Errorf("stored after rm: %v, %v", left, err)
	}
}

// weir checkpoint ls says when each checkpoint was triggered and ended
// (a trial's listing had no time at all): one token, in UTC, the date
// only for another day than today.
func TestCheckpointListSaysWhen(t *testing.T) {
	now := time.Date(2026, 5, 17, 12, 0, 0, 0, time.UTC)
	at := time.Date(2026, 5, 17, 9, 12, 3, 0, time.UTC)
	for _, c := range []struct {
		info control.CheckpointInfo
		want string
	}{
		{control.CheckpointInfo{Status: control.CheckpointCompleted, Triggered: at, Duration: 1500 * time.Millisecond}, "09:12:03→09:12:04"},
		{control.CheckpointInfo{Status: control.CheckpointFailed, Triggered: at.Add(-24 * time.Hour), Duration: time.Minute}, "05-16T09:12:03→09:13:03"},
		{control.CheckpointInfo{Status: control.CheckpointPending, Triggered: at}, "09:12:03→"},
		{control.CheckpointInfo{Status: control.CheckpointFailed}, "-"},
	} {
		if got := whenOf(c.info, now); got != c.want {
			t.Errorf("%+v: %q, want %q", c.info, got, c.want)
		}
	}
}

// weir checkpoint ls leaves out the checkpoints retention discarded,
// which made up most of a long-running job's 100 rows, and says how many
// it left out and how to list them; -all lists them.
func TestCheckpointListHidesDiscarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, HeartbeatInterval: 50 * time.Millisecond},
		"checkpointing: {interval: 20ms, retained: 1}\n")
	for st, _ := n.API.Job(ctx, "tap"); st.LatestCheckpoint < 3; st, _ = n.API.Job(ctx, "tap") {
		if ctx.Err() != nil {
			t.Fatal("no third checkpoint completed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Ended, the job takes no more: both listings see the same history.
	if _, err := n.API.CancelJob(ctx, "tap"); err != nil {
		t.Fatal(err)
	}
	url := n.Server.ClientURL()
	ls := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append([]string{"checkpoint", "ls", "-nats", url}, args...), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("weir checkpoint ls %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	discarded := regexp.MustCompile(`(?m)^\d+ +checkpoint +discarded `)
	note := regexp.MustCompile(`\n\((\d+) discarded checkpoints? not shown: weir checkpoint ls -all -nats ` + regexp.QuoteMeta(url) + ` tap lists them\)\n$`)
	got := ls("tap")
	m := note.FindStringSubmatch(got)
	if discarded.MatchString(got) || m == nil {
		t.Fatalf("weir checkpoint ls lists discarded checkpoints, or does not say how many it left out:\n%s", got)
	}
	all := ls("-all", "tap")
	if hidden, _ := strconv.Atoi(m[1]); len(discarded.FindAllString(all, -1)) != hidden || note.MatchString(all) {
		t.Errorf("weir checkpoint ls -all does not list the %d discarded checkpoints ls left out, or says it left some out:\n%s", hidden, all)
	}
}
