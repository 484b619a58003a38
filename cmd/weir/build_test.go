package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/guests/go/guestbuild"
	"github.com/weirhq/weir/guests/sourcebuild"
)

// saidBuild reports whether a command's stderr says of src that it built
// it or that the build cache had it: tests that build the repo's examples
// find them cached by an earlier run.
func saidBuild(errs, src string) bool {
	return strings.Contains(errs, "building "+src+" (") ||
		strings.Contains(errs, src+" (") && strings.Contains(errs, "): unchanged since it was built, the cached module\n")
}

// weir run, exec and module push say "building" of a module only as its
// compiler starts; of one the build cache has, that it is unchanged and
// the cached module is used (a user was told "building" of modules that
// were not built); of a source two operators name, one line.
func TestBuildSaysWhatItBuilds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv(sourcebuild.CacheDirEnv, t.TempDir())
	t.Setenv(guestbuild.CacheDirEnv, t.TempDir())
	wat, err := os.ReadFile("../../guests/wat/passthrough.wat")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "pass.wat")
	if err := os.WriteFile(src, wat, 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module example.com/said\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path, lang string
	}{{src, "WAT"}, {pkg, "GOOS=wasip1"}} {
		for _, run := range []struct {
			name, want string
		}{
			{"first", "building " + c.path + " (" + c.lang + ") …\n"},
			{"again", c.path + " (" + c.lang + "): unchanged since it was built, the cached module\n"},
		} {
			var errb bytes.Buffer
			b := &moduleBuilder{std: Stdio{Out: &bytes.Buffer{}, Err: &errb}}
			for range 2 { // two operators naming it
				out, built, err := b.build(ctx, c.path)
				if err != nil || !built {
					t.Fatalf("%s build of %s: %q, %v, %v", run.name, c.path, out, built, err)
				}
				if st, err := os.Stat(out); err != nil || st.Size() == 0 {
					t.Fatalf("%s build of %s: no module: %v", run.name, c.path, err)
				}
			}
			b.Close()
			if errb.String() != run.want {
				t.Errorf("%s build of %s said\n%q\nwant\n%q", run.name, c.lang, errb.String(), run.want)
			}
		}
	}
}
