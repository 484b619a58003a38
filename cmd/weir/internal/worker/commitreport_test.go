package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// A commit report the coordinator does not take the first time (lost in
// a NATS blip, or refused) is sent again: lost, it would hold the job's
// next checkpoint for a whole checkpoint timeout.
func TestCommitReportSentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := embeddedtest.Conn(t)
	heard := fakeCoordinator(t, nc, func(n int) *control.Reply {
		if n == 1 {
			return &control.Reply{Error: "not now"}
		}
		return &control.Reply{}
	})
	l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.DiscardHandler),
		job: "j", attempt: 3}
	if err := l.CommitStarted(ctx, "out-0", 7); err != nil {
		t.Fatalf("commit report: %v", err)
	}
	got := heard()
	if len(got) != 2 {
		t.Fatalf("%d reports reached the coordinator, want 2 (the first refused)", len(got))
	}
	for _, e := range got {
		if e.Type != control.EventCommitting || e.Job != "j" || e.Attempt != 3 || e.Task != "out-0" || e.CheckpointID != 7 || e.Worker != "w1" {
			t.Errorf("report %+v", e)
		}
	}
}

// A commit report the coordinator never takes is given up after the job's
// checkpoint timeout, the longest the coordinator holds a trigger for it:
// not sent on for as long as the task runs, nor for a fixed minute that a
// shorter timeout has long passed.
func TestCommitReportGivenUpAfterTheCheckpointTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := embeddedtest.Conn(t)
	var (
		mu sync.Mutex
		n  int
	)
	sub, err := nc.Subscribe(control.Subjects{}.Event(), func(m *nats.Msg) {
		mu.Lock()
		n++
		mu.Unlock()
		data, _ := json.Marshal(control.Reply{Error: "not now"})
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	l := listener{w: control.NewWorker(nc, "w1", nil, control.WorkerOptions{}), log: slog.New(slog.DiscardHandler),
		job: "j", attempt: 3, patience: 300 * time.Millisecond}
	err = l.CommitStarted(ctx, "out-0", 7)
	if ctx.Err() != nil {
		t.Fatalf("the report was sent until the test gave up (%v), not for the checkpoint timeout", err)
	}
	if err == nil {
		t.Fatal("a report the coordinator refused every time was taken for heard")
	}
	mu.Lock()
	defer mu.Unlock()
	if n < 2 {
		t.Errorf("the report was sent %d times, want it sent again", n)
	}
}

// fakeCoordinator takes the worker reports (control events) sent on nc as
// a coordinator would, answering the nth (from 1) with answer(n), or not
// at all when that is nil, and returns what it has heard so far.
func fakeCoordinator(t *testing.T, nc *nats.Conn, answer func(n int) *control.Reply) (heard func() []control.Event) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []control.Event
	)
	sub, err := nc.Subscribe(control.Subjects{}.Event(), func(m *nats.Msg) {
		var e control.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = append(got, e)
		n := len(got)
		mu.Unlock()
		if rep := answer(n); rep != nil {
			data, _ := json.Marshal(rep)
			_ = m.Respond(data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []control.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]control.Event(nil), got...)
	}
}
