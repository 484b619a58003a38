package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/natsconn"
)

// confServer starts a nats-server from the configuration conf (its
// store_dir, if any, given as STORE) and returns its client URL.
func confServer(t *testing.T, conf string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "nats.conf")
	conf = strings.ReplaceAll(conf, "STORE", filepath.Join(dir, "js"))
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return embeddedtest.FromOptions(t, opts).ClientURL()
}

// weir up, weir run and weir worker on a server without JetStream, or as
// a user of an account without it, fail at once saying so: which server,
// which user, and what to enable. They used to fail in the first bucket
// they opened, with "no responders available for request".
func TestStartWithoutJetStreamSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noJS := confServer(t, "")
	accounts := confServer(t, `
jetstream { store_dir: "STORE" }
accounts {
  JS: { jetstream: enabled, users: [{user: js, password: js}] }
  PLAIN: { users: [{user: plain, password: plain}] }
}`)
	for _, c := range []struct {
		name string
		o    natsconn.Options
		wait bool
		want []string
	}{
		{"server, up", natsconn.Options{URL: noJS}, false, []string{"NATS " + noJS + ": JetStream is not enabled on the server", "-js"}},
		{"account, up", natsconn.Options{URL: accounts, User: "plain", Password: "plain"}, false,
			[]string{"NATS " + accounts + `: JetStream is not enabled for the account of user "plain"`, "jetstream: enabled"}},
		{"account, worker", natsconn.Options{URL: accounts, User: "plain", Password: "plain"}, true,
			[]string{"NATS " + accounts + `: JetStream is not enabled for the account of user "plain"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{NATS: &c.o, WaitForNATS: c.wait, Coordinator: !c.wait, Workers: 0}
			n, err := Start(ctx, opts)
			if err == nil {
				n.Close()
				t.Fatal("started without JetStream")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to say %q", err, w)
				}
			}
		})
	}
	// The account that has JetStream starts.
	n, err := Start(ctx, Options{NATS: &natsconn.Options{URL: accounts, User: "js", Password: "js"}, Coordinator: true})
	if err != nil {
		t.Fatalf("start as a user of the JetStream account: %v", err)
	}
	n.Close()
}
