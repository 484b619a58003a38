package job

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// dialGate dials as net.Dialer does, or refuses while shut: a connection
// that dropped stays away until the test lets it back.
type dialGate struct {
	shut atomic.Bool
	d    net.Dialer
}

func (g *dialGate) Dial(network, address string) (net.Conn, error) {
	if g.shut.Load() {
		return nil, errors.New("dial refused by the test")
	}
	return g.d.Dial(network, address)
}

// cutOff is a manager whose NATS connection the test can cut and keep
// away, and worker w1, which holds the first request of one operation
// until the test lets it answer.
type cutOff struct {
	*env
	srv           *embedded.Server
	nc            *nats.Conn
	dial          *dialGate
	w             *fakeWorker
	held, release chan struct{}
}

// newCutOff starts a cutOff whose worker holds the first request of op.
// No worker is declared lost while the coordinator is away (that would end
// a deploy's wait too), and a deploy may take an hour.
func newCutOff(t *testing.T, ctx context.Context, op string) *cutOff {
	t.Helper()
	srv := embeddedtest.Server(t, embedded.Config{})
	dial := &dialGate{}
	nc, err := srv.Connect(nats.Name("coordinator"), nats.SetCustomDialer(dial),
		nats.ReconnectWait(10*time.Millisecond), nats.CustomInboxPrefix("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &cutOff{env: setupWith(t, ctx, Options{NC: nc, DeployTimeout: time.Hour, HeartbeatTimeout: time.Hour}),
		srv: srv, nc: nc, dial: dial, held: make(chan struct{}), release: make(chan struct{})}
	c.w = c.fleet.start(ctx, "w1")
	var n atomic.Int32
	c.w.mu.Lock()
	c.w.gate = func(got string) {
		if got == op && n.Add(1) == 1 {
			close(c.held)
			<-c.release
		}
	}
	c.w.mu.Unlock()
	t.Cleanup(func() {
		select {
		case <-c.release:
		default:
			close(c.release)
		}
	})
	c.waitWorkers(1)
	return c
}

// loseAnswer waits until the held request is at the worker, then cuts the
// coordinator's connection and keeps it away until the worker's answer
// has gone to nobody, and lets it back.
func (c *cutOff) loseAnswer(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-c.held:
	case <-ctx.Done():
		t.Fatal("the request never reached the worker")
	}
	c.dial.shut.Store(true)
	embeddedtest.Kick(t, c.srv, "coordinator")
	for c.nc.Status() == nats.CONNECTED {
		time.Sleep(time.Millisecond)
	}
	obs, _ := embeddedtest.Connect(t, c.srv)
	replies, err := obs.SubscribeSync("coordinator.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	close(c.release)
	if _, err := replies.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("the worker's answer: %v", err)
	}
	c.dial.shut.Store(false)
}

// await polls the worker until cond holds (under its lock).
func (c *cutOff) await(t *testing.T, ctx context.Context, what string, cond func(w *fakeWorker) bool) {
	t.Helper()
	for {
		c.w.mu.Lock()
		ok := cond(c.w)
		c.w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A request to a worker whose answer is lost because the coordinator's
// NATS connection dropped while the worker handled it is sent again as
// soon as the connection is back: a deploy (with DeployTimeout an hour,
// the job runs at all only because of that; the worker is asked twice for
// the same attempt and no restart is spent), a cancel, a checkpoint's
// completion, an abort and a stop. Without it, each waits for its answer
// until its time runs out and the worker hears of it once.
func TestRequestsSentAgainWhenTheConnectionComesBack(t *testing.T) {
	t.Run("deploy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newCutOff(t, ctx, control.OpDeploy)
		if _, err := c.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "")}); err != nil {
			t.Fatal(err)
		}
		c.loseAnswer(t, ctx)
		st := waitFor(t, ctx, c.env, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
		if st.Attempt != 1 || st.Restarts != 0 {
			t.Errorf("job runs attempt %d after %d restarts; want attempt 1, no restart", st.Attempt, st.Restarts)
		}
		c.await(t, ctx, "the deploy of attempt 1 twice", func(w *fakeWorker) bool {
			return len(w.deploys) == 2 && w.deploys[0].Attempt == 1 && w.deploys[1].Attempt == 1
		})
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newCutOff(t, ctx, control.OpCancel)
		c.submitRunning(t, ctx, spec(t, "wc", ""))
		go func() { _, _ = c.api.CancelJob(ctx, "wc") }()
		c.loseAnswer(t, ctx)
		c.await(t, ctx, "the cancel of attempt 1 twice", func(w *fakeWorker) bool {
			return len(w.cancels) == 2 && w.cancels[0].Attempt == 1 && w.cancels[1].Attempt == 1
		})
	})
	t.Run("complete", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newCutOff(t, ctx, control.OpComplete)
		c.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 30ms}\n"))
		c.loseAnswer(t, ctx)
		c.await(t, ctx, "the first completion twice", func(w *fakeWorker) bool {
			return len(w.complete) >= 2 && w.complete[0] == w.complete[1]
		})
	})
	t.Run("abort", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newCutOff(t, ctx, control.OpAbort)
		c.w.mu.Lock()
		c.w.noAck = true // checkpoints expire
		c.w.mu.Unlock()
		c.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {interval: 30ms, timeout: 50ms, tolerable-failures: 1000}\n"))
		c.loseAnswer(t, ctx)
		c.await(t, ctx, "the first abort twice", func(w *fakeWorker) bool {
			return len(w.aborts) >= 2 && w.aborts[0] == w.aborts[1]
		})
	})
	t.Run("stop", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newCutOff(t, ctx, control.OpStop)
		c.submitRunning(t, ctx, spec(t, "wc", "checkpointing: {disabled: true}\n"))
		go func() { _, _ = c.api.StopJob(ctx, "wc") }()
		c.loseAnswer(t, ctx)
		c.await(t, ctx, "the stop twice", func(w *fakeWorker) bool {
			return len(w.stops) == 2 && w.stops[0] == w.stops[1]
		})
	})
}
