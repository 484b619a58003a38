// Command passthrough is the Go counterpart of guests/wat/passthrough.wat:
// it re-emits every record it receives on port 0, unchanged. The host
// benchmark uses it to measure the SDK's per-record cost.
package main

import "github.com/weirhq/weir/guests/go/weir"

type passthrough struct{}

func (passthrough) Init(config []byte) error { return nil }

func (passthrough) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		out.EmitRecord(0, in.Record())
	}
	return nil
}

func (passthrough) Snapshot(w *weir.StateWriter) error { return nil }
func (passthrough) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(passthrough{}) }

func main() {}
