package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{Name: "version", Summary: "print weir's version, the commit it was built from, and the Go and nats-server versions", Run: runVersion})
}

// runVersion is weir version: what a bug report or an operator comparing
// the binaries of a fleet needs (an SRE trial found no way to tell).
func runVersion(_ context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "version", "\n\nPrints weir's version, the commit it was built from (with -buildvcs,\nthe go command's default in a checkout), Go's version and platform, and\nthe versions of nats-server, nats.go and wazero built in.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version: unexpected argument %q", fs.Arg(0))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(std.Out, "weir (no build information) %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	}
	printVersion(std.Out, info)
	return nil
}

// printVersion writes weir's version line from info: the module version
// ("(devel)" for a build from a checkout), the VCS revision and whether
// the tree had changes, the Go version and platform, and the versions of
// the NATS server and client and of wazero it was built with.
func printVersion(w io.Writer, info *debug.BuildInfo) {
	var rev, modified, at string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		case "vcs.time":
			at = " " + s.Value
		}
	}
	line := "weir " + info.Main.Version
	if rev != "" {
		line += " commit " + rev[:min(12, len(rev))] + modified + at
	}
	deps := map[string]string{}
	for _, d := range info.Deps {
		deps[d.Path] = d.Version
	}
	fmt.Fprintf(w, "%s, %s %s/%s\n", line, info.GoVersion, runtime.GOOS, runtime.GOARCH)
	for _, p := range []string{"github.com/nats-io/nats-server/v2", "github.com/nats-io/nats.go", "github.com/tetratelabs/wazero"} {
		if v := deps[p]; v != "" {
			fmt.Fprintf(w, "  %s %s\n", p, v)
		}
	}
}
