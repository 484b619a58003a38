package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/weirhq/weir/coordinator/control"
)

const workerDrainUsage = `NAME [-nats URL] [auth flags] [-wait D] [-timeout D]

Takes worker NAME out of service without failing a job over. It cordons
the worker — the coordinator places no new task on it — and moves every
job that has tasks on it to the other workers, one job at a time: an
aligned stop savepoint (its sources take nothing after the savepoint's
barrier, its sinks commit the output up to it), then the job's next
attempt restored from that savepoint on the workers that are not
cordoned. Nothing is replayed and no output is repeated or lost; the move
is no failure of the job's (not counted against restart.attempts; weir
job status counts the attempt as a replacement).

Before it cordons anything it checks that every such job fits on the
other workers' free slots, and refuses in one line naming the job, the
slots it needs and what is free. A job whose stop savepoint fails (it
expires, say) keeps running where it was: the drain names it and why, and
exits 1 once the others moved. A job that fails over meanwhile (the
worker is lost, killed during the savepoint, say: "savepoint N aborted")
is placed off the cordoned workers by its failover, from its latest
checkpoint; the drain says so and waits for it to run there. It ends
when the worker holds no task.

The worker stays cordoned, also across a coordinator restart, until
'weir worker uncordon NAME' (a worker stopped and started again under
its -id is still cordoned). Ctrl-C stops the drain between steps: a move
under way completes on the coordinator (or leaves its job running where
it was); the jobs not moved yet stay where they are; run the drain again
to move them.

-timeout bounds the whole drain (default 10m); -wait how long each request
waits for the coordinator's answer (a move's at least 3m, for its stop
savepoint: a move whose answer does not come in time is reported as not
confirmed, and the coordinator finishes it or leaves the job where it was).`

const workerUncordonUsage = `NAME [-nats URL] [auth flags] [-wait D]

Makes a worker cordoned by 'weir worker drain' placeable again: jobs
placed from now on (submitted, restored, failed over) may get tasks on
it. Jobs that run elsewhere stay where they are.`

// drainWorker is weir worker drain.
func drainWorker(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "worker drain", workerDrainUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	nf.registerWait(fs)
	timeout := fs.Duration("timeout", 10*time.Minute, "how long the drain waits in all for the worker's jobs to run elsewhere")
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("worker drain: give one worker's ID (weir worker ls lists them)")
	}
	name := pos[0]
	if *timeout <= 0 {
		return usagef("worker drain: -timeout %s: give a positive duration", *timeout)
	}
	nc, api, err := connectAPI(&nf, std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	d := drain{ctx: dctx, parent: ctx, api: api, out: std.Out, worker: name, timeout: *timeout, wait: nf.waitTimeout(), hint: nf.hint()}
	return d.run()
}

// drain is one weir worker drain.
type drain struct {
	ctx, parent context.Context
	api         *control.APIClient
	out         io.Writer
	worker      string
	timeout     time.Duration
	// wait bounds each request (-wait); a move's, at least savepointWait.
	wait time.Duration
	hint string
	// moved, failed and left are the jobs moved, those that could not be
	// (with why), and those not dealt with yet; failedOver those that
	// failed over while they were moved (placed off the worker by the
	// failover), and lost says the worker was lost meanwhile.
	moved      []string
	failed     []string
	left       []string
	failedOver []string
	lost       bool
}

