package jobspec

import (
	"fmt"
	"strings"

	"github.com/weirhq/weir/transport/source"
	"github.com/weirhq/weir/transport/subject"
)

// Unread describes each source and operator of s that nothing reads: no
// operator's or sink's input is from it, so what it reads or emits is
// dropped — most often an input that names the wrong vertex. weir run
// and the job's status (weir job status) warn of it.
func Unread(s *Spec) []string {
	read := map[string]bool{}
	for _, op := range s.Operators {
		for _, in := range op.Inputs {
			read[in.From] = true
		}
	}
	for _, sk := range s.Sinks {
		read[sk.Input.From] = true
	}
	var out []string
	for _, src := range s.Sources {
		if !read[src.Name] {
			out = append(out, fmt.Sprintf("source %s: nothing reads it (no operator or sink has an input from it): what it reads is dropped", src.Name))
		}
	}
	for _, op := range s.Operators {
		if !read[op.Name] {
			out = append(out, fmt.Sprintf("operator %s: nothing reads it (no operator or sink has an input from it): what it emits is dropped", op.Name))
		}
	}
	return out
}

// OutputPorts describes each operator of s that more than one input reads
// from: each such input is an output port of its own, numbered from 0 as
// OutputReaders says (in spec order, operators' inputs before sinks',
// unless an input gives its port), and it gets only what the operator
// emits to that port — not every record, as each reader of a source does.
// An operator written for one port (port 0) leaves the others empty. weir
// run and the job's status warn of it; an operator that routes its
// records to ports (a split) means it.
func OutputPorts(s *Spec) []string {
	readers := OutputReaders(s)
	var out []string
	for _, op := range s.Operators {
		r := readers[op.Name]
		if len(r) < 2 {
			continue
		}
		ports := make([]string, len(r))
		for i, who := range r {
			ports[i] = fmt.Sprintf("port %d to %s", i, who)
		}
		out = append(out, fmt.Sprintf("operator %s has %d readers, each on an output port of its own (%s): each gets only what the operator emits to its port, "+
			"not every record; emit a record to each port that should have it", op.Name, len(r), strings.Join(ports, ", ")))
	}
	return out
}

// FeedbackLoops describes each sink of s that writes where one of its
// sources reads — a JetStream sink into a source's stream on subjects
// the source's filter takes (all of them without a filter), or any sink
// on subjects a core NATS source subscribes to (a JetStream publish is
// delivered to core subscribers too): every record the sink writes is
// read again, a loop that grows without end unless an operator drops
// what it has seen. It may be meant (a retry loop); weir run and the
// job's status (weir job status) warn of it rather than refusing it.
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
					sk.Name, sinkTarget(sk, written), src.Name, read))
			}
		}
	}
	return out
}

// sinkTarget names what sink sk writes to: its subjects, and its stream.
func sinkTarget(sk Sink, subjects string) string {
	if sk.Kind == KindJetStream && sk.Stream != "" {
		return fmt.Sprintf("%s in stream %s", subjects, sk.Stream)
	}
	return subjects
}
