package job

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/transport/storage"
)

// holdStore is a Store that holds the first Get or Delete of a key under
// prefix, or the answer to the first List of prefix itself — a store that
// does not answer for now, as one whose stream elects a leader — until
// release is closed, having closed held.
type holdStore struct {
	storage.Store
	mu      sync.Mutex
	op      string // "get", "delete" or "list"
	prefix  string // "": hold nothing
	held    chan struct{}
	release chan struct{}
}

// holdNext makes s hold the next op of a key under prefix; the test's end
// releases it if the test did not.
func (s *holdStore) holdNext(t *testing.T, op, prefix string) (held chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.op, s.prefix, s.held, s.release = op, prefix, make(chan struct{}), make(chan struct{})
	var once sync.Once
	rel := s.release
	release = func() { once.Do(func() { close(rel) }) }
	t.Cleanup(release)
	return s.held, release
}

func (s *holdStore) pass(op, key string) {
	s.mu.Lock()
	hold := s.prefix != "" && op == s.op && strings.HasPrefix(key, s.prefix) && (op != "list" || key == s.prefix)
	held, release := s.held, s.release
	if hold {
		s.prefix = ""
	}
	s.mu.Unlock()
	if hold {
		close(held)
		<-release
	}
}

func (s *holdStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.pass("get", key)
	return s.Store.Get(ctx, key)
}

func (s *holdStore) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.Store.List(ctx, prefix)
	s.pass("list", prefix)
	return keys, err
}

func (s *holdStore) Delete(ctx context.Context, prefix string) error {
	s.pass("delete", prefix)
	return s.Store.Delete(ctx, prefix)
}

// A removal stuck in storage holds up no submit or restore of another
// checkpoint: while the deletion of savepoint b waits, the job is
// restored from savepoint a and another job is submitted, each answered
// before the removal; a job restored from b meanwhile is refused, saying
// that b is being removed, not started from half of it. The other way
// round, a checkpoint a restore is starting from (its metadata read held)
// is not removed: the removal is refused, saying so, and the job started
// from it runs from it whole — and keeps it (a failover restores it).
func TestRemovalHoldsUpNoSubmitOrRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hs *holdStore
	e, start := restartable(t, func(st storage.Store) storage.Store {
		hs = &holdStore{Store: st}
		return hs
	})
	defer start()()
	e.fleet.start(ctx, "w1")
	api := e.api
	e.submitRunning(t, ctx, spec(t, "rm", "checkpointing: {disabled: true, timeout: 3s}\n"))
	a, b, c := e.savepoint(t, ctx, "rm"), e.savepoint(t, ctx, "rm"), e.savepoint(t, ctx, "rm")
	if _, err := api.CancelJob(ctx, "rm"); err != nil {
		t.Fatal(err)
	}

	held, release := hs.holdNext(t, "delete", fmt.Sprintf("rm/chk-%d/", b))
	removed := make(chan error, 1)
	go func() {
		_, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: b})
		removed <- err
	}()
	<-held
	// answered waits for a request's answer, failing the test if the
	// removal returned first (it held the request up until released) or
	// the test's deadline passed.
	answered := func(what string, do func() error) error {
		t.Helper()
		got := make(chan error, 1)
		go func() { got <- do() }()
		select {
		case err := <-got:
			return err
		case err := <-removed:
			t.Fatalf("%s answered only after the removal it waited for (removal: %v)", what, err)
		case <-ctx.Done():
			release()
			t.Fatalf("%s: held up by the removal stuck in storage", what)
		}
		return nil
	}
	if err := answered("restore from another checkpoint", func() error {
		_, err := api.Restore(ctx, control.RestoreRequest{Job: "rm", From: fmt.Sprint(a)})
		return err
	}); err != nil {
		t.Fatalf("restore rm from %d while %d is being removed: %v", a, b, err)
	}
	if err := answered("submit of another job", func() error {
		_, err := api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "other", "checkpointing: {disabled: true}\n")})
		return err
	}); err != nil {
		t.Fatalf("submit while %d is being removed: %v", b, err)
	}
	err := answered("restore from the checkpoint being removed", func() error {
		_, err := api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", ""), RestoreFrom: fmt.Sprintf("rm/%d", b)})
		return err
	})
	if want := fmt.Sprintf("restore from rm/%d: the checkpoint is being removed (weir checkpoint rm); restore another one: weir checkpoint ls rm lists them", b); !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("restore from the checkpoint being removed = %v; want conflict: %s", err, want)
	}
	release()
	if err := <-removed; err != nil {
		t.Fatalf("remove %d: %v", b, err)
	}
	if e.stored("rm", b) {
		t.Errorf("checkpoint %d is still in storage", b)
	}

	// A restore from c under way (its metadata read held): c stays.
	held, release = hs.holdNext(t, "get", fmt.Sprintf("rm/chk-%d/_metadata", c))
	restored := make(chan error, 1)
	go func() {
		_, err := api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", "checkpointing: {disabled: true}\n"), RestoreFrom: fmt.Sprintf("rm/%d", c)})
		restored <- err
	}()
	<-held
	e.removeErr(t, ctx, "rm", c, control.ErrConflict, fmt.Sprintf(
		"cannot remove checkpoint %d of job rm: a job is being started from it (a submit or restore under way)", c))
	release()
	if err := <-restored; err != nil {
		t.Fatalf("restore from %d: %v", c, err)
	}
	st := waitFor(t, ctx, e, "copy", "running", func(st control.JobStatus) bool { return st.State == control.JobRunning })
	if d := e.fleet.ws["w1"].lastDeploy("copy"); d.Restore == nil || d.Restore.CheckpointID != c {
		t.Errorf("copy deployed with %+v; want checkpoint %d", d.Restore, c)
	}
	e.removeErr(t, ctx, "rm", c, control.ErrConflict, fmt.Sprintf(
		"cannot remove savepoint %d of job rm: job copy is %s, and a failover restores it (the job started from it and has completed no checkpoint of its own since)", c, st.State))
	for _, job := range []string{"rm", "other", "copy"} {
		cancelWhileLive(t, ctx, e, job)
	}
}

