package natsconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A port that is not a NATS server's says what answered there, on one
// line naming the URL: an HTTP server (the monitoring port, 8222, is the
// usual mistake), a TLS port, another protocol's banner — none of which
// a retry fixes, so none counts as unreachable — or nothing (a frozen
// server, or one that waits to be asked), or a close without a word (a
// server shutting down, a proxy with nothing behind it), which weir
// worker waits out as it does a server that is down.
func TestConnectToAPortThatIsNotNATS(t *testing.T) {
	monitor := startServer(t, &server.Options{HTTPHost: "127.0.0.1", HTTPPort: server.RANDOM_PORT})
	refused := fmt.Sprintf("nats://127.0.0.1:%d", natsconntest.FreePort(t))
	httpPort := natsconntest.HTTPPort(t)
	for _, c := range []struct {
		name, url, want string
		unreachable     bool
	}{
		{"the monitoring port", "nats://" + monitor.MonitorAddr().String(),
			`: answered "HTTP/1.1 400 Bad Request": an HTTP server (the NATS monitoring port?), not NATS; NATS clients use port 4222`, false},
		{"a web server", httpPort, `: answered "HTTP/1.1 400 Bad Request": an HTTP server (the NATS monitoring port?), not NATS`, false},
		{"a TLS port", natsconntest.TLSPort(t), ": answered in TLS, not with a NATS greeting: a TLS port (HTTPS", false},
		{"a TLS port that sends an alert", natsconntest.BannerPort(t, "\x15\x03\x01\x00\x02\x02\x46"), ": answered in TLS, not with a NATS greeting", false},
		{"another protocol", natsconntest.BannerPort(t, "SSH-2.0-weirtest\r\n"),
			`: answered "SSH-2.0-weirtest": not NATS, whose servers greet with INFO; NATS clients use port 4222`, false},
		{"a silent port", natsconntest.SilentPort(t),
			": the port accepted the connection and said nothing in 1s, nor in 1s after a NATS CONNECT: a frozen NATS server, or not a NATS client port", true},
		{"a port that hangs up", natsconntest.ClosingPort(t), ": the port accepted the connection and closed it without a word", true},
		{"a port that hangs up when asked", natsconntest.AskedClosingPort(t),
			": the port accepted the connection, said nothing in 1s, and closed it at a NATS CONNECT without a word: not a NATS client port", true},
	} {
		nc, err := Connect(Options{URL: c.url, ConnectTimeout: time.Second})
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", c.name)
		}
		if want := "nats connect " + c.url + c.want; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %q; want it to start %q", c.name, err, want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q is not one line", c.name, err)
		}
		if _, ok := errors.AsType[*GreetingError](err); !ok {
			t.Errorf("%s: error %q is no *GreetingError", c.name, err)
		}
		if Unreachable(err) != c.unreachable {
			t.Errorf("%s: error %q: Unreachable %v, want %v", c.name, err, !c.unreachable, c.unreachable)
		}
	}

	// In a list, nats.go's error is the last server's ("no servers
	// available" when that one refused the connection): the port that
	// answered is named all the same.
	_, err := Connect(Options{URL: httpPort + "," + refused, ConnectTimeout: time.Second})
	if want := "nats connect " + httpPort + `: answered "HTTP/1.1 400 Bad Request"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("list with a web server and a refused port: error %v; want it to start %q", err, want)
	}
	// Whatever the last server's error — here a host that does not
	// resolve, tried last (nats.DontRandomize) — a port of the list that
	// answered with something other than NATS is named.
	noHost := "nats://nosuch.invalid:4222"
	_, err = Connect(Options{URL: httpPort + "," + noHost, ConnectTimeout: time.Second}, nats.DontRandomize())
	if want := "nats connect " + httpPort + `: answered "HTTP/1.1 400 Bad Request"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("list with a web server and a host that does not resolve: error %v; want it to start %q", err, want)
	}
	// A list of servers that are down or silent is waited for, as one is.
	_, err = Connect(Options{URL: natsconntest.SilentPort(t) + "," + noHost, ConnectTimeout: time.Second}, nats.DontRandomize())
	if err == nil || !Unreachable(err) {
		t.Errorf("list with a silent port and a host that does not resolve: error %v; want an unreachable one", err)
	}
	// A refused port alone is still just that.
	if _, err := Connect(Options{URL: refused}); err == nil || !Unreachable(err) || errors.As(err, new(*GreetingError)) {
		t.Errorf("refused port: error %v; want an unreachable one, not a GreetingError", err)
	}
}

// weir worker waits for a server that is down, but not at a port that
// answered something other than NATS: ConnectRetry returns at once there,
// and keeps trying at a silent one.
func TestConnectRetryStopsAtAPortThatIsNotNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	retries := 0
	_, err := ConnectRetry(ctx, Options{URL: natsconntest.HTTPPort(t), ConnectTimeout: time.Second}, func(int, error, time.Duration) { retries++ })
	if ge, ok := errors.AsType[*GreetingError](err); !ok || !ge.Answered() || retries != 0 {
		t.Fatalf("HTTP port: %v after %d retries; want a GreetingError at once", err, retries)
	}

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	_, err = ConnectRetry(sctx, Options{URL: natsconntest.SilentPort(t), ConnectTimeout: time.Second}, func(_ int, err error, _ time.Duration) {
		if _, ok := errors.AsType[*GreetingError](err); !ok {
			t.Errorf("retry after %v; want a GreetingError", err)
		}
		retries++
		scancel()
	})
	if !errors.Is(err, context.Canceled) || retries != 1 {
		t.Fatalf("silent port: %v after %d retries; want it retried until canceled", err, retries)
	}
}

// A probe ends with its context: a port that hangs up at the CONNECT is
// offered a TLS handshake in what is left of the probe's time, not for a
// wait of its own (a diagnosis took up to twice MaxProbeWait then, past
// what MaxConnectWait, and the wait weir states, counts).
func TestProbeEndsWithItsContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hello := make(chan struct{}) // closed as the TLS handshake comes
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var b [1]byte
			_, _ = c.Read(b[:])
			if i == 0 {
				c.Close() // hangs up at the CONNECT
				continue
			}
			held = append(held, c) // says nothing to the handshake
			if i == 1 {
				close(hello)
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan probeResult, 1)
	go func() { done <- probe(ctx, "nats://"+ln.Addr().String()) }()
	select {
	case <-hello:
	case <-time.After(30 * time.Second):
		t.Fatal("the probe offered no TLS handshake")
	}
	cancel()
	select {
	case p := <-done:
		if !p.closed || p.tls {
			t.Errorf("probe: %+v; want a port that closed the connection", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the probe's TLS handshake outlived its context")
	}
}

// MaxConnectWait counts the connect timeout once for each server listed,
// then the diagnosis.
func TestMaxConnectWait(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want time.Duration
	}{
		{Options{URL: "nats://a:4222"}, DefaultConnectTimeout + MaxProbeWait},
		{Options{URL: "nats://a:4222, nats://b:4222,nats://c:4222,"}, 3*DefaultConnectTimeout + MaxProbeWait},
		{Options{URL: "nats://a:4222", ConnectTimeout: time.Second}, 2 * time.Second},
		{Options{URL: "nats://a:4222", ConnectTimeout: 500 * time.Millisecond}, time.Second},
	} {
		if got := c.o.MaxConnectWait(); got != c.want {
			t.Errorf("%+v: MaxConnectWait() = %s, want %s", c.o, got, c.want)
		}
	}
}
