package job

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/sink"
)

// A bounded source says what follows its stop: the job finishes when
// every source has a stop, and does not while another source has none —
// a job mixing the two never finishes by itself, and says so.
func TestGuaranteesOfABoundedSource(t *testing.T) {
	bounded := jobspec.Source{Name: "old", Kind: jobspec.KindJetStream, Stream: "OLD", Stop: "end", StopSequence: 3}
	for _, c := range []struct {
		name    string
		sources []jobspec.Source
		want    string
	}{
		{"all bounded", []jobspec.Source{bounded, {Name: "b", Kind: jobspec.KindJetStream, Stream: "B", StopSequence: 9}},
			"stops after sequence 3 (stop: end), then the job finishes with a final savepoint"},
		{"a jetstream source without a stop", []jobspec.Source{bounded, {Name: "live", Kind: jobspec.KindJetStream, Stream: "LIVE"}},
			"stops after sequence 3 (stop: end), then it waits: source live has no stop, so the job does not finish by itself"},
		{"a core source and a jetstream source without stops", []jobspec.Source{
			{Name: "core", Kind: jobspec.KindNATS, Subject: "c"}, bounded, {Name: "live", Kind: jobspec.KindJetStream, Stream: "LIVE"}},
			"then it waits: sources core, live have no stop, so the job does not finish by itself"},
	} {
		gs := Guarantees(&jobspec.Spec{Sources: c.sources}, false)
		got := fmt.Sprint(gs)
		if !strings.Contains(got, "source old: ") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %s\nwant %q", c.name, got, c.want)
		}
	}
}

// An at-least-once sink says when it publishes in atomic batches: in
// publish mode atomic, and in auto on a server that fsyncs every write,
// if its stream allows atomic publish (which only the workers look up).
func TestGuaranteesOfAtLeastOnceSinks(t *testing.T) {
	onSync := "; the server fsyncs every write, so published in atomic batches if stream OUT allows atomic publish"
	for _, c := range []struct {
		publish string
		fsync   bool
		want    string
	}{
		{"", false, sink.AtLeastOnceGuarantee},
		{jobspec.PublishAuto, false, sink.AtLeastOnceGuarantee},
		{jobspec.PublishAtomic, false, sink.AtLeastOnceGuarantee + sink.AtomicBatchesNote},
		{"", true, sink.AtLeastOnceGuarantee + onSync},
		{jobspec.PublishAuto, true, sink.AtLeastOnceGuarantee + onSync},
		{jobspec.PublishAtomic, true, sink.AtLeastOnceGuarantee + sink.AtomicBatchesNote},
		{jobspec.PublishFast, true, sink.AtLeastOnceGuarantee},
		{jobspec.PublishAsync, true, sink.AtLeastOnceGuarantee},
	} {
		spec := &jobspec.Spec{Sinks: []jobspec.Sink{{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out",
			Guarantee: jobspec.AtLeastOnce, Publish: c.publish}}}
		gs := Guarantees(spec, c.fsync)
		if len(gs) != 1 || gs[0].Text != c.want {
			t.Errorf("publish %q, fsync each write %v: %v; want %q", c.publish, c.fsync, gs, c.want)
		}
	}
}

// An exactly-once sink of a job checkpointing at-least-once says that
// the output is at-least-once end to end, and the checkpointing line says
// which mode would make it exactly-once; in the other modes the sink is
// exactly-once and no line is added.
func TestGuaranteesOfAnExactlyOnceSinkCheckpointingAtLeastOnce(t *testing.T) {
	sinks := []jobspec.Sink{{Name: "out", Kind: jobspec.KindJetStream, Stream: "OUT", Subject: "out", Guarantee: jobspec.ExactlyOnce},
		{Name: "log", Kind: jobspec.KindNATS, Subject: "log"}}
	spec := &jobspec.Spec{Sinks: sinks, Checkpointing: jobspec.Checkpointing{Mode: jobspec.ModeAtLeastOnce}}
	got := fmt.Sprint(Guarantees(spec, false))
	for _, want := range []string{
		"sink out: " + sink.ExactlyOnceGuarantee + "; but checkpointing at-least-once makes it at-least-once end to end: a record processed twice after a failure is published twice",
		"checkpointing at-least-once: after a failure, records may be processed twice (mode exactly-once or unaligned would make the output of sink out exactly-once)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%s\nlacks %q", got, want)
		}
	}
	for _, mode := range []string{jobspec.ModeExactlyOnce, jobspec.ModeUnaligned} {
		spec.Checkpointing.Mode = mode
		gs := Guarantees(spec, false)
		if len(gs) != 2 || gs[0].Text != sink.ExactlyOnceGuarantee {
			t.Errorf("mode %s: %v", mode, gs)
		}
	}
}

// A job's status carries the spec's warnings, which weir run prints
// before it submits: a job submitted otherwise (weir job restore -spec,
// the API) shows them too. A spec without any has none.
func TestStatusWarnsOfAFeedbackLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	s := spec(t, "loop", "")
	s.Sinks[0].Stream = "IN"
	st := e.submitRunning(t, ctx, s)
	if want := jobspec.FeedbackLoops(s); len(want) != 1 || !slices.Equal(st.Warnings, want) {
		t.Errorf("warnings %q; want %q", st.Warnings, want)
	}
	if st := e.submitRunning(t, ctx, spec(t, "plain", "")); len(st.Warnings) != 0 {
		t.Errorf("warnings of a spec without any: %q", st.Warnings)
	}
}
