package guestbuild

import (
	"context"
	"os"
	"testing"
)

func TestBuildCaches(t *testing.T) {
	const pkg = "github.com/weirhq/weir/guests/go/examples/wordcount"
	ctx := context.Background()
	p1, err := Build(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(p1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := build(ctx, pkg) // past the in-process memo, to the disk cache
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(p2)
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 || !st1.ModTime().Equal(st2.ModTime()) {
		t.Fatalf("second build did not reuse the cache: %s vs %s", p1, p2)
	}
	b := MustBuild(t, pkg)
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		t.Fatalf("not a wasm module: % x", b[:8])
	}
}

func TestBuildError(t *testing.T) {
	if _, err := Build(context.Background(), "github.com/weirhq/weir/guests/go/examples/does-not-exist"); err == nil {
		t.Fatal("building a missing package succeeded")
	}
}
