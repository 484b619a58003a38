package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/sink"
)

// weir run's records out of a jetstream sink are what its stream stored,
// not what was published on its subjects: a commit published again after
// a recovery (JetStream drops it by message id) and the empty message that
// ends a fast batch are no output. Counted from the subjects, a bounded
// job's crash-and-resume showed 420000 records out for the 400000 its
// stream held, and a failed at-least-once job an empty record.
func TestRunCountsWhatTheSinkStreamStores(t *testing.T) {
	nc, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>", "other"},
		Duplicates: time.Minute, AllowBatchPublish: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject, key, id string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set(sink.KeyHeader, key)
		m.Data = []byte(key)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	publish("out.before", "before", "0") // stored before the job: not its output

	var buf bytes.Buffer
	spec := jobspec.Sink{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out.{key}", Guarantee: jobspec.ExactlyOnce}
	out := &output{std: Stdio{Out: &buf}, show: -1, latest: map[string]string{}, bySink: map[string]int{}, since: map[string]uint64{},
		js: js, sinks: []jobspec.Sink{spec}}
	sub, err := out.watch(ctx, nc, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	publish("out.a", "a", "1")
	publish("out.a", "a", "1") // a re-commit: dropped by its id
	publish("other", "x", "2") // not the sink's subject
	fp, err := jetstreamext.NewFastPublisher(js, jetstreamext.FastPublishFlowControl{Flow: 10, MaxOutstandingAcks: 2, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("out.b")
	m.Header.Set(sink.KeyHeader, "b")
	m.Data = []byte("b")
	if _, err := fp.AddMsg(m); err != nil {
		t.Fatal(err)
	}
	if _, err := fp.Close(ctx); err != nil { // sends the end-of-batch message on out.b
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n, _ := out.state(); n >= 3 {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // an end-of-batch message, if it were counted
	summary(ctx, &buf, out, 0)
	got := buf.String()
	if !strings.Contains(got, "\n2 records out\n") || strings.Contains(got, "[out] \t") || strings.Contains(got, "[out] \n") {
		t.Errorf("weir run printed:\n%s\nwant 2 records out and no empty record", got)
	}
}
