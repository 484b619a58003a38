// Package guestbuild compiles Go guest operators to WebAssembly for tests
// and tools: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, cached on
// disk by a hash of every non-standard-library source file the package
// depends on plus the Go version, so a repeated test run does not rebuild.
//
//	wasm := guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/wordcount")
package guestbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// CacheDirEnv names the environment variable that overrides the cache
// directory (default: os.UserCacheDir()/weir/guestbuild, or
// os.TempDir()/weir-guestbuild when there is no user cache dir).
const CacheDirEnv = "WEIR_GUESTBUILD_CACHE"

// Build compiles the Go package pkg (an import path, or a directory: an
// absolute path or one relative to the current directory, starting with
// ".") to a WASI reactor module and returns the path of the cached .wasm
// file. The file is shared: do not modify it. A directory is built in
// place, in whatever module holds it (its own go.mod, say), not in the
// current directory's.
func Build(ctx context.Context, pkg string) (string, error) {
	return BuildSaying(ctx, pkg, nil)
}

// BuildSaying is Build that calls compiling, if not nil, just before the
// compiler runs: not when the module is taken from the cache (or from an
// earlier build of the process), so that a caller says "building" only
// of what it builds.
func BuildSaying(ctx context.Context, pkg string, compiling func()) (string, error) {
	cwd, _ := os.Getwd()
	memoKey := cwd + "\x00" + pkg
	if p, ok := built.Load(memoKey); ok {
		if _, err := os.Stat(p.(string)); err == nil {
			return p.(string), nil
		}
	}
	p, err := build(ctx, pkg, compiling)
	if err == nil {
		built.Store(memoKey, p)
	}
	return p, err
}

// built remembers, for the life of the process, the module each package
// built to: a test binary builds the same guests many times, and its
// sources do not change while it runs.
var built sync.Map // cwd + "\x00" + pkg -> path

func build(ctx context.Context, pkg string, compiling func()) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	// The go command runs in dir, on target.
	dir, target := "", pkg
	if filepath.IsAbs(pkg) || strings.HasPrefix(pkg, ".") {
		if dir, err = filepath.Abs(pkg); err != nil {
			return "", fmt.Errorf("guestbuild: %w", err)
		}
		target = "."
	}
	key, err := sourceHash(ctx, goBin, dir, target)
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, key+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("guestbuild: cache dir: %w", err)
	}
	tmp, err := os.CreateTemp(cache, "build-*.wasm")
	if err != nil {
		return "", fmt.Errorf("guestbuild: %w", err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	if compiling != nil {
		compiling()
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-o", tmpName, target)
	cmd.Dir, cmd.Env = dir, wasmEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("guestbuild: go build %s: %w\n%s", filepath.Join(dir, target), err, strings.TrimSpace(stderr.String()))
	}
	// Rename is atomic: concurrent builds of the same key both succeed.
	if err := os.Rename(tmpName, out); err != nil {
		return "", fmt.Errorf("guestbuild: %w", err)
	}
	return out, nil
}

// MustBuild builds pkg like Build and returns the module's bytes, failing
// the test on error.
func MustBuild(t testing.TB, pkg string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	path, err := Build(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("guestbuild: %v", err)
	}
	return b
}

// wasmEnv is the environment of a guest build.
func wasmEnv() []string {
	return append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
}

// goTool finds the go command: the one on PATH, else the one that built
// this binary.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	// A fallback only (the path is checked below): `go run` and a binary
	// built here find the toolchain that built them.
	//lint:ignore SA1019 the deprecation is about copied binaries, whose path fails the Stat below
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("guestbuild: the go command is not on PATH")
	}
	return p, nil
}

func cacheDir() (string, error) {
	if d := os.Getenv(CacheDirEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "weir-guestbuild"), nil
	}
	return filepath.Join(d, "weir", "guestbuild"), nil
}

// listedPackage is the part of `go list -json` output the hash needs.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	SFiles     []string
	EmbedFiles []string
	Module     *struct{ GoMod string }
	Error      *struct{ Err string }
}

