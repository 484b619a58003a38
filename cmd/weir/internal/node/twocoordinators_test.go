package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// A second weir up on a NATS whose coordinator answers is refused, naming
// the server, the holder of the coordinator lease and the other one's
// workers (where it runs): both used to
// start, silently, and would have run the same jobs from the same records.
// Once the first is gone, it starts.
func TestSecondCoordinatorOnTheSameNATSIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := embeddedtest.Server(t, embedded.Config{}).ClientURL()
	first, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Coordinator: true, Workers: 1, WorkerID: "w1",
		DataDir: t.TempDir(), CacheDir: t.TempDir(), HeartbeatInterval: 100 * time.Millisecond, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitUntil(t, ctx, "w1 live", func() bool {
		ws, err := first.API.Workers(ctx)
		return err == nil && len(ws) == 1
	})
	second, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Coordinator: true, Log: testLog()})
	if err == nil {
		second.Close()
		t.Fatal("a second coordinator started on the same NATS")
	}
	t.Logf("refused: %v", err)
	h := first.lease.Holder()
	for _, want := range []string{"NATS " + url + ": another coordinator already runs there", "w1",
		fmt.Sprintf("coordinator %s on %s (pid %d, since ", h.ID, h.Host, h.PID)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q; want it to say %q", err, want)
		}
	}
	// A worker alone, and weir run's node (no coordinator), still join.
	w, err := Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Workers: 1, WorkerID: "w2", DataDir: t.TempDir(),
		CacheDir: t.TempDir(), Log: testLog()})
	if err != nil {
		t.Fatalf("a worker beside the coordinator: %v", err)
	}
	w.Close()

	first.Close()
	second, err = Start(ctx, Options{NATS: &natsconn.Options{URL: url}, Coordinator: true, Log: testLog()})
	if err != nil {
		t.Fatalf("a coordinator after the first stopped: %v", err)
	}
	second.Close()
}
