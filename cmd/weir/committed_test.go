package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/cmd/weir/internal/worker"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/sink"
)

// heldCommits holds back the commits of the exactly-once sinks it wraps
// once they wrote records: Commit returns at once and the output stays
// staged (in every snapshot), as when a sink's commits lag far behind or
// its worker dies before it commits. Checkpoints go on completing. Once
// failNext is set, the next such commit fails the sink's task: the job
// fails over, and the restore commits the staged output.
type heldCommits struct {
	mu       sync.Mutex
	wrote    bool
	held     int
	failNext bool
	failed   bool
}

type holdingSink struct {
	*sink.ExactlyOnce
	h *heldCommits
}

func (s holdingSink) Write(ctx context.Context, batch []byte) error {
	if n, err := abi.BatchCount(batch); err == nil && n > 0 {
		s.h.mu.Lock()
		s.h.wrote = true
		s.h.mu.Unlock()
	}
	return s.ExactlyOnce.Write(ctx, batch)
}

func (s holdingSink) Commit(ctx context.Context, id int64) error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	switch {
	case s.h.failed || !s.h.wrote:
		return s.ExactlyOnce.Commit(ctx, id)
	case s.h.failNext:
		s.h.failed = true
		return fmt.Errorf("injected failure of the commit of checkpoint %d", id)
	}
	s.h.held++
	return nil
}

func (h *heldCommits) heldCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

func (h *heldCommits) fail() {
	h.mu.Lock()
	h.failNext = true
	h.mu.Unlock()
}

