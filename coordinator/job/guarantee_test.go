package job

import (
	"fmt"
	"strings"
	"testing"

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
