package guestbuild

import (
	"context"
	"os"
	"path/filepath"
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

// TestBuildDirectoryOfAnotherModule: a package directory with a go.mod of
// its own (an operator written outside weir's repository) builds in its own
// module, whatever the current directory.
func TestBuildDirectoryOfAnotherModule(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module example.com/op\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(CacheDirEnv, t.TempDir())
	if _, err := build(context.Background(), dir); err != nil {
		t.Fatalf("build %s: %v", dir, err)
	}
}
