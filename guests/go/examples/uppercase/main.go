// Command uppercase is a stateless weir operator: it turns the ASCII
// letters a-z of each record's value into A-Z and emits the record on port
// 0 with its key and timestamp unchanged.
package main

import "github.com/weirhq/weir/guests/go/weir"

type uppercase struct {
	buf []byte // scratch for the converted value, reused across records
}

func (u *uppercase) Init(config []byte) error { return nil }

func (u *uppercase) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		if cap(u.buf) < len(r.Value) {
			u.buf = make([]byte, len(r.Value))
		}
		buf := u.buf[:len(r.Value)]
		for i, c := range r.Value {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			buf[i] = c
		}
		out.Emit(0, r.Key, buf, r.Timestamp)
	}
	return nil
}

func (u *uppercase) Snapshot(w *weir.StateWriter) error { return nil }
func (u *uppercase) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(&uppercase{}) }

func main() {}
