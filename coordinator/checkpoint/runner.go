package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/lease"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/transport/storage"
)

// Effects is how a Runner reaches the job's tasks.
type Effects interface {
	// Trigger sends checkpoint t.ID's trigger to every source task of
	// attempt t.Run (the run Start returned), and fails, sending nothing,
	// when another attempt runs.
	Trigger(ctx context.Context, t TriggerAction) error
	// Notify tells every task that checkpoint id completed.
	Notify(ctx context.Context, id int64)
	// Abort tells every task that checkpoint id was aborted.
	Abort(ctx context.Context, id int64, reason string)
	// Fail fails the job over: too many checkpoint failures. The runner
	// calls it holding its lock, only while the attempt whose checkpoints
	// failed runs (Start without Stop since): it must not call the Runner.
	Fail(reason string)
}

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	// Now is the clock; default time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Sources are recorded in the metadata of every checkpoint the
	// runner writes (Metadata.Sources): the job's sources as its run
	// resolved them.
	Sources []jobspec.Source
	// Inputs are recorded in the metadata of every checkpoint the runner
	// writes (Metadata.Inputs): the job's operators' inputs, by operator.
	Inputs map[string][]jobspec.Input
	// Edges are recorded in the metadata of every checkpoint the runner
	// writes (Metadata.Edges): the edges of the job's plan.
	Edges []plan.Edge
	// FinishRemoval finishes the removal of checkpoint id that was cut
	// short (RemovalCut), as retention goes on: it returns how many
	// objects it deleted, and an error if the removal is not finished.
	// Default: Catalog.Remove, a checkpoint gone meanwhile counting as
	// finished.
	FinishRemoval func(ctx context.Context, id int64) (int, error)
	// Claim, if set, is asked before each discard whether checkpoint id
	// may be deleted now, and returns done, called once the discard
	// ended: while it runs, the caller starts no job from the checkpoint.
	// An error wrapping ErrBeingRemoved drops the discard (another
	// request deletes the checkpoint); any other keeps the checkpoint for
	// now (a job is being started from it, or restores it on a failover),
	// and its discard is tried again with the next discards and as Run
	// ends, when one refused still is left stored and logged. Default:
	// every discard goes ahead.
	Claim func(id int64) (done func(), err error)
}

// ErrSavepointFailed is wrapped by Savepoint when the savepoint did not
// complete: it failed (expired, declined by a task), or it was aborted
// (ErrSavepointAborted, which matches it too).
var ErrSavepointFailed = errors.New("savepoint failed")

// ErrSavepointAborted is wrapped by Savepoint when the savepoint was
// aborted with no failure of its own — cut as its attempt ended (a
// failover, a stop) — as a checkpoint's line says (weir run: "savepoint
// N aborted"; control.CheckpointInfo.Aborted). errors.Is matches it
// with ErrSavepointFailed too.
var ErrSavepointAborted error = savepointAborted{}

type savepointAborted struct{}

func (savepointAborted) Error() string        { return "savepoint aborted" }
func (savepointAborted) Is(target error) bool { return target == ErrSavepointFailed }

// abortErr is what a savepoint's waiter gets for a.
func abortErr(a AbortAction) error {
	if a.Failed {
		return fmt.Errorf("%w: checkpoint %d: %s", ErrSavepointFailed, a.ID, a.Reason)
	}
	return fmt.Errorf("%w: checkpoint %d: %s", ErrSavepointAborted, a.ID, a.Reason)
}

// ErrBeingRemoved is wrapped by a FinishRemoval's refusal of a checkpoint
// that another request is removing already (a user's weir checkpoint rm,
// or the coordinator's start finishing what was cut short): that request
// finishes it, or notes it cut short again (RemovalCut) if it fails.
var ErrBeingRemoved = errors.New("another request is removing the checkpoint")

// EndDiscardTimeout bounds the discards a Runner carries out as Run ends
// (the state of the checkpoints that ended with the job), all together:
// they outlive the job's context, not the coordinator.
const EndDiscardTimeout = 30 * time.Second

