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

// A deploy whose answer is lost because the coordinator's NATS connection
// dropped while the worker set the attempt up is sent again as soon as the
// connection is back, and the job runs: with DeployTimeout an hour, it
// runs at all only because of that. The worker is asked twice for the same
// attempt, and no restart is spent.
func TestDeploySentAgainWhenTheConnectionComesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := embeddedtest.Server(t, embedded.Config{})
	gate := &dialGate{}
	nc, err := srv.Connect(nats.Name("coordinator"), nats.SetCustomDialer(gate),
		nats.ReconnectWait(10*time.Millisecond), nats.CustomInboxPrefix("coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// No worker is declared lost while the coordinator is away: that
	// would end the deploy's wait too.
	e := setupWith(t, ctx, Options{NC: nc, DeployTimeout: time.Hour, HeartbeatTimeout: time.Hour})
	w := e.fleet.start(ctx, "w1")
	held, release := make(chan struct{}), make(chan struct{})
	var deploys atomic.Int32
	w.deployGate = func(control.Deploy) {
		if deploys.Add(1) == 1 {
			close(held)
			<-release
		}
	}
	e.waitWorkers(1)
	if _, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "wc", "")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the deploy never reached the worker")
	}

	// The coordinator's connection drops and stays away while the worker
	// answers: the server has nobody to deliver the answer to.
	gate.shut.Store(true)
	embeddedtest.Kick(t, srv, "coordinator")
	for nc.Status() == nats.CONNECTED {
		time.Sleep(time.Millisecond)
	}
	obs, _ := embeddedtest.Connect(t, srv)
	replies, err := obs.SubscribeSync("coordinator.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if _, err := replies.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("the worker's answer to the deploy: %v", err)
	}
	gate.shut.Store(false)

	st := waitFor(t, ctx, e, "wc", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if st.Attempt != 1 || st.Restarts != 0 {
		t.Errorf("job runs attempt %d after %d restarts; want attempt 1, no restart", st.Attempt, st.Restarts)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.deploys) != 2 || w.deploys[0].Attempt != 1 || w.deploys[1].Attempt != 1 {
		var got []int
		for _, d := range w.deploys {
			got = append(got, d.Attempt)
		}
		t.Errorf("worker got deploys of attempts %v; want [1 1] (the same attempt sent again)", got)
	}
}
