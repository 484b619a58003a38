package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/coordinator/plan"
	"github.com/weirhq/weir/internal/spell"
	"github.com/weirhq/weir/transport/storage"
)

// Draining a worker (control.Drainer): a cordoned worker gets no task
// (Manager.place leaves it out, as it leaves out an unusable one), and
// MoveJob moves a running job off it with a stop savepoint and an attempt
// restored from it — the path of a worker that says goodbye (a "left"
// failure: no failure counted, no restart delay, the status counts a
// replacement), but from a savepoint the sinks committed and after which
// the sources read nothing, so nothing is replayed.
//
// The cordons are kept in the job records' store under cordonsKey, so
// that a restarted coordinator keeps them: one object, the whole set,
// written whole (a Put replaces it atomically).

// cordonsKey is where the cordons are kept in Options.Jobs (beside the
// records under recordPrefix, which a listing of it does not reach).
const cordonsKey = "cordons"

// cordonSet is the manager's cordons. The zero value is empty.
type cordonSet struct {
	// writeMu orders the writes of the set: each writes the set as the
	// one before left it. mu guards workers and moving; it is not held
	// while the store writes, so that placing a job does not wait on
	// storage.
	writeMu sync.Mutex
	mu      sync.Mutex
	// workers are the cordoned workers, with when each was cordoned.
	workers map[string]time.Time
	// moving holds the jobs a move is under way for.
	moving map[string]bool
}

// cordonRecord is what cordonsKey holds.
type cordonRecord struct {
	Workers map[string]time.Time `json:"workers"`
}

// cordoned reports whether worker id is cordoned.
func (m *Manager) cordoned(id string) bool {
	m.cordon.mu.Lock()
	defer m.cordon.mu.Unlock()
	_, ok := m.cordon.workers[id]
	return ok
}

// cordonedDown lists the cordoned workers that are not live, by ID.
func (m *Manager) cordonedDown(live []control.Heartbeat) []control.WorkerStatus {
	up := make(map[string]bool, len(live))
	for _, hb := range live {
		up[hb.Worker.ID] = true
	}
	m.cordon.mu.Lock()
	defer m.cordon.mu.Unlock()
	var out []control.WorkerStatus
	for _, id := range slices.Sorted(maps.Keys(m.cordon.workers)) {
		if !up[id] {
			out = append(out, control.WorkerStatus{ID: id, Cordoned: true, Down: true})
		}
	}
	return out
}

// cordonedLive says which live workers are cordoned, for the reason of a
// job that found no worker to place it on: "" when none is.
func (m *Manager) cordonedLive() string {
	var ids []string
	for _, hb := range m.ctl.Workers() {
		if m.cordoned(hb.Worker.ID) {
			ids = append(ids, hb.Worker.ID)
		}
	}
	switch len(ids) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (worker %s is live, but cordoned: weir worker uncordon %s places tasks there again)", ids[0], ids[0])
	}
	return fmt.Sprintf(" (workers %s are live, but cordoned: weir worker uncordon places tasks there again)", strings.Join(ids, ", "))
}

// loadCordons reads the cordons a coordinator before kept (none stored:
// none), trying again while the store fails, as the job records are read
// (retryRead): a coordinator that forgot a cordon would place tasks on a
// worker being taken out of service.
func (m *Manager) loadCordons(ctx context.Context) error {
	store := m.opts.Jobs
	if store == nil {
		return nil
	}
	var data []byte
	err := retryRead(ctx, m, "read worker cordons", "", func() (err error) {
		data, err = storage.ReadAll(ctx, store, cordonsKey)
		if errors.Is(err, fs.ErrNotExist) {
			data = nil
			return nil
		}
		return err
	})
	if err != nil || data == nil {
		return err
	}
	var rec cordonRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("worker cordons: %w", err)
	}
	m.cordon.mu.Lock()
	m.cordon.workers = rec.Workers
	m.cordon.mu.Unlock()
	if len(rec.Workers) > 0 {
		m.log.Info("workers cordoned", "workers", strings.Join(slices.Sorted(maps.Keys(rec.Workers)), ","))
	}
	return nil
}

