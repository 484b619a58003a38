package wasm

import (
	"context"
	"testing"
)

// A config larger than an instance takes is refused at instantiation,
// saying the operator, the config's size, the limit and what to do — not
// merely that it is too large.
func TestConfigTooBig(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m, err := e.Load(ctx, "pass", watPassthrough(t), Limits{MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, InstanceConfig{Name: "lookup", Config: make([]byte, 1<<20+1)})
	if err == nil {
		inst.Close(ctx)
		t.Fatal("a config of 1MiB+1 bytes was taken")
	}
	want := "operator lookup: config of 1048577 bytes is larger than an instance takes (1048576 bytes, its largest input batch or 1MiB): " +
		"keep a config to settings, and feed large data to the job as a source (a stream an operator reads) or build it into the module"
	if err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	// One of the limit is taken.
	inst, err = m.Instantiate(ctx, InstanceConfig{Name: "lookup", Config: make([]byte, 1<<20)})
	if err != nil {
		t.Fatalf("a config of 1MiB: %v", err)
	}
	inst.Close(ctx)
}
