package jobspec

import "fmt"

// Reader is one input that reads a producer: input Input of operator Name,
// or (Sink) the input of sink Name.
type Reader struct {
	Name  string
	Sink  bool
	Input int
	// Pinned says the input gives its port (Input.Port).
	Pinned bool
}

// String names the reader: "operator audit", "sink good".
func (r Reader) String() string {
	if r.Sink {
		return "sink " + r.Name
	}
	return "operator " + r.Name
}

// OutputReaders returns, for each source and operator of s that an input
// reads, its readers by output port. An input that gives a port
// (Input.Port) takes it; the others take the ports left, lowest first,
// in spec order — operators' inputs in order, then sinks' — so a spec
// that gives no port numbers its readers as weir always has. A producer
// with n readers has ports 0 to n-1: a port given twice, or not below n,
// is an error of Parse and Check, and here counts as not given.
func OutputReaders(s *Spec) map[string][]Reader {
	type reading struct {
		r    Reader
		port int // -1: none given
	}
	all := map[string][]reading{}
	var order []string
	add := func(from string, r Reader, port *int) {
		if _, ok := all[from]; !ok {
			order = append(order, from)
		}
		p := -1
		if port != nil {
			p = *port
		}
		all[from] = append(all[from], reading{r: r, port: p})
	}
	for _, op := range s.Operators {
		for i, in := range op.Inputs {
			add(in.From, Reader{Name: op.Name, Input: i}, in.Port)
		}
	}
	for _, sk := range s.Sinks {
		add(sk.Input.From, Reader{Name: sk.Name, Sink: true}, sk.Input.Port)
	}
	out := make(map[string][]Reader, len(all))
	for _, from := range order {
		rs := all[from]
		ports := make([]Reader, len(rs))
		taken := make([]bool, len(rs))
		var rest []Reader
		for _, r := range rs {
			if r.port >= 0 && r.port < len(rs) && !taken[r.port] {
				taken[r.port] = true
				r.r.Pinned = true
				ports[r.port] = r.r
				continue
			}
			rest = append(rest, r.r)
		}
		p := 0
		for _, r := range rest {
			for taken[p] {
				p++
			}
			taken[p] = true
			ports[p] = r
		}
		out[from] = ports
	}
	return out
}

// portProblems reports each input of s whose port (Input.Port) cannot be
// honoured: on an input from a source (which sends every record to each
// reader), negative, not below the producer's number of readers, or
// given by another reader of the producer too. at reports one at an
// input's line and path.
func portProblems(s *Spec, at func(line int, path, format string, args ...any)) {
	type pinned struct {
		path string
		line int
		who  string
	}
	readers := map[string]int{}
	for _, op := range s.Operators {
		for _, in := range op.Inputs {
			readers[in.From]++
		}
	}
	for _, sk := range s.Sinks {
		readers[sk.Input.From]++
	}
	seen := map[string]map[int]pinned{}
	check := func(in Input, path, who string) {
		if in.Port == nil {
			return
		}
		port, n := *in.Port, readers[in.From]
		kind, _, ok := s.Producer(in.From)
		switch {
		case !ok:
			return // reported as an unknown producer
		case kind == "source":
			at(in.Line, path, "source %s sends every record to each of its readers, so an input from it takes no port (port: is for an input from an operator)", in.From)
			return
		case port < 0:
			at(in.Line, path, "port %d of operator %s: ports count from 0", port, in.From)
			return
		case port >= n:
			at(in.Line, path, "port %d of operator %s, which has %d reader(s) and so ports 0 to %d: each reader takes one port, and the ports have no gaps", port, in.From, n, n-1)
			return
		}
		if seen[in.From] == nil {
			seen[in.From] = map[int]pinned{}
		}
		if o, dup := seen[in.From][port]; dup {
			line := ""
			if o.line > 0 {
				line = fmt.Sprintf(" (line %d)", o.line)
			}
			at(in.Line, path, "port %d of operator %s is %s's too (%s%s): each reader of an operator takes a port of its own", port, in.From, o.who, o.path, line)
			return
		}
		seen[in.From][port] = pinned{path: path, line: in.Line, who: who}
	}
	for i, op := range s.Operators {
		for j, in := range op.Inputs {
			check(in, fmt.Sprintf("operators[%d].inputs[%d].port", i, j), "operator "+op.Name)
		}
	}
	for i, sk := range s.Sinks {
		check(sk.Input, fmt.Sprintf("sinks[%d].input.port", i), "sink "+sk.Name)
	}
}
