package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/cmd/weir/internal/metrics"
	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A bounded job whose stop lies ahead of its stream says so: weir job
// status shows, beside the source's unread count, the stop it waits for
// and where the stream is, and the metrics how many sequences the stream
// lacks. Once the stream reaches the stop, the job finishes. Before this
// the source showed UNREAD 0 and nothing said why the job did not end.
func TestJobStatusShowsAnAwaitedStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1,
		WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}}); err != nil {
		t.Fatal(err)
	}
	publish := func(k int) {
		for range k {
			if _, err := n.JS.Publish(ctx, "in", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(3)
	spec, err := jobspec.Parse("wait.yaml", []byte(`name: wait
sources: [{name: in, kind: jetstream, stream: IN, stop: 10}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
checkpointing: {interval: 100ms}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.Handler(metrics.NewCollector(n.Manager, 0)))
	defer srv.Close()
	for {
		got := jobStatus(t, ctx, n, "wait")
		if strings.Contains(got, "0, waits for seq 10 (stream at 3)") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status never showed the awaited stop:\n%s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := "\n" + `weir_source_awaited_messages{job="wait",task="in-0",worker="w1"} 7` + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("scrape lacks %q", want)
	}
	publish(7)
	for {
		st, err := n.API.Job(ctx, "wait")
		if err != nil {
			t.Fatal(err)
		}
		if st.State == control.JobFinished {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not finish once the stream reached its stop: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
