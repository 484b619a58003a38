package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// reservedSpec is a job with one source and one sink, the lines given.
func reservedSpec(source, sink string) string {
	return fmt.Sprintf(`name: tenant
sources:
  - name: in
%s
operators:
  - name: op
    module: op@1
    inputs: [{from: in}]
sinks:
  - name: out
%s
    input: {from: op}
`, source, sink)
}

const (
	okSource = "    kind: nats\n    subject: orders.>"
	okSink   = "    kind: nats\n    subject: counts.{key}"
)

// Every source and sink that reaches weir's own control and data
// subjects, NATS's APIs and internal subjects, or weir's own streams is
// refused by Parse and by Check (a spec from the raw job API), at its
// field, naming the source or sink, what it overlaps and why.
func TestReservedRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		source, sink string
		path         string
		want         []string // in the message
	}{
		// The trial's attacks.
		{"cancel other jobs", okSource, "    kind: nats\n    subject: weir.ctl.api.cancel", "sinks[0].subject",
			[]string{`sink "out" publishes to "weir.ctl.api.cancel"`, "overlaps weir.ctl.>", "cancel or deploy other jobs", "publish to your own subjects"}},
		{"delete streams by key", okSource, "    kind: nats\n    subject: $JS.API.STREAM.DELETE.{key}", "sinks[0].subject",
			[]string{`(any of $JS.API.STREAM.DELETE.>)`, "overlaps $JS.>", "delete or change any stream"}},
		{"overwrite job records", okSource, "    kind: jetstream\n    stream: KV_weir_jobs\n    subject: $KV.weir_jobs.{key}", "sinks[0].stream",
			[]string{`sink "out" writes to stream KV_weir_jobs, one of weir's own`}},
		{"read deploys", "    kind: nats\n    subject: weir.ctl.>", okSink, "sources[0].subject",
			[]string{`source "in" reads "weir.ctl.>"`, "overlaps weir.ctl.>", "subscribe to your own subjects"}},
		{"read job records", "    kind: jetstream\n    stream: KV_weir_jobs", okSink, "sources[0].stream",
			[]string{`source "in" reads stream KV_weir_jobs, one of weir's own`}},
		{"read checkpoint state", "    kind: jetstream\n    stream: OBJ_weir_state", okSink, "sources[0].stream",
			[]string{"OBJ_weir_state", "one of weir's own"}},
		{"read everything", "    kind: nats\n    subject: \">\"", okSink, "sources[0].subject",
			[]string{`source "in" reads ">"`, "overlaps weir.ctl.>", "and 15 more of weir's and NATS's own subjects", "subscribe to your own subjects"}},
		{"any first token", "    kind: nats\n    subject: \"*.>\"", okSink, "sources[0].subject",
			[]string{"overlaps weir.ctl.>", "and 15 more"}},
		{"weir.>", "    kind: nats\n    subject: weir.>", okSink, "sources[0].subject",
			[]string{"overlaps weir.ctl.>", "and 1 more"}},
		// Each reserved subject, as a source and as a sink.
		{"data channels", "    kind: nats\n    subject: weir.data.*.*.*", okSink, "sources[0].subject",
			[]string{"overlaps weir.data.>", "other jobs' records"}},
		{"data channel sink", okSource, "    kind: nats\n    subject: weir.data.job1.a1.{key}", "sinks[0].subject",
			[]string{"overlaps weir.data.>"}},
		{"JetStream API", "    kind: nats\n    subject: $JS.API.>", okSink, "sources[0].subject", []string{"overlaps $JS.>"}},
		{"JetStream acks", okSource, "    kind: nats\n    subject: $JS.ACK.{key}", "sinks[0].subject", []string{"overlaps $JS.>"}},
		{"key-value", okSource, "    kind: nats\n    subject: $KV.weir_jobs.{key}", "sinks[0].subject", []string{"overlaps $KV.>", "weir's job records"}},
		{"object store", "    kind: nats\n    subject: $O.weir_state.>", okSink, "sources[0].subject", []string{"overlaps $O.>"}},
		{"system account", "    kind: nats\n    subject: $SYS.>", okSink, "sources[0].subject", []string{"overlaps $SYS.>"}},
		{"JetStream internal", okSource, "    kind: nats\n    subject: $JSC.R.{key}", "sinks[0].subject", []string{"overlaps $JSC.>"}},
		{"raft", "    kind: nats\n    subject: $NRG.>", okSink, "sources[0].subject", []string{"overlaps $NRG.>"}},
		{"object store, server's name", okSource, "    kind: nats\n    subject: $OBJ.{key}", "sinks[0].subject", []string{"overlaps $OBJ.>"}},
		{"services' discovery", "    kind: nats\n    subject: $SRV.PING", okSink, "sources[0].subject", []string{"overlaps $SRV.>", "NATS services' discovery"}},
		{"answer for services", okSource, "    kind: nats\n    subject: $SRV.INFO.{key}", "sinks[0].subject", []string{"overlaps $SRV.>"}},
		{"MQTT", "    kind: nats\n    subject: $MQTT.sess.>", okSink, "sources[0].subject", []string{"overlaps $MQTT.>", "MQTT sessions"}},
		{"leaf node loops", okSource, "    kind: nats\n    subject: $LDS.{key}", "sinks[0].subject", []string{"overlaps $LDS.>"}},
		{"gateway replies", "    kind: nats\n    subject: _GR_.>", okSink, "sources[0].subject", []string{"overlaps _GR_.>", "between clusters"}},
		{"old gateway replies", "    kind: nats\n    subject: $GR.*.>", okSink, "sources[0].subject", []string{"overlaps $GR.>"}},
		{"service import replies", okSource, "    kind: nats\n    subject: _R_.{key}", "sinks[0].subject", []string{"overlaps _R_.>", "other accounts' requests"}},
		{"MQTT stream", "    kind: jetstream\n    stream: $MQTT_sess", okSink, "sources[0].stream",
			[]string{`source "in" reads stream $MQTT_sess, one of the NATS server's own`, "name a stream of your own"}},
		{"inboxes", "    kind: nats\n    subject: _INBOX.>", okSink, "sources[0].subject", []string{"overlaps _INBOX.>", "other clients' requests"}},
		{"answer inboxes", okSource, "    kind: nats\n    subject: _INBOX.{key}", "sinks[0].subject", []string{"overlaps _INBOX.>"}},
		// JetStream sources' filters, and sinks' subjects in a stream.
		{"filter", "    kind: jetstream\n    stream: ORDERS\n    filter: $KV.>", okSink, "sources[0].filter", []string{"overlaps $KV.>"}},
		{"jetstream subject", "    kind: jetstream\n    stream: ORDERS\n    subject: weir.ctl.deploy.>", okSink, "sources[0].subject",
			[]string{"overlaps weir.ctl.>"}},
		{"partition filter", "    kind: jetstream\n    stream: ORDERS\n    partitions: 4\n    partition-filter: \"$O.{p}.>\"", okSink,
			"sources[0].partition-filter", []string{`reads "$O.{p}.>"`, "overlaps $O.>"}},
		{"jetstream sink subject", okSource, "    kind: jetstream\n    stream: COUNTS\n    subject: $JS.API.STREAM.PURGE.COUNTS", "sinks[0].subject",
			[]string{"overlaps $JS.>"}},
		{"other weir stream", okSource, "    kind: jetstream\n    stream: OBJ_weir_modules\n    subject: counts", "sinks[0].stream",
			[]string{"OBJ_weir_modules"}},
		{"lease", "    kind: jetstream\n    stream: KV_weir_coordinator", okSink, "sources[0].stream", []string{"KV_weir_coordinator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yml := reservedSpec(tc.source, tc.sink)
			_, err := Parse("job.yaml", []byte(yml), Options{})
			checkReservedErr(t, "Parse", err, tc.path, tc.want, true)

			// The same spec from the raw job API: JSON, no lines.
			allowed, err := Parse("job.yaml", []byte(yml), Options{Reserved: Reserved{Allow: true}})
			if err != nil {
				t.Fatalf("Parse with Allow: %v", err)
			}
			b, err := json.Marshal(allowed)
			if err != nil {
				t.Fatal(err)
			}
			var s Spec
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			checkReservedErr(t, "Check", Check(&s), tc.path, tc.want, false)
			if err := CheckReserved(&s, Reserved{Allow: true}); err != nil {
				t.Errorf("CheckReserved with Allow: %v", err)
			}
		})
	}
}

