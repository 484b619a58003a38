package host_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// feedSource is an unbounded source: Poll hands out what the test sends
// on feed, with the count of batches handed out as the offset, and blocks
// while there is none.
type feedSource struct {
	feed  chan []byte
	n     uint64
	polls chan struct{} // a Poll took a batch
}

func (s *feedSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	select {
	case b := <-s.feed:
		s.n++
		select {
		case s.polls <- struct{}{}:
		default:
		}
		return b, binary.LittleEndian.AppendUint64(nil, s.n), nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}
func (s *feedSource) Seek(context.Context, []byte) error                      { return nil }
func (s *feedSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *feedSource) Close() error                                            { return nil }

// EndInput (a drain) ends an unbounded source task's input where it has
// read to: end-of-data follows what it processed, the listener hears of
// it once, a batch polled after it is not taken, and the final savepoint
// holds the offset after the last batch processed, its ack saying the
// source was drained.
func TestEndInputDrainsAnUnboundedSource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	so, ro := local.New(local.Options{Name: "src->x"})
	rc, acks := ackWaiter()
	er := &endRecorder{recorder: rc}
	src := &feedSource{feed: make(chan []byte), polls: make(chan struct{}, 1)}
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Store: store, Listener: er})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	src.feed <- rec("a", "a").Batch
	src.feed <- rec("b", "b").Batch
	deadline := time.Now().Add(30 * time.Second)
	for task.Stats().RecordsIn < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the batches were not processed")
		}
		time.Sleep(time.Millisecond)
	}
	task.EndInput()
	for len(er.endedTasks()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the end of input was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	// The source still polls: what it returns now is not taken.
	select {
	case src.feed <- rec("c", "c").Batch:
	case <-time.After(time.Second):
	}
	task.EndInput() // again: nothing more happens
	time.Sleep(50 * time.Millisecond)
	if got := er.endedTasks(); len(got) != 1 {
		t.Fatalf("ended reported %v, want once", got)
	}
	if s := task.Stats(); !s.InputEnded || s.RecordsIn != 2 {
		t.Fatalf("stats %+v, want the input ended after 2 records", s)
	}
	task.TriggerStop(stream.Barrier{ID: 1, Type: stream.Savepoint})
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "src"))
	if got := binary.LittleEndian.Uint64(snap.SourceOffset); got != 2 {
		t.Fatalf("the savepoint holds offset %d, want 2: after the last batch processed", got)
	}
	if v := rc.metric(1, "src", host.MetricSourceDrained); v != 1 {
		t.Fatalf("the savepoint's ack says %s %d, want 1", host.MetricSourceDrained, v)
	}
	var got []stream.Element
	for len(got) < 4 {
		if d, ok, _ := ro.Poll(); ok {
			got = append(got, d.Element)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if s := render(t, got); s != "a b EOD B1" {
		t.Fatalf("channel carried %q", s)
	}
	cancel()
	<-done
}

// EndInput before Run (the deploy of an attempt of a job being drained)
// ends the input once the task restored its state, reading nothing.
func TestEndInputBeforeRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	so, ro := local.New(local.Options{Name: "src->x"})
	rc, _ := ackWaiter()
	er := &endRecorder{recorder: rc}
	src := &feedSource{feed: make(chan []byte, 1), polls: make(chan struct{}, 1)}
	src.feed <- rec("a", "a").Batch
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Listener: er})
	if err != nil {
		t.Fatal(err)
	}
	task.EndInput()
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for len(er.endedTasks()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the end of input was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if s := task.Stats(); s.RecordsIn != 0 {
		t.Fatalf("took %d records, want none", s.RecordsIn)
	}
	d, ok, _ := ro.Poll()
	if !ok || d.Element.Kind != stream.KindEndOfData {
		t.Fatalf("channel carried %+v, want end-of-data first", d)
	}
	cancel()
	<-done
}
