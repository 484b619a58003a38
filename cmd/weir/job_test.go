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
