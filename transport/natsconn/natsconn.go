// Package natsconn turns weir's connection settings — a server URL and the
// usual NATS authentication options — into a *nats.Conn that reconnects on
// its own. Connect fails when no server answers; ConnectRetry waits for one.
// A server that falls silent without closing the connection (a frozen
// process, a partition) is left after a few unanswered pings (PingInterval),
// for another server of the cluster. ThroughElection makes a JetStream
// request again while its stream has no leader (an election after the
// leader's server went), which storage, sources and sinks share;
// ResumeThroughElection does so for a sink's commit, a long publish that
// each try takes up where the one before stopped.
//
// A reconnect does not replay what was published or delivered while the
// connection was down: core NATS subscriptions miss those messages. weir's
// remote channels therefore treat a disconnect as channel failure (see
// package remote), and JetStream sources resume from their checkpointed
// stream sequence.
package natsconn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Options are the connection settings of a weir process.
type Options struct {
	// URL is one server URL or a comma-separated list of a cluster's URLs.
	URL string
	// Name is the client name shown in server monitoring; default "weir".
	Name string
	// CredsFile is a user JWT + nkey seed credentials file (.creds).
	CredsFile string
	// NKeySeedFile holds a user nkey seed (nkey authentication).
	NKeySeedFile string
	// Token is a bearer token.
	Token string
	// User and Password authenticate with a username and password.
	User, Password string
	// TLSCA is a PEM file of CAs that verify the server's certificate.
	TLSCA string
	// TLSCert and TLSKey are the PEM client certificate and key (mutual TLS).
	TLSCert, TLSKey string
	// ReconnectWait is the pause between reconnect attempts; default 250ms.
	ReconnectWait time.Duration
	// MaxReconnects bounds reconnect attempts; 0 means unlimited.
	MaxReconnects int
	// ConnectTimeout bounds one connection attempt; default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// OnDisconnect is called when the connection drops (err may be nil).
	OnDisconnect func(err error)
	// OnReconnect is called after a successful reconnect.
	OnReconnect func()
}

// DefaultConnectTimeout bounds one connection attempt to one server by
// default (Options.ConnectTimeout): a server that does not answer (a
// frozen process) is left after it, for the next one of the URL list.
const DefaultConnectTimeout = 5 * time.Second

// MaxConnectWait returns how long Connect with o takes at most when
// servers take the connection and say nothing (frozen processes, or ports
// that are not NATS): the connect timeout for each server of o.URL, tried
// in turn, then the diagnosis that says what a port is (MaxProbeWait, or
// the connect timeout if shorter). A command that tells its user it waits
// for NATS can say for how long.
func (o Options) MaxConnectWait() time.Duration {
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	servers := 0
	for p := range strings.SplitSeq(o.URL, ",") {
		if strings.TrimSpace(p) != "" {
			servers++
		}
	}
	return time.Duration(max(servers, 1))*timeout + min(timeout, MaxProbeWait)
}

// A connection sends its server a PING every PingInterval and takes the
// server for gone once more than MaxPingsOut of them are unanswered (4 to
// 6 s after it fell silent), then reconnects — to another server of a
// cluster. A server that stops answering without closing its connections
// (a frozen process, a network partition that drops packets) is noticed
// only that way: with nats.go's defaults (2 minutes, 2) a weir process
// stayed on it for six minutes, and the coordinator, its workers and its
// jobs with it, while the cluster's other servers served on.
//
// A connection that is writing when its server falls silent is blocked in
// a write once the socket's buffers are full, and nats.go holds the
// connection's lock across a write: no ping is sent or counted until it
// gives up. So a write also gives up after WriteTimeout (nats.go's default
// is a minute, for which a writing weir process — a worker's sinks and
// channels, and its heartbeats behind them — stayed on the silent
// server), and the connection is left for another. A server that is only
// busy (storing a large batch, syncing to disk) still reads its clients'
// connections: nats-server answers a PING, and takes in what a client
// writes, in the connection's read loop, not where it stores messages.
const (
	PingInterval = 2 * time.Second
	MaxPingsOut  = 2
	WriteTimeout = (MaxPingsOut + 1) * PingInterval
)

