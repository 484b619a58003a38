// Package weir is the Go guest SDK for weir operators.
//
// An operator is a Go type implementing Operator, registered from the
// program's init function; main stays empty:
//
//	type upper struct{}
//
//	func (upper) Init(config []byte) error { return nil }
//	func (upper) Process(port int, in *weir.Batch, out *weir.Emitter) error {
//		for in.Next() {
//			r := in.Record()
//			out.Emit(0, r.Key, bytes.ToUpper(r.Value), r.Timestamp)
//		}
//		return nil
//	}
//	func (upper) Snapshot(w *weir.StateWriter) error { return nil }
//	func (upper) Restore(r *weir.StateReader) error  { return nil }
//
//	func init() { weir.Register(upper{}) }
//	func main() {}
//
// Build it as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o op.wasm .
//
// The SDK implements the exports of ABI version 1 (abi/ABI.md): it owns the
// input buffer, iterates batches without copying, collects each output
// port's records into one batch emitted once per call, streams snapshots in
// 64 KiB chunks, keeps the record cursor the host reads when a call traps,
// and turns returned errors and panics into the operator's error message
// (a panic's names the file, line and function of the operator's code that
// panicked, and its goroutine's stack goes to stderr, which the host keeps
// with the failure).
package weir