func (d *drain) run() error {
	rctx, cancel := context.WithTimeout(d.ctx, d.wait)
	p, err := d.api.DrainWorker(rctx, control.DrainRequest{Worker: d.worker})
	cancel()
	if err != nil {
		return d.apiErr("worker drain", err)
	}
	state := "cordoned"
	if p.AlreadyCordoned {
		state = "already cordoned"
	}
	if !p.Live {
		state += " (not live)"
	}
	switch len(p.Jobs) {
	case 0:
		fmt.Fprintf(d.out, "worker %s %s: no new task is placed on it; no job has tasks on it\n", d.worker, state)
	default:
		names := make([]string, len(p.Jobs))
		for i, j := range p.Jobs {
			names[i] = j.Job
		}
		fmt.Fprintf(d.out, "worker %s %s: no new task is placed on it; moving %s to the other workers: %s\n",
			d.worker, state, plural(len(p.Jobs), "job"), strings.Join(names, ", "))
	}
	for _, j := range p.Jobs {
		d.left = append(d.left, j.Job)
	}
	for len(d.left) > 0 {
		j := p.Jobs[len(p.Jobs)-len(d.left)]
		if d.ctx.Err() != nil {
			return d.stopped()
		}
		d.move(j)
		d.left = d.left[1:]
	}
	if d.ctx.Err() != nil {
		return d.stopped()
	}
	// The jobs not running as the drain began (restarting, waiting for
	// room) leave at their next placement, and a stale attempt's tasks
	// once the worker stopped them: wait until it holds none.
	if err := d.awaitEmpty(); err != nil {
		return err
	}
	if len(d.failed) > 0 {
		again := fmt.Sprintf("weir worker drain%s %s tries again", d.hint, shellQuote(d.worker))
		if d.lost {
			again = "the worker was lost: nothing to drain again; weir job status shows where the jobs run"
		}
		return fmt.Errorf("worker drain %s: %s not moved (%s); the worker stays cordoned; %s",
			d.worker, plural(len(d.failed), "job"), strings.Join(d.failed, "; "), again)
	}
	if d.lost {
		fmt.Fprintf(d.out, "worker %s was lost during the drain: it holds no task (%s failed over to the other workers), and stays cordoned, also if it comes back; weir worker uncordon%s %s places tasks on it again\n",
			d.worker, strings.Join(d.failedOver, ", "), d.hint, shellQuote(d.worker))
		return nil
	}
	fmt.Fprintf(d.out, "worker %s drained: it holds no task, and stays cordoned; weir worker uncordon%s %s places tasks on it again\n",
		d.worker, d.hint, shellQuote(d.worker))
	return nil
}

