package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// weir job status shows, besides the job's state, what each source and
// sink guarantees: a core-NATS source's at-most-once is in plain sight.
func TestJobStatusShowsGuarantees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {mode: at-least-once}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"job", "status", "-nats", n.Server.ClientURL(), "tap"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job status exited %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"JOB", "tap", "guarantees:\n",
		"  source in: at-most-once: core NATS subject, no replay",
		"  sink out: at-most-once: core NATS subject",
		"  checkpointing at-least-once: after a failure, records may be processed twice\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// weir job status shows the running tasks as their workers report them:
// records in and out, rates, busy and backpressured time.
func TestJobStatusShowsTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	spec, err := jobspec.Parse("tap.yaml", []byte(`name: tap
sources: [{name: in, kind: nats, subject: in}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	// Publish until the sink's counters say 100 records went through.
	for i := 0; ; i++ {
		st, err := n.API.Job(ctx, "tap")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Tasks) == 2 && st.Tasks[1].Stats.RecordsOut >= 100 {
			if st.Tasks[0].Task != "in-0" || st.Tasks[1].Task != "out-0" || st.Tasks[0].Worker != "w1" || st.Tasks[0].Stats.RunningNanos <= 0 {
				t.Fatalf("tasks %+v", st.Tasks)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no task counters reached 100 records: %+v", st.Tasks)
		}
		for range 10 {
			if err := n.Conn.Publish("in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"job", "status", "-nats", n.Server.ClientURL(), "tap"},
		Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("weir job status exited %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{"tasks:\n", "TASK", "RECORDS IN", "BACKPRESSURED", "in-0", "out-0", "w1"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
