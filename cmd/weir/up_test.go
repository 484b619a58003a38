package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// weir up -nats runs the coordinator and a worker on an existing server:
// no embedded one, checkpoints in JetStream, and it says so.
func TestUpOnAnExistingServer(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	upCtx, stop := context.WithCancel(ctx)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(upCtx, []string{"up", "-nats", srv.ClientURL(), "-data", t.TempDir()}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	up := "weir is up: NATS on " + srv.ClientURL() + ", no embedded server, coordinator and 1 worker(s) running (jetstream checkpoints)"
	for !strings.Contains(out.String(), up) {
		select {
		case code := <-done:
			t.Fatalf("weir up exited %d: %s%s", code, out.String(), errb.String())
		case <-ctx.Done():
			t.Fatalf("no %q in:\n%s%s", up, out.String(), errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, b := range []string{"weir_jobs", storage.DefaultMetaBucket} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s on the server: %v", b, err)
		}
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("weir up exited %d after the interrupt: %s", code, errb.String())
	}
}

// Flags that do not fit together are refused before anything starts.
func TestUpFlagMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "-replicas", "3"}, "-replicas 3 needs a NATS cluster (-nats)"},
		{[]string{"up", "-nats", "nats://127.0.0.1:1", "-replicas", "7"}, "JetStream keeps 1 to 5 replicas"},
		{[]string{"up", "-nats", "nats://127.0.0.1:1", "-port", "4333"}, "-host and -port are the embedded server's"},
		{[]string{"run", "-replicas", "3", "job.yaml"}, "above 1 only on a NATS cluster (-nats)"},
		{[]string{"up", "-slots", "-1"}, "up: -slots -1: give 0 (no limit) or more"},
		{[]string{"worker", "-slots", "-2"}, "worker: -slots -2: give 0 (no limit) or more"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("weir %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}
