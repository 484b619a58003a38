package wasm

import (
	"context"
	"errors"
	"testing"

	"github.com/tetratelabs/wazero"
)

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