// Runner drives a Machine: it ticks it on time, feeds it acks and declines,
// and carries out its actions in order on one goroutine (Run), so callers of
// Ack and Decline never wait for I/O. Discards (deleting a checkpoint's
// state, a few storage round trips per object) are carried out in order on
// a goroutine of their own: while storage is slow or unreachable, as in a
// NATS outage, they take seconds each or hang, and on Run's goroutine they
// held up every trigger and every expiry behind them — a job that ran on
// without checkpoints and without a failure.
//
// When Run's context ends (the job ended, or the coordinator stops), the
// checkpoints still pending are aborted, and the discards queued by then —
// of those, and of the checkpoints the job's end aborted (Stop) — are
// carried out before Run returns, bounded by EndDiscardTimeout: a
// checkpoint aborted as the job ended leaves nothing in storage. What a
// task acks after that (a snapshot finished after the job ended) is left
// to Catalog.Leftovers.
type Runner struct {
	cat  *Catalog
	eff  Effects
	now  func() time.Time
	log  *slog.Logger
	kick chan struct{}
	done chan struct{} // closed when Run returns

	mu      sync.Mutex
	m       *Machine
	queue   []Action
	waiters map[int64]chan error
	ended   bool // Run returned: actions are no longer carried out
	// jobEnded says that Run's end is its job's (JobEnded), not the
	// coordinator's stop: no coordinator resumes the job.
	jobEnded bool
	// discards holds the checkpoints to discard, in order, that the
	// discarder has not taken yet; dkick wakes it.
	discards []DiscardAction
	dkick    chan struct{}
	// strayDue makes the next discard list the job's stray commit
	// markers: set by Start (markers of the attempts before, of a
	// previous coordinator, of the run restored from, may be stray) and
	// by a listing that failed.
	strayDue bool

	// sweep, when due, has the discarder remove the objects of the job's
	// checkpoints numbered from up to below that never completed
	// (SweepLeftovers).
	sweep sweep

	// Of the discarder's goroutine alone: the discards since the last
	// listing of stray markers, and the markers that may come after their
	// checkpoint was discarded (see strayListEvery); as Run ends, the
	// discards left undone and why.
	sinceList int
	suspects  []suspect
	undone    int
	undoneErr error
	// failed are the discards that failed while the job ran, tried again
	// with the next ones (failedDiscardTries at most); givenUp, the
	// completed checkpoints among them given up that name output staged
	// in earlier ones, which are kept for them (see discarder).
	failed  []failedDiscard
	givenUp []*Metadata

	// removals holds the checkpoints whose removal was cut short
	// (RemovalCut), under mu, and how often retention tried to finish
	// each (finishRemovals).
	removals map[int64]int
	finish   func(ctx context.Context, id int64) (int, error)

	// Of the discarder's goroutine alone: the discards that Claim
	// refused for now, tried again with the next ones and as Run ends,
	// and Claim itself.
	held  []DiscardAction
	claim func(id int64) (done func(), err error)
}

// failedDiscard is a discard that failed, and how often it was tried.
type failedDiscard struct {
	a     DiscardAction
	tries int
}

// failedDiscardTries is how often a discard that fails while the job runs
// is tried: once, and again with each of the next discards (as the job
// completes checkpoints), so that a store that failed for a while leaves
// no objects behind. One that failed every time is logged as given up.
const failedDiscardTries = 5

// sweep is a removal of leftovers (Catalog.RemoveLeftovers) to do.
type sweep struct {
	from, below int64
	due         bool
}

// The runner's search for stray commit markers (Catalog.StrayMarkers): a
// sink task stores its commit of a checkpoint, and writes its commit
// marker next to its snapshot, after the checkpoint completed, and
// retention may discard the checkpoint before that. Listing them is a
// listing of the job's state and of the metadata bucket, which a JetStream
// store reads whole (every job's objects): once per discard, with many
// jobs and a short interval, it was the larger part of every discard.
// Instead, a discard looks for the markers of the checkpoints retention
// dropped lately by their keys (a sink's snapshot handle plus
// CommitMarkerSuffix, a read each), for suspectChecks discards after
// theirs; and the job's markers are listed (Catalog.RemoveStrayMarkers)
// at the first discard after Start, at every strayListEvery-th discard,
// and as Run ends after a discard: a stray marker stays strayListEvery
// discards at most, and in the common case (a commit stored a little
// after its checkpoint was discarded) goes with the next discard.
const (
	strayListEvery = 16
	suspectChecks  = 4
)

// suspect is a commit marker that may be written after its checkpoint
// was discarded, and the discards that looked for it.
type suspect struct {
	key    string
	checks int
}

// NewRunner returns a runner of m; call Run.
func NewRunner(m *Machine, cat *Catalog, eff Effects, opts RunnerOptions) *Runner {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	m.record(slices.Clone(opts.Sources), opts.Inputs, opts.Edges)
	r := &Runner{m: m, cat: cat, eff: eff, now: opts.Now, log: opts.Log,
		kick: make(chan struct{}, 1), done: make(chan struct{}), waiters: map[int64]chan error{},
		dkick: make(chan struct{}, 1), removals: map[int64]int{}, finish: opts.FinishRemoval, claim: opts.Claim}
	if r.finish == nil {
		r.finish = func(ctx context.Context, id int64) (int, error) {
			n, err := cat.Remove(ctx, m.job, id)
			if errors.Is(err, fs.ErrNotExist) {
				return n, nil // removed meanwhile
			}
			return n, err
		}
	}
	return r
}