// setCordon cordons worker id (on) or uncordons it, stored first: the
// change holds once the store has it. It returns whether the worker was
// cordoned before.
func (m *Manager) setCordon(ctx context.Context, id string, on bool) (was bool, err error) {
	m.cordon.writeMu.Lock()
	defer m.cordon.writeMu.Unlock()
	m.cordon.mu.Lock()
	next := maps.Clone(m.cordon.workers)
	m.cordon.mu.Unlock()
	if next == nil {
		next = map[string]time.Time{}
	}
	_, was = next[id]
	if was == on {
		return was, nil
	}
	if on {
		next[id] = time.Now().UTC()
	} else {
		delete(next, id)
	}
	if store := m.opts.Jobs; store != nil {
		data, err := json.Marshal(cordonRecord{Workers: next})
		if err != nil {
			return was, err
		}
		if err := store.Put(ctx, cordonsKey, bytes.NewReader(data)); err != nil {
			return was, fmt.Errorf("store the cordon of worker %s: %w", id, err)
		}
	}
	m.cordon.mu.Lock()
	m.cordon.workers = next
	m.cordon.mu.Unlock()
	if on {
		m.log.Info("worker cordoned: no task is placed on it", "worker", id)
	} else {
		m.log.Info("worker uncordoned", "worker", id)
		m.roomMade() // a job waiting for room may fit there now
	}
	return was, nil
}

// jobsOn returns the jobs that have not ended and hold slots on worker,
// by name, with how many of their tasks are there.
func (m *Manager) jobsOn(worker string) ([]*job, map[*job]int) {
	m.mu.Lock()
	all := make([]*job, 0, len(m.jobs))
	for _, j := range m.jobs {
		all = append(all, j)
	}
	m.mu.Unlock()
	sort.Slice(all, func(a, b int) bool { return all[a].spec.Name < all[b].spec.Name })
	var on []*job
	count := map[*job]int{}
	for _, j := range all {
		j.mu.Lock()
		n := 0
		if j.holds && !j.st.State.Terminal() && !j.gone {
			for _, w := range j.assign {
				if w == worker {
					n++
				}
			}
		}
		j.mu.Unlock()
		if n > 0 {
			on = append(on, j)
			count[j] = n
		}
	}
	return on, count
}

