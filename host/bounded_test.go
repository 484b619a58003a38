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

// EndsAt implements host.BoundedSource: the final offset is 99.
func (s *boundedSource) EndsAt(offset []byte) bool {
	return len(offset) == 8 && binary.LittleEndian.Uint64(offset) == 99
}

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
// sends end-of-data downstream, reports the end once, takes no more input,
// and still takes the stop savepoint, whose snapshot holds the source's
// final offset.
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
	deadline := time.Now().Add(30 * time.Second)
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
	if v := rc.metric(1, "src", host.MetricSourceEnded); v != 1 {
		t.Fatalf("the savepoint's ack says %s %d; want 1, the bounded source ended", host.MetricSourceEnded, v)
	}
	if v, want := rc.metric(1, "src", host.MetricSourcePosition), host.SourcePosition(snap.SourceOffset); v != want || v == 0 {
		t.Fatalf("the savepoint's ack says %s %d; want %d, the position of the offset it holds", host.MetricSourcePosition, v, want)
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

// An operator task ends its input port once every channel of it
// delivered end-of-data: the operator's EndOfInput runs once, end-of-data
// follows its output downstream, and the listener hears of it; barriers
// still pass. A task restored from a snapshot taken after that does not
// end the port again when its (restored, past its records) upstream sends
// end-of-data once more, but forwards it and reports again.
func TestEndOfDataEndsThePortOnce(t *testing.T) {
	store, _ := storage.NewDir(t.TempDir())
	run := func(restore string, records bool) (op *countOp, rc *recorder, er *endRecorder, out string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s1, r1 := local.New(local.Options{Name: "a->x"})
		s2, r2 := local.New(local.Options{Name: "b->x"})
		so, ro := local.New(local.Options{Name: "x->y"})
		rc, acks := ackWaiter()
		er = &endRecorder{recorder: rc}
		op = &countOp{}
		task, err := host.New(host.Config{Name: "x", Operator: op,
			Inputs:  []host.Input{{Receiver: r1}, {Receiver: r2}},
			Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Store: store, Listener: er, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- task.Run(ctx) }()
		send := func(s stream.Sender, e stream.Element) {
			if err := s.Send(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		want := 2 // end-of-data and the barrier
		if records {
			send(s1, rec("a", "a"))
			want += 2
		}
		send(s1, stream.EndOfData())
		if records {
			send(s2, rec("b", "b"))
		}
		time.Sleep(20 * time.Millisecond)
		if len(er.endedTasks()) != 0 {
			t.Fatal("input ended with one channel still open")
		}
		send(s2, stream.EndOfData())
		sp := stream.Barrier{ID: 5, Type: stream.Savepoint}
		send(s1, stream.BarrierElement(sp))
		send(s2, stream.BarrierElement(sp))
		if id := waitAck(t, acks, rc); id != 5 {
			t.Fatalf("ack %d", id)
		}
		var got []stream.Element
		for len(got) < want {
			if d, ok, _ := ro.Poll(); ok {
				got = append(got, d.Element)
			} else {
				time.Sleep(time.Millisecond)
			}
		}
		cancel()
		<-done
		return op, rc, er, render(t, got)
	}
	op, rc, er, out := run("", true)
	if out != "a b EOD B5" || fmt.Sprint(op.endPorts) != "[0]" || fmt.Sprint(er.endedTasks()) != "[x]" {
		t.Fatalf("output %q, ended ports %v, reported %v", out, op.endPorts, er.endedTasks())
	}
	snap := readSnap(t, store, rc.handle(5, "x"))
	if fmt.Sprint(snap.EndedPorts) != "[0]" {
		t.Fatalf("the snapshot's ended ports %v, want [0]", snap.EndedPorts)
	}
	// The ack tells the coordinator too (a restore that would give the
	// port more records is refused there).
	if m := rc.metric(5, "x", host.MetricEndedPorts); m != 1 {
		t.Fatalf("ack metric %s = %b, want 1 (port 0)", host.MetricEndedPorts, m)
	}
	op, rc2, er, out := run(rc.handle(5, "x"), false)
	if out != "EOD B5" || len(op.endPorts) != 0 || fmt.Sprint(er.endedTasks()) != "[x]" {
		t.Fatalf("restored: output %q, ended ports %v (want none again), reported %v", out, op.endPorts, er.endedTasks())
	}
	if m := rc2.metric(5, "x", host.MetricEndedPorts); m != 1 {
		t.Fatalf("restored: ack metric %s = %b, want 1 (the port ended before the restore)", host.MetricEndedPorts, m)
	}
}

// A task whose last open channel closes (end-of-partition) after the
// others said end-of-data has its input ended all the same: it ends the
// port, forwards end-of-data and reports.
func TestEndOfPartitionAfterEndOfData(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s1, r1 := local.New(local.Options{Name: "a->x"})
	s2, r2 := local.New(local.Options{Name: "b->x"})
	so, ro := local.New(local.Options{Name: "x->y"})
	er := &endRecorder{recorder: newRecorder()}
	op := &countOp{}
	task, err := host.New(host.Config{Name: "x", Operator: op, Inputs: []host.Input{{Receiver: r1}, {Receiver: r2}},
		Outputs: []host.Output{{Senders: []stream.Sender{so}}}, Listener: er})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- task.Run(ctx) }()
	for _, c := range []struct {
		s stream.Sender
		e stream.Element
	}{{s1, stream.EndOfData()}, {s2, rec("b", "b")}, {s2, stream.EndOfPartition()}} {
		if err := c.s.Send(ctx, c.e); err != nil {
			t.Fatal(err)
		}
	}
	var got []stream.Element
	for deadline := time.Now().Add(30 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		if d, ok, _ := ro.Poll(); ok {
			got = append(got, d.Element)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if s := render(t, got); s != "b EOD" || fmt.Sprint(op.endPorts) != "[0]" || fmt.Sprint(er.endedTasks()) != "[x]" {
		t.Fatalf("output %q, ended ports %v, reported %v", s, op.endPorts, er.endedTasks())
	}
	cancel()
	<-done
}