// SweepLeftovers has the runner remove, before its next discard, the
// objects of the job's checkpoints numbered from up to below (excluded)
// that have no metadata (Catalog.RemoveLeftovers): a coordinator that
// resumes a job calls it for the checkpoints its predecessor triggered,
// none of which can complete any more, whose discards that one may have
// left undone (Run's end with the store unreachable). A sweep that fails
// is done again at the next discard; one not done by the time Run ends is
// dropped.
func (r *Runner) SweepLeftovers(from, below int64) {
	if from >= below {
		return
	}
	r.mu.Lock()
	r.sweep = sweep{from: from, below: below, due: true}
	r.mu.Unlock()
	select {
	case r.dkick <- struct{}{}:
	default:
	}
}

// DiscardUnusable has the runner discard checkpoints ids of its job,
// which a resuming coordinator found stored and unusable (corrupt: no
// restore reads them) while a newer one restores: with the next discards,
// as Claim lets it, metadata first. Their objects would stay otherwise,
// as the machine keeps only the checkpoints it restores, and every
// restart would warn of them again.
func (r *Runner) DiscardUnusable(ids ...int64) {
	for _, id := range ids {
		r.queueDiscard(DiscardAction{ID: id})
	}
}

// JobEnded tells the runner, before its Run's context ends, that the
// end is its job's (finished, failed, canceled or stopped), which no
// coordinator resumes: what its end leaves undone is not done by one.
func (r *Runner) JobEnded() {
	r.mu.Lock()
	r.jobEnded = true
	r.mu.Unlock()
}

// Done is closed once Run returned, after the discards it carries out as
// it ends.
func (r *Runner) Done() <-chan struct{} { return r.done }

