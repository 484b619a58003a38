package job

import (
	"strings"
	"testing"
)

// A bounded job stopped (or cancelled) while one of its source's subtasks
// had reached the stop and the other had not: on forward edges only the
// first one's chain ended (count-0's port, then out-0's), the second one's
// goes on. Restoring that savepoint with the job's own spec is a legit
// resume — count-1 keeps feeding out-1 only, out-0 gets nothing but the
// end again — and must not be refused because count-1 (which never feeds
// out-0) had not finished.
func TestCheckEndedForwardEdgeEndsPerSubtask(t *testing.T) {
	yaml := `sources: [{name: in, kind: jetstream, stream: IN, stop: "5", parallelism: 2}]
operators: [{name: count, module: count@1, parallelism: 2, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: 2, input: {from: count}}]
`
	s, p := endedSpec(t, yaml, map[string]uint64{"in": 5})
	md := endedMetadata(map[string]ended{
		"in-0": {stop: 5}, "in-1": {stop: 5},
		"count-0": {ports: 1}, "count-1": {},
		"out-0": {ports: 1}, "out-1": {},
	})
	if err := checkEnded(s, p, md, nil); err != nil {
		t.Fatalf("the job's own savepoint refused: %v", err)
	}
	// The same savepoint with count's input changed to key partitioning
	// would feed count-1's rest to out-0 as well: refused.
	yaml2 := `sources: [{name: in, kind: jetstream, stream: IN, stop: "5", parallelism: 2}]
operators: [{name: count, module: count@1, parallelism: 2, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: 2, input: {from: count, partition: round-robin}}]
`
	s, p = endedSpec(t, yaml2, map[string]uint64{"in": 5})
	if err := checkEnded(s, p, md, nil); err == nil {
		t.Fatal("out-0's ended port fed by the unfinished count-1 accepted")
	} else {
		t.Log(err)
	}
}

// The same savepoint, its source subtasks' acks saying which had read up
// to the stop (source_ended), restored with count's input changed from
// forward to key partitioning: in-1, still reading, would now also feed
// count-0, whose port ended. Refused, naming in-1; with forward edges it
// is still accepted.
func TestCheckEndedSourceSubtaskRewiredToAnEndedPort(t *testing.T) {
	md := endedMetadata(map[string]ended{
		"in-0": {stop: 5, read: true}, "in-1": {stop: 5, reading: true},
		"count-0": {ports: 1}, "count-1": {},
		"out-0": {ports: 1}, "out-1": {},
	})
	forward := `sources: [{name: in, kind: jetstream, stream: IN, stop: "5", parallelism: 2}]
operators: [{name: count, module: count@1, parallelism: 2, inputs: [{from: in}]}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, parallelism: 2, input: {from: count}}]
`
	s, p := endedSpec(t, forward, map[string]uint64{"in": 5})
	if err := checkEnded(s, p, md, nil); err != nil {
		t.Fatalf("the job's own savepoint refused: %v", err)
	}
	keyed := strings.Replace(forward, "inputs: [{from: in}]", "inputs: [{from: in, partition: key}]", 1)
	s, p = endedSpec(t, keyed, map[string]uint64{"in": 5})
	err := checkEnded(s, p, md, nil)
	if err == nil || !strings.Contains(err.Error(), "task count-0's input port 0 ended in the checkpoint, but source in would give it more records: its task in-1 had not read up to its stop (sequence 5)") {
		t.Fatalf("in-1, still reading, rewired to count-0's ended port: %v", err)
	}
}