func checkReservedErr(t *testing.T, what string, err error, path string, want []string, lines bool) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("%s: got %v, want an Errors value", what, err)
	}
	var e *Error
	for _, x := range es {
		if x.Path == path {
			e = x
		}
	}
	if e == nil {
		t.Fatalf("%s: no error at %s:\n%v", what, path, err)
	}
	if lines != (e.Line > 0) {
		t.Errorf("%s: line %d (%v)", what, e.Line, e)
	}
	if strings.Contains(e.Msg, "\n") {
		t.Errorf("%s: not one line: %q", what, e.Msg)
	}
	for _, w := range want {
		if !strings.Contains(e.Msg, w) {
			t.Errorf("%s: %q does not say %q", what, e.Msg, w)
		}
	}
}

// Where the coordinator's control subjects have another prefix, that one
// is refused too, and the default stays refused.
func TestReservedControlPrefix(t *testing.T) {
	yml := reservedSpec(okSource, "    kind: nats\n    subject: acme.ctl.api.cancel")
	if _, err := Parse("job.yaml", []byte(yml), Options{}); err != nil {
		t.Fatalf("another deployment's prefix refused by default: %v", err)
	}
	_, err := Parse("job.yaml", []byte(yml), Options{Reserved: Reserved{ControlPrefix: "acme.ctl"}})
	checkReservedErr(t, "Parse", err, "sinks[0].subject", []string{"overlaps acme.ctl.>", "weir's control subjects"}, true)

	yml = reservedSpec(okSource, "    kind: nats\n    subject: weir.ctl.api.cancel")
	_, err = Parse("job.yaml", []byte(yml), Options{Reserved: Reserved{ControlPrefix: "acme.ctl"}})
	checkReservedErr(t, "Parse", err, "sinks[0].subject", []string{"overlaps weir.ctl.>"}, true)
}

