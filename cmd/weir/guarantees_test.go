package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// weir run says how each sink publishes: at-least-once sinks fast or
// async by what their stream allows (atomic batches when asked, or on a
// server that fsyncs every write), exactly-once sinks with their plan.
func TestPrintGuaranteesSinks(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "BATCHED", Subjects: []string{"batched"}, AllowBatchPublish: true, Duplicates: time.Minute},
		{Name: "PLAIN", Subjects: []string{"plain"}},
		{Name: "BOTH", Subjects: []string{"both"}, AllowBatchPublish: true, AllowAtomicPublish: true, Duplicates: time.Minute},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	spec := &jobspec.Spec{Sinks: []jobspec.Sink{
		{Name: "a", Kind: jobspec.KindJetStream, Stream: "BATCHED", Subject: "batched", Guarantee: jobspec.AtLeastOnce},
		{Name: "b", Kind: jobspec.KindJetStream, Stream: "PLAIN", Subject: "plain", Guarantee: jobspec.AtLeastOnce},
		{Name: "c", Kind: jobspec.KindJetStream, Stream: "BATCHED", Subject: "batched", Guarantee: jobspec.ExactlyOnce},
		{Name: "d", Kind: jobspec.KindNATS, Subject: "x", Guarantee: jobspec.AtMostOnce},
		{Name: "e", Kind: jobspec.KindJetStream, Stream: "BOTH", Subject: "both", Guarantee: jobspec.AtLeastOnce, Publish: jobspec.PublishAtomic},
		{Name: "f", Kind: jobspec.KindJetStream, Stream: "BOTH", Subject: "both", Guarantee: jobspec.AtLeastOnce},
	}}
	var out bytes.Buffer
	printGuarantees(ctx, &out, js, spec, nil, 0, false)
	got := out.String()
	for _, want := range []string{
		"sink a: at-least-once: JetStream", "; publish mode fast on stream BATCHED\n",
		"sink b: at-least-once: JetStream", "; publish mode async on stream PLAIN\n",
		"sink c: exactly-once: JetStream", "; publish mode fast on stream BATCHED",
		"sink d: at-most-once",
		"sink e: at-least-once: JetStream", "; published in atomic batches", "; publish mode atomic on stream BOTH, batches of up to 1000\n",
		"sink f: at-least-once: JetStream", "; publish mode fast on stream BOTH\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// On a server that fsyncs every write, auto takes atomic batches
	// where the stream allows them, and fast or async elsewhere as before.
	out.Reset()
	printGuarantees(ctx, &out, js, spec, nil, 20000, true)
	got = out.String()
	for _, want := range []string{
		"; publish mode fast on stream BATCHED\n",
		"; publish mode async on stream PLAIN\n",
		"sink f: at-least-once: JetStream", "; the server fsyncs every write, so published in atomic batches if stream BOTH allows atomic publish; publish mode atomic on stream BOTH, batches of up to 20000\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("with fsync on every write, output lacks %q:\n%s", want, got)
		}
	}
}
