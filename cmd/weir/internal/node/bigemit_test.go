package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/guests/go/guestbuild"
)

// An operator that emits a record over the 4 MiB input batch of the
// operator it goes to fails, not the operator the record goes to (a
// trial's failure blamed passop, named no key, had no kind and was
// restarted): of kind bad-record, its reason naming the emitting
// operator, the record's key and size and the limit, and, fed by a
// JetStream stream that would replay the record into the same failure,
// not restarted.
func TestRecordOverTheBatchLimitFailsItsEmitter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, mods := oneNode(t, ctx, "passthrough")
	bad := filepath.Join(t.TempDir(), "sdktest.wasm")
	if err := os.WriteFile(bad, guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/internal/sdktest"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustStream(t, ctx, n.JS, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	mustSinkStream(t, ctx, n.JS, "OUT", "out")
	spec, err := jobspec.Parse("big.yaml", fmt.Appendf(nil, `name: big
sources: [{name: in, kind: jetstream, stream: IN, key: subject}]
operators:
  - {name: badop, module: %s, config: big, limits: {memory: 256MiB}, inputs: [{from: in}]}
  - {name: passop, module: %s, inputs: [{from: badop}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: passop}}]
checkpointing: {interval: 100ms}
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`, bad, mods["passthrough"]), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.JS.Publish(ctx, "in.k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Submit(ctx, control.SubmitRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	st := waitJob(t, ctx, n, "big", "the job failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	want := `task badop-0 failed: operator badop[0]: forwarding output to port 0: record 1 of an emitted batch (key "in.k"): ` +
		`record too large for an operator's input: a record of 10485764 bytes (key 4, value 10485760) makes a batch of 10485784 bytes, ` +
		`over the 4194304-byte (4 MiB) limit of operator passop's input batch; emit smaller records (split a large value across several)`
	if st.State != control.JobFailed || st.Restarts != 0 || len(st.Failures) != 1 || st.Failures[0].Kind != control.FailureBadRecord ||
		st.Failures[0].Task != "badop-0" || st.Failures[0].Reason != want ||
		!strings.HasSuffix(st.Reason, "(not restarted: it would fail the same way again)") {
		t.Fatalf("job %s after %d restarts: %q, failures %+v; want failed at once, of kind %s in badop-0: %q",
			st.State, st.Restarts, st.Reason, st.Failures, control.FailureBadRecord, want)
	}
}
