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
	p2, err := build(ctx, pkg, nil) // past the in-process memo, to the disk cache
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
	if _, err := build(context.Background(), dir, nil); err != nil {
		t.Fatalf("build %s: %v", dir, err)
	}
}

// BuildSaying says when the compiler runs, and only then: not for a
// module the disk cache or an earlier build of the process has (weir run
// said "building" of modules it took from the cache).
func TestBuildSayingSaysOnlyOfACompile(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module example.com/said\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(CacheDirEnv, t.TempDir())
	ctx := context.Background()
	for i, what := range []string{"first build", "in-process memo", "disk cache"} {
		if what == "disk cache" {
			cwd, _ := os.Getwd()
			built.Delete(cwd + "\x00" + dir)
		}
		compiles := 0
		if _, err := BuildSaying(ctx, dir, func() { compiles++ }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if want := map[bool]int{true: 1, false: 0}[i == 0]; compiles != want {
			t.Errorf("%s: compiling said %d times, want %d", what, compiles, want)
		}
	}
}
