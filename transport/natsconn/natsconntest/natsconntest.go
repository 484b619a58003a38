// Package natsconntest gives tests a NATS server that falls silent — a
// TCP proxy in front of a real server that, once silenced, moves no byte
// either way and closes nothing: what a client sees of a frozen server
// process (kill -STOP) or of a network partition that drops packets, as
// opposed to a server that shuts down and resets its connections — and
// ports that a NATS URL is pointed at by mistake (an HTTP server, a TLS
// port, one that says nothing).
package natsconntest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Silencer forwards the connections it accepts to a server until Silence.
type Silencer struct {
	ln     net.Listener
	target string
	quiet  chan struct{} // closed by Silence
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

// NewSilencer listens on a loopback port and forwards each connection to
// target (host:port), until t ends.
func NewSilencer(t testing.TB, target string) *Silencer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silencer{ln: ln, target: target, quiet: make(chan struct{})}
	go s.accept()
	t.Cleanup(s.close)
	return s
}

// URL is the client URL of the server behind s.
func (s *Silencer) URL() string { return "nats://" + s.ln.Addr().String() }

// Silence stops all forwarding for good; the connections stay open, and
// new ones are accepted and left without an answer.
func (s *Silencer) Silence() { s.once.Do(func() { close(s.quiet) }) }

func (s *Silencer) silenced() bool {
	select {
	case <-s.quiet:
		return true
	default:
		return false
	}
}

func (s *Silencer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		if s.silenced() {
			continue
		}
		up, err := net.Dial("tcp", s.target)
		if err != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, up)
		s.mu.Unlock()
		go s.pipe(up, c)
		go s.pipe(c, up)
	}
}

// pipe copies from src to dst until either fails or s is silenced, after
// which it leaves both as they are.
func (s *Silencer) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for !s.silenced() {
		n, err := src.Read(buf)
		if s.silenced() {
			return
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

func (s *Silencer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}
