package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/checkpoint"
	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

// crash is what the stores of a crashStore share: from the Nth write or
// delete on that arm counts, every write and delete fails, until revive —
// a coordinator killed at that point of its work, of which nothing after
// reaches storage.
type crash struct {
	mu    sync.Mutex
	armed bool
	left  int
}

var errCrashed = errors.New("injected: the coordinator was killed")

// arm makes the nth write or delete from now on, and every one after it,
// fail.
func (c *crash) arm(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.left = true, n-1
}

func (c *crash) revive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
}

func (c *crash) op(what, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return nil
	}
	if c.left <= 0 {
		return fmt.Errorf("%s %s: %w", what, key, errCrashed)
	}
	c.left--
	return nil
}

// crashStore is a Store whose writes and deletes its crash fails. A
// delete by key (DeleteKey) is one, and deletes as the wrapped store does
// (storage.DeleteKey).
type crashStore struct {
	storage.Store
	c *crash
}

func (s *crashStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := s.c.op("put", key); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, r)
}

func (s *crashStore) Delete(ctx context.Context, prefix string) error {
	if err := s.c.op("delete", prefix); err != nil {
		return err
	}
	return s.Store.Delete(ctx, prefix)
}

func (s *crashStore) DeleteKey(ctx context.Context, key string) error {
	if err := s.c.op("delete", key); err != nil {
		return err
	}
	return storage.DeleteKey(ctx, s.Store, key)
}

// logBuffer is a log that goroutines write side by side.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A coordinator killed at any point of the removal of an ended job's
// latest checkpoint leaves nothing that the next one does not finish or
// correct, in a directory (one store for checkpoints and records) and in
// JetStream (metadata and records in KV, state in the Object Store): the
// removal's steps are the mark (1), the five snapshots' deletes (2-6),
// the metadata's delete (7) and the job record's write (8), and the
// coordinator is killed at each (that write or delete fails, and every
// one after it). Killed at the mark, the checkpoint is whole and stays
// the latest; later, the next coordinator finishes the removal as it
// starts, logging one line for it, and the job's latest is the newest
// checkpoint still stored, in its record too; killed after the removal,
// at the record, the record's latest is set anew. Before, a partly
// removed checkpoint stayed until weir checkpoint rm, and the record
// named the checkpoint gone or being removed as the job's latest.
func TestRemovalKilledIsFinishedAtStart(t *testing.T) {
	for _, kind := range []string{"dir", "jetstream"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cr := &crash{}
			e, cat, logs, start := removalEnv(t, ctx, kind, func(s storage.Store) storage.Store { return &crashStore{Store: s, c: cr} })
			stop := start()
			defer func() { stop() }()
			e.fleet.start(ctx, "w1")

			for n := 1; n <= 8; n++ {
				name := fmt.Sprintf("rm%d", n)
				e.submitRunning(t, ctx, spec(t, name, "checkpointing: {disabled: true, timeout: 3s}\n"))
				b, d := e.savepoint(t, ctx, name), e.savepoint(t, ctx, name)
				if _, err := e.api.CancelJob(ctx, name); err != nil {
					t.Fatal(err)
				}
				waitFor(t, ctx, e, name, "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })

				cr.arm(n)
				_, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: name, ID: d})
				if n < 8 && !errors.Is(err, errCrashed) && !strings.Contains(err.Error(), errCrashed.Error()) {
					t.Fatalf("%s: removal killed at step %d: %v", name, n, err)
				}
				stop()
				cr.revive()
				stop = start()

				want := b
				if n == 1 {
					want = d // nothing was deleted
				}
				waitFor(t, ctx, e, name, fmt.Sprintf("latest %d", want), func(st control.JobStatus) bool {
					return st.LatestCheckpoint == want
				})
				stored := []int64{b}
				if n == 1 {
					stored = []int64{b, d}
				}
				for {
					ids, err := cat.IDs(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					if n == 1 || !slices.Contains(ids, d) {
						if !slices.Equal(ids, stored) {
							t.Errorf("%s, killed at step %d: stored %v; want %v", name, n, ids, stored)
						}
						break
					}
					select {
					case <-ctx.Done():
						t.Fatalf("%s, killed at step %d: checkpoint %d still stored: %v", name, n, d, ids)
					case <-time.After(10 * time.Millisecond):
					}
				}
				if n == 1 {
					if _, err := cat.Read(ctx, name, d); err != nil {
						t.Errorf("%s: checkpoint %d after a removal killed at its mark: %v", name, d, err)
					}
				}
				if left, err := cat.State.List(ctx, checkpoint.StatePrefix(name, d)); err != nil || n > 1 && len(left) != 0 {
					t.Errorf("%s, killed at step %d: left of checkpoint %d: %v, %v", name, n, d, left, err)
				}
				// The record says so too, to the coordinator after.
				stop()
				stop = start()
				if st, err := e.api.Job(ctx, name); err != nil || st.LatestCheckpoint != want {
					t.Errorf("%s, killed at step %d: latest after one more restart %d, %v; want %d", name, n, st.LatestCheckpoint, err, want)
				}
				// What the kill left: the snapshots not deleted, and the
				// metadata.
				line := fmt.Sprintf(`msg="checkpoint removal finished (it was cut short before)" job=%s checkpoint=%d objects=%d by="coordinator start"`, name, d, 8-n)
				lines := 0
				if n >= 2 && n <= 7 {
					lines = 1
				}
				if got := strings.Count(logs.String(), line); got != lines {
					t.Errorf("%s, killed at step %d: the log has %d lines %s; want %d:\n%s", name, n, got, line, lines, logs.String())
				}
			}
		})
	}
}

