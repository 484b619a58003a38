package sink

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// An atomic batch a stream with discard new refuses whole for its
// max_msgs limit: the stream is not full (a trial's held 0 messages,
// and the error said "stream OUT5 is full"); the batch is larger than
// the room left, or than the limit itself, which no restart changes.
func TestExactlyOnceAtomicBatchLargerThanTheStreamTakes(t *testing.T) {
	for _, c := range []struct {
		name     string
		max      int64
		before   int // records committed first, in batches of 5
		tooLarge bool
		want     string
	}{
		{"past the limit", 15, 0, true,
			"(stream OUT refused an atomic batch of 20 messages whole: the batch is larger than the stream's max_msgs limit of 15, so it never fits however often it is sent; raise the limit to 20 or more: weir stream edit OUT -max-msgs 20)"},
		{"past the room left", 25, 10, false,
			"(stream OUT refused an atomic batch of 20 messages whole: it holds 10 of its max_msgs limit of 25 and discards new messages, leaving room for 15; raise the limit (weir stream edit OUT -max-msgs N), or make it discard old ones)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := outStream(PublishAtomic)
			cfg.MaxMsgs, cfg.Discard = c.max, jetstream.DiscardNew
			nc, _, ctx := outSetup(t, cfg)
			s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: PublishAtomic, BatchSize: 20})
			must(t, err)
			defer s.Close()
			commit := func(id int64, from, to int) error {
				must(t, s.Write(ctx, batchOf(from, to)))
				if _, err := s.PreCommit(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := s.Commit(ctx, id); err != nil {
					return err
				}
				return s.Wait(ctx)
			}
			for i := 0; i < c.before; i += 5 {
				must(t, commit(int64(i/5+1), i, i+5))
			}
			err = commit(100, 100, 120)
			var full *StreamFullError
			if !errors.As(err, &full) || full.Batch != 20 || full.TooLarge() != c.tooLarge || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("commit of an atomic batch of 20: %v; want a *StreamFullError (too large: %v) saying %q", err, c.tooLarge, c.want)
			}
		})
	}
}

// A commit cut into several atomic batches streams the next batch while
// the server stores one, but commits it only once the one before is
// stored: when the stream refuses a batch (here the second of three, past
// its max_msgs with discard new), the third, streamed ahead, is never
// stored, and the stream holds the first batch only, in order.
func TestExactlyOnceBatchStreamedAheadOfARefusedOne(t *testing.T) {
	cfg := outStream(PublishAtomic)
	cfg.MaxMsgs, cfg.Discard = 15, jetstream.DiscardNew
	nc, js, ctx := outSetup(t, cfg)
	s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink0", Publish: PublishAtomic, BatchSize: 10})
	must(t, err)
	defer s.Close()
	must(t, s.Write(ctx, batchOf(0, 30)))
	if _, err := s.PreCommit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	must(t, s.Commit(ctx, 1))
	var full *StreamFullError
	if err := s.Wait(ctx); !errors.As(err, &full) || full.Batch != 10 {
		t.Fatalf("commit: %v; want the second batch of 10 refused", err)
	}
	// The third batch's messages reached the server before the second's
	// answer; had its commit gone out, it would be stored by now.
	_, values := streamIDs(t, ctx, js, "OUT")
	if len(values) != 10 || values[0] != "v0" || values[9] != "v9" {
		t.Fatalf("stream holds %v; want the first batch, v0..v9", values)
	}
}
