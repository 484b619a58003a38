package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
)

// states is checkpoint storage for sink states in a test: what a task's
// snapshots of each checkpoint hold.
type states map[int64][]byte

func (m states) load(_ context.Context, id int64) ([]byte, error) {
	b, ok := m[id]
	if !ok {
		return nil, fmt.Errorf("no snapshot of checkpoint %d", id)
	}
	return b, nil
}

// refsOf returns, per staged checkpoint in state, the checkpoint whose
// state it names for its records (0: the state holds them).
func refsOf(t *testing.T, state []byte) map[int64]int64 {
	t.Helper()
	st, err := decodeState(state)
	must(t, err)
	out := map[int64]int64{}
	for _, e := range st {
		out[e.id] = e.ref
		if e.ref != 0 && e.batch != nil {
			t.Fatalf("entry %d names checkpoint %d and holds records", e.id, e.ref)
		}
	}
	return out
}

// While commits wait (the server is down), each checkpoint's state holds
// only the records no completed checkpoint's state holds and names the
// others; a crash then, and a restore of the last checkpoint whose state
// InlineState makes whole, leaves every record in the stream once. A
// savepoint's state holds everything.
func TestIncrementalStateNamesCompletedCheckpoints(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			srv := startServer(t)
			nc, js := embeddedtest.Connect(t, srv, nats.ReconnectWait(20*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, outStream(mode)); err != nil {
				t.Fatal(err)
			}
			cfg := ExactlyOnceConfig{Stream: "OUT", Subject: "out", Job: "job1", Task: "sink[0]", BatchSize: 50, Timeout: 30 * time.Second}
			s, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			saved := states{}
			pre := func(id int64, savepoint bool) (int64, map[int64]int64) {
				t.Helper()
				st, from, err := s.PreCommitIncremental(ctx, id, savepoint)
				must(t, err)
				saved[id] = st
				return from, refsOf(t, st)
			}

			must(t, s.Write(ctx, batchOf(0, 100)))
			if from, refs := pre(1, false); from != 0 || fmt.Sprint(refs) != "map[1:0]" {
				t.Fatalf("checkpoint 1: from %d, refs %v", from, refs)
			}
			// Checkpoint 2 is taken before 1 completes: it holds 1's
			// records too.
			must(t, s.Write(ctx, batchOf(100, 200)))
			if from, refs := pre(2, false); from != 0 || fmt.Sprint(refs) != "map[1:0 2:0]" {
				t.Fatalf("checkpoint 2: from %d, refs %v", from, refs)
			}
			srv.Shutdown()
			// 1 completes, but 2's state was the last to hold its records:
			// 1 is not named. 2 completes: its state is.
			must(t, s.Commit(ctx, 1))
			must(t, s.Write(ctx, batchOf(200, 300)))
			if from, refs := pre(3, false); from != 0 || fmt.Sprint(refs) != "map[1:0 2:0 3:0]" {
				t.Fatalf("checkpoint 3: from %d, refs %v", from, refs)
			}
			must(t, s.Commit(ctx, 3))
			must(t, s.Write(ctx, batchOf(300, 400)))
			if from, refs := pre(4, false); from != 3 || fmt.Sprint(refs) != "map[1:3 2:3 3:3 4:0]" {
				t.Fatalf("checkpoint 4: from %d, refs %v", from, refs)
			}
			// A savepoint holds everything, and does not count as holding
			// 4's records for the checkpoint after it.
			must(t, s.Write(ctx, batchOf(400, 500)))
			if from, refs := pre(5, true); from != 0 || fmt.Sprint(refs) != "map[1:0 2:0 3:0 4:0 5:0]" {
				t.Fatalf("savepoint 5: from %d, refs %v", from, refs)
			}
			// Its completion (what Commit does first; Commit itself would
			// wait here for the two commits in flight).
			s.completed(5)
			must(t, s.Write(ctx, batchOf(500, 600)))
			if from, refs := pre(6, false); from != 3 || fmt.Sprint(refs) != "map[1:3 2:3 3:3 4:0 5:0 6:0]" {
				t.Fatalf("checkpoint 6: from %d, refs %v", from, refs)
			}
			if len(saved[6]) >= len(saved[5]) {
				t.Fatalf("checkpoint 6's state has %d bytes, the savepoint's %d", len(saved[6]), len(saved[5]))
			}

			// Recover refuses a state that names others.
			err = s.Recover(ctx, 6, saved[6])
			if !errors.Is(err, ErrMalformedState) {
				t.Fatalf("Recover of a state naming others: %v", err)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }() // the crash: commits still waiting
			embeddedtest.Restart(t, srv, nc)
			<-closed

			// A checkpoint the state names is missing: one line saying so.
			_, err = s.InlineState(ctx, saved[6], states{}.load)
			if err == nil || !strings.Contains(err.Error(), "the records staged for checkpoint 1: no snapshot of checkpoint 3") {
				t.Fatalf("missing named checkpoint: %v", err)
			}
			// One that does not hold what is named for it.
			_, err = s.InlineState(ctx, saved[6], states{3: saved[1]}.load)
			if !errors.Is(err, ErrMalformedState) {
				t.Fatalf("named checkpoint without the records: %v", err)
			}

			whole, err := s.InlineState(ctx, saved[6], saved.load)
			must(t, err)
			if refs := refsOf(t, whole); fmt.Sprint(refs) != "map[1:0 2:0 3:0 4:0 5:0 6:0]" {
				t.Fatalf("inlined state still names %v", refs)
			}
			r, err := NewExactlyOnce(ctx, nc, cfg)
			must(t, err)
			must(t, r.Recover(ctx, 6, whole))
			must(t, r.Close())
			got := streamValues(t, ctx, js, "OUT")
			if mode == PublishAsync {
				// Stored out of order by the crash, each record once.
				slices.SortFunc(got, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
			}
			if fmt.Sprint(got) != fmt.Sprint(wantValues(0, 600)) {
				t.Fatalf("stream holds %d messages, want v0..v599 once each in order", len(got))
			}
		})
	}
}
