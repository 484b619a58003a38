package natsconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// connectRefused connects with o, which must fail, and checks that the
// error says each of want and never secret.
func connectRefused(t *testing.T, o Options, secret string, want ...string) {
	t.Helper()
	nc, err := Connect(o)
	if err == nil {
		nc.Close()
		t.Fatalf("%+v: connected", o)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q; want it to say %q", err, w)
		}
	}
	if Unreachable(err) {
		t.Errorf("error %q counts as unreachable: weir worker would retry it, and a command blame a server that is down", err)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Errorf("error %q shows the secret %q", err, secret)
	}
}

// A server that refuses the credentials is told apart from one that
// cannot be reached, and the error names what was sent (the method, the
// user or file, never the secret) and, when nothing was, what to give:
// the server itself says only "Authorization Violation".
func TestConnectNamesTheRefusedCredentials(t *testing.T) {
	tokens := startServer(t, &server.Options{Authorization: "s3cret"})
	users := startServer(t, &server.Options{Username: "bob", Password: "pw"})
	connectRefused(t, Options{URL: tokens.ClientURL()}, "", "the server refused a connection without credentials: give -creds")
	connectRefused(t, Options{URL: tokens.ClientURL(), Token: "wrong-token"}, "wrong-token", "the server refused the token of -token")
	connectRefused(t, Options{URL: strings.Replace(tokens.ClientURL(), "nats://", "nats://wrong-token@", 1)}, "wrong-token",
		"the server refused the token in the URL")
	connectRefused(t, Options{URL: strings.Replace(users.ClientURL(), "nats://", "nats://bob:wrong-pw@", 1)}, "wrong-pw",
		`the server refused user "bob" of the URL`)
	connectRefused(t, Options{URL: users.ClientURL(), User: "bob", Password: "wrong-pw"}, "wrong-pw", `the server refused user "bob"`)
}

// TLS refusals say which side refused which certificate and what to give,
// whether the client hears the server's alert or only its close (as
// timing has it), and neither counts as unreachable.
func TestConnectNamesTheRefusedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile, _ := certPair(t, dir, "ca", nil, nil, true)
	_, _, srvCert, srvKey := certPair(t, dir, "server", ca, caKey, false)
	_, _, otherCert, otherKey := certPair(t, dir, "other", nil, nil, false) // self-signed: no CA the server trusts
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: caFile, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	tc.MinVersion = tls.VersionTLS12
	ns := startServer(t, &server.Options{TLSConfig: tc, TLSVerify: true, TLSTimeout: 5})
	url := ns.ClientURL()
	connectRefused(t, Options{URL: url}, "", "the server's TLS certificate is signed by a CA this machine does not trust: give the CA's PEM file with -tlsca")
	connectRefused(t, Options{URL: url, TLSCA: otherCert}, "", "the server's TLS certificate is not signed by the CA of -tlsca "+otherCert)
	connectRefused(t, Options{URL: url, TLSCA: caFile}, "", "the server requires a client certificate (mutual TLS): give it with -tlscert and -tlskey")
	connectRefused(t, Options{URL: url, TLSCA: caFile, TLSCert: otherCert, TLSKey: otherKey}, "",
		"the server did not accept the client certificate "+otherCert)
}

// The server's refusal of the credentials is told by nats.go's
// ErrAuthorization, not by the words: another error that quotes them (a
// proxy's, a message of the server's about something else) is no
// refusal of what was sent.
func TestRefusalIsToldByItsType(t *testing.T) {
	o := Options{URL: "nats://127.0.0.1:4222", Token: "t"}
	if why := o.refusal(fmt.Errorf("connect: %w", nats.ErrAuthorization)); why != "the server refused the token of -token" {
		t.Errorf("nats.ErrAuthorization: %q", why)
	}
	if why := o.refusal(errors.New("nats: expected 'PONG', got 'authorization violation of the upstream proxy'")); why != "" {
		t.Errorf("an error that only says the words: %q, want no refusal", why)
	}
}
