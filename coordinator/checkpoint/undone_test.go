package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/transport/storage"
)

// reachableDir is a directory store that says it cannot be reached while
// down is set (storage.Reacher), as a JetStream store says with its NATS
// connection down.
type reachableDir struct {
	storage.Store
	down *atomic.Bool
}

func (s reachableDir) Reachable() error {
	if s.down.Load() {
		return fmt.Errorf("test dir: %w: down", storage.ErrUnreachable)
	}
	return nil
}

// lockedBuffer is a log's buffer, written by the runner's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The discards a runner leaves undone as it ends, its store out of reach,
// are done by the next coordinator that resumes the job; but no
// coordinator resumes a job that ended, and the log said that one would.
// It names weir checkpoint rm then. A coordinator that lost its lease
// leaves them undone because it may not write, not because the store is
// out of reach, which the log said too.
func TestRunnerSaysWhoDoesTheDiscardsLeftUndone(t *testing.T) {
	for _, c := range []struct {
		name  string
		ended bool
		fence bool // the store refuses deletes (a lost lease), else it goes out of reach
		want  string
	}{
		{name: "running", want: "a coordinator that resumes the job does them"},
		{name: "ended", ended: true, want: "the job has ended, so no coordinator does them: weir checkpoint rm removes what they leave"},
		{name: "lease lost", fence: true, want: "this coordinator lost its lease, so it writes to the checkpoint store no more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := storage.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var down atomic.Bool
			var state storage.Store = reachableDir{Store: st, down: &down}
			if c.fence {
				state = fencedDir{Store: st}
			}
			cat := &Catalog{Meta: st, State: state}
			eff := &holdingEffects{fakeEffects: fakeEffects{trigger: make(chan TriggerAction, 16)},
				aborting: make(chan int64, 16), release: make(chan struct{})}
			var logs lockedBuffer
			m := NewMachine("j", Config{Interval: 10 * time.Millisecond, Timeout: time.Minute, MaxConcurrent: 1, Retained: 1}, nil, 0)
			r := NewRunner(m, cat, eff, RunnerOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			go r.Run(ctx)
			r.Start([]string{"a-0", "b-0"})
			id := (<-eff.trigger).ID
			key := StateKey("j", id, "a-0")
			if err := st.Put(context.Background(), key, strings.NewReader("state")); err != nil {
				t.Fatal(err)
			}
			r.Ack("a-0", id, key, nil)
			// The job ends (or the coordinator stops) with the store gone
			// or refusing: the discard of the checkpoint its end aborts is
			// left undone.
			r.Stop("job canceled")
			<-eff.aborting
			down.Store(true)
			if c.ended {
				r.JobEnded()
			}
			cancel()
			close(eff.release)
			<-r.Done()
			if keys, err := st.List(context.Background(), StatePrefix("j", id)); err != nil || len(keys) == 0 {
				t.Fatalf("checkpoint %d's objects %v, %v; want them left", id, keys, err)
			}
			if got := logs.String(); !strings.Contains(got, "checkpoint discards left undone") || !strings.Contains(got, c.want) {
				t.Errorf("log\n%s\nwant the discards left undone, saying %q", got, c.want)
			}
		})
	}
}

// fencedDir is a directory store behind a lost coordinator lease: every
// delete is refused, as the node's fence refuses them.
type fencedDir struct{ storage.Store }

func (s fencedDir) Delete(ctx context.Context, prefix string) error {
	return fmt.Errorf("delete %s: %w: expired", prefix, lease.ErrLost)
}

func (s fencedDir) DeleteKey(ctx context.Context, key string) error {
	return fmt.Errorf("delete %s: %w: expired", key, lease.ErrLost)
}
