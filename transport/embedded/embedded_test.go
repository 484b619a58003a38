package embedded

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	nc, err := srv.Connect()
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

// TestConnectFollowsRestart: a client of Connect is in-process (no TCP
// connection on the server's side) and, once the server restarts, is
// connected to the new one, where its subscription gets messages again,
// from this process and from a TCP client on the port alike.
func TestConnectFollowsRestart(t *testing.T) {
	srv, err := Start(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	reconnected := make(chan struct{}, 1)
	nc, err := srv.Connect(nats.ReconnectWait(20*time.Millisecond), nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != srv.ClientURL() {
		t.Errorf("ConnectedUrl %q, want the server's %q", got, srv.ClientURL())
	}
	if ip := inProcessClients(t, srv); ip != 1 {
		t.Fatalf("%d in-process clients, want 1", ip)
	}
	sub, err := nc.SubscribeSync("a")
	if err != nil {
		t.Fatal(err)
	}
	old := srv.NATSServer()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.NATSServer() == old {
		t.Fatal("Restart kept the old nats-server")
	}
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnect to the restarted server in 30s")
	}
	if err := nc.Flush(); err != nil { // the subscription is on the new server
		t.Fatal(err)
	}
	if ip := inProcessClients(t, srv); ip != 1 {
		t.Fatalf("after the restart: %d in-process clients, want 1", ip)
	}
	tcp, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for _, pub := range []*nats.Conn{nc, tcp} {
		if err := pub.Publish("a", []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(30 * time.Second); err != nil || string(m.Data) != "hi" {
			t.Fatalf("after the restart: got %v, %v", m, err)
		}
	}
}

// inProcessClients counts the server's client connections that have no
// TCP address (the in-process ones).
func inProcessClients(t *testing.T, srv *Server) int {
	t.Helper()
	cz, err := srv.NATSServer().Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Port == 0 {
			n++
		}
	}
	return n
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