// LivenessOptions are the options that make a connection leave a server
// that falls silent (PingInterval, MaxPingsOut, WriteTimeout), for
// connections made without NATSOptions.
func LivenessOptions() []nats.Option {
	return []nats.Option{
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.FlusherTimeout(WriteTimeout),
		nats.ReconnectOnFlusherError(),
	}
}

// ErrConflictingAuth is returned when more than one authentication method
// is configured.
var ErrConflictingAuth = errors.New("more than one NATS authentication method configured")

// NATSOptions returns the nats.go options that Options describe.
func (o Options) NATSOptions() ([]nats.Option, error) {
	name := o.Name
	if name == "" {
		name = "weir"
	}
	wait := o.ReconnectWait
	if wait <= 0 {
		wait = 250 * time.Millisecond
	}
	max := o.MaxReconnects
	if max == 0 {
		max = -1
	}
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.ReconnectWait(wait),
		nats.MaxReconnects(max),
		nats.Timeout(timeout),
		nats.RetryOnFailedConnect(false),
	}
	opts = append(opts, LivenessOptions()...)
	methods := 0
	if o.CredsFile != "" {
		methods++
		if err := checkCredsFile(o.CredsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		methods++
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed file %s: %w", o.NKeySeedFile, err)
		}
		opts = append(opts, opt)
	}
	if o.Token != "" {
		methods++
		opts = append(opts, nats.Token(o.Token))
	}
	if o.User != "" || o.Password != "" {
		methods++
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if methods > 1 {
		return nil, ErrConflictingAuth
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("nats TLS: client certificate and key must be set together")
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.OnDisconnect != nil {
		f := o.OnDisconnect
		opts = append(opts, nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { f(err) }))
	}
	if o.OnReconnect != nil {
		f := o.OnReconnect
		opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) { f() }))
	}
	return opts, nil
}

// checkCredsFile returns an error naming file when it cannot be read or
// holds no user nkey seed. nats.go reads it only when the server asks
// for a signature, and then said "error signing nonce: unable to extract
// key pair from file …: nkeys: no nkey seed found" for a file that is
// not a .creds file at all (a JWT alone, a seed file, a typo'd path's
// neighbour). A path beginning with ~, which nats.go expands, is left
// to it.
func checkCredsFile(file string) error {
	if strings.HasPrefix(file, "~") {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("nats creds file: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	clear(data)
	if err != nil {
		return fmt.Errorf("nats creds file %s: no user JWT and nkey seed in it, as nsc writes them (an nkey seed alone goes to -nkey): %w", file, err)
	}
	kp.Wipe()
	return nil
}

// Connect connects to o.URL with o's settings plus extra options.
func Connect(o Options, extra ...nats.Option) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, errors.New("nats connect: no server URL")
	}
	if err := CheckURLs(o.URL); err != nil {
		return nil, err
	}
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.URL, append(opts, extra...)...)
	if err != nil {
		if why := o.refusal(err); why != "" {
			return nil, fmt.Errorf("nats connect %s: %s: %w", Redact(o.URL), why, err)
		}
		if ge := o.diagnose(err); ge != nil {
			return nil, ge
		}
		return nil, fmt.Errorf("nats connect %s: %w", Redact(o.URL), err)
	}
	return nc, nil
}

// refusal says what to change when err, from connecting with o's
// settings, is the server refusing the credentials or a side of TLS
// refusing the other's certificate; "" for any other error. The server
// only says "Authorization Violation", and TLS only what failed: neither
// names what was sent, nor the flag that sends something else.
func (o Options) refusal(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var op *net.OpError
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		// nats.go turns the server's "-ERR 'Authorization Violation'"
		// into ErrAuthorization wherever it reads it.
		return "the server refused " + o.credentials()
	case errors.As(err, &unknownCA):
		if o.TLSCA == "" {
			return "the server's TLS certificate is signed by a CA this machine does not trust: give the CA's PEM file with -tlsca"
		}
		return fmt.Sprintf("the server's TLS certificate is not signed by the CA of -tlsca %s", o.TLSCA)
	case errors.As(err, &hostname):
		return "the server's TLS certificate is not for the host of the URL: connect by a name or address it lists"
	case certRefused(err) || errors.As(err, &op) && op.Op == "remote error" && strings.Contains(op.Err.Error(), "certificate"):
		// A TLS alert from the server, or the connection it closed once
		// the handshake ended: Go's client sends no certificate whose
		// CA the server did not ask for, so a certificate it does not
		// trust comes back as "certificate required" too. The alert is
		// told by its words: crypto/tls gives it as a *net.OpError
		// "remote error" around a value of its unexported alert type
		// (tls.AlertError is only QUIC's), which nats.go passes on as
		// is.
		if o.TLSCert == "" {
			return "the server requires a client certificate (mutual TLS): give it with -tlscert and -tlskey"
		}
		return fmt.Sprintf("the server did not accept the client certificate %s: give one signed by a CA the server trusts", o.TLSCert)
	}
	return ""
}

