package storage

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// BenchmarkObjectGet measures reading an 8 MiB snapshot (64 chunks of the
// client's 128 KiB) from the object store on a real embedded server.
func BenchmarkObjectGet(b *testing.B) {
	_, js := embeddedtest.Connect(b, embeddedtest.Server(b, embedded.Config{}))
	ctx := context.Background()
	obj, err := NewObjectStore(ctx, js, DefaultStateBucket, 0)
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	if err := obj.Put(ctx, "j/chk-1/task-0", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		rc, err := obj.Get(ctx, "j/chk-1/task-0")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != int64(len(data)) {
			b.Fatalf("read %d bytes, %v", n, err)
		}
	}
}
