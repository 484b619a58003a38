package conformance

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host/wasm"
)

// examples are the operators every language implements.
var examples = []string{"uppercase", "filter", "wordcount", "join"}

// A language is one way of building the examples.
type language struct {
	name string
	// path returns the committed .wasm of an example ("" for Go, which is
	// built from source).
	path func(example string) string
}

// languages lists every build of the examples. Go comes first: it is the
// reference the others are compared with.
var languages = []language{
	{"go", nil},
	{"rust", func(ex string) string { return filepath.Join("..", "rust", "examples", ex+".wasm") }},
	{"c", func(ex string) string { return filepath.Join("..", "c", "examples", ex+".wasm") }},
	{"c-freestanding", func(ex string) string { return filepath.Join("..", "c", "examples", ex+".freestanding.wasm") }},
	{"assemblyscript", func(ex string) string { return filepath.Join("..", "assemblyscript", "examples", ex+".wasm") }},
	{"wat", func(ex string) string { return filepath.Join("..", "wat", ex+".wasm") }},
}

// wasmOf returns the module bytes of a language's build of an example.
func wasmOf(t testing.TB, lang language, example string) []byte {
	t.Helper()
	if lang.path == nil {
		return guestbuild.MustBuild(t, "github.com/weirhq/weir/guests/go/examples/"+example)
	}
	b, err := os.ReadFile(lang.path(example))
	if err != nil {
		t.Fatalf("%s %s: %v (run guests/build.sh)", lang.name, example, err)
	}
	return b
}

// engine is shared by every test of the package: it compiles each module
// once (and caches compiled code on disk, like weir does). It lives until
// the test binary exits.
var engine = sync.OnceValues(func() (*wasm.Engine, error) {
	return wasm.NewEngine(wasm.Config{})
})

// load compiles a language's build of an example.
func load(t testing.TB, lang language, example string) *wasm.Module {
	t.Helper()
	e, err := engine()
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(context.Background(), lang.name+"-"+example, wasmOf(t, lang, example), wasm.Limits{})
	if err != nil {
		t.Fatalf("load %s %s: %v", lang.name, example, err)
	}
	return m
}

// configOf is the config each example runs with in the suite.
func configOf(example string) []byte {
	if example == "filter" {
		return []byte("an")
	}
	return nil
}

// start instantiates a module with the example's config.
func start(t testing.TB, m *wasm.Module, example string) *wasm.Instance {
	t.Helper()
	inst, err := m.Instantiate(context.Background(), wasm.InstanceConfig{Config: configOf(example)})
	if err != nil {
		t.Fatalf("instantiate %s: %v", m.Name(), err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}
