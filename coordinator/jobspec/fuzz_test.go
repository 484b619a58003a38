package jobspec

import (
	"encoding/json"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser: it must never panic, must
// return either a spec or located errors, and an accepted spec must be
// serializable (it travels in deploy messages).
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("name: j\nsources: [{name: in, kind: nats, subject: a}]\n"))
	f.Add([]byte("name: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data, Options{})
		if err != nil {
			es, ok := err.(Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error is %T %v, want non-empty Errors", err, err)
			}
			return
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("accepted spec does not serialize: %v", err)
		}
	})
}
