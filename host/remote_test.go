package host_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/remote"
	"github.com/weirhq/weir/transport/stream"
)

// TestRecoveryPropertyOverNATS runs the recovery property with every
// channel a NATS channel (transport/remote) on an embedded nats-server, with
// small credit windows so backpressure and priority barriers cross NATS.
func TestRecoveryPropertyOverNATS(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn := func() *nats.Conn {
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	pub, sub := conn(), conn()
	var seq atomic.Int64
	channels := func(t *testing.T, name string) (stream.Sender, stream.Receiver) {
		subj := fmt.Sprintf("weir.test.ch%d", seq.Add(1))
		cfg := remote.Config{Channel: name, Subject: subj, Window: 256, MaxFrameBytes: 128}
		r, err := remote.NewReceiver(sub, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := remote.NewSender(pub, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s, r
	}
	n := 40
	if testing.Short() {
		n = 10
	}
	for i := 0; i < n; i++ {
		c := genCase(uint64(3000 + i))
		c.channels = channels
		checkCase(t, c, func() host.Operator { return &joinOp{} }, verifyJoin)
	}
	// Larger batches, processed in pieces with barriers taken between them.
	for i := 0; i < n/2; i++ {
		c := genCaseBatch(uint64(3500+i), 8)
		c.channels = channels
		checkCase(t, c, func() host.Operator { return &pacedJoin{} }, verifyJoin)
	}
}
