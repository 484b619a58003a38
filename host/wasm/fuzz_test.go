package wasm

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/weirhq/weir/abi"
)

func abiEmpty() []byte { return append([]byte(nil), abi.EmptyBatch...) }

func abiValidate(b []byte) (int, error) { return abi.ValidateBatch(b) }

// FuzzLoad feeds arbitrary bytes to Check and Load: they must never panic,
// every refusal must be a *ValidationError, and the loop instrumentation
// must never turn a module wazero accepts into one it refuses.
func FuzzLoad(f *testing.F) {
	f.Add(watPassthrough(f))
	f.Add(misbehave(f))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	ctx := context.Background()
	e, err := NewEngine(Config{CacheDir: "-"})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close(ctx)
	plain := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer plain.Close(ctx)
	f.Fuzz(func(t *testing.T, b []byte) {
		cerr := Check("f", b, Limits{})
		_, err := e.Load(ctx, "f", b, Limits{})
		if err == nil {
			if cerr != nil {
				t.Fatalf("Check refused what Load accepted: %v", cerr)
			}
			return
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("untyped error: %v", err)
		}
		if ve.Kind == KindMalformed && ve.Err != nil && cerr == nil {
			// wazero refused the instrumented module: it must refuse the
			// original too.
			if cm, err := plain.CompileModule(ctx, b); err == nil {
				cm.Close(ctx)
				t.Fatalf("the instrumented module was refused (%v) but the original compiles", ve)
			}
		}
	})
}

// FuzzEmit hands arbitrary bytes to the WAT passthrough, which emits them
// back unchecked: the host's emit must forward exactly the valid batches
// and refuse every other with a *FaultError, never panic.
func FuzzEmit(f *testing.F) {
	f.Add(abiEmpty())
	f.Add(batchOf(kv{"k", "v", 1}, kv{"", "", -1}))
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	ctx := context.Background()
	e, err := NewEngine(Config{CacheDir: "-"})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, "pt", watPassthrough(f), Limits{MaxBatchBytes: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		var got []byte
		err := inst.Process(ctx, 0, b, func(_ int, out []byte) error { got = out; return nil })
		_, verr := abiValidate(b)
		switch {
		case verr == nil && (err != nil || !bytes.Equal(got, b)):
			t.Fatalf("valid batch: %v, forwarded %x", err, got)
		case verr != nil:
			var fe *FaultError
			if !errors.As(err, &fe) || got != nil {
				t.Fatalf("malformed batch: got %v, forwarded %x", err, got)
			}
			inst.Close(ctx)
			if inst, err = m.Instantiate(ctx, InstanceConfig{}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
