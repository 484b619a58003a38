package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/stream"
)

// A source read by two consumers (a job spec whose operators, or sinks,
// both take it as input) has an output port for each, and, having no
// operator to choose a port, sends every record to each of them — not
// only to the first, which left the others without input and the job
// without their output, said nowhere.
func TestSourceFeedsEveryOutputPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	s0, r0 := local.New(local.Options{Name: "src->x"})
	s1, r1 := local.New(local.Options{Name: "src->y"})
	src := &boundedSource{batches: [][]byte{rec("a", "a").Batch, rec("b", "b").Batch}}
	task, err := host.New(host.Config{Name: "src", Source: src,
		Outputs:  []host.Output{{Senders: []stream.Sender{s0}}, {Senders: []stream.Sender{s1}}},
		Listener: &endRecorder{recorder: newRecorder()}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	for port, r := range []stream.Receiver{r0, r1} {
		var got []stream.Element
		for len(got) == 0 || got[len(got)-1].Kind != stream.KindEndOfData {
			if d, ok, _ := r.Poll(); ok {
				got = append(got, d.Element)
				continue
			}
			select {
			case <-ctx.Done():
				t.Fatalf("output port %d carried %q, then nothing more", port, render(t, got))
			case <-time.After(time.Millisecond):
			}
		}
		if s := render(t, got); s != "a b EOD" {
			t.Errorf("output port %d carried %q, want %q", port, s, "a b EOD")
		}
	}
	cancel()
	<-done
}