// certRefused reports whether err is nats.go's "connection closed by
// remote after TLS handshake": a server that requires a client
// certificate closes the connection when it gets none it trusts, and
// the client, whose side of the handshake had ended, sees the close
// (io.EOF, a broken pipe or a reset) rather than the server's alert,
// depending on timing. nats.go v1.55.0 has no error of its own for it:
// it wraps ErrTLS, as a failed handshake does, around the close, which a
// server that closes during the handshake gives too (io.EOF); only the
// words tell a close after the handshake.
func certRefused(err error) bool {
	return errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "connection closed by remote after TLS handshake")
}

// credentials names what o authenticates with, for an error: the method
// and the file or user, never a secret.
func (o Options) credentials() string {
	switch {
	case o.CredsFile != "":
		return "the credentials of -creds " + o.CredsFile
	case o.NKeySeedFile != "":
		return "the nkey of -nkey " + o.NKeySeedFile
	case o.Token != "":
		return "the token of -token"
	case o.User != "":
		return fmt.Sprintf("user %q (-user, -password)", o.User)
	case strings.Contains(o.URL, "@"):
		for p := range strings.SplitSeq(o.URL, ",") {
			if u, err := parseServerURL(strings.TrimSpace(p)); err == nil && u.User != nil {
				if _, ok := u.User.Password(); ok {
					return fmt.Sprintf("user %q of the URL", u.User.Username())
				}
			}
		}
		return "the token in the URL"
	}
	return "a connection without credentials: give -creds, -nkey, -token, or -user and -password"
}

// schemes are the URL schemes a server URL may have: nats.go connects
// with any other as with nats://, so a typo (nast://, or tsl:// for
// tls://) would connect without the TLS it asked for, or to a port given
// for another protocol (http://), instead of being pointed out.
var schemes = [...]string{"nats", "tls", "ws", "wss"}

// CheckURLs returns an error naming the first URL of the comma-separated
// list urls (redacted) that does not parse, or whose scheme is none of
// nats, tls, ws and wss. A URL without a scheme (host:port) is nats://.
func CheckURLs(urls string) error {
	for p := range strings.SplitSeq(urls, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if _, err := parseServerURL(p); err != nil {
			return badURL(p, err)
		}
		scheme, _, ok := strings.Cut(p, "://")
		if !ok || slices.Contains(schemes[:], strings.ToLower(scheme)) {
			continue
		}
		return fmt.Errorf("nats URL %s: unknown scheme %q: give nats://HOST:PORT (tls:// for TLS, ws:// or wss:// for websocket)",
			Redact(p), scheme)
	}
	return nil
}

// badURL is CheckURLs' error for p, a server URL that does not parse:
// nats.go's own error quotes the URL whole, password or token included.
// The parser's reason is kept only for a URL without user information,
// as it may quote a piece of that.
func badURL(p string, err error) error {
	if strings.Contains(p, "@") {
		return fmt.Errorf("nats URL %s: does not parse as a URL: escape a %%, /, @ or : in its user, password or token as %%XX", Redact(p))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("nats URL %s: %w", p, err)
}

// Redact hides the passwords and tokens of a comma-separated list of server URLs, for
// errors and logs. A URL without a scheme, which nats.go takes as
// nats://, is read as one ("user:pw@host:4222"); one that does not parse
// (nats.go refuses it) has everything before its last "@" hidden.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

// redactOne redacts one server URL of a list, keeping the spaces around
// it.
func redactOne(p string) string {
	s := strings.TrimSpace(p)
	if !strings.Contains(s, "@") {
		return p
	}
	var out string
	u, err := parseServerURL(s)
	switch {
	case err != nil:
		start := 0
		if i := strings.Index(s, "://"); i >= 0 {
			start = i + len("://")
		}
		at := strings.LastIndex(s, "@")
		if at < start {
			return p
		}
		out = s[:start] + "xxxxx" + s[at:]
	case u.User == nil:
		return p
	default:
		if _, ok := u.User.Password(); ok {
			out = u.Redacted()
		} else {
			u.User = url.User("xxxxx") // a token or a user alone
			out = u.String()
		}
		if !strings.Contains(s, "://") {
			out = strings.TrimPrefix(out, "nats://")
		}
	}
	k := strings.Index(p, s)
	return p[:k] + out + p[k+len(s):]
}

// parseServerURL parses one server URL as nats.go does: one without a
// scheme is nats://.
func parseServerURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	return url.Parse(s)
}