// A new run of a job's name that starts while weir checkpoint rm -earlier
// deletes the objects of checkpoints that never completed numbers its
// checkpoints above them: none of its snapshots is under a prefix being
// deleted. (The leftover here lies above what the ended run reserved, as
// one of a record that kept no reservation does.)
func TestRunStartedWhileLeftoversGoNumbersAbove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hs *holdStore
	e, start := restartable(t, func(st storage.Store) storage.Store {
		hs = &holdStore{Store: st}
		return hs
	})
	defer start()()
	e.fleet.start(ctx, "w1")
	api := e.api
	e.submitRunning(t, ctx, spec(t, "lo", "checkpointing: {disabled: true, timeout: 3s}\n"))
	last := e.savepoint(t, ctx, "lo")
	if _, err := api.CancelJob(ctx, "lo"); err != nil {
		t.Fatal(err)
	}
	left := last + 1 // what a new run would number its first checkpoint
	if err := hs.Put(ctx, fmt.Sprintf("lo/chk-%d/in-0", left), strings.NewReader("late")); err != nil {
		t.Fatal(err)
	}
	held, release := hs.holdNext(t, "delete", fmt.Sprintf("lo/chk-%d/", left))
	removed := make(chan error, 1)
	go func() {
		rm, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "lo", Earlier: true})
		if err == nil && (len(rm.Leftovers) != 1 || rm.Leftovers[0] != left) {
			err = fmt.Errorf("removed %+v; want the leftover of %d", rm, left)
		}
		removed <- err
	}()
	<-held
	e.submitRunning(t, ctx, spec(t, "lo", "checkpointing: {disabled: true, timeout: 3s}\n"))
	release()
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if id := e.savepoint(t, ctx, "lo"); id <= left || !e.stored("lo", id) {
		t.Errorf("the new run's savepoint is %d (stored: %v); want one above %d, whose objects were being deleted", id, e.stored("lo", id), left)
	}
	cancelWhileLive(t, ctx, e, "lo")
}

