package sink

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/transport/source"
)

// The header a sink writes a record's time in is the one sources read it
// from: a job reading another's output takes the event time it gave.
func TestTimeHeaderIsTheSourcesOne(t *testing.T) {
	if TimeHeader != source.TimeHeader {
		t.Fatalf("sink.TimeHeader %q, source.TimeHeader %q", TimeHeader, source.TimeHeader)
	}
}

// Every sink, in every publish mode, publishes a record's timestamp in
// TimeHeader when asked to (none for a record without one), and none when
// not asked to.
func TestSinksPublishTimestamps(t *testing.T) {
	const n = 5 // batchOf(0, n): record i has timestamp i
	wantTimes := func(on bool) []string {
		var out []string
		for i := range n {
			if on && i > 0 {
				out = append(out, strconv.Itoa(i))
			} else {
				out = append(out, "")
			}
		}
		return out
	}
	check := func(t *testing.T, got []string, on bool) {
		t.Helper()
		if want := wantTimes(on); len(got) != len(want) || !slices.Equal(got, want) {
			t.Errorf("Weir-Time of the messages %q, want %q", got, want)
		}
	}
	streamTimes := func(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
		t.Helper()
		st, err := js.Stream(ctx, "OUT")
		must(t, err)
		var out []string
		for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			must(t, err)
			out = append(out, m.Header.Get(TimeHeader))
		}
		return out
	}
	for _, on := range []bool{true, false} {
		t.Run("core/timestamps="+strconv.FormatBool(on), func(t *testing.T) {
			nc, _ := connect(t, startServer(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ch := make(chan *nats.Msg, n)
			sub, err := nc.ChanSubscribe("out", ch)
			must(t, err)
			defer sub.Unsubscribe()
			must(t, nc.Flush())
			s, err := NewCore(nc, "out")
			must(t, err)
			s.Timestamps = on
			must(t, s.Write(ctx, batchOf(0, n)))
			var got []string
			for range n {
				select {
				case m := <-ch:
					got = append(got, m.Header.Get(TimeHeader))
				case <-ctx.Done():
					t.Fatal("messages missing")
				}
			}
			check(t, got, on)
		})
		for _, mode := range publishModes {
			t.Run("at-least-once/"+string(mode)+"/timestamps="+strconv.FormatBool(on), func(t *testing.T) {
				nc, js, ctx := outSetup(t, outStream(mode))
				s, err := NewAtLeastOnce(ctx, nc, AtLeastOnceConfig{Stream: "OUT", Subject: "out", Publish: mode, IdleCommit: time.Hour, Timestamps: on})
				must(t, err)
				defer s.Close()
				must(t, s.Write(ctx, batchOf(0, n)))
				_, err = s.PreCommit(ctx, 1)
				must(t, err)
				check(t, streamTimes(t, ctx, js), on)
			})
			t.Run("exactly-once/"+string(mode)+"/timestamps="+strconv.FormatBool(on), func(t *testing.T) {
				nc, js, ctx := outSetup(t, outStream(mode))
				s, err := NewExactlyOnce(ctx, nc, ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "j", Task: "sink[0]", Publish: mode, Timestamps: on})
				must(t, err)
				defer s.Close()
				must(t, s.Write(ctx, batchOf(0, n)))
				_, err = s.PreCommit(ctx, 1)
				must(t, err)
				must(t, s.Commit(ctx, 1))
				must(t, s.Wait(ctx))
				check(t, streamTimes(t, ctx, js), on)
			})
		}
	}
}
