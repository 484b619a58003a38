// Command split is the first operator of the wordcount example: it splits
// each line into words (on ASCII white space, lower-cased, punctuation
// trimmed) and emits one record per word, keyed by the word, so that a key
// partitioner downstream sends every occurrence of a word to the same
// counting instance. It keeps no state.
package main

import (
	"bytes"

	"github.com/weirhq/weir/guests/go/weir"
)

type split struct{ word []byte }

func (s *split) Init(config []byte) error { return nil }

func (s *split) Process(port int, in *weir.Batch, out *weir.Emitter) error {
	for in.Next() {
		r := in.Record()
		for _, f := range bytes.Fields(r.Value) {
			s.word = s.word[:0]
			for _, c := range f {
				switch {
				case 'A' <= c && c <= 'Z':
					s.word = append(s.word, c+('a'-'A'))
				case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '\'', c == '-', c >= 0x80:
					s.word = append(s.word, c)
				}
			}
			s.word = bytes.Trim(s.word, "'-")
			if len(s.word) > 0 {
				out.Emit(0, s.word, s.word, r.Timestamp)
			}
		}
	}
	return nil
}

func (s *split) Snapshot(w *weir.StateWriter) error { return nil }
func (s *split) Restore(r *weir.StateReader) error  { return nil }

func init() { weir.Register(&split{}) }

func main() {}