// push queues acts for Run; the caller holds r.mu. Once Run returned
// they are dropped.
func (r *Runner) push(acts []Action) {
	if len(acts) == 0 || r.ended {
		return
	}
	r.queue = append(r.queue, acts...)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Start begins an attempt whose tasks are tasks, and returns its run
// number (Machine.Run), which its triggers carry (TriggerAction.Run).
func (r *Runner) Start(tasks []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.Start(r.now(), tasks)
	r.strayDue = true
	r.push(nil)
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return r.m.Run()
}

// Stop ends the attempt, aborting pending checkpoints with reason.
func (r *Runner) Stop(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.push(r.m.Stop(r.now(), reason))
}

// Ack feeds a task's ack.
func (r *Runner) Ack(task string, id int64, handle string, metrics map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.push(r.m.Ack(r.now(), task, id, handle, metrics))
}

// Committing feeds a task's report that it handed its sink's output up to
// checkpoint id to its commits (Machine.Committing).
func (r *Runner) Committing(task string, id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m.Committing(task, id) {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Untold feeds that tasks may not have heard that checkpoint id completed
// (the request to their worker failed): they would not report handing its
// output to their commits, and the next periodic trigger does not wait
// for them (Machine.Committing). One that heard it after all loses
// nothing: the wait only keeps barriers from queuing behind commits.
func (r *Runner) Untold(id int64, tasks []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ended := false
	for _, t := range tasks {
		if r.m.Committing(t, id) {
			ended = true
		}
	}
	if ended {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Late feeds an ack of checkpoint id from a task of an attempt that ended:
// it never counts, but the snapshot it names is discarded if the
// checkpoint was aborted (Machine.Late).
func (r *Runner) Late(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.push(r.m.Late(id))
}

// Decline feeds a task's decline.
func (r *Runner) Decline(task string, id int64, kind, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.push(r.m.Decline(r.now(), task, id, kind, reason))
}

// Finished feeds a task's end of input.
func (r *Runner) Finished(task string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.push(r.m.Finished(r.now(), task))
}

// History returns the recent checkpoints, newest first.
func (r *Runner) History() []control.CheckpointInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.m.History()
	// A pending one's duration is how long it has been pending (a trial's
	// listing showed 0s for one pending for seconds).
	now := r.now()
	for i := range h {
		if h[i].Status == control.CheckpointPending && !h[i].Triggered.IsZero() {
			h[i].Duration = max(now.Sub(h[i].Triggered), 0)
		}
	}
	return h
}

// LastCompleted returns the latest checkpoint or savepoint the machine
// completed, the one Stats describes, with each task's metrics
// (Machine.LastCompleted); false when none did.
func (r *Runner) LastCompleted() (control.CheckpointInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.LastCompleted()
}

// Retained returns what the machine keeps of the job's completed
// checkpoints and savepoints (Machine.Retained), newest first: stored and
// restorable, whether or not the history, which keeps the newest
// HistorySize, still lists them.
func (r *Runner) Retained() []control.CheckpointInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.m.Retained()
	out := make([]control.CheckpointInfo, len(kept))
	for i, md := range kept {
		out[i] = md.Info()
	}
	return out
}

// Stats returns the machine's checkpoint counts (Machine.Stats).
func (r *Runner) Stats() control.CheckpointStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Stats()
}

// Latest returns the ID of the newest completed checkpoint or savepoint
// the machine keeps — of the attempts it coordinated, or restored into it
// (the one a restored job started from, those a resumed job's run had) —
// or 0 when it keeps none.
func (r *Runner) Latest() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if md := r.m.Latest(); md != nil {
		return md.ID
	}
	return 0
}

// LatestMetadata returns the metadata of the checkpoint Latest names, or
// nil: it is shared, to be read and not changed.
func (r *Runner) LatestMetadata() *Metadata {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Latest()
}

// Ended reports whether checkpoint id was triggered and is no longer
// pending (Machine.Ended), and pending whether it is under way.
func (r *Runner) Ended(id int64) (ended, pending bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, pending = r.m.pending[id]
	return r.m.Ended(id), pending
}

// Removed drops checkpoint id, which is being removed from storage, from
// those the machine keeps (Machine.Removed), and from the removals cut
// short that retention finishes: this removal may finish it.
func (r *Runner) Removed(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.Removed(id)
	delete(r.removals, id)
}

// RemovalCut notes that the removal of checkpoint id, which Removed
// dropped, was cut short (Machine.RemovalCut): retention finishes it as
// the job runs on, trying again with each discard (finishRemovals).
func (r *Runner) RemovalCut(id int64, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.RemovalCut(id, reason)
	if _, ok := r.removals[id]; !ok {
		r.removals[id] = 0
	}
}

// Savepoint takes a savepoint and waits until it completes or fails.
func (r *Runner) Savepoint(ctx context.Context) (control.CheckpointInfo, error) {
	return r.savepoint(ctx, r.m.TriggerSavepoint)
}

// StopSavepoint takes the savepoint of a job being stopped
// (Machine.TriggerStop) and waits until it completes or fails.
func (r *Runner) StopSavepoint(ctx context.Context) (control.CheckpointInfo, error) {
	return r.savepoint(ctx, r.m.TriggerStop)
}

func (r *Runner) savepoint(ctx context.Context, trigger func(time.Time) (int64, []Action, error)) (control.CheckpointInfo, error) {
	r.mu.Lock()
	id, acts, err := trigger(r.now())
	if err != nil {
		r.mu.Unlock()
		return control.CheckpointInfo{}, err
	}
	done := make(chan error, 1)
	r.waiters[id] = done
	r.push(acts)
	r.mu.Unlock()
	select {
	case err = <-done:
	case <-ctx.Done():
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
		return control.CheckpointInfo{}, fmt.Errorf("savepoint %d: %w", id, ctx.Err())
	}
	for _, h := range r.History() {
		if h.ID == id {
			return h, err
		}
	}
	return control.CheckpointInfo{ID: id, Savepoint: true}, err
}

// LatestValid returns the newest retained checkpoint or savepoint whose
// metadata and state check out in storage; corrupt or missing ones are
// dropped with a warning. nil means there is none.
func (r *Runner) LatestValid(ctx context.Context) (*Metadata, error) {
	r.mu.Lock()
	var ids []int64
	for _, md := range r.m.Retained() {
		ids = append(ids, md.ID)
	}
	job := r.m.job
	r.mu.Unlock()
	md, skipped, err := r.cat.Latest(ctx, job, ids)
	r.mu.Lock()
	for _, id := range skipped {
		r.m.Forget(id)
	}
	r.mu.Unlock()
	return md, err
}

// Unusable drops completed checkpoint or savepoint id, which a restore
// found unusable though its metadata checks out (a task's snapshot of it
// is damaged), from those the machine keeps: no later failover restores
// it (LatestValid), and its history entry says it failed. Its objects
// stay: a coordinator that resumes the job discards it once a newer one
// restores, unless a kept one names it (the job's record lists it).
func (r *Runner) Unusable(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.Forget(id)
}

// Run carries out actions and ticks the machine until ctx is done; then it
// carries out what it must as it ends (see Runner) and closes Done.
func (r *Runner) Run(ctx context.Context) {
	defer close(r.done)
	// The discards outlive ctx: those queued as the job ends are carried
	// out before Run returns, EndDiscardTimeout at most (end).
	dctx, dcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer dcancel()
	stop := make(chan struct{})
	discarded := make(chan struct{})
	go func() { defer close(discarded); r.discarder(dctx, stop) }()
	defer func() {
		t := time.AfterFunc(EndDiscardTimeout, dcancel)
		defer t.Stop()
		go r.cancelWhenUnreachable(dctx, dcancel)
		close(stop)
		<-discarded
		dcancel()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		r.queue = append(r.queue, r.m.Tick(r.now())...)
		acts := r.queue
		r.queue = nil
		wake := r.m.NextWake()
		r.mu.Unlock()
		for i, a := range acts {
			if ctx.Err() != nil {
				r.end(ctx, acts[i:])
				return
			}
			r.do(ctx, a)
		}
		if len(acts) > 0 {
			continue // actions may have produced more actions
		}
		d := time.Hour
		if !wake.IsZero() {
			d = wake.Sub(r.now())
			if d < 0 {
				d = 0
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			r.end(ctx, nil)
			return
		case <-r.kick:
		case <-timer.C:
		}
	}
}

// end is Run's end: left are the actions Run had taken but not carried
// out. Checkpoints still pending are aborted (no attempt will complete
// them), and every checkpoint a discard was queued for is handed to the
// discarder, which Run waits for, EndDiscardTimeout at most; a
// savepoint's waiter learns whether it completed (its metadata is
// written) or was aborted. The other actions (triggers, metadata writes,
// notifications and aborts sent to tasks) are moot: the tasks are being
// canceled — or, as the coordinator stops, left running for the next one,
// which cancels their attempt before it deploys another.
func (r *Runner) end(ctx context.Context, left []Action) {
	r.mu.Lock()
	acts := slices.Concat(left, r.queue, r.m.Stop(r.now(), "the checkpoint coordinator of the job stopped"))
	r.queue = nil
	r.ended = true
	r.mu.Unlock()
	for _, a := range acts {
		switch a := a.(type) {
		case DiscardAction:
			r.queueDiscard(a)
		case AbortAction:
			r.resolve(a.ID, abortErr(a))
		case NotifyAction:
			r.resolve(a.ID, nil)
		}
	}
}

// queueDiscard hands a discard to the discarder.
func (r *Runner) queueDiscard(a DiscardAction) {
	r.mu.Lock()
	r.discards = append(r.discards, a)
	r.mu.Unlock()
	select {
	case r.dkick <- struct{}{}:
	default:
	}
}

// discarder carries out the sweep due (SweepLeftovers) and the discards
// queued (queueDiscard), in order, until stop is closed and none is left;
// ctx bounds each. A discard that fails is tried again with the next ones
// (discardFailed), and once more as the runner ends. The last thing it does, if it discarded anything
// since, is list the job's stray commit markers (see strayListEvery).
//
// Once Run ends (end, or stop closed), a checkpoint store that cannot be
// reached (Catalog.Reachable: its NATS connection is down) would hold
// each discard up to ctx's end, EndDiscardTimeout, and the coordinator's
// shutdown with it: the discards left then are not tried, nor are those
// the store's loss cut short (Run's end cancels ctx as the store goes),
// and the runner logs how many it left undone. The next coordinator that
// resumes the job does them: retention discards the completed checkpoints
// beyond it as the job completes its next one, and SweepLeftovers removes
// the others. A job that ended (JobEnded) is resumed by none: the log
// says so, and names weir checkpoint rm, which removes them by hand.
func (r *Runner) discarder(ctx context.Context, stop <-chan struct{}) {
	ending := false
	for {
		r.mu.Lock()
		acts := r.discards
		r.discards = nil
		sw := r.sweep
		r.sweep.due = false
		ending = ending || r.ended // Run's end queued its discards
		r.mu.Unlock()
		if sw.due && !r.leftUndone(ending, 0) {
			r.sweepLeftovers(ctx, sw)
		}
		// Those that failed before, and those Claim refused, with the
		// new ones (or as the runner ends): the store may answer again,
		// and the checkpoint may be needed no more.
		var todo []failedDiscard // each with its tries, this one counted
		if len(acts) > 0 || ending {
			for _, a := range r.held {
				todo = append(todo, failedDiscard{a: a, tries: 1})
			}
			for _, f := range r.failed {
				todo = append(todo, failedDiscard{a: f.a, tries: f.tries + 1})
			}
			r.failed, r.held = nil, nil
		}
		for _, a := range acts {
			todo = append(todo, failedDiscard{a: a, tries: 1})
		}
		// Newest first, as retention queues them: a checkpoint whose
		// sink snapshot names an older one goes before it, and one that
		// stays (its discard failed, was refused, or is left undone)
		// keeps what it names stored with it (stays), so that no discard
		// cut short leaves a checkpoint stored that names one gone —
		// which a restart finds corrupt, and keeps.
		slices.SortStableFunc(todo, func(x, y failedDiscard) int { return cmp.Compare(y.a.ID, x.a.ID) })
		var stays []*Metadata
		for i, f := range todo {
			if r.leftUndone(ending, len(todo)-i) {
				break
			}
			if by := namer(r.givenUp, f.a.ID); by != nil {
				r.log.Warn(fmt.Sprintf("checkpoint kept past retention: checkpoint %d, whose discard failed every time, names output staged in it; weir checkpoint rm %s %d, then %d, removes them",
					by.ID, by.Job, by.ID, f.a.ID), "checkpoint", f.a.ID)
			} else if by := namer(stays, f.a.ID); by != nil {
				r.keptNamed(f.a, by, ending)
			} else if r.claimed(ctx, f.a, f.tries, ending) {
				continue
			}
			if f.a.Completed != nil {
				stays = append(stays, f.a.Completed)
			}
		}
		if len(acts) > 0 && !ending {
			r.finishRemovals(ctx)
		}
		if len(acts) > 0 {
			continue
		}
		select {
		case <-r.dkick:
		case <-stop:
			ending = true
			r.mu.Lock()
			left := len(r.discards)
			job := r.m.job
			r.mu.Unlock()
			if left == 0 && len(r.failed)+len(r.held) > 0 {
				continue // tried once more, as the runner ends
			}
			if left == 0 {
				if r.sinceList > 0 && !r.leftUndone(ending, 0) {
					r.removeStrayMarkers(ctx, job)
				}
				if r.undone > 0 {
					r.mu.Lock()
					ended := r.jobEnded
					r.mu.Unlock()
					msg := "checkpoint discards left undone: the checkpoint store is out of reach; a coordinator that resumes the job does them"
					switch {
					case errors.Is(r.undoneErr, lease.ErrLost):
						// Not the store: this coordinator may not write
						// to it any more.
						msg = "checkpoint discards left undone: this coordinator lost its lease, so it writes to the checkpoint store no more"
					case ended:
						msg = "checkpoint discards left undone: the checkpoint store is out of reach; the job has ended, so no coordinator does them: weir checkpoint rm removes what they leave (-earlier: the objects of checkpoints that never completed)"
					}
					r.log.Warn(msg, "discards", r.undone, "err", r.undoneErr)
				}
				return
			}
		}
	}
}

// claimed carries out discard a, tried tries times with this one, if
// Claim lets it: one that another request removes is dropped, one
// refused for now is held (tried again with the next discards) or, as
// the runner ends, left stored with a log line saying why and what
// removes it. A discard that fails is discardFailed's. It reports whether
// the checkpoint is gone or going (discarded, or removed by the other
// request, which marks it first: nothing restores it then), false when
// it stays stored for now.
func (r *Runner) claimed(ctx context.Context, a DiscardAction, tries int, ending bool) bool {
	if r.claim != nil {
		done, err := r.claim(a.ID)
		switch {
		case errors.Is(err, ErrBeingRemoved):
			return true // the other request deletes it, or notes it cut short
		case err != nil && ending:
			r.mu.Lock()
			job := r.m.job
			r.mu.Unlock()
			r.log.Warn(fmt.Sprintf("checkpoint kept past retention: weir checkpoint rm %s %d removes it once nothing needs it", job, a.ID),
				"checkpoint", a.ID, "why", err)
			return false
		case err != nil:
			r.hold(a)
			return false
		}
		defer done()
	}
	if err := r.discard(ctx, a); err != nil {
		r.discardFailed(a, tries, ending, err)
		return false
	}
	return true
}

// hold keeps discard a to be tried again with the next discards.
func (r *Runner) hold(a DiscardAction) {
	if !slices.ContainsFunc(r.held, func(h DiscardAction) bool { return h.ID == a.ID }) {
		r.held = append(r.held, a)
	}
}

// namer returns the checkpoint among stays whose sink snapshot names
// output staged in checkpoint id (Metadata.SinkStateFrom: from id or an
// earlier one on), which its restore reads; nil if none does.
func namer(stays []*Metadata, id int64) *Metadata {
	for _, md := range stays {
		if from, _ := md.SinkStateFrom(); from > 0 && from <= id && id < md.ID {
			return md
		}
	}
	return nil
}

// keptNamed keeps discard a, of a checkpoint that by, which stays stored
// for now, names: held, and carried out after by's; as the runner ends,
// left undone with it (the coordinator that resumes the job keeps or
// discards both, as its retention says).
func (r *Runner) keptNamed(a DiscardAction, by *Metadata, ending bool) {
	if !ending {
		r.hold(a)
		return
	}
	r.undone++
	if r.undoneErr == nil {
		r.undoneErr = fmt.Errorf("checkpoint %d stays while checkpoint %d, which names output staged in it, is stored", a.ID, by.ID)
	}
}

// discardFailed notes discard a, tried tries times, that failed with err:
// as the runner ends it is left undone (counted, with the reason), before
// that it is tried again with the next discards, up to failedDiscardTries.
func (r *Runner) discardFailed(a DiscardAction, tries int, ending bool, err error) {
	switch {
	case ending:
		r.undone++
		if r.undoneErr == nil {
			r.undoneErr = err
		}
	case tries < failedDiscardTries:
		r.failed = append(r.failed, failedDiscard{a: a, tries: tries})
	default:
		r.log.Warn("discarding checkpoint failed every time; given up: weir checkpoint rm removes what it leaves",
			"checkpoint", a.ID, "tries", tries, "err", err)
		if md := a.Completed; md != nil {
			if from, _ := md.SinkStateFrom(); from > 0 {
				// Stored still: what it names stays with it.
				r.givenUp = append(r.givenUp, md)
			}
		}
	}
}

// leftUndone reports, for a discarder that is ending, whether the
// checkpoint store cannot be reached: the n discards it was about to do
// are then left undone (counted, with the reason). Before the end it
// reports false: discards are tried, and fail, as they come.
func (r *Runner) leftUndone(ending bool, n int) bool {
	if !ending {
		return false
	}
	err := r.cat.Reachable()
	if err == nil {
		return false
	}
	r.undone += n
	if r.undoneErr == nil {
		r.undoneErr = err
	}
	return true
}

// cancelWhenUnreachable cancels ctx, the context of the discards as Run
// ends, once the checkpoint store cannot be reached (looking every
// unreachablePoll), so that a discard under way does not wait for the
// store's timeouts; it returns when ctx ends.
func (r *Runner) cancelWhenUnreachable(ctx context.Context, cancel context.CancelFunc) {
	t := time.NewTicker(unreachablePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.cat.Reachable() != nil {
				cancel()
				return
			}
		}
	}
}

// unreachablePoll is how often a runner that is ending looks whether its
// checkpoint store can still be reached (cancelWhenUnreachable).
const unreachablePoll = 100 * time.Millisecond

// finishRemovals finishes the removals cut short (RemovalCut), as
// retention discards: each is tried with every discard while the job
// runs, failedDiscardTries times at most, and logged once it is done.
// One that failed every time is logged as given up: weir checkpoint rm,
// or the next coordinator's start, finishes it.
func (r *Runner) finishRemovals(ctx context.Context) {
	r.mu.Lock()
	tried := maps.Clone(r.removals) // finish drops its own (Removed)
	r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(tried)) {
		n, err := r.finish(ctx, id)
		r.mu.Lock()
		tries := tried[id] + 1
		elsewhere := errors.Is(err, ErrBeingRemoved)
		if err == nil || elsewhere || tries >= failedDiscardTries {
			delete(r.removals, id)
		} else {
			r.removals[id] = tries
		}
		r.mu.Unlock()
		switch {
		case err == nil && n == 0:
			// Gone meanwhile: another removal finished it, and said so.
		case elsewhere:
			// Another request finishes it, and says so.
		case err == nil:
			r.log.Info("checkpoint removal finished (it was cut short before)", "checkpoint", id, "objects", n, "by", "retention")
		case tries >= failedDiscardTries:
			r.log.Warn("finishing a checkpoint removal cut short failed every time; given up: weir checkpoint rm finishes it",
				"checkpoint", id, "tries", tries, "err", err)
		default:
			r.log.Warn("finishing a checkpoint removal cut short failed; retention tries again", "checkpoint", id, "err", err)
		}
	}
}