// A job's own subjects and streams, near the reserved ones, pass.
func TestReservedNotOverreaching(t *testing.T) {
	for _, tc := range []struct{ source, sink string }{
		{"    kind: nats\n    subject: \"*\"", okSink}, // one token: no reserved subject has one
		{"    kind: nats\n    subject: weird.>", okSink},
		{"    kind: nats\n    subject: weir", okSink},
		{"    kind: nats\n    subject: weir.ctl", "    kind: nats\n    subject: $JS"}, // the prefixes alone: no subject weir or NATS uses
		{"    kind: nats\n    subject: JS.API.>", okSink},
		{"    kind: nats\n    subject: orders.weir.ctl.>", "    kind: nats\n    subject: out.$JS.{key}"},
		{"    kind: jetstream\n    stream: KV_orders", "    kind: jetstream\n    stream: OBJ_weirdo\n    subject: counts.{key}"},
		{"    kind: jetstream\n    stream: weir_jobs", "    kind: jetstream\n    stream: COUNTS\n    subject: counts.{key}"},
	} {
		yml := reservedSpec(tc.source, tc.sink)
		if _, err := Parse("job.yaml", []byte(yml), Options{}); err != nil {
			t.Errorf("refused:\n%s\n%v", yml, err)
		}
	}
}

// A subject refused as malformed is not reported again as reserved.
func TestReservedAfterBadSubject(t *testing.T) {
	yml := reservedSpec("    kind: nats\n    subject: weir..ctl", "    kind: nats\n    subject: $JS.>")
	_, err := Parse("job.yaml", []byte(yml), Options{})
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("got %v, want two errors", err)
	}
	for _, e := range es {
		if strings.Contains(e.Msg, "overlaps") {
			t.Errorf("malformed subject reported as reserved: %v", e)
		}
	}
}

// Reserved.Check reports only what reaches reserved subjects and streams,
// and leaves the spec as it was: a stored job's, restored without a new
// spec.
func TestReservedCheckAlone(t *testing.T) {
	yml := reservedSpec("    kind: jetstream\n    stream: OBJ_weir_state", "    kind: nats\n    subject: _INBOX.{key}")
	s, err := Parse("job.yaml", []byte(yml), Options{Reserved: Reserved{Allow: true}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := json.Marshal(s)
	err = Reserved{}.Check(s)
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Path != "sources[0].stream" || es[1].Path != "sinks[0].subject" {
		t.Errorf("got %v, want the source's stream and the sink's subject", err)
	}
	if after, _ := json.Marshal(s); string(after) != string(before) {
		t.Errorf("Check changed the spec:\n%s\n%s", before, after)
	}
	if err := (Reserved{Allow: true}).Check(s); err != nil {
		t.Errorf("with Allow: %v", err)
	}
}
