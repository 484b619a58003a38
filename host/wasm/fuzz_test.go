package wasm

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/weirhq/weir/abi"
)

func abiEmpty() []byte { return append([]byte(nil), abi.EmptyBatch...) }

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
// and refuse every other with a *FaultError, never panic. Each input goes
// in whole and cut into pieces of one record (what Process does for a slow
// operator): a valid batch must come out record for record either way.
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
		want, verr := abi.DecodeBatch(b)
		for _, pace := range []pacer{
			{budget: time.Hour, perRecord: 1}, // whole
			{budget: 1, perRecord: 1},         // pieces of one record
		} {
			inst.pace = pace
			var got []abi.Record
			err := inst.Process(ctx, 0, b, func(_ int, out []byte) error {
				rs, err := abi.DecodeBatch(out)
				if err != nil {
					t.Fatalf("forwarded a malformed batch %x: %v", out, err)
				}
				got = append(got, rs...)
				return nil
			})
			switch {
			case verr == nil && (err != nil || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want))):
				t.Fatalf("valid batch (pace %+v): %v, forwarded %v", pace, err, got)
			case verr != nil:
				var fe *FaultError
				if !errors.As(err, &fe) {
					t.Fatalf("malformed batch (pace %+v): got %v", pace, err)
				}
				inst.Close(ctx)
				if inst, err = m.Instantiate(ctx, InstanceConfig{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
