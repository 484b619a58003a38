package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/embedded"
	"github.com/weirhq/weir/transport/embedded/embeddedtest"
	"github.com/weirhq/weir/transport/storage"
)

func writeCheckpoint(t *testing.T, c *Catalog, id int64) {
	t.Helper()
	ctx := context.Background()
	md := &Metadata{Job: "j", ID: id, Triggered: at(0), Completed: at(10), Handles: map[string]string{}}
	for _, task := range []string{"src-0", "op-0"} {
		key := StateKey("j", id, task)
		if err := c.State.Put(ctx, key, strings.NewReader("state of "+task)); err != nil {
			t.Fatal(err)
		}
		md.Handles[task] = key
	}
	if err := c.Write(ctx, md); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptCheckpointFallback(t *testing.T) {
	dir := t.TempDir()
	st, err := storage.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logbuf bytes.Buffer
	c := &Catalog{Meta: st, State: st, Log: slog.New(slog.NewTextHandler(&logbuf, nil))}
	ctx := context.Background()
	for id := int64(1); id <= 4; id++ {
		writeCheckpoint(t, c, id)
	}
	ids, err := c.IDs(ctx, "j")
	if err != nil || len(ids) != 4 {
		t.Fatalf("ids %v %v", ids, err)
	}
	// 4: a flipped byte in the metadata; 3: a missing state object; 2: no metadata.
	p := filepath.Join(dir, "j", "chk-4", "_metadata")
	data, _ := os.ReadFile(p)
	data[bytes.Index(data, []byte("src-0"))] = 'S'
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "j", "chk-3", "op-0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "j", "chk-2", "_metadata")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, "j", 4); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read corrupt = %v", err)
	}
	if _, err := c.Read(ctx, "j", 2); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read missing = %v", err)
	}
	md, skipped, err := c.Latest(ctx, "j", []int64{1, 2, 3, 4})
	if err != nil || md == nil || md.ID != 1 || len(skipped) != 3 {
		t.Fatalf("latest = %+v skipped %v err %v", md, skipped, err)
	}
	if n := strings.Count(logbuf.String(), "falling back"); n != 3 {
		t.Errorf("%d warnings:\n%s", n, logbuf.String())
	}
	all, _ := c.LoadAll(ctx, "j")
	if len(all) != 1 || all[0].ID != 1 {
		t.Errorf("load all = %v", all)
	}
	if err := c.Discard(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
	if keys, _ := st.List(ctx, "j/chk-1/"); len(keys) != 0 {
		t.Errorf("discarded keys left: %v", keys)
	}
}

type fakeEffects struct {
	mu       sync.Mutex
	log      []string
	failed   chan string
	notified chan int64
	trigger  chan TriggerAction
}

func (f *fakeEffects) Trigger(_ context.Context, t TriggerAction) error {
	f.trigger <- t
	return nil
}
func (f *fakeEffects) Notify(_ context.Context, id int64) { f.notified <- id }
func (f *fakeEffects) Abort(_ context.Context, id int64, reason string) {
	f.mu.Lock()
	f.log = append(f.log, reason)
	f.mu.Unlock()
}
func (f *fakeEffects) Fail(reason string) { f.failed <- reason }

// TestRunner drives the runner with real time, real directory storage and
// acks answering triggers, as a job manager would.
func TestRunner(t *testing.T) {
	st, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat := &Catalog{Meta: st, State: st}
	eff := &fakeEffects{failed: make(chan string, 1), notified: make(chan int64, 16), trigger: make(chan TriggerAction, 16)}
	m := NewMachine("j", Config{Interval: 20 * time.Millisecond, Timeout: 5 * time.Second, MaxConcurrent: 1, Retained: 2}, nil, 0)
	r := NewRunner(m, cat, eff, RunnerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	r.Start([]string{"a-0", "b-0"})

	ackAll := func(tr TriggerAction) {
		for _, task := range []string{"a-0", "b-0"} {
			key := StateKey("j", tr.ID, task)
			if err := st.Put(ctx, key, strings.NewReader("s")); err != nil {
				t.Error(err)
			}
			r.Ack(task, tr.ID, key, map[string]int64{control.MetricSnapshotBytes: 1})
		}
	}
	for i := 0; i < 3; i++ {
		tr := <-eff.trigger
		ackAll(tr)
		if id := <-eff.notified; id != tr.ID {
			t.Fatalf("notified %d, want %d", id, tr.ID)
		}
	}
	// Savepoint: answered by acks like any checkpoint.
	spDone := make(chan error, 1)
	var sp control.CheckpointInfo
	go func() {
		var err error
		sp, err = r.Savepoint(ctx)
		spDone <- err
	}()
	for {
		tr := <-eff.trigger
		if tr.Savepoint {
			ackAll(tr)
			break
		}
		r.Decline("a-0", tr.ID, control.DeclineSubsumed, "savepoint first")
	}
	if err := <-spDone; err != nil || !sp.Savepoint || sp.Status != control.CheckpointCompleted {
		t.Fatalf("savepoint %+v %v", sp, err)
	}
	latest, err := r.LatestValid(ctx)
	if err != nil || latest == nil || !latest.Savepoint {
		t.Fatalf("latest valid = %+v %v", latest, err)
	}
	// Retention removed checkpoint 1 from storage.
	if ids, _ := cat.IDs(ctx, "j"); len(ids) < 2 || ids[0] == 1 {
		t.Errorf("ids in storage %v", ids)
	}
	// A declined checkpoint beyond tolerance fails the job.
	tr := <-eff.trigger
	r.Decline("b-0", tr.ID, control.DeclineFailed, "disk full")
	if reason := <-eff.failed; !strings.Contains(reason, "disk full") {
		t.Errorf("fail reason %q", reason)
	}
	r.Stop("failover")
	cancel()
	<-done
}

// TestCatalogJetStream keeps metadata in JetStream KV and state in the
// Object Store of a real embedded server, and falls back past a corrupt
// and a missing checkpoint.
func TestCatalogJetStream(t *testing.T) {
	_, nc := embeddedtest.Start(t, embedded.Config{SyncAlways: true})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	meta, err := storage.NewKV(ctx, js, storage.DefaultMetaBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	state, err := storage.NewObjectStore(ctx, js, storage.DefaultStateBucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &Catalog{Meta: meta, State: state}
	for id := int64(1); id <= 3; id++ {
		writeCheckpoint(t, c, id)
	}
	if err := meta.Put(ctx, MetadataKey("j", 3), strings.NewReader(`{"checksum":"sha256:00","metadata":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := state.Delete(ctx, StateKey("j", 2, "op-0")); err != nil {
		t.Fatal(err)
	}
	md, skipped, err := c.Latest(ctx, "j", []int64{1, 2, 3})
	if err != nil || md == nil || md.ID != 1 || len(skipped) != 2 {
		t.Fatalf("latest = %+v skipped %v err %v", md, skipped, err)
	}
	if err := c.Discard(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
	if ids, _ := c.IDs(ctx, "j"); len(ids) != 2 {
		t.Errorf("ids after discard %v", ids)
	}
}
