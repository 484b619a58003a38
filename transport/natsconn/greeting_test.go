package natsconn

import (
	"net"
	"strings"
	"testing"
	"time"
)

// notNATS listens on a port that takes connections and, like an HTTP
// port, sends no NATS greeting: it holds each connection open silently,
// or closes it at once (hangUp), and returns its URL.
func notNATS(t *testing.T, hangUp bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if hangUp {
				c.Close()
			} else {
				held = append(held, c)
			}
		}
	}()
	return "nats://" + ln.Addr().String()
}

// A port that is not a NATS server's (an HTTP port, the monitoring port)
// is told apart from one where nothing listens: the error says that no
// NATS greeting came and what the client port is. It still counts as
// unreachable, for weir worker waits for a server that may come.
func TestConnectToAPortThatIsNotNATS(t *testing.T) {
	for _, hangUp := range []bool{false, true} {
		url := notNATS(t, hangUp)
		nc, err := Connect(Options{URL: url, ConnectTimeout: time.Second})
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", url)
		}
		if want := "nats connect " + url + ": no NATS greeting from the server"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("hang up %v: error %q; want it to start %q", hangUp, err, want)
		}
		if !Unreachable(err) {
			t.Errorf("hang up %v: error %q does not count as unreachable", hangUp, err)
		}
	}
}
