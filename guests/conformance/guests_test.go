package conformance

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/host/wasm"
)

// examples are the operators every language implements.
var examples = []string{"uppercase", "filter", "wordcount", "join", "keyedcount"}

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
	{"c-simd128", func(ex string) string { return filepath.Join("..", "c", "examples", ex+".simd.wasm") }},
	{"c++", func(ex string) string { return filepath.Join("..", "cpp", "examples", ex+".wasm") }},
	{"assemblyscript", func(ex string) string { return filepath.Join("..", "assemblyscript", "examples", ex+".wasm") }},
	{"wat", func(ex string) string { return filepath.Join("..", "wat", ex+".wasm") }},
}

// some names the languages that build some of the examples, not all: C++,
// which uses the C SDK, shows the C++ standard library at work in those
// its library serves (std::string, std::string_view, std::unordered_map);
// the others are C's.
var some = map[string][]string{
	"c++": {"uppercase", "filter", "keyedcount"},
}

// has reports whether lang builds example.
func (lang language) has(example string) bool {
	only, ok := some[lang.name]
	return !ok || slices.Contains(only, example)
}

// languagesWith returns the languages that build example, in the order of
// languages (Go first).
func languagesWith(example string) []language {
	var with []language
	for _, lang := range languages {
		if lang.has(example) {
			with = append(with, lang)
		}
	}
	return with
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

// newEngine returns an Engine for one test, closed when the test ends.
// Compiled code is shared between tests through wazero's on-disk cache, as
// in weir itself.
func newEngine(tb testing.TB) *wasm.Engine {
	tb.Helper()
	e, err := wasm.NewEngine(wasm.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// load compiles a language's build of an example.
func load(tb testing.TB, e *wasm.Engine, lang language, example string) *wasm.Module {
	tb.Helper()
	m, err := e.Load(context.Background(), lang.name+"-"+example, wasmOf(tb, lang, example), wasm.Limits{})
	if err != nil {
		tb.Fatalf("load %s %s: %v", lang.name, example, err)
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
	inst, err := m.Instantiate(context.Background(), wasm.InstanceConfig{Config: configOf(example), WholeBatches: true})
	if err != nil {
		t.Fatalf("instantiate %s: %v", m.Name(), err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	return inst
}