// roomOff checks that jobs fit on the live workers that take tasks and
// are not cordoned, and not worker (about to be), one after the other as
// their moves place them: each counts its own tasks free, slots and
// memory, and takes what plan.AssignMemory gives it, on the workers whose
// caps take it — as placement counts them (Manager.place): a drain that
// counted slots alone moved a job to workers without the memory budget
// for it, where it then waited. It refuses (control.ErrConflict) saying
// what the jobs need and what is free: for slots, for one job noRoom, for
// more noRoomAll — the slots they need together against what the other
// workers have for them, as weir worker ls counts them before any move
// (naming only the first job that did not fit, it gave that job's view
// after the others' moves: "1 free" where worker ls said 3); for memory,
// the job that does not fit after those before it, and each worker's
// free memory of its budget (plan.CapacityError.Shortfall). It places nothing: a job
// submitted in between may take the room after all, and the job moved
// then waits for free slots as any placement does.
func (m *Manager) roomOff(worker string, jobs []*job) error {
	m.placeMu.Lock()
	defer m.placeMu.Unlock()
	live := m.ctl.Workers()
	used := m.slotsUsed(nil)
	memUsed := m.memoryUsed(nil)
	stale, staleMem := m.staleTasks(live, nil)
	for w, n := range staleMem {
		memUsed[w] += n
	}
	before := maps.Clone(used)
	cordoned := cordonedNote(m, worker, live, before, stale)
	for _, j := range jobs {
		own := map[string]int{}           // the job's tasks on each worker: free for it, as it moves whole
		ownMem := map[string]int64{}      // and their memory
		mem := control.TaskMemory(j.spec) // counted as placement counts it (Manager.place)
		j.mu.Lock()
		if j.holds && !j.st.State.Terminal() {
			for _, t := range j.plan.Tasks {
				if w, ok := j.assign[t.ID]; ok {
					used[w]--
					own[w]++
					memUsed[w] -= mem[t.Vertex]
					ownMem[w] += mem[t.Vertex]
				}
			}
		}
		j.mu.Unlock()
		ws := make([]plan.Worker, 0, len(live))
		var capped error // why a worker's caps refuse the job
		for _, hb := range live {
			id := hb.Worker.ID
			if id == worker || m.unusable(hb.Worker) != "" || m.cordoned(id) {
				continue
			}
			if err := hb.Worker.Caps.Refuse(id, j.spec); err != nil {
				capped = err
				continue
			}
			ws = append(ws, plan.Worker{ID: id, Slots: hb.Worker.Slots, Used: used[id] + stale[id],
				Memory: hb.Worker.Caps.Memory, MemoryUsed: memUsed[id]})
		}
		assignment, err := plan.AssignMemory(j.plan, ws, mem)
		var short *plan.CapacityError
		switch {
		case errors.Is(err, plan.ErrNoWorkers) && capped != nil:
			return control.Errorf(control.ErrConflict, "no other worker's caps take job %s: %v", j.spec.Name, capped)
		case errors.Is(err, plan.ErrNoWorkers) && cordoned != "":
			return control.Errorf(control.ErrConflict, "no other worker takes tasks to move job %s to%s", j.spec.Name, cordoned)
		case errors.Is(err, plan.ErrNoWorkers):
			return control.Errorf(control.ErrConflict, "no other worker takes tasks to move job %s to (none is live, or none takes tasks: weir worker ls says why)", j.spec.Name)
		case errors.As(err, &short) && short.Memory > 0:
			// The slots are there, the memory not: the job that does not
			// fit after those before it moved, and what each worker has
			// free of its budget (its own tasks' memory counted free).
			return control.Errorf(control.ErrConflict, "no room on the other workers for job %s: it %s%s%s; start a worker, raise its -memory, or stop a job, and drain again",
				j.spec.Name, short.Shortfall(), ownMemNote(ownMem, short.Workers), cordoned)
		case errors.As(err, &short) && len(jobs) > 1:
			return control.Errorf(control.ErrConflict, "no room on the other workers for the %d jobs on %s: %s%s", len(jobs), worker,
				noRoomAll(jobs, ws, before, stale), cordoned)
		case errors.As(err, &short):
			return control.Errorf(control.ErrConflict, "no room on the other workers for job %s: %s%s", j.spec.Name, noRoom(j.spec.Name, short, own), cordoned)
		case err != nil:
			return err
		}
		vertex := make(map[string]string, len(j.plan.Tasks))
		for _, t := range j.plan.Tasks {
			vertex[t.ID] = t.Vertex
		}
		for w, tasks := range assignment {
			used[w] += len(tasks)
			for _, task := range tasks {
				memUsed[w] += mem[vertex[task]]
			}
		}
	}
	return nil
}

// cordonedNote names the live workers besides worker that are cordoned,
// which a drain's room does not count, with their free slots as weir
// worker ls counts them (used: the tasks placed, stale those running
// besides): "; not counted: cordoned w1 (6 slots free), which weir worker
// uncordon w1 lets jobs move to"; "" when none is. A refusal that left
// them out said "the other workers have 6" of a cluster whose cordoned
// worker had 6 more, without a word of it.
func cordonedNote(m *Manager, worker string, live []control.Heartbeat, used, stale map[string]int) string {
	var ids, each []string
	for _, hb := range live {
		id := hb.Worker.ID
		if id == worker || m.unusable(hb.Worker) != "" || !m.cordoned(id) {
			continue
		}
		ids = append(ids, id)
		free := "no slot limit"
		if hb.Worker.Slots > 0 {
			free = plural(max(hb.Worker.Slots-used[id]-stale[id], 0), "slot") + " free"
		}
		each = append(each, fmt.Sprintf("%s (%s)", id, free))
	}
	switch len(ids) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("; not counted: cordoned %s, which weir worker uncordon %s lets jobs move to", each[0], ids[0])
	}
	return fmt.Sprintf("; not counted: cordoned %s, which weir worker uncordon lets jobs move to", strings.Join(each, ", "))
}

// ownMemNote says how much memory a job's own tasks hold on the workers
// ws of a memory shortfall (own, by worker), counted free for it as it
// moves whole: ", counting the 256MiB its own tasks hold on w2 as free";
// "" when they hold none there.
func ownMemNote(own map[string]int64, ws []plan.Worker) string {
	var held int64
	var on []string
	for _, w := range ws {
		if k := own[w.ID]; k > 0 && w.Memory > 0 {
			held += k
			on = append(on, w.ID)
		}
	}
	if held == 0 {
		return ""
	}
	return fmt.Sprintf(", counting the %s its own tasks hold on %s as free", jobspec.FormatSize(held), strings.Join(on, ", "))
}

