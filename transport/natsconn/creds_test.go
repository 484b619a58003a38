package natsconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// A credentials file (user JWT and nkey seed, as `nsc` writes it) logs in
// to a server in operator mode; a user the account did not sign is refused.
func TestCredsFile(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "weir-test"
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	op, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "APP"
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{op}, AccountResolver: resolver})

	creds := func(signer nkeys.KeyPair) string {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.IssuerAccount = apub
		ujwt, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := ukp.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "user.creds")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	nc, err := Connect(Options{URL: ns.ClientURL(), CredsFile: creds(akp)})
	if err != nil {
		t.Fatalf("connect with a credentials file: %v", err)
	}
	if err := nc.Publish("x", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	other, _ := nkeys.CreateAccount()
	if nc, err := Connect(Options{URL: ns.ClientURL(), CredsFile: creds(other), MaxReconnects: 1}); err == nil {
		nc.Close()
		t.Fatal("a user signed by an unknown account was let in")
	}
	if _, err := Connect(Options{URL: ns.ClientURL(), CredsFile: filepath.Join(t.TempDir(), "missing.creds")}); err == nil ||
		!strings.Contains(err.Error(), "missing.creds") {
		t.Fatalf("a missing credentials file: %v, want an error naming it", err)
	}
}

// A creds file that is missing, or is not a .creds file, is named before
// any server is asked; nats.go found out only when the server asked for
// a signature, saying "error signing nonce".
func TestCredsFileThatIsNotOne(t *testing.T) {
	ns := startServer(t, &server.Options{})
	dir := t.TempDir()
	bad := filepath.Join(dir, "user.creds")
	if err := os.WriteFile(bad, []byte("-----BEGIN NATS USER JWT-----\nnot a jwt\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "gone.creds")
	for file, want := range map[string]string{
		bad:     "nats creds file " + bad + ": no user JWT and nkey seed in it",
		missing: "nats creds file: open " + missing,
	} {
		nc, err := Connect(Options{URL: ns.ClientURL(), CredsFile: file})
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", file)
			continue
		}
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %q; want it to start %q", file, err, want)
		}
	}
}