// Backoff between the attempts of ConnectRetry: RetryInitial after the
// first failure, doubling up to RetryMax, each spread by up to a fifth
// either way so that many workers do not knock in step.
const (
	RetryInitial = 250 * time.Millisecond
	RetryMax     = 10 * time.Second
)

// RetryDelay is the pause after failed attempt n (1, 2, ...) of a retry
// loop: see RetryInitial.
func RetryDelay(n int) time.Duration {
	d := RetryInitial
	for i := 1; i < n && d < RetryMax; i++ {
		d *= 2
	}
	d = min(d, RetryMax)
	return d + time.Duration((rand.Float64()-0.5)*0.4*float64(d))
}

// Unreachable reports whether err, from Connect, says that no server could
// be reached — refused, timed out, reset, or a host name that does not
// resolve (yet) — which a later attempt may get past, rather than a
// refusal no retry fixes (authentication, TLS, a bad URL or option).
func Unreachable(err error) bool {
	if ge, ok := errors.AsType[*GreetingError](err); ok {
		// A port that answered something other than NATS is the
		// wrong one; one that said nothing, or closed the connection,
		// may be a server not ready yet.
		return !ge.Answered()
	}
	if certRefused(err) {
		// It carries the io.EOF or reset of the close, but the server
		// was reached and refused the certificate.
		return false
	}
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ConnectRetry connects like Connect, but while no server can be reached
// (Unreachable) it keeps trying, pausing RetryDelay between attempts and
// calling onRetry (if not nil) after each failed one, until it connects or
// ctx is done. It suits a process that may start before its server (a
// worker under systemd or Kubernetes); interactive commands use Connect and
// fail fast. Any other error is returned at once.
func ConnectRetry(ctx context.Context, o Options, onRetry func(attempt int, err error, wait time.Duration), extra ...nats.Option) (*nats.Conn, error) {
	type result struct {
		nc  *nats.Conn
		err error
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("nats connect %s: %w", Redact(o.URL), err)
		}
		// An attempt may take up to ConnectTimeout (a server that does not
		// answer); ctx ends the wait, and a late connection is closed.
		ch := make(chan result, 1)
		go func() {
			nc, err := Connect(o, extra...)
			ch <- result{nc, err}
		}()
		var r result
		select {
		case r = <-ch:
		case <-ctx.Done():
			go func() {
				if r := <-ch; r.nc != nil {
					r.nc.Close()
				}
			}()
			return nil, fmt.Errorf("nats connect %s: %w", Redact(o.URL), ctx.Err())
		}
		if r.err == nil {
			return r.nc, nil
		}
		if !Unreachable(r.err) {
			return nil, r.err
		}
		wait := RetryDelay(attempt)
		if onRetry != nil {
			onRetry(attempt, r.err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("nats connect %s: %w (last attempt: %v)", Redact(o.URL), ctx.Err(), r.err)
		}
	}
}

// DefaultFlushTimeout bounds Flush when its context has no deadline: the
// timeout nats.go's own Flush uses.
const DefaultFlushTimeout = 10 * time.Second

// Flush waits until the server has processed everything nc published
// before, or ctx ends. Unlike nats.Conn.FlushWithContext, which refuses a
// context without a deadline, it applies DefaultFlushTimeout then: a task's
// context lives as long as the task and has none.
func Flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultFlushTimeout)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}
