package jobspec

import (
	"fmt"
	"strings"

	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/subject"
)

// FeedbackLoops describes each sink of s that writes where one of its
// sources reads — a JetStream sink into a source's stream on subjects
// the source's filter takes (all of them without a filter), or any sink
// on subjects a core NATS source subscribes to (a JetStream publish is
// delivered to core subscribers too): every record the sink writes is
// read again, a loop that grows without end unless an operator drops
// what it has seen. It may be meant (a retry loop); weir run warns of
// it rather than refusing it.
func FeedbackLoops(s *Spec) []string {
	var out []string
	for _, sk := range s.Sinks {
		t, err := subject.Parse(sk.Subject)
		if err != nil {
			continue // Check says so
		}
		written := t.Filter()
		for _, src := range s.Sources {
			read, loop := "", false
			switch {
			case src.Kind == KindNATS:
				read, loop = src.Subject, src.Subject != "" && subject.Overlap(src.Subject, written)
			case sk.Kind == KindJetStream && src.Kind == KindJetStream && src.Stream == sk.Stream:
				read = src.Filter
				if src.PartitionFilter != "" {
					read = strings.ReplaceAll(src.PartitionFilter, source.PartitionToken, "*")
				}
				loop = read == "" || subject.Overlap(read, written)
				if read == "" {
					read = "all its subjects"
				}
			}
			if loop {
				out = append(out, fmt.Sprintf("sink %s writes %s, which source %s reads (%s): every record the sink writes is read again, a loop without end unless an operator drops what it has seen",
					sk.Name, where(sk, written), src.Name, read))
			}
		}
	}
	return out
}

// where names what sink sk writes to: its subjects, and its stream.
func where(sk Sink, subjects string) string {
	if sk.Kind == KindJetStream && sk.Stream != "" {
		return fmt.Sprintf("%s in stream %s", subjects, sk.Stream)
	}
	return subjects
}
