package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// deafConsumer is an ordered consumer whose first Info request is never
// answered (a reply lost in an election): it waits for its context. The
// later ones say the stream has nothing left to deliver.
type deafConsumer struct {
	jetstream.Consumer
	asked     atomic.Int32
	unbounded atomic.Bool // a question came without a deadline
}

func (c *deafConsumer) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		c.unbounded.Store(true)
	}
	if c.asked.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &jetstream.ConsumerInfo{}, nil
}

// A question of caughtUp that no server answers ends after
// natsconn.ElectionTry and is asked again, under a caller's deadline of a
// year (weir job output on an ended job): before, an ordered consumer's
// Info, which has no timeout of its own, waited until that deadline.
// A call that gives up leaves its question to the next call, which asks
// no other meanwhile.
func TestCaughtUpAsksAgainWhenNotAnswered(t *testing.T) {
	cons := &deafConsumer{}
	w := &streamWatch{cons: cons}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if w.caughtUp(short) {
		t.Fatal("caught up without an answer")
	}
	if w.caughtUp(short) || cons.asked.Load() != 1 {
		t.Fatalf("a second call while the first question is unanswered asked %d questions, want 1", cons.asked.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 365*24*time.Hour)
	defer cancel()
	done := make(chan bool, 1)
	go func() { done <- w.catchUp(ctx) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("catchUp gave up")
		}
	case <-time.After(time.Minute):
		t.Fatal("catchUp still waits for the unanswered question after a minute")
	}
	if cons.unbounded.Load() {
		t.Error("a question was asked without a deadline")
	}
}
