package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// coreJob submits a job reading core NATS subject in (keys as key says)
// through passthrough into a core sink on sinkSubject, and waits until its
// source reads (a checkpoint completed).
func coreJob(t *testing.T, ctx context.Context, n *Node, mods map[string]string, name, key, sinkSubject string) {
	t.Helper()
	spec, err := jobspec.Parse(name+".yaml", fmt.Appendf(nil, `name: %s
sources: [{name: in, kind: nats, subject: "in.>", key: %s}]
operators: [{name: op, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: %q, input: {from: op}}]
checkpointing: {interval: 50ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`, name, key, mods["passthrough"], sinkSubject), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	readingAgain(t, ctx, n, name, 0)
}

// readingAgain waits until job runs after restarts restarts and completed
// a checkpoint in that attempt (its core source subscribed), and returns
// its status.
func readingAgain(t *testing.T, ctx context.Context, n *Node, job string, restarts int) control.JobStatus {
	t.Helper()
	var cp int64 = -1
	return waitJob(t, ctx, n, job, fmt.Sprintf("a checkpoint after %d restarts", restarts), func(st control.JobStatus) bool {
		if st.State.Terminal() {
			return true
		}
		if st.Restarts < restarts || st.State != control.JobRunning {
			return false
		}
		if cp < 0 {
			cp = st.LatestCheckpoint // may be the attempt before's
		}
		return st.LatestCheckpoint > cp
	})
}

// A core NATS source replays nothing: a record its sink cannot publish
// (here, an empty key for "kk.{key}") is gone once refused, and no
// restart meets it again. The job restarts under its restart strategy —
// it failed for good in a trial, losing all input until someone stepped
// in — its failure of kind bad-record naming the record and saying it is
// lost, and the input after it comes out.
func TestBadRecordOfACoreSourceRestartsTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	out, err := n.Conn.SubscribeSync("kk.>")
	if err != nil {
		t.Fatal(err)
	}
	coreJob(t, ctx, n, mods, "lossy", "header", "kk.{key}")
	if err := n.Conn.Publish("in.x", []byte("no key")); err != nil {
		t.Fatal(err)
	}
	st := readingAgain(t, ctx, n, "lossy", 1)
	want := `task out-0 failed: core sink kk.{key}: record 1 of the batch: record key cannot form a subject: key "": the record has no key; ` +
		`the record is lost: it came from core NATS source in, which cannot replay it, so a restart goes on without it`
	if st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 ||
		st.Failures[0].Kind != control.FailureBadRecord || st.Failures[0].Reason != want {
		t.Fatalf("job %s after %d restarts, failures %+v; want running again after one restart, failure of kind %s: %q",
			st.State, st.Restarts, st.Failures, control.FailureBadRecord, want)
	}
	m := nats.NewMsg("in.x")
	m.Header.Set("Weir-Key", "a")
	m.Data = []byte("after")
	if err := n.Conn.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	got, err := out.NextMsgWithContext(ctx)
	if err != nil || got.Subject != "kk.a" || string(got.Data) != "after" {
		t.Fatalf("output %v (%v); want the record after the lost one on kk.a", got, err)
	}
}

// A record larger than the server's max_payload fails a core sink with
// one line naming the sink, the record, its size and the limit, of kind
// bad-record (a trial's said nats.go's "maximum payload exceeded", of no
// kind); fed by a core NATS source the job restarts, the record lost.
// The record is larger than its input message as its key, the input's
// subject, goes into the output's Weir-Key header.
func TestTooLargeRecordOfACoreSourceRestartsTheJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	out, err := n.Conn.SubscribeSync("bout")
	if err != nil {
		t.Fatal(err)
	}
	coreJob(t, ctx, n, mods, "big", "subject", "bout")
	max := n.Conn.MaxPayload()
	if err := n.Conn.Publish("in.big", make([]byte, max)); err != nil {
		t.Fatal(err)
	}
	st := readingAgain(t, ctx, n, "big", 1)
	want := fmt.Sprintf(`task out-0 failed: core sink bout: record 1 of the batch (key "in.big"): record too large for a NATS message: `+
		`a record of %d bytes (key 6, value %d) and its headers (24 bytes) exceed the server's max_payload of %d bytes; `+
		`emit smaller records, or raise the server's max_payload; `+
		`the record is lost: it came from core NATS source in, which cannot replay it, so a restart goes on without it`, max+6, max, max)
	if st.State != control.JobRunning || st.Restarts != 1 || len(st.Failures) != 1 ||
		st.Failures[0].Kind != control.FailureBadRecord || st.Failures[0].Reason != want {
		t.Fatalf("job %s after %d restarts, failures %+v; want running again after one restart, failure of kind %s: %q",
			st.State, st.Restarts, st.Failures, control.FailureBadRecord, want)
	}
	if err := n.Conn.Publish("in.small", []byte("after")); err != nil {
		t.Fatal(err)
	}
	got, err := out.NextMsgWithContext(ctx)
	if err != nil || string(got.Data) != "after" {
		t.Fatalf("output %v (%v); want the record after the lost one", got, err)
	}
}

// Fed by a JetStream stream, which replays from the checkpoint, a record
// too large for the at-least-once sink's message fails the job at once:
// every replay would meet it again.
func TestTooLargeRecordOfAStreamFailsTheJobAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("big.yaml", fmt.Appendf(nil, `name: big
sources: [{name: in, kind: jetstream, stream: IN, key: subject}]
operators: [{name: op, module: %s, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, guarantee: at-least-once, input: {from: op}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`, mods["passthrough"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	max := n.Conn.MaxPayload()
	if _, err := n.JS.Publish(ctx, "in.big", make([]byte, max)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "big", "the job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || len(st.Failures) != 1 || st.Failures[0].Kind != control.FailureBadRecord ||
		!strings.Contains(st.Reason, fmt.Sprintf(`record 1 of the batch (key "in.big"): record too large for a NATS message: a record of %d bytes`, max+6)) ||
		!strings.HasSuffix(st.Reason, "(not restarted: it would fail the same way again)") {
		t.Fatalf("job %s after %d restarts: %q, failures %+v; want failed at once as a bad record", st.State, st.Restarts, st.Reason, st.Failures)
	}
}
