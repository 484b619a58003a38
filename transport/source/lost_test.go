package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirhq/weir/abi"
)

// pollUntilErr polls src until it fails, and returns the records it gave
// before and the error.
func pollUntilErr(t *testing.T, ctx context.Context, src *JetStream) ([]int, error) {
	t.Helper()
	var got []int
	for {
		b, _, err := src.Poll(ctx)
		if err != nil {
			return got, err
		}
		recs, err := abi.DecodeBatch(b)
		must(t, err)
		got = append(got, values(recs)...)
	}
}

// A stream purged while a hash-split subtask is behind fails the source
// with ErrMessagesLost, naming the sequences it lost: when more messages
// come after the purge (the consumer jumps over the gap) and when none
// does (the reader waits on a consumer with nothing left to send). A trial's
// job read on past 3 499 purged records, running, with no failure.
func TestJetStreamPurgeWhileBehindFails(t *testing.T) {
	for _, more := range []bool{true, false} {
		t.Run(fmt.Sprintf("more=%v", more), func(t *testing.T) {
			srv := startServer(t)
			_, js := connect(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
			publishN(t, ctx, js, func(i int) string { return fmt.Sprintf("in.%d", i%7) }, 0, 1000)
			src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", Parallelism: 2, Index: 1,
				MaxBatchRecords: 10, PullMaxMessages: 20, StallTimeout: 2 * time.Second})
			must(t, err)
			defer src.Close()
			if _, _, err := src.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, "IN")
			must(t, err)
			must(t, st.Purge(ctx))
			if more {
				publishN(t, ctx, js, func(i int) string { return fmt.Sprintf("in.%d", i%7) }, 1000, 1010)
			}
			_, err = pollUntilErr(t, ctx, src)
			want := "jetstream source IN (subtask 1 of 2): messages "
			if !errors.Is(err, ErrMessagesLost) || !strings.HasPrefix(err.Error(), want) ||
				!strings.Contains(err.Error(), "..1000 were removed from the stream before the source read them") ||
				!strings.Contains(err.Error(), "the stream starts at 1001 now): purged (no limit of the stream drops messages)") ||
				!strings.Contains(err.Error(), "with start: 1001 on this source") {
				t.Fatalf("poll: %v; want ErrMessagesLost, %q…", err, want)
			}
			t.Log(err)
		})
	}
}

// Messages a lagging source had not read that the stream's max-age
// expired fail it, with the range it lost and the limit; what it had been
// sent before they expired it reads (no false alarm for those).
func TestJetStreamExpiredWhileBehindFails(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, MaxAge: time.Second})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 500)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: 10, PullMaxMessages: 20})
	must(t, err)
	defer src.Close()
	first, _ := pollRecords(t, ctx, src, 1)
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	for { // until the stream expired them all
		info, err := st.Info(ctx)
		must(t, err)
		if info.State.Msgs == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	publishN(t, ctx, js, func(int) string { return "in.a" }, 500, 510)
	got, err := pollUntilErr(t, ctx, src)
	got = append(values(first), got...)
	for i, v := range got {
		if v != i {
			t.Fatalf("record %d = %d: the source skipped messages before it failed", i, v)
		}
	}
	want := fmt.Sprintf("jetstream source IN: messages %d..500 were removed from the stream before the source read them (it had read up to %d, the stream starts at 501 now): purged, or dropped by the stream's limits (max-age 1s) while the job was behind; raise them (weir stream edit IN -max-age D)",
		len(got)+1, len(got))
	if !errors.Is(err, ErrMessagesLost) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("after %d records: poll: %v; want ErrMessagesLost, %q…", len(got), err, want)
	}
	t.Log(err)
}

