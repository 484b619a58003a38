// Package benchmarks holds the transport's end-to-end benchmarks (in its
// test files): raw core NATS, a plain Go forwarder, and weir pipelines that
// run a Go-SDK WebAssembly operator between NATS subjects and JetStream
// streams. Results and the command to reproduce them are in
// docs/bench/transport.md.
//
// Four environment variables change how they run: WEIR_BENCH_CPUPROFILE=FILE
// writes a CPU profile of the timed part of the last benchmark run;
// WEIR_BENCH_NATS=URL runs them against that NATS server (JetStream on)
// instead of one embedded in the benchmark process, deleting and recreating
// the streams they use there; WEIR_BENCH_CHECKPOINT_INTERVAL=DURATION sets
// how often the runtime benchmarks checkpoint (default 200ms);
// WEIR_BENCH_STORAGE=memory makes the JetStream streams memory-stored
// instead of file-stored (the default, as weir run creates them).
package benchmarks
