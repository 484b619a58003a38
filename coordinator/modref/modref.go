// Package modref parses the module references a job spec uses to name an
// operator's WebAssembly module: "NAME@VERSION" and "NAME" (latest) in the
// module registry, "sha256:DIGEST" (any version with that content), or a
// local file path.
package modref

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kind tells how a reference names its module.
type Kind int

// Reference kinds.
const (
	// Registry names a module in the registry, with or without a version.
	Registry Kind = iota + 1
	// Digest names module content by its sha256 digest.
	Digest
	// File names a local file.
	File
)

func (k Kind) String() string {
	switch k {
	case Registry:
		return "registry"
	case Digest:
		return "digest"
	case File:
		return "file"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Ref is a parsed module reference.
type Ref struct {
	Kind Kind
	// Name is the registry name (Registry).
	Name string
	// Version is the registry version; 0 means the latest (Registry).
	Version int
	// Digest is the lower-case hex sha256 of the module bytes (Digest).
	Digest string
	// Path is the file path (File).
	Path string
}

func (r Ref) String() string {
	switch r.Kind {
	case Registry:
		if r.Version == 0 {
			return r.Name
		}
		return fmt.Sprintf("%s@%d", r.Name, r.Version)
	case Digest:
		return "sha256:" + r.Digest
	case File:
		return r.Path
	}
	return "invalid module reference"
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidName reports whether name is usable as a registry module name:
// a letter, then up to 63 letters, digits, '-' or '_'.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Parse parses a module reference. A string containing a path separator,
// ending in ".wasm" or in the extension of a source file weir builds (".rs",
// ".c", ".ts", ".wat"), or "." or ".." (a Go package directory, such as the
// spec's own) is a file path; "sha256:" starts a digest; anything else is
// NAME or NAME@VERSION with VERSION a positive integer.
func Parse(s string) (Ref, error) {
	switch {
	case s == "":
		return Ref{}, fmt.Errorf("empty module reference")
	case strings.HasPrefix(s, "sha256:"):
		d := strings.TrimPrefix(s, "sha256:")
		if !digestRE.MatchString(d) {
			return Ref{}, fmt.Errorf("module reference %q: a digest is 64 lower-case hex digits", s)
		}
		return Ref{Kind: Digest, Digest: d}, nil
	case strings.ContainsAny(s, `/\`) || fileSuffix(s) || s == "." || s == "..":
		return Ref{Kind: File, Path: s}, nil
	}
	name, ver, hasVer := strings.Cut(s, "@")
	if !ValidName(name) {
		return Ref{}, fmt.Errorf("module reference %q: bad module name (want NAME@VERSION, NAME, sha256:DIGEST or a file path)", s)
	}
	r := Ref{Kind: Registry, Name: name}
	if hasVer {
		v, err := strconv.Atoi(ver)
		if err != nil || v <= 0 {
			return Ref{}, fmt.Errorf("module reference %q: version must be a positive integer", s)
		}
		r.Version = v
	}
	return r, nil
}

// fileSuffix reports whether s ends as a module file or a source file of
// one does (guests/sourcebuild); no registry name has a dot.
func fileSuffix(s string) bool {
	for _, ext := range []string{".wasm", ".rs", ".c", ".ts", ".wat"} {
		if strings.HasSuffix(s, ext) {
			return true
		}
	}
	return false
}
