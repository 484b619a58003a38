// Command filter is a stateless weir operator: its config is a substring,
// and it keeps (emits on port 0, unchanged) the records whose value contains
// it.
package main

import (
	"bytes"
	"errors"

	"github.com/weirhq/weir/guests/go/weir"
)

type filter struct {
	substr []byte
}

func (f *filter) Init(config []byte) error {
	if len(config) == 0 {
		return errors.New("filter: config must be the substring to keep")
	}
	f.substr = config
	return nil
}

func (f *filter) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		if r := in.Record(); bytes.Contains(r.Value, f.substr) {
			out.EmitRecord(0, r)
		}
	}
	return nil
}

func (f *filter) Snapshot(w *weir.StateWriter) error { return nil }
func (f *filter) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(&filter{}) }

func main() {}
