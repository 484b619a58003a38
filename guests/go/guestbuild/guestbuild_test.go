package guestbuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// TestBuildSaysHowToFindTheSDK: an operator importing the Go SDK from a
// directory in no module, or whose go.mod does not find the SDK, is
// refused in one line that says what to run there — the replace of the
// unpublished weir module by this checkout — not the go command's go get,
// which cannot fetch it.
func TestBuildSaysHowToFindTheSDK(t *testing.T) {
	t.Setenv(CacheDirEnv, t.TempDir())
	t.Setenv("GOWORK", "off")
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	const op = "package main\n\nimport _ \"github.com/weirhq/weir/guests/go/weir\"\n\nfunc main() {}\n"
	for _, c := range []struct {
		name, gomod, want string
	}{
		{"nomod", "", " is in no Go module, which a Go operator needs to find the SDK (github.com/weirhq/weir is not published): in DIR run go mod init example.com/nomod && go mod edit -replace github.com/weirhq/weir=ROOT && go mod tidy"},
		{"noreplace", "module example.com/op\n\ngo 1.22\n", ": its go.mod does not find the SDK (github.com/weirhq/weir is not published, go get cannot fetch it): in DIR run go mod edit -replace github.com/weirhq/weir=ROOT && go mod tidy"},
		{"untidy", "module example.com/op\n\ngo 1.22\n\nreplace github.com/weirhq/weir => " + root + "\n", ": its go.mod replaces github.com/weirhq/weir but does not require it: in DIR run go mod tidy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), c.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{"main.go": op}
			if c.gomod != "" {
				files["go.mod"] = c.gomod
			}
			for name, text := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := build(context.Background(), dir, nil)
			want := "guestbuild: " + dir + strings.NewReplacer("DIR", dir, "ROOT", root).Replace(c.want)
			if err == nil || err.Error() != want {
				t.Errorf("build:\n got %v\nwant %s", err, want)
			}
		})
	}
}
