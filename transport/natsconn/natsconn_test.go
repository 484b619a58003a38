package natsconn

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	return embeddedtest.FromOptions(t, opts)
}

func TestToken(t *testing.T) {
	ns := startServer(t, &server.Options{Authorization: "s3cret"})
	if _, err := Connect(Options{URL: ns.ClientURL(), Token: "wrong", MaxReconnects: 1}); err == nil {
		t.Fatal("wrong token accepted")
	}
	nc, err := Connect(Options{URL: ns.ClientURL(), Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

func TestUserPassword(t *testing.T) {
	ns := startServer(t, &server.Options{Username: "weir", Password: "pw"})
	nc, err := Connect(Options{URL: ns.ClientURL(), User: "weir", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

func TestNKeySeedFile(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	file := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	nc, err := Connect(Options{URL: ns.ClientURL(), NKeySeedFile: file})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

func TestConflictingAuth(t *testing.T) {
	_, err := Options{Token: "a", User: "b"}.NATSOptions()
	if !errors.Is(err, ErrConflictingAuth) {
		t.Fatalf("got %v", err)
	}
	if _, err := (Options{TLSCert: "c"}).NATSOptions(); err == nil {
		t.Fatal("cert without key accepted")
	}
	if _, err := Connect(Options{}); err == nil {
		t.Fatal("empty URL accepted")
	}
}

// The connection survives a server restart on the same port and reports
// the disconnect and the reconnect.
func TestReconnectAfterRestart(t *testing.T) {
	opts := &server.Options{}
	ns := startServer(t, opts)
	port := ns.Addr().(*net.TCPAddr).Port
	disc, reco := make(chan struct{}, 4), make(chan struct{}, 4)
	nc, err := Connect(Options{
		URL:           ns.ClientURL(),
		ReconnectWait: 20 * time.Millisecond,
		OnDisconnect:  func(error) { disc <- struct{}{} },
		OnReconnect:   func() { reco <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	select {
	case <-disc:
	case <-time.After(30 * time.Second):
		t.Fatal("no disconnect reported")
	}
	// Restart on the original port so the client finds it again.
	var ns3 *server.Server
	for i := 0; i < 50 && ns3 == nil; i++ {
		o := &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if s.ReadyForConnections(2 * time.Second) {
			ns3 = s
		} else {
			s.Shutdown()
			time.Sleep(100 * time.Millisecond)
		}
	}
	if ns3 == nil {
		t.Fatal("could not restart on the same port")
	}
	defer ns3.Shutdown()
	select {
	case <-reco:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnect reported")
	}
	if err := nc.Publish("x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A URL whose scheme is not one NATS takes (a typo) is refused, naming
// it, rather than connected to as nats:// — which nats.go does with any
// scheme, so tsl:// would have connected without TLS.
func TestConnectRefusesAnUnknownScheme(t *testing.T) {
	ns := startServer(t, &server.Options{})
	hostPort := strings.TrimPrefix(ns.ClientURL(), "nats://")
	for _, u := range []string{"nast://" + hostPort, "nats://" + hostPort + ",tsl://u:secret@" + hostPort, "http://" + hostPort} {
		nc, err := Connect(Options{URL: u})
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", u)
			continue
		}
		if !strings.Contains(err.Error(), "unknown scheme") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q; want it to name the unknown scheme, the password hidden", u, err)
		}
	}
	for _, u := range []string{ns.ClientURL(), hostPort, "NATS://" + hostPort} {
		nc, err := Connect(Options{URL: u})
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		nc.Close()
	}
}

// A URL that does not parse (a password with a "%" or "/" not escaped)
// is refused naming it redacted: nats.go's error quoted the whole URL,
// password and all, and Connect passed it on.
func TestUnparsableURLHidesItsSecret(t *testing.T) {
	for _, u := range []string{"nats://u:p%zzw@127.0.0.1:4999", "u:p/w@127.0.0.1:4999", "p%zzw@127.0.0.1:4999"} {
		_, err := Connect(Options{URL: u})
		if err == nil || strings.Contains(err.Error(), "p%zzw") || strings.Contains(err.Error(), "p/w") || strings.Contains(err.Error(), "zz") {
			t.Errorf("connect %s: %v; want an error without the password", u, err)
		}
	}
	// The forms nats.go takes pass.
	for _, u := range []string{"nats://u:pw@a:4222, tls://tok@b:4222,", "[::1]:4222", "nats://[::1]:4222", "localhost",
		"u:pw@localhost:4222", "ws://a:8080", "nats://u:p%40w@a:4222"} {
		if err := CheckURLs(u); err != nil {
			t.Errorf("CheckURLs(%q): %v", u, err)
		}
	}
	_, err := Connect(Options{URL: "nats://127.0.0.1:99999x"})
	if err == nil || !strings.Contains(err.Error(), "99999x") {
		t.Errorf("a bad port: %v; want it named", err)
	}
}
