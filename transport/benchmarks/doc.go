// Package benchmarks holds the transport's end-to-end benchmarks (in its
// test files): raw core NATS, a plain Go forwarder, and weir pipelines that
// run a Go-SDK WebAssembly operator between NATS subjects and JetStream
// streams. Results and the command to reproduce them are in
// docs/bench/transport.md.
package benchmarks
