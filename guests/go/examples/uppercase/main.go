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
		u.buf = append(u.buf[:0], r.Value...)
		for i, c := range u.buf {
			if 'a' <= c && c <= 'z' {
				u.buf[i] = c - ('a' - 'A')
			}
		}
		out.Emit(0, r.Key, u.buf, r.Timestamp)
	}
	return nil
}

func (u *uppercase) Snapshot(w *weir.StateWriter) error { return nil }
func (u *uppercase) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(&uppercase{}) }

func main() {}
