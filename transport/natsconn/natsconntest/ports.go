package natsconntest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The ports below are what a NATS URL is pointed at by mistake: each
// listens on a loopback port until t ends, and is returned as a NATS URL
// (nats://127.0.0.1:PORT).

// FreePort returns a loopback TCP port that nothing listens on: a server
// that is down, or one a test starts there later.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HTTPPort is a real net/http server, as the NATS monitoring port or a web
// server is: it sends nothing until it gets a request.
func HTTPPort(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "not NATS") }))
	t.Cleanup(srv.Close)
	return "nats://" + strings.TrimPrefix(srv.URL, "http://")
}

// TLSPort is a real HTTPS server: it sends nothing until a TLS handshake.
func TLSPort(t testing.TB) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "not NATS") }))
	t.Cleanup(srv.Close)
	return "nats://" + strings.TrimPrefix(srv.URL, "https://")
}

// SilentPort accepts connections and holds them open without a word, as
// a frozen server does.
func SilentPort(t testing.TB) string {
	t.Helper()
	return listen(t, func(net.Conn) (keep bool) { return true })
}

// ClosingPort accepts connections and closes them at once, as a proxy
// with no server behind it does.
func ClosingPort(t testing.TB) string {
	t.Helper()
	return listen(t, func(net.Conn) (keep bool) { return false })
}

// AskedClosingPort accepts connections, says nothing, and closes each at
// the first bytes it gets, as a server of another protocol that reads
// first does at what is not its protocol (PostgreSQL, MongoDB).
func AskedClosingPort(t testing.TB) string {
	t.Helper()
	return listen(t, func(c net.Conn) (keep bool) {
		go func() {
			var b [1]byte
			_, _ = c.Read(b[:])
			c.Close()
		}()
		return true
	})
}

// BannerPort greets each connection with banner, as a server of another
// protocol does (SSH, SMTP), and holds it open.
func BannerPort(t testing.TB, banner string) string {
	t.Helper()
	return listen(t, func(c net.Conn) (keep bool) {
		_, _ = io.WriteString(c, banner)
		return true
	})
}

// listen accepts connections on a loopback port until t ends, hands each
// to serve, and closes it at once unless serve keeps it (then at t's end).
func listen(t testing.TB, serve func(net.Conn) (keep bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !serve(c) {
				c.Close()
				continue
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	})
	return "nats://" + ln.Addr().String()
}
