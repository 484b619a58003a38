package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/transport/natsconn/natsconntest"
)

// weir run -port pins the embedded NATS server's port and -metrics serves
// the job's Prometheus metrics, as weir up's do; neither goes with -nats.
func TestRunPortAndMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good, err := filepath.Abs(filepath.Join("..", "..", "guests", "wat", "passthrough.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.WriteFile("job.yaml", []byte(`name: pinned
sources: [{name: in, kind: nats, subject: in}]
operators: [{name: op, module: `+good+`, inputs: [{from: in}]}]
sinks: [{name: out, kind: nats, subject: out, input: {from: op}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	port, mport := natsconntest.FreePort(t), natsconntest.FreePort(t)
	maddr := "127.0.0.1:" + strconv.Itoa(mport)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "-port", strconv.Itoa(port), "-metrics", maddr, "-for", "30s", "job.yaml"},
			Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	// The server answers on the port given, and the metrics name the job.
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var body string
	for body == "" || !strings.Contains(body, `job="pinned"`) {
		select {
		case code := <-done:
			t.Fatalf("weir run exited %d early: %s\n%s", code, errb.String(), out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + maddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to -port %d: %v", port, err)
	}
	nc.Close()
	cancel() // as Ctrl-C
	<-done
	for _, want := range []string{"embedded NATS on " + url + ",", "metrics on http://" + maddr + "/metrics\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// Refused at once: with -nats, and a port out of range.
	for _, args := range [][]string{{"-nats", url, "-port", "4222"}, {"-nats", url, "-metrics", maddr}, {"-port", "70000"}} {
		if code, _, errs := weir(t, "", append(append([]string{"run"}, args...), "job.yaml")...); code != 2 {
			t.Errorf("weir run %v: exit %d, stderr %q; want 2 (usage)", args, code, errs)
		}
	}
}
