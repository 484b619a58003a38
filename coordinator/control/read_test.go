package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// The answer to a read's earlier try counts when it comes after the read
// asked again: here the coordinator answers the first request only once
// the second arrived, and never the second. (It answered none the client
// still listened for: each try had a reply subject of its own.) The
// requests say how long the caller waits, less what it waited already.
func TestAPIReadTakesTheAnswerToAnEarlierTry(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		first *nats.Msg
		waits []time.Duration
	)
	sub, err := nc.Subscribe(Subjects{}.API(APICheckpoints), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		d, err := time.ParseDuration(m.Header.Get(HeaderWait))
		if err != nil {
			t.Errorf("request without a wait: %v", err)
		}
		waits = append(waits, d)
		switch len(waits) {
		case 1:
			first = m
		case 2:
			_ = first.Respond([]byte(`{"result":[{"job":"x","id":1}]}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := NewAPIClient(nc, "")
	c.ReadAttempt = 100 * time.Millisecond
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	cps, err := c.Checkpoints(rctx, "x")
	if err != nil || len(cps) != 1 || cps[0].ID != 1 {
		t.Fatalf("checkpoints = %+v, %v; want the answer to the first try", cps, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 2 || waits[0] > 20*time.Second || waits[1] >= waits[0] {
		t.Errorf("the tries said their caller waits %v; want 20s at most, less for the later", waits)
	}
}

// A request that has had no answer for WaitingAfter calls Waiting once,
// with its operation and its whole wait, and not after it returned: here
// the coordinator answers only once Waiting was called.
func TestAPIWaitingSaysWhatItWaitsFor(t *testing.T) {
	nc := embeddedtest.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	called := make(chan string, 4)
	sub, err := nc.Subscribe(Subjects{}.API(APICancel), func(m *nats.Msg) {
		select {
		case <-called:
		case <-ctx.Done():
		}
		_ = m.Respond([]byte(`{"result":{"name":"x","state":"canceled"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := NewAPIClient(nc, "")
	c.Timeout, c.WaitingAfter = 20*time.Second, 10*time.Millisecond
	var ops []string
	var waits []time.Duration
	c.Waiting = func(op string, wait time.Duration) {
		ops, waits = append(ops, op), append(waits, wait)
		called <- op
	}
	st, err := c.CancelJob(context.Background(), "x") // c.Timeout bounds it
	if err != nil || st.State != JobCanceled {
		t.Fatalf("cancel = %+v, %v", st, err)
	}
	if len(ops) != 1 || ops[0] != APICancel || waits[0] <= 19*time.Second || waits[0] > 20*time.Second {
		t.Errorf("Waiting called with %v, %v; want once, with %s and 20s", ops, waits, APICancel)
	}
}