// noRoom says in one line why job does not fit on the other workers:
// the slots it needs, and those they have for it — their free slots and
// those its own tasks there hold (own, by worker), which it frees as it
// moves — so that the numbers match weir worker ls, which counts the
// job's tasks as used: "it needs 4 slots; the other workers have 2,
// counting the 2 its own tasks hold on w2 (w2 has 2 slots: 0 free, 2
// dk's)".
func noRoom(job string, short *plan.CapacityError, own map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "it needs %s; the other workers have %d", plural(short.Tasks, "slot"), short.Free)
	held, on := 0, []string(nil)
	for _, w := range short.Workers {
		if k := own[w.ID]; k > 0 {
			held += k
			on = append(on, w.ID)
		}
	}
	switch {
	case held == 1:
		fmt.Fprintf(&b, ", counting the 1 its own task holds on %s (", on[0])
	case held > 0:
		fmt.Fprintf(&b, ", counting the %d its own tasks hold on %s (", held, strings.Join(on, ", "))
	default:
		b.WriteString(" free (")
	}
	const maxListed = 10
	for i, w := range short.Workers {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(short.Workers)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		k := own[w.ID]
		fmt.Fprintf(&b, "%s has %s: %d free", w.ID, plural(w.Slots, "slot"), max(w.Slots-w.Used-k, 0))
		if k > 0 {
			fmt.Fprintf(&b, ", %d %s's", k, job)
		}
	}
	b.WriteString(")")
	return b.String()
}

