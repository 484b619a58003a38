package control

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A submit too large for the server's max_payload because of an
// operator's config says so — the config, its size, and what to do —
// not to lower the parallelism, which does not make a spec smaller.
func TestSubmitWithAConfigTooBig(t *testing.T) {
	const maxPayload = 64 << 10
	_, nc := embeddedtest.Start(t, embedded.Config{MaxPayload: maxPayload, NoJetStream: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := make(chan struct{})
	go func() { _ = ServeAPI(ctx, nc, "", fakeAPI{}, ready) }()
	<-ready
	spec := &jobspec.Spec{Name: "x", Operators: []jobspec.Operator{
		{Name: "small", Config: []byte("sep= ")},
		{Name: "lookup", Parallelism: 4, Config: []byte(strings.Repeat("k=v\n", 20000))},
	}}
	_, err := NewAPIClient(nc, "").Submit(ctx, SubmitRequest{Spec: spec})
	want := "(max_payload 65536): " +
		"operator lookup's config is 80000 bytes (106668 in the request, base64), too big to send with the job: " +
		"keep a config to settings, and feed large data to the job as a source (a stream an operator reads) or build it into the module; " +
		"or raise the server's max_payload: "
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "parallelism") {
		t.Fatalf("submit of an 80000-byte config: %v; want %q", err, want)
	}
	if strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("not one line: %q", err)
	}
}

// What payloadAdvice says of a request too large: the config that makes
// half of it or more; else, of a deploy, the plan (parallelism); else the
// server's max_payload.
func TestPayloadAdvice(t *testing.T) {
	spec := &jobspec.Spec{Name: "x", Operators: []jobspec.Operator{{Name: "op", Config: make([]byte, 3000)}}}
	for _, c := range []struct {
		req  any
		size int
		want string
	}{
		{SubmitRequest{Spec: spec}, 5000, "operator op's config is 3000 bytes (4000 in the request, base64)"},
		{Deploy{Spec: spec}, 8000, "operator op's config is 3000 bytes"},
		{Deploy{Spec: spec}, 8002, "the job's plan of tasks is too big to deploy: lower the operators' parallelism, or raise the server's max_payload"},
		{RestoreRequest{Spec: spec}, 9000, "raise the server's max_payload"},
		{nameRequest{"x"}, 9000, "raise the server's max_payload"},
	} {
		if got := payloadAdvice(c.req, c.size); !strings.HasPrefix(got, c.want) {
			t.Errorf("payloadAdvice(%T, %d) = %q; want %q…", c.req, c.size, got, c.want)
		}
	}
}