// weir run -input on a job without a stop ends once the output of the
// input is committed, not once the output was quiet for -idle: with the
// sink's commits held back while checkpoints complete (the output staged,
// none stored), weir run waits — also through the failover that follows,
// whose restore commits the staged output — and prints all of it. (It
// used to end after -idle of quiet output and a second completed
// checkpoint, printing nothing.)
func TestRunWaitsForTheInputsOutputThroughAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job through a failover: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := &heldCommits{}
	hooks := &worker.Hooks{Sink: func(_, _ string, s host.Sink) host.Sink {
		if e, ok := s.(*sink.ExactlyOnce); ok {
			return holdingSink{e, h}
		}
		return s
	}}
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Hooks: hooks,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	mod, err := filepath.Abs("../../guests/wat/passthrough.wasm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "held.yaml")
	if err := os.WriteFile(spec, []byte(`name: held
sources: [{name: in, kind: jetstream, stream: HELDIN}]
operators: [{name: pass, module: `+mod+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: HELDOUT, subject: heldout, guarantee: exactly-once, input: {from: pass}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 100ms, attempts: 10}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const lines = 40
	var in strings.Builder
	for i := range lines {
		fmt.Fprintf(&in, "v%d\n", i)
	}
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &following{t: t, ctx: ctx, done: make(chan int, 1)}
	go func() {
		f.done <- run(ctx, []string{"run", "-nats", n.Server.ClientURL(), "-idle", "1ms", "-show", "-1", "-cancel",
			spec, "-input", input}, Stdio{In: strings.NewReader(""), Out: &f.out, Err: &f.errb})
	}()
	f.said(fmt.Sprintf("published %d input records", lines))
	// Three checkpoints complete with commits held after the sink wrote
	// the input's records: quiet output, checkpoints completing.
	for h.heldCount() < 3 {
		select {
		case code := <-f.done:
			t.Fatalf("weir run exited %d with the output of the input not committed:\n%s\n%s", code, f.out.String(), f.errb.String())
		case <-ctx.Done():
			t.Fatalf("commits held: %d\n%s", h.heldCount(), f.out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	f.said("checkpoint") // weir run saw checkpoints complete meanwhile
	h.fail()
	var code int
	select {
	case code = <-f.done:
	case <-ctx.Done():
		t.Fatalf("weir run did not end:\n%s\n%s", f.out.String(), f.errb.String())
	}
	got := f.out.String()
	if code != 0 {
		t.Fatalf("weir run exited %d:\n%s\n%s", code, got, f.errb.String())
	}
	// The failure shows on the restarting line, or on the running one
	// when weir run did not look while the job restarted.
	if !strings.Contains(got, "task out-0 failed: injected failure of the commit of checkpoint") ||
		!strings.Contains(got, "job held: running (attempt 2)") {
		t.Errorf("no failover in the output:\n%s", got)
	}
	for i := range lines {
		if !regexp.MustCompile(`(?m)^\[out\] v` + strconv.Itoa(i) + `$`).MatchString(got) {
			t.Errorf("record v%d not printed:\n%s", i, got)
			break
		}
	}
	if want := fmt.Sprintf("%d records in, %d records out", lines, lines); !strings.Contains(got, want) {
		t.Errorf("summary is not %q:\n%s", want, got)
	}
}

// A source task whose worker does not report what it read (older than
// TaskStats.SourceReadSeq) makes inputCommit blind — weir run falls back
// to quiet output — where it used to wait for a read sequence that never
// came, until -for or Ctrl-C. A task that reports 0 (it processed nothing
// yet) is not blind: it can tell, later.
func TestInputCommitBlindToAWorkerThatDoesNotReport(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	zero, end := uint64(0), uint64(40)
	for _, c := range []struct {
		name      string
		read      *uint64
		blind     bool
		committed bool
	}{
		{"an older worker", nil, true, false},
		{"nothing processed yet", &zero, false, false},
		{"read to the input's end", &end, false, true},
	} {
		commit, sound := newInputCommit(spec, inputFlags{"in.txt"})
		if !sound {
			t.Fatal("a JetStream source's input: want sound")
		}
		commit.sources["in"], commit.known = end, true
		one := int64(1)
		st := control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 1, Tasks: []control.TaskStatus{
			{Task: "in-0", Stats: control.TaskStats{SourceReadSeq: c.read}},
			{Task: "out-0", Stats: control.TaskStats{SinkCommitted: &one}},
		}}
		commit.done(st, nil, true)
		st.LatestCheckpoint = 1 // a checkpoint after the reports, committed
		got := commit.done(st, []control.CheckpointInfo{{ID: 1, Status: control.CheckpointCompleted}}, true)
		if commit.blind != c.blind || got != c.committed {
			t.Errorf("%s: blind %v, committed %v; want %v, %v", c.name, commit.blind, got, c.blind, c.committed)
		}
	}
}

// An unaligned checkpoint whose barriers overtook records (channel state)
// does not cover their output: the input's output is complete only with
// a later checkpoint that held none, committed by the sinks. weir run
// said "0 records out" and ended while the one record a slow filter let
// through was still in a channel.
func TestInputCommitWaitsForACheckpointWithoutInFlightData(t *testing.T) {
	spec, err := jobspec.Parse("j.yaml", []byte(`name: j
sources: [{name: in, kind: jetstream, stream: IN}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: in}}]
checkpointing: {mode: unaligned}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	commit, sound := newInputCommit(spec, inputFlags{"in.txt"})
	if !sound {
		t.Fatal("a JetStream source's input: want sound")
	}
	end := uint64(40)
	commit.sources["in"], commit.known = end, true
	committed := int64(0)
	st := control.JobStatus{Name: "j", State: control.JobRunning, Attempt: 1, Tasks: []control.TaskStatus{
		{Task: "in-0", Stats: control.TaskStats{SourceReadSeq: &end}},
		{Task: "out-0", Stats: control.TaskStats{SinkCommitted: &committed}},
	}}
	commit.done(st, nil, true) // the sources read the input before checkpoint 1
	overtaken := control.CheckpointInfo{ID: 1, Status: control.CheckpointCompleted,
		Tasks: map[string]map[string]int64{"out-0": {control.MetricChannelStateBytes: 120}}}
	clean := control.CheckpointInfo{ID: 2, Status: control.CheckpointCompleted, Tasks: map[string]map[string]int64{"out-0": {}}}
	st.LatestCheckpoint, committed = 1, 1
	if commit.done(st, []control.CheckpointInfo{overtaken}, true) {
		t.Error("complete with only a checkpoint that holds in-flight records")
	}
	st.LatestCheckpoint = 2
	if commit.done(st, []control.CheckpointInfo{overtaken, clean}, true) {
		t.Error("complete before the sink committed the checkpoint without in-flight records")
	}
	committed = 2
	if !commit.done(st, []control.CheckpointInfo{overtaken, clean}, true) {
		t.Error("not complete once the sink committed the checkpoint without in-flight records")
	}
	if commit.done(st, nil, false) {
		t.Error("complete without the checkpoint listing")
	}
}
