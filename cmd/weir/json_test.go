package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
)

// weir job ls, job status and worker ls -json print the API's status
// structs as JSON, for scripts (the docs named a -json none of them had):
// each decodes back into the struct it is.
func TestJSONOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, _ := tapNode(t, ctx, node.Options{Workers: 1, WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond}, "")
	url := n.Server.ClientURL()
	weir := func(args ...string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
			t.Fatalf("weir %s exited %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.Bytes()
	}

	var jobs []control.JobStatus
	if err := json.Unmarshal(weir("job", "ls", "-nats", url, "-json"), &jobs); err != nil {
		t.Fatalf("job ls -json: %v", err)
	}
	if len(jobs) != 1 || jobs[0].Name != "tap" || len(jobs[0].Sinks) != 1 {
		t.Errorf("job ls -json: %+v; want job tap with its sink", jobs)
	}
	var st control.JobStatus
	// -json after the job's name too, as the other flags go.
	if err := json.Unmarshal(weir("job", "status", "-nats", url, "tap", "-json"), &st); err != nil {
		t.Fatalf("job status -json: %v", err)
	}
	if st.Name != "tap" || st.Sinks[0].Subject != "out" {
		t.Errorf("job status -json: %+v", st)
	}
	var ws []control.WorkerStatus
	if err := json.Unmarshal(weir("worker", "ls", "-nats", url, "-json"), &ws); err != nil {
		t.Fatalf("worker ls -json: %v", err)
	}
	if len(ws) != 1 || ws[0].ID != "w1" {
		t.Errorf("worker ls -json: %+v; want worker w1", ws)
	}

	// No job: an empty array, not null.
	var b bytes.Buffer
	if err := printJSON(&b, []control.JobStatus(nil)); err != nil || b.String() != "[]\n" {
		t.Errorf("no jobs: %q, %v; want []", b.String(), err)
	}
}
