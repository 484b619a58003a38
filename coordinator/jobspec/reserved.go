package jobspec

import (
	"fmt"
	"strings"

	"github.com/weirhq/weir/transport/subject"
)

// The subject prefixes weir itself uses by default: control.DefaultPrefix
// and the worker's DefaultDataPrefix are these.
const (
	// DefaultControlPrefix starts weir's control subjects: worker
	// registration, deploys (which carry whole job specs), checkpoint
	// barriers and the job API (submit, cancel, ...).
	DefaultControlPrefix = "weir.ctl"
	// DefaultDataPrefix starts the subjects of the remote channels
	// between the tasks of a job on different workers.
	DefaultDataPrefix = "weir.data"
)

// Reserved is what a job's sources and sinks may not reach: weir's own
// control and data subjects, the subjects NATS itself serves (the
// JetStream, key-value and object store APIs, the system account,
// JetStream's and the cluster's internal traffic, services' discovery,
// MQTT, leaf node loop detection, reply inboxes of clients, gateways and
// service imports), weir's own streams (WeirOwnStream) and the NATS
// server's (NATSOwnStream). A job runs on weir's NATS
// connection, with its permissions: a sink on weir.ctl.api.cancel
// cancels other jobs, one on $JS.API.STREAM.DELETE.{key} deletes streams,
// a source on weir.ctl.> reads every job's spec, one on KV_weir_jobs the
// job records. The zero value reserves the defaults.
type Reserved struct {
	// ControlPrefix is the coordinator's control subject prefix ("" =
	// DefaultControlPrefix). The default is reserved as well: workers and
	// clients of another deployment on the same NATS may use it.
	ControlPrefix string
	// Allow lets a spec reach them all: weir up -allow-system-subjects,
	// the deployment operator's choice, which nothing in a spec turns on.
	Allow bool
}

// reservedSubject is a subject filter weir or NATS uses, and why a job
// must not touch it.
type reservedSubject struct {
	filter, why string
}

// subjects returns the filters r reserves, the control prefix's first.
func (r Reserved) subjects() []reservedSubject {
	const ctlWhy = "weir's control subjects: a job could cancel or deploy other jobs and read their specs"
	var out []reservedSubject
	if r.ControlPrefix != "" && r.ControlPrefix != DefaultControlPrefix {
		out = append(out, reservedSubject{r.ControlPrefix + ".>", ctlWhy})
	}
	return append(out,
		reservedSubject{DefaultControlPrefix + ".>", ctlWhy},
		reservedSubject{DefaultDataPrefix + ".>", "weir's channels between workers: a job could read or forge other jobs' records"},
		reservedSubject{"$JS.>", "the JetStream API: a job could delete or change any stream or consumer"},
		reservedSubject{"$KV.>", "key-value buckets: a job could read or overwrite weir's job records"},
		reservedSubject{"$O.>", "object stores: a job could read or overwrite other jobs' checkpoint state and modules"},
		reservedSubject{"$OBJ.>", "object stores (the name the server reserves too, with $KV.> and $O.>)"},
		reservedSubject{"$SYS.>", "the NATS system account's subjects"},
		reservedSubject{"$JSC.>", "JetStream's internal subjects"},
		reservedSubject{"$NRG.>", "the NATS cluster's Raft traffic"},
		reservedSubject{"$SRV.>", "NATS services' discovery (PING, INFO, STATS): a job could answer for other services or list them"},
		reservedSubject{"$MQTT.>", "the NATS server's MQTT sessions, retained messages and deliveries"},
		reservedSubject{"$LDS.>", "the NATS server's leaf node loop detection"},
		reservedSubject{"$GR.>", "reply subjects routed between clusters (gateways, older servers)"},
		reservedSubject{"_GR_.>", "reply subjects routed between clusters (gateways): a job could read or answer other clients' requests"},
		reservedSubject{"_R_.>", "reply subjects of imported services: a job could read or answer other accounts' requests"},
		reservedSubject{"_INBOX.>", "reply subjects: a job could read or answer other clients' requests"},
	)
}

// WeirOwnStream reports whether stream is one of weir's own: the stream
// of a key-value bucket or object store of its job records, module
// registry, checkpoints or coordinator lease (KV_weir_*, OBJ_weir_*).
func WeirOwnStream(stream string) bool {
	return strings.HasPrefix(stream, "KV_weir_") || strings.HasPrefix(stream, "OBJ_weir_")
}

// subjectOverlaps returns the first reserved filter that filter (a
// subject, possibly with wildcards) overlaps and how many others it
// overlaps too; ok is false when it overlaps none. The prefix alone
// ("weir.ctl", "$JS") is no subject weir or NATS uses.
func (r Reserved) subjectOverlaps(filter string) (first reservedSubject, more int, ok bool) {
	for _, rs := range r.subjects() {
		if !subject.Overlap(filter, rs.filter) {
			continue
		}
		if !ok {
			first, ok = rs, true
		} else {
			more++
		}
	}
	return first, more, ok
}

