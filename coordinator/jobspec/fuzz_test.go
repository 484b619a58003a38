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
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("accepted spec does not serialize: %v", err)
		}
		// The job API gets the spec as JSON and checks it again: what
		// Parse accepted passes, unchanged.
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("accepted spec does not deserialize: %v", err)
		}
		if err := Check(&back); err != nil {
			t.Fatalf("Check refuses what Parse accepted:\n%s\n%v", data, err)
		}
		if b2, _ := json.Marshal(&back); string(b2) != string(b) {
			t.Fatalf("Check changed what Parse accepted:\n%s\n%s", b, b2)
		}
	})
}

// FuzzCheck feeds arbitrary JSON to Check, as the job API does: it must
// never panic, and must return nil or non-empty Errors.
func FuzzCheck(f *testing.F) {
	s, err := Parse("f.yaml", []byte(good), Options{})
	if err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(s)
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"name":"j","sources":[{"name":"a","kind":"jetstream","parallelism":1}],"operators":[{"name":"x","module":"m","parallelism":1,"inputs":[{"from":"y"}]},{"name":"y","module":"m","parallelism":1,"inputs":[{"from":"x"}]}],"sinks":[{"name":"o","kind":"nats","subject":"s","parallelism":1,"input":{"from":"x"}}],"restart":{"strategy":"exponential-backoff","multiplier":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Spec
		if json.Unmarshal(data, &s) != nil {
			return
		}
		if err := Check(&s); err != nil {
			es, ok := err.(Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error is %T %v, want non-empty Errors", err, err)
			}
		}
	})
}
