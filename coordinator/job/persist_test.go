package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// overlapStore is a Store that notes when two Puts of one key overlap.
type overlapStore struct {
	storage.Store
	mu       sync.Mutex
	writing  map[string]int
	overlaps []string
}

func (s *overlapStore) Put(ctx context.Context, key string, r io.Reader) error {
	s.mu.Lock()
	s.writing[key]++
	if s.writing[key] > 1 {
		s.overlaps = append(s.overlaps, key)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.writing[key]--
		s.mu.Unlock()
	}()
	return s.Store.Put(ctx, key, r)
}

// storedRecord reads the record of job name as stored.
func storedRecord(t *testing.T, ctx context.Context, st storage.Store, name string) []byte {
	t.Helper()
	data, err := storage.ReadAll(ctx, st, recordKey(name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The job record written by several goroutines at once (the job's
// goroutine changing its state, the checkpoint runner reserving IDs, a
// checkpoint removal) is written one write at a time, each with the record
// as it is then: the stored record is the last state, not an older one
// whose write finished last.
func TestRecordWritesInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	records := &overlapStore{Store: dir, writing: map[string]int{}}
	e := setupWith(t, ctx, Options{Jobs: records})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "rec", "checkpointing: {disabled: true}\n"))
	j, err := e.mgr.job("rec")
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if g%2 == 0 {
					j.setState(control.JobRunning, fmt.Sprintf("change %d of goroutine %d", i, g))
					continue
				}
				// The runner's reservation of checkpoint IDs (Trigger).
				j.mu.Lock()
				j.reserved += idReserve
				j.mu.Unlock()
				j.persist()
			}
		}()
	}
	wg.Wait()

	records.mu.Lock()
	overlaps := records.overlaps
	records.mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("%d writes of the record overlapped another write of it", len(overlaps))
	}
	rec, ok := j.record()
	if !ok {
		t.Fatal("the job counts as superseded")
	}
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := storedRecord(t, ctx, dir, "rec"); !bytes.Equal(got, want) {
		t.Errorf("stored record\n%s\nwant the job's last state\n%s", got, want)
	}
}

// Once a new run of a job's name started, the run it replaced writes its
// record no more: a late write of it (its checkpoint runner reserving IDs
// as it ended, say) would make a restarted coordinator list the running
// job as ended.
func TestReplacedRunWritesNoRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := setupWith(t, ctx, Options{Jobs: dir})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	s := spec(t, "again", "checkpointing: {disabled: true}\n")
	e.submitRunning(t, ctx, s)
	old, err := e.mgr.job("again")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.CancelJob(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	e.submitRunning(t, ctx, spec(t, "again", "checkpointing: {disabled: true}\n"))
	stored := func() record {
		t.Helper()
		var rec record
		if err := json.Unmarshal(storedRecord(t, ctx, dir, "again"), &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// The new run's last write (running) may land after its state shows.
	for stored().State != control.JobRunning {
		time.Sleep(10 * time.Millisecond)
	}
	old.persist()
	if rec := stored(); rec.State != control.JobRunning {
		t.Errorf("the replaced run wrote its record over the new run's: %s is %s", rec.Spec.Name, rec.State)
	}
}

// gateStore is a Store whose first Put of key waits until release is
// closed, having closed entered.
type gateStore struct {
	storage.Store
	key     string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *gateStore) Put(ctx context.Context, key string, r io.Reader) error {
	if key == s.key {
		s.once.Do(func() {
			close(s.entered)
			<-s.release
		})
	}
	return s.Store.Put(ctx, key, r)
}

// A submit's first write of the job record does not hold the manager's
// lock: while the store takes its time, the job API answers (here a read
// of another job's status), and the submit returns once the record is
// stored.
func TestSlowRecordWriteBlocksNoRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	records := &gateStore{Store: dir, key: recordKey("slow"), entered: make(chan struct{}), release: make(chan struct{})}
	e := setupWith(t, ctx, Options{Jobs: records})
	e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "other", "checkpointing: {disabled: true}\n"))
	slow := spec(t, "slow", "checkpointing: {disabled: true}\n")
	submitted := make(chan error, 1)
	go func() {
		_, err := e.mgr.Submit(ctx, control.SubmitRequest{Spec: slow})
		submitted <- err
	}()
	<-records.entered
	read := make(chan error, 1)
	go func() {
		_, err := e.mgr.Job(ctx, "other")
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Errorf("status of another job while the record is written: %v", err)
		}
	case <-ctx.Done():
		close(records.release)
		t.Fatal("a read of the job API waited for the write of another job's record")
	}
	close(records.release)
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(storedRecord(t, ctx, dir, "slow"), &rec); err != nil || rec.Spec.Name != "slow" {
		t.Errorf("stored record of slow: %+v, %v", rec, err)
	}
	cancelWhileLive(t, ctx, e, "slow")
	cancelWhileLive(t, ctx, e, "other")
}