// removalEnv returns an env whose coordinator (start starts one, stop
// stops it) keeps its checkpoints and job records in a directory (kind
// "dir", one store) or in JetStream ("jetstream": metadata and records in
// KV buckets, state in an Object Store) of a fresh server, each store
// wrapped by wrap, and logs to logs.
func removalEnv(t *testing.T, ctx context.Context, kind string, wrap func(storage.Store) storage.Store) (e *env, cat *checkpoint.Catalog, logs *logBuffer, start func() (stop func())) {
	t.Helper()
	nc, js := embeddedtest.JetStream(t)
	var jobs storage.Store
	if kind == "dir" {
		dir, err := storage.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		st := wrap(dir)
		cat, jobs = &checkpoint.Catalog{Meta: st, State: st}, st
	} else {
		kv := func(bucket string) storage.Store {
			s, err := storage.NewKV(ctx, js, bucket, 0)
			if err != nil {
				t.Fatal(err)
			}
			return wrap(s)
		}
		state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
		if err != nil {
			t.Fatal(err)
		}
		cat = &checkpoint.Catalog{Meta: kv(storage.DefaultMetaBucket), State: wrap(state)}
		jobs = kv("weir_jobs")
	}
	logs = &logBuffer{}
	start = func() (stop func()) {
		mgr := New(Options{NC: nc, Catalog: cat, Jobs: jobs, HeartbeatTimeout: 3 * time.Second, RequestTimeout: 2 * time.Second,
			Log: slog.New(slog.NewTextHandler(logs, nil))})
		mctx, mcancel := context.WithCancel(context.Background())
		ready, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); _ = mgr.Run(mctx, ready) }()
		<-ready
		return func() { mcancel(); <-done }
	}
	f := &fleet{t: t, nc: nc, store: cat.State, ws: map[string]*fakeWorker{}}
	t.Cleanup(f.wait)
	return &env{api: control.NewAPIClient(nc, ""), fleet: f}, cat, logs, start
}

// A removal of a running job's savepoint that storage cut short is
// finished by the job's retention as it goes on, once storage works
// again, in a directory and in JetStream: what the cut left goes, the
// job logs one line for it, and its history lists the savepoint as
// removed. Before, its objects stayed until weir checkpoint rm.
func TestRetentionFinishesARemovalCutShort(t *testing.T) {
	for _, kind := range []string{"dir", "jetstream"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var cuts []*cutDeletes
			e, cat, logs, start := removalEnv(t, ctx, kind, func(s storage.Store) storage.Store {
				c := &cutDeletes{Store: s}
				cuts = append(cuts, c)
				return c
			})
			defer start()()
			e.fleet.start(ctx, "w1")
			e.submitRunning(t, ctx, spec(t, "ret", "checkpointing: {interval: 50ms, timeout: 5s, retained: 1}\n"))
			sp := e.savepoint(t, ctx, "ret")
			// Not the latest, which a failover restores.
			waitFor(t, ctx, e, "ret", "a checkpoint after the savepoint", func(st control.JobStatus) bool { return st.LatestCheckpoint > sp })

			for _, c := range cuts {
				c.cutAfter(fmt.Sprintf("ret/chk-%d/", sp), 1)
			}
			if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "ret", ID: sp}); err == nil ||
				!strings.Contains(err.Error(), "deleted 1 of its 5 state objects, 4 left: ") {
				t.Fatalf("remove cut short: %v", err)
			}
			for _, c := range cuts {
				c.mend()
			}
			// Four snapshots and the metadata. Retention logs the line once
			// the removal is done, after the savepoint's metadata is gone:
			// wait for the line, not for the metadata.
			line := fmt.Sprintf(`msg="checkpoint removal finished (it was cut short before)" job=ret checkpoint=%d objects=5 by=retention`, sp)
			for !strings.Contains(logs.String(), line) {
				select {
				case <-ctx.Done():
					t.Fatalf("the log has no line %s:\n%s", line, logs.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if ids, err := cat.IDs(ctx, "ret"); err != nil || slices.Contains(ids, sp) {
				t.Errorf("savepoint %d is still stored: %v, %v", sp, ids, err)
			}
			if left, err := cat.State.List(ctx, checkpoint.StatePrefix("ret", sp)); err != nil || len(left) != 0 {
				t.Errorf("left of savepoint %d: %v, %v", sp, left, err)
			}
			if n := strings.Count(logs.String(), line); n != 1 {
				t.Errorf("the log has %d lines %s; want 1:\n%s", n, line, logs.String())
			}
			if got := listed(t, ctx, e.api, "ret", sp); got.Status != control.CheckpointDiscarded || got.Reason != checkpoint.ReasonRemoved {
				t.Errorf("savepoint %d listed as %+v; want removed", sp, got)
			}
		})
	}
}