// sweepLeftovers removes the objects of the checkpoints of sw that never
// completed; a failed sweep is due again.
func (r *Runner) sweepLeftovers(ctx context.Context, sw sweep) {
	r.mu.Lock()
	job := r.m.job
	r.mu.Unlock()
	ids, err := r.cat.RemoveLeftovers(ctx, job, sw.from, sw.below)
	if len(ids) > 0 {
		r.log.Info("objects of checkpoints that never completed removed (their discards were left undone)", "checkpoints", ids)
	}
	if err != nil {
		r.log.Warn("removing the objects of checkpoints that never completed failed", "err", err)
		r.mu.Lock()
		if !r.sweep.due {
			r.sweep = sw
		}
		r.mu.Unlock()
	}
}

// discard deletes checkpoint a.ID, and the stray commit markers it is
// time to look for (see strayListEvery). It returns the discard's error.
func (r *Runner) discard(ctx context.Context, a DiscardAction) error {
	r.mu.Lock()
	job := r.m.job
	list := r.strayDue
	r.strayDue = false
	r.mu.Unlock()
	var err error
	if a.Completed != nil {
		err = r.cat.DiscardCompleted(ctx, a.Completed)
	} else {
		err = r.cat.Discard(ctx, job, a.ID)
	}
	if err != nil {
		r.log.Warn("discarding checkpoint failed", "checkpoint", a.ID, "err", err)
	}
	r.sinceList++
	if list || r.sinceList >= strayListEvery {
		r.removeStrayMarkers(ctx, job)
	} else {
		r.removeSuspects(ctx)
	}
	// Markers present now went with the checkpoint's state; those of its
	// sinks' commits still under way are looked for from the next
	// discard on. (A checkpoint whose discard failed may still have its
	// metadata: its markers are not stray, and the listings find them
	// once they are.)
	if md := a.Completed; md != nil && err == nil && r.cat.State != nil {
		for task, h := range md.Handles {
			if mayMark(md, task, h) {
				r.suspects = append(r.suspects, suspect{key: h + CommitMarkerSuffix})
			}
		}
	}
	return err
}