// Overlaps returns the first filter of weir's or NATS's own subjects that
// filter (a subject, possibly with wildcards) overlaps, and why a job
// must not reach it; ok is false when it overlaps none, or r.Allow. A
// stream created for jobs (weir stream add) is held to what a job's
// sources and sinks are.
func (r Reserved) Overlaps(filter string) (reserved, why string, ok bool) {
	if r.Allow {
		return "", "", false
	}
	first, _, ok := r.subjectOverlaps(filter)
	return first.filter, first.why, ok
}

// overlapMsg says that what (e.g. `source "lines" reads "weir.>"`)
// overlaps reserved subjects, and what to do: todo.
func (r Reserved) overlapMsg(what, filter, todo string) string {
	first, more, ok := r.subjectOverlaps(filter)
	if !ok {
		return ""
	}
	also := ""
	if more > 0 {
		also = fmt.Sprintf(", and %d more of weir's and NATS's own subjects", more)
	}
	return fmt.Sprintf("%s, which overlaps %s (%s)%s; %s", what, first.filter, first.why, also, todo)
}

// NATSOwnStream reports whether stream is one the NATS server creates for
// itself: its MQTT sessions, retained messages and deliveries ($MQTT_*).
func NATSOwnStream(stream string) bool {
	return strings.HasPrefix(stream, "$MQTT_")
}

// streamMsg says that what (e.g. `source "lines" reads stream X`) names
// one of weir's own streams, or one of the NATS server's, or "".
func streamMsg(what, stream string) string {
	if NATSOwnStream(stream) {
		return fmt.Sprintf("%s, one of the NATS server's own ($MQTT_*: MQTT sessions, retained messages, deliveries): a job could read or corrupt MQTT clients' state; name a stream of your own", what)
	}
	if !WeirOwnStream(stream) {
		return ""
	}
	return fmt.Sprintf("%s, one of weir's own (KV_weir_*, OBJ_weir_*: job records, checkpoints, modules, the coordinator lease): a job could read or corrupt weir's state; name a stream of your own", what)
}

// reserved reports each source and sink of s that reaches what p.reserved
// reserves, by at(line, path, msg) — Parse's and Check's validate.
func (p *parser) reserved(s *Spec, line func(path string, def int) int, at func(line int, path, format string, args ...any)) {
	r := p.reservedFor
	if r.Allow {
		return
	}
	report := func(path string, def int, msg string) {
		if msg != "" {
			at(line(path, def), path, "%s", msg)
		}
	}
	const subTodo = "subscribe to your own subjects"
	for i := range s.Sources {
		src := &s.Sources[i]
		path := fmt.Sprintf("sources[%d]", i)
		switch src.Kind {
		case KindNATS:
			if src.Subject != "" && subjectProblem(src.Subject) == "" {
				report(path+".subject", src.Line, r.overlapMsg(fmt.Sprintf("source %q reads %q", src.Name, src.Subject), src.Subject, subTodo))
			}
		case KindJetStream:
			report(path+".stream", src.Line, streamMsg(fmt.Sprintf("source %q reads stream %s", src.Name, src.Stream), src.Stream))
			field, filter := ".filter", src.Filter
			if filter == "" || filter == src.Subject {
				field, filter = ".subject", src.Subject
			}
			if filter != "" && subjectProblem(filter) == "" {
				report(path+field, src.Line, r.overlapMsg(fmt.Sprintf("source %q reads %q", src.Name, filter), filter, subTodo))
			}
			if pf := src.PartitionFilter; pf != "" {
				f := strings.ReplaceAll(pf, "{p}", "*")
				if subjectProblem(f) == "" {
					report(path+".partition-filter", src.Line, r.overlapMsg(fmt.Sprintf("source %q reads %q", src.Name, pf), f, subTodo))
				}
			}
		}
	}
	for i := range s.Sinks {
		sk := &s.Sinks[i]
		path := fmt.Sprintf("sinks[%d]", i)
		if sk.Kind == KindJetStream {
			report(path+".stream", sk.Line, streamMsg(fmt.Sprintf("sink %q writes to stream %s", sk.Name, sk.Stream), sk.Stream))
		}
		t, err := subject.Parse(sk.Subject)
		if sk.Subject == "" || err != nil {
			continue // reported as such
		}
		what := fmt.Sprintf("sink %q publishes to %q", sk.Name, sk.Subject)
		if t.Keyed() {
			what += fmt.Sprintf(" (any of %s)", t.Filter())
		}
		report(path+".subject", sk.Line, r.overlapMsg(what, t.Filter(), "publish to your own subjects"))
	}
}

// Check returns an Errors value naming each source and sink of s that
// reaches what r reserves, or nil; unlike CheckReserved it checks nothing
// else and changes nothing in s (which may be a running job's).
func (r Reserved) Check(s *Spec) error {
	if s == nil {
		return nil
	}
	p := &parser{reservedFor: r}
	p.reserved(s, func(_ string, def int) int { return def }, func(_ int, path, format string, args ...any) {
		p.errs = append(p.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
	})
	if len(p.errs) > 0 {
		return p.errs
	}
	return nil
}
