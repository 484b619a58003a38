// Package guests holds weir's guest SDKs and ships the ones that are
// source files — Rust's crate, C's header, AssemblyScript's library — with
// the weir binary (SDK), so that an operator written in those languages
// builds against the SDK of the weir that runs it (guests/sourcebuild).
// The Go SDK is a Go package (guests/go/weir), which a Go operator
// imports as any other.
package guests

import (
	"embed"
	"io/fs"
)

//go:embed rust/weir/lib.rs c/weir.h assemblyscript/weir/index.ts assemblyscript/weir/exports.ts
var sdk embed.FS

// SDK returns the guest SDK sources: "rust/weir/lib.rs", "c/weir.h",
// "assemblyscript/weir/index.ts" and "assemblyscript/weir/exports.ts".
func SDK() fs.FS { return sdk }
