package wasm

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// withCustomSection returns wasm with a custom section named name
// appended: other bytes (another compiled module) with the same code.
func withCustomSection(wasm []byte, name string) []byte {
	body := appendULEB(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, 0) // a payload byte
	return appendSection(append([]byte(nil), wasm...), 0, body)
}

// An engine with MaxIdleModules keeps at most that many compiled modules
// without a live instance, releasing the least recently used; a module
// with an instance stays however old, a released one says to load it
// again, and loading it again works.
func TestIdleModulesReleased(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(Config{MaxIdleModules: 2, CacheDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	mis := misbehave(t)
	load := func(v int) *Module {
		t.Helper()
		m, err := e.Load(ctx, fmt.Sprintf("v%d", v), withCustomSection(mis, fmt.Sprint("version-", v)), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	v0 := load(0)
	inst, err := v0.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	v1 := load(1)
	for v := 2; v <= 5; v++ {
		load(v)
	}
	// v0 is live; of the idle v1..v5 the two most recent stay.
	if n := e.cachedModules(); n != 3 {
		t.Fatalf("%d compiled modules kept, want 3 (one live, two idle)", n)
	}
	if _, err := v1.Instantiate(ctx, InstanceConfig{}); err == nil || !strings.Contains(err.Error(), "module v1 was released after it stayed unused") {
		t.Fatalf("instantiate a released module: %v", err)
	}
	again, err := load(1).Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatalf("instantiate a module loaded again: %v", err)
	}
	again.Close(ctx)
	// v0's instance still works, and once closed v0 is idle like the rest.
	if err := inst.Process(ctx, 0, benchBatch(3), func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	if n := e.cachedModules(); n != 2 {
		t.Fatalf("%d compiled modules kept, want the 2 idle ones", n)
	}
}