// failReserveStore is a Store whose first write of a job record that
// reserves checkpoint IDs fails; failed is closed then, and failedRes is
// the reservation it refused.
type failReserveStore struct {
	storage.Store
	once      sync.Once
	failed    chan struct{}
	failedRes int64
}

func (s *failReserveStore) Put(ctx context.Context, key string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var rec record
	if json.Unmarshal(data, &rec) == nil && rec.Reserved > 0 {
		refused := false
		s.once.Do(func() {
			s.failedRes, refused = rec.Reserved, true
			close(s.failed)
		})
		if refused {
			return fmt.Errorf("store unavailable (test)")
		}
	}
	return s.Store.Put(ctx, key, bytes.NewReader(data))
}

// A checkpoint whose ID the job record could not reserve is not
// triggered: a coordinator that resumed the job from the record as it was
// would number a checkpoint with that ID again, whose snapshot keys a
// cut-off worker may still write. The checkpoint fails naming the record,
// and the next one reserves again and completes.
func TestUnreservedCheckpointIsNotTriggered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	records := &failReserveStore{Store: dir, failed: make(chan struct{})}
	e := setupWith(t, ctx, Options{Jobs: records})
	w := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	e.submitRunning(t, ctx, spec(t, "res", "checkpointing: {interval: 20ms}\n"))
	<-records.failed
	refused := records.failedRes - idReserve
	waitFor(t, ctx, e, "res", "a checkpoint after the refused reservation", func(s control.JobStatus) bool {
		return s.LatestCheckpoint > refused
	})
	w.mu.Lock()
	for _, tr := range w.triggers {
		if tr.CheckpointID == refused {
			t.Errorf("checkpoint %d was triggered though the record reserving its ID was not stored", refused)
		}
	}
	w.mu.Unlock()
	cps, err := e.api.Checkpoints(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cps {
		if c.ID == refused {
			found = true
			if c.Status != control.CheckpointFailed || !strings.Contains(c.Reason, "record") {
				t.Errorf("checkpoint %d: %s (%s), want failed naming the job record", c.ID, c.Status, c.Reason)
			}
		}
	}
	if !found {
		t.Errorf("checkpoint %d is not listed: %+v", refused, cps)
	}
	var rec record
	if err := json.Unmarshal(storedRecord(t, ctx, dir, "res"), &rec); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	for _, tr := range w.triggers {
		if tr.CheckpointID > rec.Reserved {
			t.Errorf("checkpoint %d was triggered beyond the stored reservation %d", tr.CheckpointID, rec.Reserved)
		}
	}
	w.mu.Unlock()
	cancelWhileLive(t, ctx, e, "res")
}

// failAttemptStore is a Store whose first write of a job record naming
// attempt 1 fails.
type failAttemptStore struct {
	storage.Store
	once sync.Once
}

func (s *failAttemptStore) Put(ctx context.Context, key string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var rec record
	if json.Unmarshal(data, &rec) == nil && rec.Attempt == 1 {
		refused := false
		s.once.Do(func() { refused = true })
		if refused {
			return fmt.Errorf("store unavailable (test)")
		}
	}
	return s.Store.Put(ctx, key, bytes.NewReader(data))
}

// An attempt whose number the job record could not store is not
// deployed: a coordinator that resumed the job from the record as it was
// would deploy that number again, and a worker still running it keeps it
// as it runs (tasks of two coordinators wired together). The attempt
// fails naming the record, and the next one runs.
func TestUnrecordedAttemptIsNotDeployed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := storage.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := setupWith(t, ctx, Options{Jobs: &failAttemptStore{Store: dir}})
	w := e.fleet.start(ctx, "w1")
	e.waitWorkers(1)
	st := e.submitRunning(t, ctx, spec(t, "att", "checkpointing: {disabled: true}\n"))
	if st.Attempt != 2 || st.LastFailure == nil || !strings.Contains(st.LastFailure.Reason, "record") {
		t.Errorf("running as attempt %d after %+v, want attempt 2 after a failure naming the job record", st.Attempt, st.LastFailure)
	}
	w.mu.Lock()
	for _, d := range w.deploys {
		if d.Attempt == 1 {
			t.Errorf("attempt 1 was deployed though the record naming it was not stored")
		}
	}
	w.mu.Unlock()
	var rec record
	if err := json.Unmarshal(storedRecord(t, ctx, dir, "att"), &rec); err != nil || rec.Attempt != 2 {
		t.Errorf("stored record: attempt %d (%v), want 2", rec.Attempt, err)
	}
	cancelWhileLive(t, ctx, e, "att")
}
