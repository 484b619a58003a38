package natsconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// A process started before its server keeps trying, one report per failed
// attempt, and connects once the server is up.
func TestConnectRetryWaitsForServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := natsconntest.FreePort(t)
	type retry struct {
		attempt int
		err     error
		wait    time.Duration
	}
	retries := make(chan retry, 100)
	done := make(chan error, 1)
	go func() {
		nc, err := ConnectRetry(ctx, Options{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}, func(a int, err error, wait time.Duration) {
			retries <- retry{a, err, wait}
		})
		if err == nil {
			err = nc.Publish("x", nil)
			nc.Close()
		}
		done <- err
	}()
	// Two failed attempts, reported in order with a growing wait.
	var first retry
	for i := 1; i <= 2; i++ {
		select {
		case r := <-retries:
			if r.attempt != i || !Unreachable(r.err) || r.wait <= 0 {
				t.Fatalf("retry %d: %+v", i, r)
			}
			if i == 1 {
				first = r
			} else if r.wait <= first.wait {
				t.Errorf("no backoff: waits %s then %s", first.wait, r.wait)
			}
		case err := <-done:
			t.Fatalf("ConnectRetry returned %v without a server", err)
		case <-ctx.Done():
			t.Fatal("no retry reported")
		}
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the server started: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("did not connect once the server was up")
	}
}

// A refusal no retry fixes comes back at once; a canceled context ends the
// wait.
func TestConnectRetryGivesUp(t *testing.T) {
	ns := startServer(t, &server.Options{Authorization: "s3cret"})
	calls := 0
	_, err := ConnectRetry(context.Background(), Options{URL: ns.ClientURL(), Token: "wrong"}, func(int, error, time.Duration) { calls++ })
	if err == nil || Unreachable(err) || calls != 0 {
		t.Fatalf("wrong token: %v after %d retries; want an error at once", err, calls)
	}

	// Canceled while it waits after a failed attempt, it returns then,
	// naming that attempt: it does not wait out the pause (a pause's end
	// would find the context done before the next attempt, naming none).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls = 0
	_, err = ConnectRetry(ctx, Options{URL: fmt.Sprintf("nats://127.0.0.1:%d", natsconntest.FreePort(t))}, func(int, error, time.Duration) {
		calls++
		cancel()
	})
	if !errors.Is(err, context.Canceled) || calls != 1 || !strings.Contains(err.Error(), "(last attempt: ") {
		t.Fatalf("canceled during the pause after attempt 1: %v after %d retries; want context.Canceled naming the last attempt", err, calls)
	}
}

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{1: RetryInitial, 2: 2 * RetryInitial, 3: 4 * RetryInitial, 100: RetryMax} {
		got := RetryDelay(n)
		if got < want*8/10 || got > want*12/10 {
			t.Errorf("RetryDelay(%d) = %s, want %s ± 20%%", n, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	got := Redact("nats://u:pw@a:4222, nats://tok@b:4222,nats://c:4222")
	if strings.Contains(got, "pw") || strings.Contains(got, "tok") || !strings.Contains(got, "nats://c:4222") {
		t.Errorf("redact: %s", got)
	}
	_, err := Connect(Options{URL: fmt.Sprintf("nats://u:pw@127.0.0.1:%d", natsconntest.FreePort(t))})
	if err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("connect error shows the password: %v", err)
	}
}

// A URL without a scheme, which nats.go takes as nats://, may carry a
// user and password or a token as well: url.Parse reads "user:pw@host"
// as scheme "user", and fails on "tok@host:4222", so Redact returned
// both as they were, and the errors that name the server showed the
// secret. So did a URL whose password url.Parse refuses ("%zz"), which
// nats.go refuses too, naming it.
func TestRedactWithoutScheme(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"u:pw@a:4222", "u:xxxxx@a:4222"},
		{"tok@a:4222", "xxxxx@a:4222"},
		{"nats://a:4222, u:pw@b:4222", "nats://a:4222, u:xxxxx@b:4222"},
		{"[::1]:4222", "[::1]:4222"},
		{"u:pw@[::1]:4222", "u:xxxxx@[::1]:4222"},
		{"a:4222", "a:4222"},
		{"nats://u:p%zzw@a:4222", "nats://xxxxx@a:4222"},
		{"p%zzw@a:4222", "xxxxx@a:4222"},
	} {
		if got := Redact(c.url); got != c.want {
			t.Errorf("Redact(%q) = %q; want %q", c.url, got, c.want)
		}
	}
	_, err := Connect(Options{URL: fmt.Sprintf("u:pw@127.0.0.1:%d", natsconntest.FreePort(t))})
	if err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("connect error shows the password: %v", err)
	}
}
