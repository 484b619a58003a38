package storage

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A listing whose watch never delivers its end marker fails, naming the
// bucket, instead of waiting for it as long as its context lets it — for
// good with a context without a deadline, as a job's failover and its
// checkpoint runner have: a job stayed restarting, or running without a
// checkpoint, after a NATS outage. The marker is lost here as the object
// store client loses it when it cannot read the bucket's last entry: a
// user may not publish direct gets, so the client takes the empty bucket
// for one with entries, and waits for a delivery that never comes.
func TestListWhoseWatchNeverEndsFails(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{{Username: "weir", Password: "weir", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{jetstream.DefaultAPIPrefix + "DIRECT.GET.>"}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("weir", "weir"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := NewObjectStore(ctx, js, "state", 0)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(ctx, js, "meta", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "j/chk-1/_metadata", bytes.NewReader([]byte("m"))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := obs.List(context.Background(), "j/chk-")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrWatchStalled) || err.Error() != "storage list j/chk-: object store state: watch stalled: nothing for 200ms after 0 entries" {
			t.Errorf("list: %v; want it to say the watch of bucket state stalled", err)
		}
	case <-ctx.Done():
		t.Fatal("a listing whose watch never ended never returned")
	}
	// The KV listing of the same connection still works.
	keys, err := kv.List(ctx, "j/")
	if err != nil || len(keys) != 1 {
		t.Errorf("kv list: %v, %v", keys, err)
	}
}
