package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// weir worker drain refuses, in one line, a drain whose job does not fit
// on the other workers, and cordons nothing; with room (a worker joined)
// it moves the job, saying so job by job, until the worker holds no task;
// weir worker ls says the worker is cordoned; weir worker uncordon makes
// it placeable again.
func TestWorkerDrainAndUncordon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	up, err := node.Start(ctx, node.Options{DataDir: dir, Port: -1, Coordinator: true, Workers: 2, WorkerID: "w",
		WorkerSlots: 1, HeartbeatInterval: 100 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	url := up.Server.ClientURL()
	weir := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "-nats", url), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	for len(up.Manager.Control().LiveWorkers()) < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("the workers never joined")
		case <-time.After(20 * time.Millisecond):
		}
	}
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	jobIs := func(what string, cond func(control.JobStatus) bool) control.JobStatus {
		t.Helper()
		for {
			st, err := up.API.Job(ctx, "tap")
			if err == nil && cond(st) {
				return st
			}
			select {
			case <-ctx.Done():
				t.Fatalf("tap: timed out waiting for %s: %+v (%v)", what, st, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	jobIs("running", func(st control.JobStatus) bool { return st.State == control.JobRunning && len(st.Restoring) == 0 })

	code, out, errb := weir("worker", "drain", "w")
	const refused = "weir: drain w: no room on the other workers for job tap: it needs 2 slots; the other workers have 1, counting the 1 its own task holds on w-1 (w-1 has 1 slot: 0 free, 1 tap's); nothing was cordoned or stopped\n"
	if code != 1 || out != "" || errb != refused {
		t.Errorf("drain without room: exit %d, out %q, err %q; want 1 and %q", code, out, errb, refused)
	}
	if _, out, _ := weir("worker", "ls"); strings.Contains(out, "cordoned") {
		t.Errorf("a refused drain cordoned:\n%s", out)
	}

	other, err := node.Start(ctx, node.Options{NATS: &natsconn.Options{URL: url}, DataDir: dir, CheckpointStore: node.StoreDir,
		Workers: 1, WorkerID: "x", WorkerSlots: 2, HeartbeatInterval: 100 * time.Millisecond, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	for len(up.Manager.Control().LiveWorkers()) < 3 {
		select {
		case <-ctx.Done():
			t.Fatal("x never joined")
		case <-time.After(20 * time.Millisecond):
		}
	}
	code, out, errb = weir("worker", "drain", "w", "-timeout", "1m")
	t.Logf("weir worker drain w:\n%s", out)
	want := regexp.MustCompile(`^worker w cordoned: no new task is placed on it; moving 1 job to the other workers: tap\n` +
		`job tap: stopping with a savepoint to move its 1 task off w …\n` +
		`job tap: savepoint (\d+) taken; restarting from it on the other workers …\n` +
		`job tap: running on (w-1, x|x) \(attempt 2, restored from savepoint (\d+)\)\n` +
		`worker w drained: it holds no task, and stays cordoned; weir worker uncordon -nats \S+ w places tasks on it again\n$`)
	if m := want.FindStringSubmatch(out); code != 0 || m == nil || m[1] != m[3] {
		t.Errorf("drain: exit %d\n%s%s", code, out, errb)
	}
	st := jobIs("running off w", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if st.Restarts != 0 || len(st.Failures) != 0 {
		t.Errorf("after the drain: %d restarts, failures %+v; want none", st.Restarts, st.Failures)
	}
	_, out, _ = weir("worker", "ls")
	if !regexp.MustCompile(`(?m)^WORKER +HOST +STATE +SLOTS +LAST HEARD\nw +\S+ +cordoned +0/1 `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^x +\S+ +ready +\d/2 `).MatchString(out) {
		t.Errorf("weir worker ls after the drain:\n%s", out)
	}
	// Drained again: nothing to move.
	if code, out, errb := weir("worker", "drain", "w"); code != 0 || !strings.HasPrefix(out, "worker w already cordoned: no new task is placed on it; no job has tasks on it\nworker w drained") {
		t.Errorf("drain again: exit %d\n%s%s", code, out, errb)
	}

	if code, out, errb := weir("worker", "uncordon", "w"); code != 0 || !strings.HasPrefix(out, "worker w uncordoned: ") {
		t.Errorf("uncordon: exit %d\n%s%s", code, out, errb)
	}
	// STATE stays, ready: a column that came and went broke the scripts
	// that parse the list.
	if _, out, _ := weir("worker", "ls"); !regexp.MustCompile(`(?m)^WORKER +HOST +STATE +SLOTS +LAST HEARD\nw +\S+ +ready +0/1 `).MatchString(out) {
		t.Errorf("weir worker ls after uncordon:\n%s", out)
	}
	if code, out, _ := weir("worker", "uncordon", "w"); code != 0 || out != "worker w was not cordoned\n" {
		t.Errorf("uncordon again: exit %d, %q", code, out)
	}
	if code, _, errb := weir("worker", "drain"); code != 2 || !strings.Contains(errb, "give one worker's ID") {
		t.Errorf("drain without a name: exit %d, %q", code, errb)
	}
}

// A drain cut short (Ctrl-C, -timeout) says in one line what it moved,
// what it could not, what it did not reach, and that the worker stays
// cordoned.
func TestDrainStoppedSaysWhereItLeftThings(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	d := drain{ctx: parent, parent: parent, worker: "w1", timeout: time.Minute, hint: " -nats nats://h:4222",
		moved: []string{"a"}, failed: []string{"b: its move was under way as the drain stopped (weir job status b shows where it runs)"}, left: []string{"c", "d"}}
	const want = "worker drain w1: interrupted; the worker stays cordoned; moved: a; not moved: b: its move was under way as the drain stopped (weir job status b shows where it runs); not moved yet (running where they were): c, d; weir worker drain -nats nats://h:4222 w1 moves the rest"
	if got := d.stopped().Error(); got != want {
		t.Errorf("interrupted:\n%s\nwant\n%s", got, want)
	}
	d.parent = context.Background()
	d.moved, d.failed, d.left = nil, nil, []string{"c"}
	if got := d.stopped().Error(); !strings.HasPrefix(got, "worker drain w1: -timeout 1m0s ran out; the worker stays cordoned; not moved yet (running where they were): c;") {
		t.Errorf("timed out: %s", got)
	}
}

// lostDrainAPI answers a drain of w2 whose job failed over as w2 was
// lost during its stop savepoint, and runs on w1 since.
type lostDrainAPI struct {
	control.API // the calls a drain does not make panic
}

func (lostDrainAPI) DrainWorker(context.Context, control.DrainRequest) (control.DrainPlan, error) {
	return control.DrainPlan{Worker: "w2", Live: true, Jobs: []control.DrainJob{{Job: "dk", State: control.JobRunning, Tasks: 2, Needs: 4}}}, nil
}

func (lostDrainAPI) Uncordon(context.Context, string) (control.CordonState, error) {
	return control.CordonState{}, nil
}

func (lostDrainAPI) MoveJob(context.Context, control.MoveRequest) (control.Move, error) {
	return control.Move{Job: "dk", Attempt: 1, FailedOver: true, WorkerLost: true,
		Note: "worker w2 was lost as its stop savepoint ran (savepoint aborted: checkpoint 2: worker w2 lost): the job failed over from w2 to the other workers, from its latest checkpoint (attempt 1 ended)"}, nil
}

func (lostDrainAPI) Job(context.Context, string) (control.JobStatus, error) {
	return control.JobStatus{Name: "dk", State: control.JobRunning, Attempt: 2, Restarts: 1, RestoredFrom: 1,
		Assignment: map[string]string{"in-0": "w1", "out-0": "w1"}}, nil
}

func (lostDrainAPI) Workers(context.Context) ([]control.WorkerStatus, error) {
	return []control.WorkerStatus{{ID: "w1", Slots: 4, Used: 4}}, nil
}

// A drain whose worker is lost during a job's stop savepoint says the job
// failed over from it to the other workers, from its latest checkpoint,
// and that it runs there — no "not moved", no advice to drain again: the
// worker is gone.
func TestDrainWhoseWorkerIsLostSaysTheJobFailedOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := embeddedtest.Conn(t)
	ready, done := make(chan struct{}), make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = control.ServeAPI(sctx, nc, "", lostDrainAPI{}, ready) }()
	defer func() { stop(); <-done }()
	<-ready
	var out bytes.Buffer
	d := drain{ctx: ctx, parent: ctx, api: control.NewAPIClient(nc, ""), out: &out, worker: "w2", timeout: time.Minute, wait: 5 * time.Second}
	if err := d.run(); err != nil {
		t.Fatalf("drain: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"job dk: failed over: worker w2 was lost as its stop savepoint ran (savepoint aborted: checkpoint 2: worker w2 lost): the job failed over from w2 to the other workers, from its latest checkpoint (attempt 1 ended)\n",
		"job dk: running on w1 (attempt 2, restored from checkpoint 1)\n",
		"worker w2 was lost during the drain: it holds no task (dk failed over to the other workers), and stays cordoned",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("drain output lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"not moved", "tries again", "savepoint failed", "keeps running where it was"} {
		if strings.Contains(got, bad) {
			t.Errorf("drain output says %q:\n%s", bad, got)
		}
	}
}
