package natsconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A NATS server greets each connection with an INFO line before the
// client says anything; nats.go waits for it, and sends nothing, until
// the connect timeout. An HTTP server (the monitoring port, 8222, is the
// usual mistake), a TLS port and a frozen server all send nothing until
// asked, so nats.go's error ("i/o timeout") is the same for each. When a
// connection got no greeting, Connect therefore asks the server's port
// again, as a diagnosis: it sends a NATS CONNECT and PING (probeRequest),
// which a NATS server answers and an HTTP server takes for a malformed
// request ("HTTP/1.1 400 Bad Request"), and reads what comes back; a port
// that closes the connection at that is offered a TLS handshake. What the
// port answered, from its bytes, is the GreetingError Connect returns.

// probeRequest is what a diagnosis sends: valid NATS (a port that greets
// late, a server that thawed, answers it with INFO), and a request line
// without an HTTP version, which an HTTP server answers with 400.
const probeRequest = "CONNECT {\"verbose\":false}\r\nPING\r\n"

// MaxProbeWait bounds how long a diagnosis takes (ConnectTimeout if
// shorter): its wait for a port that did not greet to answer the CONNECT
// and, for one that closed the connection, the TLS handshake offered
// after, together; the URLs of a list are probed at once. A port that
// answers a request answers at once.
const MaxProbeWait = 2 * time.Second

// defaultPort is the port of a server URL that gives none, as nats.go
// takes it.
const defaultPort = "4222"

// GreetingError is Connect's error for a server whose port accepted the
// connection but did not greet as a NATS server does. Answered says
// whether the port answered with something other than NATS — an HTTP
// server, a TLS port, another protocol's banner — which no retry fixes;
// otherwise the port said nothing (a frozen server, or one that waits to
// be asked) or closed the connection without a word (a server shutting
// down, a proxy with nothing behind it), which a later attempt may get
// past: Unreachable reports those.
type GreetingError struct {
	// URL is the server's URL, its password or token hidden.
	URL string
	// Answer is the start of what the port sent (its first line, at
	// most maxAnswer bytes); empty when it sent nothing.
	Answer []byte
	// TLS is set when the port answered a TLS handshake, or the
	// diagnosis's CONNECT with a TLS record (an alert).
	TLS bool
	// Closed is set when the port closed the connection without a word.
	Closed bool
	// Silent is set when the port said nothing in Wait: with Closed, it
	// closed the connection only at the diagnosis's CONNECT.
	Silent bool
	// Wait is how long the port was given to greet, and ProbeWait how
	// long to answer the diagnosis's CONNECT.
	Wait, ProbeWait time.Duration
	// Err is nats.go's error for the connection.
	Err error
}

// maxAnswer bounds the part of a port's answer that a GreetingError
// quotes.
const maxAnswer = 64

// Answered reports whether the port answered with something other than
// NATS: a misconfiguration (a wrong port) that will not fix itself.
func (e *GreetingError) Answered() bool { return len(e.Answer) > 0 || e.TLS }

// Error says, on one line, what the port did and what to do.
func (e *GreetingError) Error() string {
	const clients = "NATS clients use port 4222 unless the server is configured otherwise"
	prefix := "nats connect " + e.URL + ": "
	switch {
	case e.TLS:
		return prefix + "answered in TLS, not with a NATS greeting: " +
			"a TLS port (HTTPS, or a NATS server with TLS handshake_first, which weir does not use); " + clients
	case len(e.Answer) > 0:
		what := "not NATS, whose servers greet with INFO"
		if bytes.HasPrefix(e.Answer, []byte("HTTP/")) {
			what = "an HTTP server (the NATS monitoring port?), not NATS"
		}
		return prefix + "answered " + strconv.Quote(string(e.Answer)) + ": " + what + "; " + clients
	case e.Closed && e.Silent:
		return prefix + fmt.Sprintf("the port accepted the connection, said nothing in %s, and closed it at a NATS CONNECT without a word: ", e.Wait) +
			"not a NATS client port (a server of another protocol that waits to be asked), or a proxy whose server does not answer (" + clients + ")"
	case e.Closed:
		return prefix + "the port accepted the connection and closed it without a word: " +
			"a NATS server shutting down, a proxy with no server behind it, or not a NATS client port (" + clients + ")"
	}
	return prefix + fmt.Sprintf("the port accepted the connection and said nothing in %s, nor in %s after a NATS CONNECT: ", e.Wait, e.ProbeWait) +
		"a frozen NATS server, or not a NATS client port (" + clients + ")"
}

// Unwrap returns nats.go's error.
func (e *GreetingError) Unwrap() error { return e.Err }

// tlsRecord reports whether b starts as a TLS record does (an alert or a
// handshake, version 3.x): what some TLS servers send a client whose
// first bytes are not a TLS handshake; others close the connection.
func tlsRecord(b []byte) bool {
	return len(b) >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03
}

