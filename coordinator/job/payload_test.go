package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// A job whose plan is larger than a NATS message may be fails at its first
// deploy with the sizes, instead of restarting into the same refusal.
func TestDeployLargerThanAMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := setup(t, ctx)
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s, err := jobspec.Parse("big.yaml", []byte(`name: big
sources: [{name: in, kind: jetstream, stream: IN, parallelism: 200}]
operators:
  - {name: count, module: count@1, parallelism: 200, inputs: [{from: in, partition: key}]}
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: count}}]
restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, ctx, e, "big", "failed", func(st control.JobStatus) bool { return st.State.Terminal() })
	if st.State != control.JobFailed || st.Restarts != 0 || !strings.Contains(st.Reason, "larger than the NATS server accepts (max_payload") ||
		!strings.Contains(st.Reason, "not restarted") || !strings.Contains(st.Reason, "lower the operators' parallelism") {
		t.Errorf("status %+v; want failed at once, with the sizes", st)
	}
	t.Log(st.Reason)
}
