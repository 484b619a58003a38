package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/weirhq/weir/coordinator/control"
)

// weir version names the module version, the commit and whether the tree
// had changes, Go, and the NATS and wazero versions built in.
func TestVersion(t *testing.T) {
	var b bytes.Buffer
	printVersion(&b, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"},
		Deps:     []*debug.Module{{Path: "github.com/nats-io/nats-server/v2", Version: "v2.15.3"}, {Path: "github.com/tetratelabs/wazero", Version: "v1.12.0"}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-04T16:00:00Z"}}})
	want := "weir v0.4.0 commit 0123456789ab (modified) 2026-12-04T16:00:00Z, go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n" +
		"  github.com/nats-io/nats-server/v2 v2.15.3\n  github.com/tetratelabs/wazero v1.12.0\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 || !strings.HasPrefix(out.String(), "weir ") {
		t.Errorf("weir version: exit %d, %q %q", code, out.String(), errb.String())
	}
}

type workersFunc func(context.Context) ([]control.WorkerStatus, error)

func (f workersFunc) Workers(ctx context.Context) ([]control.WorkerStatus, error) { return f(ctx) }

// /healthz answers 200 while the coordinator answers, 503 with why when
// it does not.
func TestHealthz(t *testing.T) {
	for _, c := range []struct {
		api  workersFunc
		code int
		body string
	}{
		{func(context.Context) ([]control.WorkerStatus, error) { return make([]control.WorkerStatus, 2), nil }, http.StatusOK, "ok: coordinator running, 2 worker(s) live\n"},
		{func(context.Context) ([]control.WorkerStatus, error) {
			return nil, errors.New("the coordinator is not running")
		}, http.StatusServiceUnavailable,
			"coordinator not answering: the coordinator is not running\n"},
	} {
		rec := httptest.NewRecorder()
		healthz(c.api).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != c.code || rec.Body.String() != c.body {
			t.Errorf("healthz: %d %q, want %d %q", rec.Code, rec.Body.String(), c.code, c.body)
		}
	}
}