// noRoomAll says in one line why jobs, moving off a worker one after
// the other, do not all fit on the other workers ws: the slots they
// need together, each job's, and what the other workers have for them —
// their free slots and those the jobs' own tasks there hold, which they
// free as they move —, each worker as weir worker ls counts it before
// any move (used: the tasks placed, stale those running besides): "they
// need 7 slots (j02 3, j04 4); the other workers have 5, counting the 2
// their own tasks hold on w3 (w3 has 24 slots: 3 free, 2 of theirs)".
func noRoomAll(jobs []*job, ws []plan.Worker, used, stale map[string]int) string {
	own := map[string]int{} // the jobs' tasks on each worker
	need := 0
	each := make([]string, len(jobs))
	for i, j := range jobs {
		n := len(j.plan.Tasks)
		need += n
		each[i] = fmt.Sprintf("%s %d", j.spec.Name, n)
		j.mu.Lock()
		if j.holds && !j.st.State.Terminal() {
			for _, w := range j.assign {
				own[w]++
			}
		}
		j.mu.Unlock()
	}
	have, held := 0, 0
	var on []string
	for _, w := range ws {
		have += max(w.Slots-used[w.ID]-stale[w.ID], 0) + own[w.ID]
		if k := own[w.ID]; k > 0 {
			held += k
			on = append(on, w.ID)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "they need %s (%s); the other workers have %d", plural(need, "slot"), strings.Join(each, ", "), have)
	switch {
	case held == 1:
		fmt.Fprintf(&b, ", counting the 1 their own task holds on %s (", on[0])
	case held > 0:
		fmt.Fprintf(&b, ", counting the %d their own tasks hold on %s (", held, strings.Join(on, ", "))
	default:
		b.WriteString(" free (")
	}
	const maxListed = 10
	for i, w := range ws {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(ws)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s has %s: %d free", w.ID, plural(w.Slots, "slot"), max(w.Slots-used[w.ID]-stale[w.ID], 0))
		if k := own[w.ID]; k > 0 {
			fmt.Fprintf(&b, ", %d of theirs", k)
		}
	}
	b.WriteString(")")
	return b.String()
}

// plural is "1 slot", "2 slots".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// DrainWorker implements control.Drainer.
func (m *Manager) DrainWorker(ctx context.Context, r control.DrainRequest) (control.DrainPlan, error) {
	id := r.Worker
	if id == "" {
		return control.DrainPlan{}, control.Errorf(control.ErrInvalid, "drain: no worker named")
	}
	live := false
	var ids []string
	for _, hb := range m.ctl.Workers() {
		ids = append(ids, hb.Worker.ID)
		live = live || hb.Worker.ID == id
	}
	was := m.cordoned(id)
	jobs, count := m.jobsOn(id)
	if !live && !was && len(jobs) == 0 {
		meant := ""
		if c := spell.Closest(id, ids); c != "" {
			meant = fmt.Sprintf(" (did you mean %s?)", c)
		}
		return control.DrainPlan{}, control.Errorf(control.ErrNotFound, "drain: no worker %s is live, and no job has tasks on it%s", id, meant)
	}
	if err := m.roomOff(id, jobs); err != nil {
		return control.DrainPlan{}, fmt.Errorf("drain %s: %w; nothing was cordoned or stopped", id, err)
	}
	if _, err := m.setCordon(ctx, id, true); err != nil {
		return control.DrainPlan{}, fmt.Errorf("drain %s: %w; nothing was cordoned or stopped", id, err)
	}
	p := control.DrainPlan{Worker: id, Live: live, AlreadyCordoned: was}
	for _, j := range jobs {
		st := j.status()
		p.Jobs = append(p.Jobs, control.DrainJob{Job: st.Name, State: st.State, Tasks: count[j], Needs: len(j.plan.Tasks)})
	}
	return p, nil
}

// Uncordon implements control.Drainer.
func (m *Manager) Uncordon(ctx context.Context, id string) (control.CordonState, error) {
	if id == "" {
		return control.CordonState{}, control.Errorf(control.ErrInvalid, "uncordon: no worker named")
	}
	was, err := m.setCordon(ctx, id, false)
	if err != nil {
		return control.CordonState{}, fmt.Errorf("uncordon %s: %w", id, err)
	}
	return control.CordonState{Worker: id, Cordoned: false, Was: was}, nil
}

// MoveJob implements control.Drainer. The savepoint and what follows run
// on, whatever becomes of the request: a caller that stops waiting (its
// wait ran out, Ctrl-C) leaves the job moved, or, if the savepoint fails,
// running where it was — never stopped halfway.
func (m *Manager) MoveJob(ctx context.Context, r control.MoveRequest) (control.Move, error) {
	j, err := m.job(r.Job)
	if err != nil {
		return control.Move{}, err
	}
	if !m.cordoned(r.Worker) {
		return control.Move{}, control.Errorf(control.ErrConflict, "move %s: worker %s is not cordoned (weir worker drain %s cordons it and moves its jobs)", r.Job, r.Worker, r.Worker)
	}
	mv := control.Move{Job: r.Job}
	st := j.status()
	on := 0
	for _, w := range st.Assignment {
		if w == r.Worker {
			on++
		}
	}
	switch {
	case st.State.Terminal():
		mv.Note = fmt.Sprintf("it %s: nothing to move", st.State)
		return mv, nil
	case on == 0:
		mv.Note = fmt.Sprintf("it has no task on worker %s", r.Worker)
		return mv, nil
	case st.State != control.JobRunning:
		mv.Note = fmt.Sprintf("it is %s, not running: its next attempt is placed off the cordoned workers", st.State)
		return mv, nil
	}
	if err := m.roomOff(r.Worker, []*job{j}); err != nil {
		return mv, fmt.Errorf("move %s: %w; the job keeps running where it was", r.Job, err)
	}
	m.cordon.mu.Lock()
	if m.cordon.moving[r.Job] {
		m.cordon.mu.Unlock()
		return mv, control.Errorf(control.ErrConflict, "move %s: a move of it is under way", r.Job)
	}
	if m.cordon.moving == nil {
		m.cordon.moving = map[string]bool{}
	}
	m.cordon.moving[r.Job] = true
	m.cordon.mu.Unlock()
	m.mu.Lock()
	if m.ctx == nil || m.ctx.Err() != nil {
		m.mu.Unlock()
		m.doneMoving(r.Job)
		return mv, control.Errorf(control.ErrUnavailable, "move %s: the coordinator is shutting down", r.Job)
	}
	m.wg.Add(1)
	m.mu.Unlock()
	type result struct {
		mv  control.Move
		err error
	}
	res := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		defer m.doneMoving(r.Job)
		mv, err := j.move(r.Worker, st.Attempt)
		res <- result{mv, err}
	}()
	select {
	case x := <-res:
		return x.mv, x.err
	case <-ctx.Done():
		return mv, control.Errorf(control.ErrUnavailable, "move %s: its stop savepoint is still under way (weir job status %s shows where it runs)", r.Job, r.Job)
	}
}