// mayMark reports whether task of checkpoint md may write a commit marker
// next to its snapshot h: h is under the checkpoint's own prefix (a task
// marks no snapshot of another job's), and its ack said that it commits
// in the background (control.MetricCommitReport: an exactly-once sink),
// or said nothing of itself. A marker this misses is a stray marker the
// next listing finds.
func mayMark(md *Metadata, task, h string) bool {
	if h == "" || !strings.HasPrefix(h, StatePrefix(md.Job, md.ID)) {
		return false
	}
	mt := md.Metrics[task]
	return len(mt) == 0 || mt[control.MetricCommitReport] != 0
}

// removeStrayMarkers lists and deletes job's stray commit markers
// (Catalog.RemoveStrayMarkers); a listing that fails is done again at the
// next discard.
func (r *Runner) removeStrayMarkers(ctx context.Context, job string) {
	n, err := r.cat.RemoveStrayMarkers(ctx, job)
	if err != nil {
		r.log.Warn("removing stray commit markers failed", "err", err)
		r.mu.Lock()
		r.strayDue = true
		r.mu.Unlock()
		return
	}
	r.sinceList = 0
	if n > 0 {
		r.log.Info("stray commit markers removed", "markers", n)
	}
}

// removeSuspects deletes the suspected markers (suspect) that are there,
// and forgets those looked for suspectChecks times: what comes later is
// left to the next listing.
func (r *Runner) removeSuspects(ctx context.Context) {
	kept := r.suspects[:0]
	for _, s := range r.suspects {
		rc, err := r.cat.State.Get(ctx, s.key)
		if err == nil {
			_ = rc.Close()
			if err := storage.DeleteKey(ctx, r.cat.State, s.key); err != nil {
				r.log.Warn("removing a stray commit marker failed", "marker", s.key, "err", err)
			} else {
				r.log.Info("stray commit markers removed", "markers", 1)
				continue
			}
		}
		if s.checks++; s.checks < suspectChecks {
			kept = append(kept, s)
		}
	}
	clear(r.suspects[len(kept):])
	r.suspects = kept
}

