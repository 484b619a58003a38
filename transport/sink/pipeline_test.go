package sink

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/transport/embedded"
)

// Checkpoints completing faster than they are committed queue up behind
// the running commit instead of making Commit wait, up to
// MaxPendingCommits; they reach the stream in checkpoint order, and until
// a commit is confirmed its checkpoint stays in the snapshot state.
// (Checkpoint 0's output was once lost: the sink took 0 for "no commit
// handed over".)
func TestCommitsQueueInOrder(t *testing.T) {
	for _, mode := range publishModes {
		t.Run("publish="+string(mode), func(t *testing.T) {
			ctx, js, s := sinkOn(t, embedded.Config{}, mode, ExactlyOnceConfig{BatchSize: 100})
			const ckpts, per = 8, 250
			// From checkpoint 0: no id may stand for "none".
			for id := int64(0); id < ckpts; id++ {
				from := int(id) * per
				must(t, s.Write(ctx, batchOf(from, from+per)))
				state, err := s.PreCommit(ctx, id)
				must(t, err)
				// The state holds this checkpoint and every one whose commit
				// is not confirmed yet, oldest first, contiguous.
				st, err := decodeState(state)
				must(t, err)
				if len(st) == 0 || st[len(st)-1].id != id || st[0].id < id-MaxPendingCommits {
					t.Fatalf("checkpoint %d: state holds checkpoints %v", id, stateIDs(st))
				}
				for i := 1; i < len(st); i++ {
					if st[i].id != st[i-1].id+1 {
						t.Fatalf("checkpoint %d: state holds checkpoints %v", id, stateIDs(st))
					}
				}
				must(t, s.Commit(ctx, id))
				if len(s.jobs) > MaxPendingCommits {
					t.Fatalf("checkpoint %d: %d commits pending, at most %d allowed", id, len(s.jobs), MaxPendingCommits)
				}
				must(t, s.Commit(ctx, id)) // idempotent: nothing new to hand over
			}
			must(t, s.Wait(ctx))
			if len(s.staged) != 0 || len(s.jobs) != 0 {
				t.Fatalf("after Wait: %d staged, %d commits", len(s.staged), len(s.jobs))
			}
			got := streamValues(t, ctx, js, "OUT")
			if strings.Join(got, ",") != strings.Join(wantValues(0, ckpts*per), ",") {
				t.Fatalf("stream holds %d values, want %d once each in order", len(got), ckpts*per)
			}
		})
	}
}

func stateIDs(st []staged) []int64 {
	var ids []int64
	for _, e := range st {
		ids = append(ids, e.id)
	}
	return ids
}

// A commit queued behind one that fails publishes nothing — the stream
// keeps the checkpoints' order — and its checkpoint stays staged, so the
// snapshot a recovery restores still holds it and a later Commit
// publishes it.
func TestFailedCommitFailsTheQueuedOnes(t *testing.T) {
	ctx, js, s := sinkOn(t, embedded.Config{}, PublishAtomic, ExactlyOnceConfig{})
	// A commit still running when checkpoint 1 completes, failing later.
	running := &commitJob{done: make(chan struct{})}
	s.jobs = append(s.jobs, running)
	must(t, s.Write(ctx, batchOf(0, 10)))
	_, err := s.PreCommit(ctx, 1)
	must(t, err)
	must(t, s.Commit(ctx, 1)) // queued behind the running one
	if len(s.jobs) != 2 {
		t.Fatalf("%d commits pending, want 2", len(s.jobs))
	}
	running.err = errors.New("server gone")
	close(running.done)
	if err := s.Wait(ctx); err == nil || err.Error() != "server gone" {
		t.Fatalf("Wait: %v, want the running commit's error", err)
	}
	if got := streamValues(t, ctx, js, "OUT"); len(got) != 0 {
		t.Fatalf("stream holds %d messages after the failed commit, want none", len(got))
	}
	if ids := stateIDs(s.staged); len(ids) != 1 || ids[0] != 1 || len(s.jobs) != 0 {
		t.Fatalf("staged checkpoints %v and %d commits, want [1] and none", ids, len(s.jobs))
	}
	must(t, s.Commit(ctx, 1))
	must(t, s.Wait(ctx))
	if got := streamValues(t, ctx, js, "OUT"); strings.Join(got, ",") != strings.Join(wantValues(0, 10), ",") {
		t.Fatalf("stream holds %v, want v0..v9", got)
	}
}

// The atomic publisher reuses one message and header set for a whole
// batch: every message still carries exactly its own record's key (none
// for a record without one) and only the first the batch's message id.
func TestAtomicBatchHeadersPerMessage(t *testing.T) {
	ctx, js, s := sinkOn(t, embedded.Config{}, PublishAtomic, ExactlyOnceConfig{BatchSize: 1000})
	var b abi.Builder
	keys := make([]string, 30)
	for i := range keys {
		if i%3 != 1 {
			keys[i] = "k" + strconv.Itoa(i)
		}
		b.Add([]byte(keys[i]), []byte("v"+strconv.Itoa(i)), int64(i))
	}
	must(t, s.Write(ctx, b.Bytes()))
	_, err := s.PreCommit(ctx, 1)
	must(t, err)
	must(t, s.Commit(ctx, 1))
	must(t, s.Wait(ctx))
	msgs := readStream(t, ctx, js, "OUT")
	if len(msgs) != len(keys) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(keys))
	}
	for i, m := range msgs {
		wantID := ""
		if i == 0 || i == len(keys)-1 { // the batch's first and last
			wantID = "j/sink0/1/" + strconv.Itoa(i)
		}
		if m.key != keys[i] || m.id != wantID || m.value != "v"+strconv.Itoa(i) {
			t.Fatalf("message %d: key %q id %q value %q, want key %q id %q value v%d", i, m.key, m.id, m.value, keys[i], wantID, i)
		}
	}
}