func (m *Manager) doneMoving(job string) {
	m.cordon.mu.Lock()
	delete(m.cordon.moving, job)
	m.cordon.mu.Unlock()
}

// move takes a stop savepoint of attempt, has its sinks commit it (rest),
// and queues the attempt's end as a worker's goodbye (left): the job's
// goroutine cancels the attempt and places the next one, restored from
// its latest checkpoint — the savepoint: nothing completes after a stop
// savepoint in its attempt — on the workers that are not cordoned. A
// savepoint that fails leaves the attempt running: its sources go on.
func (j *job) move(worker string, attempt int) (control.Move, error) {
	mv := control.Move{Job: j.spec.Name, Attempt: attempt}
	ctx := j.ctx
	if t := j.spec.Checkpointing.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t+time.Second)
		defer cancel()
	}
	if err := j.awaitRunning(ctx, "move"); err != nil {
		return mv, fmt.Errorf("%w (the job was not moved)", err)
	}
	cp, err := j.runner.StopSavepoint(ctx)
	if err != nil {
		if fo, ok := j.failedOver(mv, worker, err.Error()); ok {
			return fo, nil
		}
		return mv, control.Errorf(control.ErrConflict, "move %s: its stop savepoint failed: %v; the job keeps running where it was", j.spec.Name, err)
	}
	mv.Savepoint = cp.ID
	if fo, ok := j.failedOver(mv, worker, fmt.Sprintf("savepoint %d completed", cp.ID)); ok {
		return fo, nil
	}
	j.rest(j.ctx, attempt, cp.ID)
	j.m.log.Info("moving a job off a cordoned worker", "job", j.spec.Name, "worker", worker, "attempt", attempt, "savepoint", cp.ID)
	j.push(jobEvent{kind: evFailure, attempt: attempt, left: true,
		reason: fmt.Sprintf("moving off cordoned worker %s: restoring savepoint %d on the other workers", worker, cp.ID)})
	mv.Moved = true
	return mv, nil
}

// failedOver reports whether mv's attempt ended (the job failed over, or
// ended) while it was being moved off worker, with the Move that says
// so; savepoint says what became of the stop savepoint ("savepoint
// aborted: checkpoint 2: worker w2 lost"). A job that failed over is no
// refusal to try again: its next attempt restores its latest checkpoint
// off the cordoned workers.
func (j *job) failedOver(mv control.Move, worker, savepoint string) (control.Move, bool) {
	now := j.status()
	if now.Attempt == mv.Attempt && now.State == control.JobRunning {
		return mv, false
	}
	if now.State.Terminal() {
		mv.Note = fmt.Sprintf("it %s as its stop savepoint ran (%s): %s", now.State, savepoint, now.Reason)
		return mv, true
	}
	mv.FailedOver = true
	var f *control.Failure
	for i := range now.Failures {
		if now.Failures[i].Attempt == mv.Attempt {
			f = &now.Failures[i]
			break
		}
	}
	live := false
	for _, hb := range j.m.ctl.Workers() {
		live = live || hb.Worker.ID == worker
	}
	switch {
	case f != nil && f.Kind == control.FailureWorkerLost && !live:
		mv.WorkerLost = true
		mv.Note = fmt.Sprintf("worker %s was lost as its stop savepoint ran (%s): the job failed over from %s to the other workers, from its latest checkpoint (attempt %d ended)",
			worker, savepoint, worker, mv.Attempt)
	case f != nil:
		mv.Note = fmt.Sprintf("it failed over as its stop savepoint ran (%s; attempt %d failed: %s): it restarts from its latest checkpoint on the other workers",
			savepoint, mv.Attempt, f.Reason)
	default:
		why := ""
		if now.Reason != "" {
			why = ": " + now.Reason
		}
		mv.Note = fmt.Sprintf("its attempt %d ended as its stop savepoint ran (%s)%s; it is placed again from its latest checkpoint on the other workers", mv.Attempt, savepoint, why)
	}
	return mv, true
}