// sourceHash hashes the Go version, the package path and every source file
// (and the go.mod) of the non-standard packages pkg depends on, as the go
// command sees them in dir ("": the current directory).
func sourceHash(ctx context.Context, goBin, dir, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "list", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,SFiles,EmbedFiles,Module,Error", pkg)
	cmd.Dir, cmd.Env = dir, wasmEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if hint := sdkHint(ctx, goBin, dir, stderr.String()); hint != "" {
			return "", &hintError{msg: "guestbuild: " + hint, err: err}
		}
		return "", fmt.Errorf("guestbuild: go list %s: %w\n%s", filepath.Join(dir, pkg), err, strings.TrimSpace(stderr.String()))
	}
	h := sha256.New()
	ver, err := exec.CommandContext(ctx, goBin, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("guestbuild: go env GOVERSION: %w", err)
	}
	fmt.Fprintf(h, "go %s\npkg %s\n", bytes.TrimSpace(ver), filepath.Join(dir, pkg))
	seenMod := map[string]bool{}
	dec := json.NewDecoder(&stdout)
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("guestbuild: go list output: %w", err)
		}
		if p.Error != nil {
			return "", fmt.Errorf("guestbuild: %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.Standard {
			continue
		}
		fmt.Fprintf(h, "package %s\n", p.ImportPath)
		files := append(append(append([]string(nil), p.GoFiles...), p.SFiles...), p.EmbedFiles...)
		for _, f := range files {
			if err := hashFile(h, filepath.Join(p.Dir, f)); err != nil {
				return "", err
			}
		}
		if p.Module != nil && p.Module.GoMod != "" && !seenMod[p.Module.GoMod] {
			seenMod[p.Module.GoMod] = true
			if err := hashFile(h, p.Module.GoMod); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("guestbuild: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(h, "file %s\n", filepath.Base(path))
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("guestbuild: %s: %w", path, err)
	}
	return nil
}

// sdkModule is the module of weir's Go SDK (guests/go/weir). It is not
// published: a Go operator's go.mod finds it by a replace directive that
// points at a weir checkout.
const sdkModule = "github.com/weirhq/weir"

// sdkHint turns the go command's refusal (its stderr) of a package
// directory dir that is in no module, or in one whose go.mod does not
// find sdkModule, into one line that says what to run there — not go
// get, which the go command suggests and which cannot fetch an
// unpublished module. "" for any other refusal.
func sdkHint(ctx context.Context, goBin, dir, stderr string) string {
	where := dir
	if where == "" {
		where = "."
	}
	replace := "go mod edit -replace " + sdkModule + "=" + shellWord(checkout())
	switch {
	case strings.Contains(stderr, "go.mod file not found"):
		return fmt.Sprintf("%s is in no Go module, which a Go operator needs to find the SDK (%s is not published): in %s run go mod init example.com/%s && %s && go mod tidy",
			where, sdkModule, where, modName(dir), replace)
	case strings.Contains(stderr, "no required module provides package "+sdkModule+"/"),
		strings.Contains(stderr, "cannot find module providing package "+sdkModule+"/"),
		strings.Contains(stderr, "module "+sdkModule+" provides package "+sdkModule+"/") && strings.Contains(stderr, "replaced but not required"):
		cmd := exec.CommandContext(ctx, goBin, "mod", "edit", "-json")
		cmd.Dir = dir
		out, err := cmd.Output()
		var mod struct {
			Replace []struct{ Old struct{ Path string } }
		}
		if err == nil && json.Unmarshal(out, &mod) == nil {
			for _, r := range mod.Replace {
				if r.Old.Path == sdkModule {
					return fmt.Sprintf("%s: its go.mod replaces %s but does not require it: in %s run go mod tidy", where, sdkModule, where)
				}
			}
		}
		return fmt.Sprintf("%s: its go.mod does not find the SDK (%s is not published, go get cannot fetch it): in %s run %s && go mod tidy",
			where, sdkModule, where, replace)
	}
	return ""
}

// hintError is a go command's failure said as what to do about it; the
// go command's exit status, which says nothing more, is only wrapped.
type hintError struct {
	msg string
	err error
}

func (e *hintError) Error() string { return e.msg }
func (e *hintError) Unwrap() error { return e.err }

// checkout is the weir checkout this package was built from, where the
// SDK is, when the binary knows it (built without -trimpath, the source
// still there); else a placeholder to fill in.
func checkout() string {
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file)))) // guests/go/guestbuild/guestbuild.go
		if st, err := os.Stat(filepath.Join(root, "guests", "go", "weir")); err == nil && st.IsDir() {
			return root
		}
	}
	return "/path/to/your/weir/checkout"
}

// modName is a module path's last element for a package directory: its
// base name, or "operator" where that would not do.
func modName(dir string) string {
	base := filepath.Base(dir)
	if dir == "" || base == "." || base == string(filepath.Separator) || strings.ContainsAny(base, " '\"$`\\") {
		return "operator"
	}
	return base
}

// shellWord quotes s for a POSIX shell if it needs quoting.
func shellWord(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"$`\\|&;<>()*?[]#~{}!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
