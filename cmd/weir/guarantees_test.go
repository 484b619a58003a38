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
// async by what their stream allows, exactly-once sinks with their plan.
func TestPrintGuaranteesSinks(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "BATCHED", Subjects: []string{"batched"}, AllowBatchPublish: true, Duplicates: time.Minute},
		{Name: "PLAIN", Subjects: []string{"plain"}},
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
	}}
	var out bytes.Buffer
	printGuarantees(ctx, &out, js, spec, nil, 0)
	got := out.String()
	for _, want := range []string{
		"sink a: at-least-once: JetStream", "; publish mode fast on stream BATCHED\n",
		"sink b: at-least-once: JetStream", "; publish mode async on stream PLAIN\n",
		"sink c: exactly-once: JetStream", "; publish mode fast on stream BATCHED",
		"sink d: at-most-once",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