// A filtered source, behind, over a stream that dropped other subjects'
// messages past its position (a purge up to its next message: the
// stream's first sequence moves past the last it read) and deleted others
// one by one reads its own to the end, and waits, without a false alarm;
// so does a source over a stream that purged what it had read, and sat
// idle.
func TestJetStreamNoFalseLoss(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	// 100 of in.b first, then in.a every fourth message.
	publishN(t, ctx, js, func(i int) string {
		if i >= 100 && i%4 == 0 {
			return "in.a"
		}
		return "in.b"
	}, 0, 1000)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", FilterSubjects: []string{"in.a"},
		MaxBatchRecords: 5, PullMaxMessages: 10, StallTimeout: 2 * time.Second})
	must(t, err)
	defer src.Close()
	got, _ := pollRecords(t, ctx, src, 5)
	ci, err := src.lanes[0].rd.Info(ctx)
	must(t, err)
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	next, err := st.GetMsg(ctx, ci.Delivered.Stream+1, jetstream.WithGetMsgSubject("in.a"))
	must(t, err)
	if next.Sequence <= ci.Delivered.Stream+1 {
		t.Fatalf("next in.a at %d, right after %d", next.Sequence, ci.Delivered.Stream)
	}
	must(t, st.Purge(ctx, jetstream.WithPurgeSequence(next.Sequence)))
	for seq := next.Sequence + 100; seq < next.Sequence+120; seq++ {
		if seq%4 != 1 { // an in.b (sequence = i + 1)
			must(t, st.DeleteMsg(ctx, seq))
		}
	}
	rest, _ := pollRecords(t, ctx, src, 225-len(got))
	got = append(got, rest...)
	for i, v := range values(got) {
		if v != 100+4*i {
			t.Fatalf("record %d = %d, want %d", i, v, 100+4*i)
		}
	}
	// Caught up: many looks of the watcher find nothing wrong.
	if _, _, err := pollWithin(src, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll of a caught-up filtered source: %v", err)
	}

	// Idle: everything read, then purged; nothing comes for a while,
	// then more does.
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IDLE", Subjects: []string{"idle.>"}})
	publishN(t, ctx, js, func(int) string { return "idle.a" }, 0, 10)
	idle, err := NewJetStream(js, JetStreamConfig{Stream: "IDLE", StallTimeout: 2 * time.Second})
	must(t, err)
	defer idle.Close()
	pollRecords(t, ctx, idle, 10)
	ist, err := js.Stream(ctx, "IDLE")
	must(t, err)
	must(t, ist.Purge(ctx))
	if _, _, err := pollWithin(idle, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll of an idle, purged stream: %v", err)
	}
	publishN(t, ctx, js, func(int) string { return "idle.a" }, 10, 15)
	if recs, _ := pollRecords(t, ctx, idle, 5); values(recs)[0] != 10 {
		t.Fatalf("after the purge: %v", values(recs))
	}
}

// A source whose reader waits, after the stream deleted the messages that
// were pending for it one by one (not a loss: its first sequence stays),
// reports nothing pending, not the count of its last delivery: a trial's
// UNREAD stayed at 6228 with the stream empty.
func TestJetStreamPendingFollowsTheStream(t *testing.T) {
	srv := startServer(t)
	_, js := connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createStream(t, ctx, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	publishN(t, ctx, js, func(int) string { return "in.a" }, 0, 100)
	src, err := NewJetStream(js, JetStreamConfig{Stream: "IN", MaxBatchRecords: 10, PullMaxMessages: 20, StallTimeout: 2 * time.Second})
	must(t, err)
	defer src.Close()
	pollRecords(t, ctx, src, 10)
	var sent uint64 // what the server sent: the reader holds it
	for sent <= 10 {
		ci, err := src.lanes[0].rd.Info(ctx)
		must(t, err)
		sent = ci.Delivered.Stream
	}
	st, err := js.Stream(ctx, "IN")
	must(t, err)
	for seq := sent + 1; seq <= 100; seq++ {
		must(t, st.DeleteMsg(ctx, seq))
	}
	// Polled on (the server may have sent more meanwhile, deleted since:
	// the reader has them) until the reader waits, pending reads 0.
	for {
		if n, ok := src.Pending(); ok && n == 0 {
			break
		}
		if _, _, err := pollWithin(src, 20*time.Millisecond); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			n, _ := src.Pending()
			t.Fatalf("pending stays %d after the stream deleted what followed", n)
		}
	}
	if _, _, err := pollWithin(src, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll after deletes: %v", err)
	}
}