// move moves job j off the worker and waits until it runs elsewhere.
func (d *drain) move(j control.DrainJob) {
	fmt.Fprintf(d.out, "job %s: stopping with a savepoint to move its %s off %s …\n", j.Job, plural(j.Tasks, "task"), d.worker)
	rctx, cancel := context.WithTimeout(d.ctx, max(d.wait, savepointWait))
	mv, err := d.api.MoveJob(rctx, control.MoveRequest{Job: j.Job, Worker: d.worker})
	cancel()
	if err != nil && errors.Is(err, control.ErrUnavailable) && d.ctx.Err() == nil {
		// The request's wait ran out with the move under way (a
		// checkpoint timeout longer than it): the coordinator finishes
		// it, or leaves the job where it was if its savepoint fails.
		fmt.Fprintf(d.out, "job %s: not confirmed: %v\n", j.Job, oneLine(err))
		d.failed = append(d.failed, j.Job+": its move was still under way as the request's wait ran out (weir job status "+shellQuote(j.Job)+" shows where it runs)")
		return
	}
	if err != nil {
		if d.ctx.Err() != nil {
			// Interrupted, or out of time, while the savepoint was under
			// way: the coordinator carries the move out, or leaves the
			// job running where it was.
			d.failed = append(d.failed, j.Job+": its move was under way as the drain stopped (weir job status "+shellQuote(j.Job)+" shows where it runs)")
			return
		}
		fmt.Fprintf(d.out, "job %s: not moved: %v\n", j.Job, err)
		d.failed = append(d.failed, j.Job+": "+oneLine(err))
		return
	}
	if mv.FailedOver {
		// No refusal: the failover places the job off the cordoned
		// workers, from its latest checkpoint; nothing to try again.
		fmt.Fprintf(d.out, "job %s: failed over: %s\n", j.Job, mv.Note)
		d.lost = d.lost || mv.WorkerLost
	} else if !mv.Moved {
		fmt.Fprintf(d.out, "job %s: %s\n", j.Job, mv.Note)
		return
	} else {
		fmt.Fprintf(d.out, "job %s: savepoint %d taken; restarting from it on the other workers …\n", j.Job, mv.Savepoint)
	}
	var st control.JobStatus
	for {
		rctx, cancel := context.WithTimeout(d.ctx, d.wait)
		st, err = d.api.Job(rctx, j.Job)
		cancel()
		switch {
		case err == nil && st.State.Terminal() && mv.FailedOver:
			fmt.Fprintf(d.out, "job %s: %s after it failed over (%s)\n", j.Job, st.State, st.Reason)
			d.failed = append(d.failed, fmt.Sprintf("%s: %s after it failed over", j.Job, st.State))
			return
		case err == nil && st.State.Terminal():
			fmt.Fprintf(d.out, "job %s: %s after its savepoint %d (%s)\n", j.Job, st.State, mv.Savepoint, st.Reason)
			d.failed = append(d.failed, fmt.Sprintf("%s: %s", j.Job, st.State))
			return
		case err == nil && st.Attempt > mv.Attempt && st.State == control.JobRunning && !runsOn(st, d.worker):
			from := fmt.Sprintf("restored from savepoint %d", st.RestoredFrom)
			switch {
			case mv.FailedOver && st.RestoredFrom > 0:
				from = fmt.Sprintf("restored from checkpoint %d", st.RestoredFrom)
			case mv.FailedOver:
				from = "from its start: no checkpoint to restore"
			}
			fmt.Fprintf(d.out, "job %s: running on %s (attempt %d, %s)\n",
				j.Job, strings.Join(workersOf(st), ", "), st.Attempt, from)
			if mv.FailedOver {
				d.failedOver = append(d.failedOver, j.Job)
			} else {
				d.moved = append(d.moved, j.Job)
			}
			return
		}
		select {
		case <-d.ctx.Done():
			where := string(st.State)
			if st.Reason != "" {
				where += ": " + st.Reason
			}
			if mv.FailedOver {
				d.failed = append(d.failed, fmt.Sprintf("%s: failed over, not running again yet (%s)", j.Job, where))
			} else {
				d.failed = append(d.failed, fmt.Sprintf("%s: savepoint %d taken, not running again yet (%s)", j.Job, mv.Savepoint, where))
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awaitEmpty waits until the worker holds no task (or is not live).
func (d *drain) awaitEmpty() error {
	said := false
	for {
		rctx, cancel := context.WithTimeout(d.ctx, d.wait)
		ws, err := d.api.Workers(rctx)
		cancel()
		if err == nil {
			used := 0
			for _, w := range ws {
				if w.ID == d.worker {
					used = w.Used
				}
			}
			if used == 0 {
				return nil
			}
			if !said && len(d.failed) == 0 {
				fmt.Fprintf(d.out, "worker %s still holds %s: waiting for them to leave …\n", d.worker, plural(used, "task"))
				said = true
			}
			if len(d.failed) > 0 {
				return nil // those of the jobs not moved stay
			}
		}
		select {
		case <-d.ctx.Done():
			return d.stopped()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopped says where a drain cut short (Ctrl-C, -timeout) left things.
func (d *drain) stopped() error {
	why := fmt.Sprintf("-timeout %s ran out", d.timeout)
	if d.parent.Err() != nil {
		why = "interrupted"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "worker drain %s: %s; the worker stays cordoned", d.worker, why)
	if len(d.moved) > 0 {
		fmt.Fprintf(&b, "; moved: %s", strings.Join(d.moved, ", "))
	}
	if len(d.failedOver) > 0 {
		fmt.Fprintf(&b, "; failed over to the other workers: %s", strings.Join(d.failedOver, ", "))
	}
	if len(d.failed) > 0 {
		fmt.Fprintf(&b, "; not moved: %s", strings.Join(d.failed, "; "))
	}
	if len(d.left) > 0 {
		fmt.Fprintf(&b, "; not moved yet (running where they were): %s", strings.Join(d.left, ", "))
	}
	fmt.Fprintf(&b, "; weir worker drain%s %s moves the rest", d.hint, shellQuote(d.worker))
	return errors.New(b.String())
}

func (d *drain) apiErr(what string, err error) error {
	if d.parent.Err() != nil {
		return fmt.Errorf("%s %s: interrupted", what, d.worker)
	}
	return apiErr(what, err)
}

// runsOn reports whether st places a task on worker.
func runsOn(st control.JobStatus, worker string) bool {
	for _, w := range st.Assignment {
		if w == worker {
			return true
		}
	}
	return false
}

// workersOf returns the workers st places tasks on, sorted.
func workersOf(st control.JobStatus) []string {
	set := map[string]bool{}
	for _, w := range st.Assignment {
		set[w] = true
	}
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// plural is "1 job", "2 jobs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// uncordonWorker is weir worker uncordon.
func uncordonWorker(ctx context.Context, std Stdio, args []string) error {
	fs := newFlags(std, "worker uncordon", workerUncordonUsage)
	var nf natsFlags
	nf.register(fs, defaultNATS, "NATS server URL")
	nf.registerWait(fs)
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("worker uncordon: give one worker's ID (weir worker ls lists them)")
	}
	nc, api, err := connectAPI(&nf, std.Err)
	if err != nil {
		return err
	}
	defer nc.Close()
	cs, err := api.Uncordon(ctx, pos[0])
	if err != nil {
		return apiErr("worker uncordon", err)
	}
	if !cs.Was {
		fmt.Fprintf(std.Out, "worker %s was not cordoned\n", cs.Worker)
		return nil
	}
	fmt.Fprintf(std.Out, "worker %s uncordoned: jobs placed from now on may get tasks on it (those running elsewhere stay there)\n", cs.Worker)
	return nil
}
