package natsconn

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// silencer forwards TCP connections to a server until it is silenced:
// from then on it moves no byte either way and closes nothing, as a
// frozen server process or a partition that drops packets looks to a
// client.
type silencer struct {
	ln     net.Listener
	target string
	quiet  chan struct{} // closed by silence
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilencer(t *testing.T, target string) *silencer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silencer{ln: ln, target: target, quiet: make(chan struct{})}
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *silencer) url() string { return "nats://" + s.ln.Addr().String() }

func (s *silencer) silence() { s.once.Do(func() { close(s.quiet) }) }

func (s *silencer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", s.target)
		if err != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, c, up)
		s.mu.Unlock()
		go s.pipe(up, c)
		go s.pipe(c, up)
	}
}

// pipe copies from src to dst until either fails or s is silenced, after
// which it leaves both as they are.
func (s *silencer) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-s.quiet:
			return
		default:
		}
		n, err := src.Read(buf)
		select {
		case <-s.quiet:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *silencer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// A server that falls silent without closing the connection (here a
// proxy that stops forwarding; a frozen process or a partition) is taken
// for gone after a few unanswered pings, and the connection moves to the
// next server it knows. With nats.go's default ping interval it stayed on
// the silent one for six minutes.
func TestSilentServerIsLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := startServer(t, &server.Options{})
	quiet := newSilencer(t, ns.Addr().String())
	disc := make(chan error, 4)
	reco := make(chan struct{}, 4)
	nc, err := Connect(Options{
		URL:          quiet.url() + "," + ns.ClientURL(),
		OnDisconnect: func(err error) { disc <- err },
		OnReconnect:  func() { reco <- struct{}{} },
	}, nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != quiet.url() {
		t.Fatalf("connected to %s, want the silenced path %s first", got, quiet.url())
	}
	quiet.silence()
	select {
	case err := <-disc:
		if !errors.Is(err, nats.ErrStaleConnection) {
			t.Fatalf("disconnected with %v, want %v", err, nats.ErrStaleConnection)
		}
	case <-ctx.Done():
		t.Fatalf("the connection stayed on the silent server (%s)", ctx.Err())
	}
	select {
	case <-reco:
	case <-ctx.Done():
		t.Fatalf("no reconnect after leaving the silent server (%s)", ctx.Err())
	}
	if got := nc.ConnectedUrl(); got != ns.ClientURL() {
		t.Fatalf("reconnected to %s, want %s", got, ns.ClientURL())
	}
	// The connection works: a round trip through the server.
	sub, err := nc.SubscribeSync("ping")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("ping", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("message after the reconnect: %v", err)
	}
}