// Two removals side by side of the checkpoints of an ended job a
// restarted coordinator knows from its record — its latest, c, and b —
// leave it the newest checkpoint of its run still stored, a, also when
// the removal of c listed the stored ones (a, b) before b went and sets
// the latest after the removal of b did.
func TestRemovalsSideBySideKeepTheLatestStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hs *holdStore
	e, start := restartable(t, func(st storage.Store) storage.Store {
		hs = &holdStore{Store: st}
		return hs
	})
	stop := start()
	e.fleet.start(ctx, "w1")
	api := e.api
	e.submitRunning(t, ctx, spec(t, "two", "checkpointing: {disabled: true, timeout: 3s}\n"))
	a, b, c := e.savepoint(t, ctx, "two"), e.savepoint(t, ctx, "two"), e.savepoint(t, ctx, "two")
	if _, err := api.CancelJob(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	// A coordinator that knows the ended job from its record only: the
	// latest checkpoint is the record's, which removals keep.
	stop()
	defer start()()
	// The listing of the job's checkpoints after c's deletion is held
	// once it listed.
	held, release := hs.holdNext(t, "list", "two/chk-")
	removed := make(chan error, 1)
	go func() {
		_, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "two", ID: c})
		removed <- err
	}()
	<-held
	if _, err := api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "two", ID: b}); err != nil {
		t.Fatalf("remove %d: %v", b, err)
	}
	release()
	if err := <-removed; err != nil {
		t.Fatalf("remove %d: %v", c, err)
	}
	if st, err := api.Job(ctx, "two"); err != nil || st.LatestCheckpoint != a {
		t.Errorf("two's latest checkpoint = %d (%v); want %d, the newest still stored", st.LatestCheckpoint, err, a)
	}
}

// A restore refused because the checkpoint is being removed names what
// removes it, and what to do instead. A removal cut short (a store that
// failed) is finished by the next coordinator as it starts; a restore
// from the checkpoint meanwhile was refused as "being removed (weir
// checkpoint rm)", which nobody was running. It now says that the
// coordinator finishes a removal cut short, and to restore another
// checkpoint, which weir checkpoint ls lists.
func TestRestoreRefusalNamesWhatRemovesTheCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cut *cutDeletes
	var hs *holdStore
	e, _, _, start := removalEnv(t, ctx, "dir", func(s storage.Store) storage.Store {
		cut = &cutDeletes{Store: s}
		hs = &holdStore{Store: cut}
		return hs
	})
	stop := start()
	defer func() { stop() }()
	e.fleet.start(ctx, "w1")
	e.submitRunning(t, ctx, spec(t, "rm", "checkpointing: {disabled: true, timeout: 3s}\n"))
	e.savepoint(t, ctx, "rm")
	d := e.savepoint(t, ctx, "rm")
	if _, err := e.api.CancelJob(ctx, "rm"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, e, "rm", "canceled", func(st control.JobStatus) bool { return st.State == control.JobCanceled })

	// A removal cut short after one delete.
	cut.cutAfter(fmt.Sprintf("rm/chk-%d/", d), 1)
	if _, err := e.api.RemoveCheckpoints(ctx, control.RemoveRequest{Job: "rm", ID: d}); err == nil {
		t.Fatal("the removal was not cut short")
	}
	cut.mend()

	// The next coordinator finishes it as it starts: held in storage.
	stop()
	held, release := hs.holdNext(t, "delete", fmt.Sprintf("rm/chk-%d/", d))
	stop = start()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the coordinator did not finish the removal cut short")
	}
	_, err := e.api.Submit(ctx, control.SubmitRequest{Spec: spec(t, "copy", ""), RestoreFrom: fmt.Sprintf("rm/%d", d)})
	want := fmt.Sprintf("restore from rm/%d: the checkpoint is being removed (the coordinator finishes a removal of it that was cut short); "+
		"restore another one: weir checkpoint ls rm lists them", d)
	if !errors.Is(err, control.ErrConflict) || err.Error() != want {
		t.Errorf("restore from the checkpoint the coordinator removes = %v; want conflict: %s", err, want)
	}
	release()
}
