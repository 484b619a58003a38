package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/job"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A source's stop: end on a stream that holds nothing is refused, as the
// submit refuses it — before weir run -create-streams creates any stream,
// so a refused run leaves none behind: one it would create (empty) and
// one that exists empty alike. A stream -input publishes to before the
// submit is the submit's to judge.
func TestRunRefusesAStopOnAnEmptyStreamBeforeCreatingStreams(t *testing.T) {
	srv := embeddedtest.Server(t, embedded.Config{})
	_, js := embeddedtest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte(`name: j
sources: [{name: in, kind: jetstream, stream: IN, stop: end}]
sinks: [{name: out, kind: jetstream, stream: OUT, subject: out, input: {from: in}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	streams := func() []string {
		var names []string
		for l := js.StreamNames(ctx); ; {
			select {
			case n, ok := <-l.Name():
				if !ok {
					return names
				}
				if !strings.HasPrefix(n, "KV_weir_") && !strings.HasPrefix(n, "OBJ_weir_") {
					names = append(names, n) // not weir's own, which a weir up keeps anyway
				}
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	want := "weir: submit j: source in: stop end: stream IN holds no message up to it: the source would read nothing (give a sequence to wait for)\n"
	// IN does not exist: -create-streams would create it empty.
	code, _, errs := weir(t, "", "run", "-nats", srv.ClientURL(), spec)
	if code == 0 || !strings.HasSuffix(errs, want) {
		t.Errorf("stream IN to be created: exit %d, stderr %q; want it to end %q", code, errs, want)
	}
	if got := streams(); len(got) != 0 {
		t.Errorf("a refused run left streams %v", got)
	}
	// IN exists, empty.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}}); err != nil {
		t.Fatal(err)
	}
	code, _, errs = weir(t, "", "run", "-nats", srv.ClientURL(), spec)
	if code == 0 || !strings.HasSuffix(errs, want) {
		t.Errorf("stream IN empty: exit %d, stderr %q; want it to end %q", code, errs, want)
	}
	if got := streams(); len(got) != 1 || got[0] != "IN" {
		t.Errorf("a refused run left streams %v, want IN only", got)
	}

	// The check itself: -input to IN leaves the stop to the submit, and
	// so does a stream that holds a message.
	s, err := jobspec.Parse("job.yaml", []byte(`name: j
sources: [{name: in, kind: jetstream, stream: IN, stop: end}]
sinks: [{name: out, kind: nats, subject: out, input: {from: in}}]
`), jobspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := job.CheckStops(ctx, js, s, time.Second, nil, map[string]bool{"IN": true}); err != nil {
		t.Errorf("IN fed by -input: %v", err)
	}
	if _, err := js.Publish(ctx, "in", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := job.CheckStops(ctx, js, s, time.Second, nil, nil); err != nil {
		t.Errorf("IN holds a message: %v", err)
	}
}