func (r *Runner) do(ctx context.Context, a Action) {
	switch a := a.(type) {
	case TriggerAction:
		// A checkpoint that ended before its trigger was sent — its
		// attempt ended (Stop) while the runner carried out earlier
		// actions, or it expired — is not triggered: the tasks running
		// now may be the next attempt's, whose sources would inject a
		// barrier of a checkpoint nobody completes (for a stop savepoint,
		// one after which they take no input).
		r.mu.Lock()
		live := r.m.pending[a.ID] != nil && r.m.Current(a.Run)
		r.mu.Unlock()
		if !live {
			r.log.Info("checkpoint ended before its trigger was sent; not triggered", "checkpoint", a.ID)
			return
		}
		err := r.eff.Trigger(ctx, a)
		r.mu.Lock()
		if err != nil {
			r.log.Warn("checkpoint trigger failed", "checkpoint", a.ID, "err", err)
			r.queue = append(r.queue, r.m.TriggerFailed(r.now(), a.Run, a.ID, err.Error())...)
		} else {
			r.m.Triggered(a.Run)
		}
		r.mu.Unlock()
	case PersistAction:
		md := *a.Metadata // its Sources, Inputs and Edges the machine's (NewRunner)
		r.mu.Lock()
		wait := r.m.MetadataWriteWait()
		r.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := r.cat.Write(wctx, &md)
		cancel()
		if err != nil {
			r.log.Warn("checkpoint metadata write failed", "checkpoint", a.Metadata.ID, "err", err)
		}
		r.mu.Lock()
		r.queue = append(r.queue, r.m.Persisted(r.now(), a.Metadata.ID, err)...)
		r.mu.Unlock()
	case NotifyAction:
		r.eff.Notify(ctx, a.ID)
		r.resolve(a.ID, nil)
	case AbortAction:
		r.eff.Abort(ctx, a.ID, a.Reason)
		r.resolve(a.ID, abortErr(a))
	case DiscardAction:
		// After the actions before it: a checkpoint aborted while its
		// metadata was being written (PersistAction) is deleted once the
		// write ended.
		r.queueDiscard(a)
	case FailJobAction:
		// Under the lock: an attempt cannot end (Stop) while its failure
		// is reported. One that ended meanwhile (a task failure or a lost
		// worker failed it over while this action waited behind slow
		// aborts) must not pass its checkpoint failures on to the next.
		r.mu.Lock()
		if r.m.Current(a.Run) {
			r.eff.Fail(a.Reason)
		} else {
			r.log.Info("checkpoint failures of an attempt that ended meanwhile", "reason", a.Reason)
		}
		r.mu.Unlock()
	}
}

func (r *Runner) resolve(id int64, err error) {
	r.mu.Lock()
	w := r.waiters[id]
	delete(r.waiters, id)
	r.mu.Unlock()
	if w != nil {
		w <- err
	}
}
