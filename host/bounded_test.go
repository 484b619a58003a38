package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/host"
	"github.com/weirhq/weir/transport/local"
	"github.com/weirhq/weir/transport/storage"
	"github.com/weirhq/weir/transport/stream"
)

// endedErr is how a bounded source says its input ended (host.InputEnded).
type endedErr struct{}

func (endedErr) Error() string    { return "ended" }
func (endedErr) InputEnded() bool { return true }

// boundedSource hands out its batches, then says its input ended, with
// the final offset 99, on every later Poll.
type boundedSource struct {
	batches [][]byte
	pos     int
	polls   int // Polls after the end
}

func (s *boundedSource) Poll(ctx context.Context) ([]byte, []byte, error) {
	if s.pos >= len(s.batches) {
		s.polls++
		return nil, binary.LittleEndian.AppendUint64(nil, 99), fmt.Errorf("source x: %w", endedErr{})
	}
	b := s.batches[s.pos]
	s.pos++
	return b, binary.LittleEndian.AppendUint64(nil, uint64(s.pos)), nil
}
func (s *boundedSource) Seek(context.Context, []byte) error                      { return nil }
func (s *boundedSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }
func (s *boundedSource) Close() error                                            { return nil }

// endRecorder is a recorder that also hears of ended inputs.
type endRecorder struct {
	*recorder
	mu    sync.Mutex
	ended []string
	fail  error
}

func (r *endRecorder) InputEnded(ctx context.Context, task string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, task)
	return r.fail
}

func (r *endRecorder) endedTasks() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ended...)
}

func TestInputEnded(t *testing.T) {
	if host.InputEnded(errors.New("x")) || host.InputEnded(nil) {
		t.Fatal("an ordinary error taken for the end of input")
	}
	if !host.InputEnded(fmt.Errorf("wrapped: %w", endedErr{})) {
		t.Fatal("a wrapped end of input not recognized")
	}
}

// A bounded source's end (host.InputEnded) does not finish the task: it
// reports the end once, takes no more input, and still takes the stop
// savepoint, whose snapshot holds the source's final offset.
func TestBoundedSourceWaitsForTheFinalSavepoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, _ := storage.NewDir(t.TempDir())
	so, ro := local.New(local.Options{Name: "src->x"})
	rc, acks := ackWaiter()
	er := &endRecorder{recorder: rc}
	src := &boundedSource{batches: [][]byte{rec("a", "a").Batch, rec("b", "b").Batch}}
	task, err := host.New(host.Config{Name: "src", Source: src, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Store: store, Listener: er})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(er.endedTasks()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the end of input was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a task that went on polling would poll again
	if got := er.endedTasks(); len(got) != 1 || got[0] != "src" {
		t.Fatalf("ended reported %v, want once for src", got)
	}
	if src.polls != 1 {
		t.Fatalf("polled %d times after the end, want 1", src.polls)
	}
	if s := task.Stats(); !s.InputEnded || s.RecordsIn != 2 {
		t.Fatalf("stats %+v, want the input ended after 2 records", s)
	}
	select {
	case err := <-done:
		t.Fatalf("the task ended (%v) before its final savepoint", err)
	default:
	}
	task.TriggerStop(stream.Barrier{ID: 1, Type: stream.Savepoint})
	if id := waitAck(t, acks, rc); id != 1 {
		t.Fatalf("ack %d", id)
	}
	snap := readSnap(t, store, rc.handle(1, "src"))
	if got := binary.LittleEndian.Uint64(snap.SourceOffset); got != 99 {
		t.Fatalf("the savepoint holds offset %d, want the final 99", got)
	}
	var got []stream.Element
	for len(got) < 3 {
		if d, ok, _ := ro.Poll(); ok {
			got = append(got, d.Element)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if s := render(t, got); s != "a b B1" {
		t.Fatalf("channel carried %q", s)
	}
	task.NotifyCheckpointComplete(1)
	if err := task.Rest(ctx); err != nil {
		t.Fatalf("rest: %v", err)
	}
	cancel()
	<-done
}

// A listener that cannot be told of the end fails the task: the job
// recovers, rather than wait for a final savepoint nobody triggers.
func TestInputEndedUnreportedFailsTheTask(t *testing.T) {
	so, _ := local.New(local.Options{Name: "src->x"})
	er := &endRecorder{recorder: newRecorder(), fail: errors.New("coordinator unreachable")}
	task, err := host.New(host.Config{Name: "src", Source: &boundedSource{}, Outputs: []host.Output{{Senders: []stream.Sender{so}}},
		Listener: er})
	if err != nil {
		t.Fatal(err)
	}
	err = task.Run(context.Background())
	if err == nil || !errors.Is(err, er.fail) {
		t.Fatalf("run: %v, want the report's failure", err)
	}
}
