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

// Silencer forwards the connections it accepts to a server until Silence,
// and those it accepts after Resume again.
type Silencer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	quiet  bool
	epoch  int // of the connections forwarded: Silence ends theirs
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
	s := &Silencer{ln: ln, target: target}
	go s.accept()
	t.Cleanup(s.close)
	return s
}

// URL is the client URL of the server behind s.
func (s *Silencer) URL() string { return "nats://" + s.ln.Addr().String() }

// Silence stops all forwarding: the connections stay open, without a
// byte either way for good, and new ones are accepted and left without an
// answer until Resume.
func (s *Silencer) Silence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.quiet {
		s.quiet = true
		s.epoch++
	}
}

// Resume forwards the connections accepted from now on again, as a server
// that runs again (kill -CONT) or a partition that heals looks to a client
// that connects anew; those silenced stay silent.
func (s *Silencer) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quiet = false
}

// silenced reports whether a connection forwarded in epoch is silenced
// (epoch -1: a new one).
func (s *Silencer) silenced(epoch int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quiet || epoch >= 0 && epoch != s.epoch
}

func (s *Silencer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		epoch := s.epoch
		s.mu.Unlock()
		if s.silenced(-1) {
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
		go s.pipe(up, c, epoch)
		go s.pipe(c, up, epoch)
	}
}

// pipe copies from src to dst until either fails or s is silenced (the
// epoch of the connection ended), after which it leaves both as they are.
func (s *Silencer) pipe(dst io.Writer, src io.Reader, epoch int) {
	buf := make([]byte, 32<<10)
	for !s.silenced(epoch) {
		n, err := src.Read(buf)
		if s.silenced(epoch) {
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
