// Package conformance holds the test suite that runs every language's build
// of weir's example operators (uppercase, filter, wordcount, join,
// keyedcount) through the real host (host/wasm) on the same inputs, and
// checks that they behave identically: the same output batches,
// byte-identical snapshots that restore into any other language's build,
// and the same init errors.
//
// The non-Go guests are the .wasm files guests/build.sh commits next to
// their sources; Go guests are compiled by guests/go/guestbuild. A
// benchmark measures uppercase per language beside native Go.
package conformance
