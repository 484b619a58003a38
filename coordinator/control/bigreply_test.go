package control

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// bigAPI answers with lists far larger than the server's max_payload:
// many jobs, a job with many retained checkpoints, a removal of many.
type bigAPI struct {
	fakeAPI
	jobs, checkpoints int
}

func (a bigAPI) Jobs(context.Context) ([]JobStatus, error) {
	out := make([]JobStatus, a.jobs)
	for i := range out {
		out[i] = JobStatus{Name: fmt.Sprintf("job-%05d", i), State: JobRunning, Reason: "a reason long enough to take some room in the listing"}
	}
	return out, nil
}

func (a bigAPI) Checkpoints(_ context.Context, job string) ([]CheckpointInfo, error) {
	out := make([]CheckpointInfo, a.checkpoints)
	for i := range out {
		out[i] = CheckpointInfo{Job: job, ID: int64(a.checkpoints - i), Size: 1234}
	}
	return out, nil
}

func (a bigAPI) RemoveJob(_ context.Context, job string) (Removed, error) {
	var out Removed
	for i := range a.checkpoints {
		out.Checkpoints = append(out.Checkpoints, RemovedCheckpoint{CheckpointInfo: CheckpointInfo{Job: job, ID: int64(i + 1)}, Objects: 3})
	}
	return out, nil
}

// An answer larger than the server's max_payload — a job listing of
// thousands of jobs, the checkpoints of a job that retains thousands, a
// removal of them — reaches the client whole, in parts, for reads and
// calls alike; a small one is still one message without part headers, as
// a client older than parts reads it.
func TestAPIAnswerLargerThanMaxPayload(t *testing.T) {
	const maxPayload = 32 << 10
	_, nc := embeddedtest.Start(t, embedded.Config{MaxPayload: maxPayload, NoJetStream: true})
	if nc.MaxPayload() != maxPayload {
		t.Fatalf("max_payload = %d, want %d", nc.MaxPayload(), maxPayload)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	impl := bigAPI{jobs: 3000, checkpoints: 22000}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); _ = ServeAPI(ctx, nc, "", impl, ready) }()
	<-ready
	c := NewAPIClient(nc, "")

	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != impl.jobs || jobs[impl.jobs-1].Name != fmt.Sprintf("job-%05d", impl.jobs-1) {
		t.Fatalf("jobs: %d of them, %v; want %d", len(jobs), err, impl.jobs)
	}
	cps, err := c.Checkpoints(ctx, "big")
	if err != nil || len(cps) != impl.checkpoints || cps[0].ID != int64(impl.checkpoints) || cps[len(cps)-1].ID != 1 {
		t.Fatalf("checkpoints: %d of them, %v; want %d", len(cps), err, impl.checkpoints)
	}
	rm, err := c.RemoveJob(ctx, "big")
	if err != nil || len(rm.Checkpoints) != impl.checkpoints || rm.Checkpoints[impl.checkpoints-1].ID != int64(impl.checkpoints) {
		t.Fatalf("remove job: %d checkpoints, %v; want %d", len(rm.Checkpoints), err, impl.checkpoints)
	}

	// On the wire: parts within max_payload, and a small answer alone.
	raw := func(op string, req string) []*nats.Msg {
		t.Helper()
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.PublishRequest(Subjects{}.API(op), inbox, []byte(req)); err != nil {
			t.Fatal(err)
		}
		var got []*nats.Msg
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("%s: %d messages, then %v", op, len(got), err)
			}
			got = append(got, m)
			var i, n int
			if _, err := fmt.Sscanf(m.Header.Get(HeaderPart), "%d/%d", &i, &n); err != nil || i == n-1 {
				return got
			}
		}
	}
	parts := raw(APICheckpoints, `{"name":"big"}`)
	if len(parts) < 2 {
		t.Fatalf("the checkpoints came in %d message(s); want parts", len(parts))
	}
	total := 0
	for i, m := range parts {
		if size := len(m.Data) + len(m.Header.Get(HeaderPart)) + len(m.Header.Get(HeaderAnswer)); size > maxPayload {
			t.Errorf("part %d is %d bytes, over max_payload", i, size)
		}
		if m.Header.Get(HeaderAnswer) != parts[0].Header.Get(HeaderAnswer) || m.Header.Get(HeaderPart) != fmt.Sprintf("%d/%d", i, len(parts)) {
			t.Errorf("part %d has headers %v", i, m.Header)
		}
		total += len(m.Data)
	}
	t.Logf("%d checkpoints: an answer of %d bytes in %d parts", impl.checkpoints, total, len(parts))
	small := raw(APIWorkers, `{}`)
	if len(small) != 1 || small[0].Header.Get(HeaderPart) != "" || small[0].Header.Get(HeaderAnswer) != "" {
		t.Fatalf("a small answer came as %d messages, headers %v; want one without part headers", len(small), small[0].Header)
	}
	var ws apiReply[[]WorkerStatus]
	if err := json.Unmarshal(small[0].Data, &ws); err != nil || len(ws.Result) != 1 {
		t.Errorf("small answer %q: %v", small[0].Data, err)
	}
	cancel()
	<-done
}

// Parts of two answers to an inbox — the answers to two tries of a read —
// may interleave: each is put together from its own.
func TestAnswersInterleavedParts(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ans, err := subscribeAnswers(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer ans.close()
	part := func(id string, i, n int, data string) {
		m := nats.NewMsg(ans.inbox)
		m.Header.Set(HeaderAnswer, id)
		m.Header.Set(HeaderPart, fmt.Sprintf("%d/%d", i, n))
		m.Data = []byte(data)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	part("a", 0, 3, "a0")
	part("b", 1, 2, "b1")
	part("a", 1, 3, "a1")
	part("b", 0, 2, "b0")
	part("a", 2, 3, "a2")
	if err := nc.Publish(ans.inbox, []byte("whole")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"b0b1", "a0a1a2", "whole"} {
		m, err := ans.next(ctx)
		if err != nil || string(m.Data) != want {
			t.Fatalf("answer = %v, %v; want %q", m, err, want)
		}
	}
	part("c", 5, 3, "bad")
	if _, err := ans.next(ctx); err == nil {
		t.Errorf("a part 5 of 3 was taken")
	}
}
