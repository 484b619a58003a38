package job

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/jobspec"
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
		gs := Guarantees(&jobspec.Spec{Sources: c.sources})
		got := fmt.Sprint(gs)
		if !strings.Contains(got, "source old: ") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %s\nwant %q", c.name, got, c.want)
		}
	}
}
