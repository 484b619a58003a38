package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/cmd/weir/internal/node"
	"github.com/weirhq/weir/coordinator/control"
)

// padModule writes the WAT guests' passthrough.wasm, padded with a custom
// section to size bytes, to dir/name.wasm and returns its path.
func padModule(t *testing.T, dir, name string, size int) string {
	t.Helper()
	wasm, err := os.ReadFile(filepath.Join("..", "..", "guests", "wat", "passthrough.wasm"))
	if err != nil {
		t.Skip("guests/wat/passthrough.wasm not built")
	}
	body := size - len(wasm) - 1 - 5 // a custom section: id, 5-byte size, then body
	out := append(wasm, 0, byte(body)|0x80, byte(body>>7)|0x80, byte(body>>14)|0x80, byte(body>>21)|0x80, byte(body>>28), 3, 'p', 'a', 'd')
	out = append(out, make([]byte, body-4)...)
	p := filepath.Join(dir, name+".wasm")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A module over weir up -max-module-size is refused by weir module push
// and weir run's push, before it is validated or stored, in one line; one
// stored before the limit was lowered fails its job at deploy, the worker
// refusing it before reading it.
func TestMaxModuleSizeOfWeirUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 1 << 20
	n, err := node.Start(ctx, node.Options{DataDir: t.TempDir(), Port: -1, Coordinator: true, Workers: 1, MaxModuleSize: limit,
		HeartbeatTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	url := n.Server.ClientURL()
	dir := t.TempDir()
	over := padModule(t, dir, "over", limit+1)
	const why = "is 1 MiB (1048577 bytes), over the module registry's limit of 1 MiB: shrink it (strip its debug info: " +
		`wasm-opt --strip-debug, Go -ldflags="-s -w"), or have whoever runs weir raise weir up -max-module-size` + "\n"

	code, out, errs := weir(t, "", "module", "push", "-nats", url, "over", over)
	if code != 1 || errs != "weir: module over "+why {
		t.Errorf("module push: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	spec := tapSpec(t, "big", over, "")
	code, out, errs = weir(t, "", "run", "-nats", url, "-for", "100ms", spec)
	if code != 1 || !strings.HasSuffix(errs, "weir: operator op: push "+over+": module over "+why) || strings.Count(errs, "weir: ") != 1 {
		t.Errorf("run: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if ms, err := n.Registry.List(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("the registry holds %v, %v after refused pushes", ms, err)
	}

	// Stored while the limit was higher: the worker refuses it.
	if err := n.Registry.SetMaxModuleSize(ctx, 2*limit); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := weir(t, "", "module", "push", "-nats", url, "over", over); code != 0 {
		t.Fatalf("push under a higher limit: exit %d %q %q", code, out, errs)
	}
	if err := n.Registry.SetMaxModuleSize(ctx, limit); err != nil {
		t.Fatal(err)
	}
	// With restarts to spare, the job fails at once: every attempt would
	// be refused the same way.
	spec = tapSpec(t, "stored", "over@1", "restart: {strategy: fixed-delay, delay: 10ms, attempts: 5}\n")
	code, out, errs = weir(t, "", "run", "-nats", url, "-for", "20s", spec)
	if code != 1 || !strings.Contains(errs, "job stored failed: ") || !strings.Contains(errs, "module over@1 "+strings.TrimSuffix(why, "\n")) {
		t.Errorf("run of a module stored over the limit: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	st, err := n.API.Job(ctx, "stored")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != control.JobFailed || st.Restarts != 0 || st.LastFailure == nil || st.LastFailure.Kind != control.FailureDeploy {
		t.Errorf("job stored: %s after %d restarts, last failure %+v; want failed at once, of kind deploy", st.State, st.Restarts, st.LastFailure)
	}
}

func TestMaxModuleSizeFlag(t *testing.T) {
	code, _, errs := weir(t, "", "up", "-max-module-size", "big")
	if code != 2 || errs != "weir: up: -max-module-size big: give a size, e.g. 64MiB\n" {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
