package embedded

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestStartPublishRestartKeepsStream(t *testing.T) {
	dir := t.TempDir()
	srv, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if srv.Port() <= 0 {
		t.Fatalf("port %d", srv.Port())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := js.Publish(ctx, "s.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	port := srv.Port()

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed on restart: %d -> %d", port, srv.Port())
	}
	nc, err = srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Fatalf("after restart: %d messages, want 10", info.State.Msgs)
	}
}

func TestInProcessAndCoreOnly(t *testing.T) {
	srv, err := Start(Config{NoJetStream: true, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.ConnectInProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("a", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v %v", m, err)
	}
}

func TestMissingDataDir(t *testing.T) {
	if _, err := Start(Config{}); err == nil {
		t.Fatal("want error without DataDir")
	}
}

// TestStartOnPortInUse checks that a port another process listens on is
// reported at once, naming the address, instead of after the ready
// timeout as "not ready".
func TestStartOnPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	// An hour's ready timeout: an error that waited for it would not come.
	srv, err := Start(Config{DataDir: t.TempDir(), Port: port, ReadyTimeout: time.Hour})
	if err == nil {
		srv.Shutdown()
		t.Fatal("started on a port in use")
	}
	if want := "127.0.0.1:" + strconv.Itoa(port); !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "address already in use") || errors.Is(err, ErrNotReady) {
		t.Errorf("error %q, want it to name %s at once", err, want)
	}
}

// TestRestartAfterShutdownKeepsThePort: a server shut down (an outage)
// and restarted later comes back on its port, where its clients reconnect,
// also when its port was picked at random.
func TestRestartAfterShutdownKeepsThePort(t *testing.T) {
	srv, err := Start(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	port := srv.Port()
	srv.Shutdown()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("restarted after a shutdown on port %d, want %d", srv.Port(), port)
	}
}