// diagnose returns the GreetingError for err, nats.go's error connecting
// with o, when it may come from a port that is not a NATS server's, and
// a probe of the server URLs of o (in parallel) finds one that answered
// with something other than NATS or, as err says for one, was silent or
// closed the connection. Otherwise it returns nil.
//
// With several URLs nats.go's error is the last server's it tried (in
// an order of its own), "no servers available" when that one refused the
// connection: it says nothing of the others, one of which may be a port
// that is not NATS (an HTTP port listed by mistake). Each URL is probed
// then, whatever the error; a port that answered with something other
// than NATS is named, one that is down or silent only as err says so for
// the last.
func (o Options) diagnose(err error) *GreetingError {
	urls := serverURLs(o.URL)
	silent, closed := noGreetingKind(err)
	if !silent && !closed && !errors.Is(err, nats.ErrNoInfoReceived) && len(urls) < 2 {
		return nil
	}
	wait := o.ConnectTimeout
	if wait <= 0 {
		wait = DefaultConnectTimeout
	}
	probeWait := min(wait, MaxProbeWait)
	ctx, cancel := context.WithTimeout(context.Background(), probeWait)
	defer cancel()
	probes := make([]probeResult, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { probes[i] = probe(ctx, u) })
	}
	wg.Wait()
	// What answered, in the order of the list, then a silent port when
	// nats.go waited out one, then one that closed, then one that
	// closed only when asked after nats.go waited it out (a server of
	// another protocol that reads first, as PostgreSQL does, and hangs up
	// at what is not its protocol).
	for _, want := range []func(probeResult) bool{
		probeResult.answered,
		func(p probeResult) bool { return silent && p.silent },
		func(p probeResult) bool { return closed && p.closed },
		func(p probeResult) bool { return silent && p.closed },
	} {
		for i, p := range probes {
			if want(p) {
				return &GreetingError{URL: Redact(urls[i]), Answer: p.answer, TLS: p.tls, Closed: p.closed,
					Silent: silent && !p.answered(), Wait: wait, ProbeWait: probeWait, Err: err}
			}
		}
	}
	return nil
}

// noGreetingKind reports whether err, from connecting, says that the
// server accepted the connection and then sent nothing (a read that timed
// out) or closed it (io.EOF) where a NATS server sends its INFO.
func noGreetingKind(err error) (silent, closed bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "read" && op.Timeout() {
		return true, false
	}
	return false, errors.Is(err, io.EOF) && !errors.Is(err, nats.ErrTLS)
}

// serverURLs returns the URLs of the comma-separated list urls that a
// diagnosis probes: those over TCP (nats://, tls://, or no scheme), as
// given. A websocket URL's server speaks HTTP, and nats.go says what it
// answered.
func serverURLs(urls string) []string {
	var out []string
	for p := range strings.SplitSeq(urls, ",") {
		p = strings.TrimSpace(p)
		u, err := parseServerURL(p)
		if p == "" || err != nil || (u.Scheme != "nats" && u.Scheme != "tls") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// probeResult is what a probe of one server URL found: the start of an
// answer that is not NATS, a TLS port, a port that said nothing, or one
// that closed the connection. All false and empty: nothing to say (not
// reached, or it greeted as NATS does).
type probeResult struct {
	answer              []byte
	tls, silent, closed bool
}

// answered reports whether the port answered with something other than
// NATS.
func (p probeResult) answered() bool { return len(p.answer) > 0 || p.tls }

// probe connects to the server of URL p, sends probeRequest and reads the
// first line of what comes back, until ctx ends; a port that closes the
// connection without a word is offered a TLS handshake, on a connection
// of its own, in what is left of ctx's time: the whole probe takes no
// longer than ctx allows (with MaxProbeWait, a port that hung up at the
// CONNECT just before it ran out took twice that).
func probe(ctx context.Context, p string) probeResult {
	u, err := parseServerURL(p)
	if err != nil {
		return probeResult{}
	}
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return probeResult{}
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	// A write that fails (the port closed the connection) leaves what
	// it sent, if anything, to read.
	_, _ = io.WriteString(c, probeRequest)
	answer, err := readLine(c)
	switch {
	case len(answer) > 0:
		switch {
		case bytes.HasPrefix(answer, []byte("INFO ")) || bytes.HasPrefix(answer, []byte("INFO\t")):
			return probeResult{} // NATS after all
		case tlsRecord(answer):
			return probeResult{tls: true}
		}
		return probeResult{answer: answer}
	case timeout(err):
		return probeResult{silent: true}
	}
	if probeTLS(ctx, addr, u.Hostname()) {
		return probeResult{tls: true}
	}
	return probeResult{closed: true}
}

// readLine reads from c up to the end of the first line (without its line
// ending), maxAnswer bytes, or an error, and returns what it read.
func readLine(c net.Conn) ([]byte, error) {
	buf := make([]byte, 0, maxAnswer)
	for len(buf) < maxAnswer {
		n, err := c.Read(buf[len(buf):maxAnswer])
		buf = buf[:len(buf)+n]
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return bytes.TrimRight(buf[:i], "\r"), nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// timeout reports whether err is a read that timed out.
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// probeTLS reports whether the port at addr answers a TLS handshake (a
// TLS server's hello, or its alert) before ctx ends.
func probeTLS(ctx context.Context, addr, host string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	// Only whether the port speaks TLS is asked, not whom to trust: no
	// data goes over this connection.
	tc := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // a probe, see above
	err = tc.HandshakeContext(ctx)
	var op *net.OpError
	return err == nil || errors.As(err, &op) && op.Op == "remote error"
}
