package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// weir worker -metrics serves metrics and a /healthz of its own while no
// coordinator runs: a trial's workers had no -metrics, and weir up's
// /healthz hung while the coordinator was frozen. /healthz says the
// coordinator is unreachable rather than waiting for it.
func TestWorkerMetricsWithoutACoordinator(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	w, wdone := &upOutput{}, make(chan int, 1)
	go func() {
		wdone <- run(wctx, []string{"worker", "-nats", srv.ClientURL(), "-id", "lone", "-data", t.TempDir(), "-metrics", "127.0.0.1:0"},
			Stdio{In: strings.NewReader(""), Out: &w.out, Err: &w.errb})
	}()
	w.await(t, ctx, wdone, "/metrics")
	addr := regexp.MustCompile(`worker lone metrics on (http://\S+)/metrics`).FindStringSubmatch(w.out.String())
	if addr == nil {
		t.Fatalf("no metrics address in:\n%s", w.out.String())
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(addr[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK ||
		!strings.HasPrefix(body, "ok: worker lone connected to NATS, 0 task(s); coordinator unreachable (") {
		t.Errorf("/healthz without a coordinator: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_build_info") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	stopWorker()
	if code := <-wdone; code != 0 {
		t.Fatalf("weir worker exited %d: %s", code, w.errb.String())
	}
}
