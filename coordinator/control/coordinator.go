package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// CoordinatorHandler receives what workers report. Calls come from the
// coordinator client's goroutines; they should return quickly.
type CoordinatorHandler interface {
	// Event is a task event; an error is sent back to the worker.
	Event(e Event) error
	// WorkerJoined is called when a worker registers or first heartbeats.
	WorkerJoined(w WorkerInfo)
	// WorkerLost is called when a worker missed its heartbeats for the
	// heartbeat timeout, unregistered, or was forgotten.
	WorkerLost(id string)
	// WorkerTasks is called with the tasks a live worker reports in each
	// heartbeat (none: it runs none), so the handler can cancel those it
	// no longer wants (an attempt the worker missed the cancel of while it
	// was cut off), and see slots come free.
	WorkerTasks(id string, tasks []TaskRef)
}

// CoordinatorOptions configure a Coordinator.
type CoordinatorOptions struct {
	Prefix string
	// HeartbeatTimeout declares a silent worker lost; default
	// DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Fence, if set, guards every request to a worker (see Fence): one
	// it refuses is not sent.
	Fence Fence
	// Unusable, if set, says why the coordinator would place no tasks on
	// a worker ("" if it would): its registration is answered with that
	// (RegisterReply.Refused), and the worker stops. One that joins by
	// heartbeat alone is kept, and the handler leaves it out.
	Unusable func(WorkerInfo) string
	// Log, if set, hears of a coordinator that was not running (frozen,
	// starved) between its heartbeat checks.
	Log *slog.Logger
}

// Fence guards a coordinator's acts on shared state — its requests to
// workers, its writes to job records and checkpoints — with its lease
// (coordinator/lease): it returns an error, and nothing is done, once the
// coordinator no longer surely is the only one; else a context derived
// from ctx that ends when that happens, for the act, and release, called
// when the act is done.
type Fence func(ctx context.Context) (_ context.Context, release context.CancelFunc, _ error)

// guard is c's Fence on ctx, or ctx as it is without one.
func (c *Coordinator) guard(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if c.opts.Fence == nil {
		return ctx, func() {}, nil
	}
	g, release, err := c.opts.Fence(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: %w", err)
	}
	return g, release, nil
}

// Coordinator is the coordinator side of the control protocol.
type Coordinator struct {
	nc   *nats.Conn
	h    CoordinatorHandler
	opts CoordinatorOptions
	subj Subjects

	mu      sync.Mutex
	workers map[string]*workerState
	// departed holds the sessions that unregistered, with when: a
	// heartbeat they sent before leaving may be handled after the
	// unregistration (each subscription has its own goroutine) and must
	// not bring the worker back.
	departed map[string]time.Time

	// hearing is since when the coordinator's own connection carries
	// heartbeats: set when it found itself cut off (deaf) and again when
	// the connection reconnected (reconnects counts them); a worker is
	// silent only for the time since then. Used by checkHeartbeats only.
	hearing    time.Time
	deaf       bool
	reconnects uint64
	// checked is when checkHeartbeats last ended, by runClock (the
	// clock its ticker runs on, time.Now; tests set another): a next one
	// much later than its period says the coordinator itself was not
	// running.
	checked  time.Time
	runClock func() time.Time
}

type workerState struct {
	info     WorkerInfo
	lastSeen time.Time
	tasks    []TaskRef
}

// NewCoordinator returns the coordinator-side client; call Run.
func NewCoordinator(nc *nats.Conn, h CoordinatorHandler, opts CoordinatorOptions) *Coordinator {
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Coordinator{nc: nc, h: h, opts: opts, subj: Subjects{opts.Prefix}, workers: map[string]*workerState{},
		departed: map[string]time.Time{}, runClock: time.Now}
}

// Run serves registrations, heartbeats and events, and checks heartbeats,
// until ctx is done. ready, if not nil, is closed once the subscriptions
// are live.
func (c *Coordinator) Run(ctx context.Context, ready chan<- struct{}) error {
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	sub := func(subject string, fn nats.MsgHandler) error {
		s, err := c.nc.Subscribe(subject, fn)
		if err != nil {
			return fmt.Errorf("coordinator: subscribe %s: %w", subject, err)
		}
		subs = append(subs, s)
		return nil
	}
	if err := sub(c.subj.Register(), func(m *nats.Msg) {
		var info WorkerInfo
		if err := json.Unmarshal(m.Data, &info); err != nil || info.ID == "" {
			respond(c.nc, m, RegisterReply{Error: "bad registration"})
			return
		}
		if c.opts.Unusable != nil {
			if why := c.opts.Unusable(info); why != "" {
				respond(c.nc, m, RegisterReply{HeartbeatTimeout: c.opts.HeartbeatTimeout, Refused: why})
				return
			}
		}
		c.seen(info, nil)
		respond(c.nc, m, RegisterReply{HeartbeatTimeout: c.opts.HeartbeatTimeout})
	}); err != nil {
		return err
	}
	if err := sub(c.subj.Heartbeat(), func(m *nats.Msg) {
		var hb Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil || hb.Worker.ID == "" {
			return
		}
		// A heartbeat without tasks says the worker runs none (an empty
		// list is not sent); a registration says nothing of them.
		tasks := hb.Tasks
		if tasks == nil {
			tasks = []TaskRef{}
		}
		if c.seen(hb.Worker, tasks) {
			c.h.WorkerTasks(hb.Worker.ID, hb.Tasks)
		}
	}); err != nil {
		return err
	}
	if err := sub(c.subj.Unregister(), func(m *nats.Msg) {
		var info WorkerInfo
		if err := json.Unmarshal(m.Data, &info); err != nil || info.ID == "" {
			return
		}
		c.mu.Lock()
		w, ok := c.workers[info.ID]
		same := ok && w.info.Session == info.Session
		if info.Session != "" {
			c.departed[info.Session] = c.opts.Now()
		}
		c.mu.Unlock()
		if same {
			c.leave(info.ID)
		}
	}); err != nil {
		return err
	}
	if err := sub(c.subj.Event(), func(m *nats.Msg) {
		var e Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			respond(c.nc, m, Reply{Error: "bad event: " + err.Error(), Code: "invalid"})
			return
		}
		respond(c.nc, m, replyFor(c.h.Event(e)))
	}); err != nil {
		return err
	}
	if err := c.nc.Flush(); err != nil {
		return fmt.Errorf("coordinator: flush: %w", err)
	}
	if ready != nil {
		close(ready)
	}
	period := c.opts.HeartbeatTimeout / 4
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.checkHeartbeats(period)
		}
	}
}

// seen records a sign of life from a worker; it returns false when the
// message came from a session that has unregistered and was ignored.
func (c *Coordinator) seen(info WorkerInfo, tasks []TaskRef) bool {
	c.mu.Lock()
	if _, gone := c.departed[info.Session]; gone && info.Session != "" {
		c.mu.Unlock()
		return false
	}
	w, known := c.workers[info.ID]
	if known && info.Session != "" && w.info.Session != "" && info.Session != w.info.Session {
		// The worker restarted: what it ran is gone.
		delete(c.workers, info.ID)
		c.mu.Unlock()
		c.h.WorkerLost(info.ID)
		c.mu.Lock()
		w, known = nil, false
	}
	if !known {
		w = &workerState{}
		c.workers[info.ID] = w
	}
	w.info, w.lastSeen = info, c.opts.Now()
	if tasks != nil {
		w.tasks = tasks
	}
	c.mu.Unlock()
	if !known {
		c.h.WorkerJoined(info)
	}
	return true
}

// checkHeartbeats declares lost the workers not heard from for the
// heartbeat timeout — unless the coordinator could not have heard them.
// When its own server falls silent (a frozen process, a partition), every
// worker's heartbeats stop reaching it at once, for the 4–6 s its
// connection takes to leave that server, longer than the default timeout:
// it declared every worker lost and failed every job over, naming a
// worker as the cause, while the workers ran on through the other
// servers. So before it declares any, it makes sure its connection
// answers (a flush, within period); while it does not, nobody is lost,
// and once it does again (or has reconnected), each worker has a whole
// timeout from then on to be heard.
//
// Nor does it declare any lost after it was not running itself: a process
// frozen (kill -STOP, a VM paused) or starved for longer than the timeout
// resumed to find every worker's heartbeat late, and declared them all
// lost in the same millisecond, failing their jobs over with a worker as
// the cause, while their heartbeats waited to be read. A check that comes
// more than twice its period after the last one ended gives each worker a
// whole timeout from then on, as a reconnect does, and logs for how long
// the coordinator was not running.
func (c *Coordinator) checkHeartbeats(period time.Duration) {
	defer func() {
		c.mu.Lock()
		c.checked = c.runClock()
		c.mu.Unlock()
	}()
	c.mu.Lock()
	gap := c.runClock().Sub(c.checked)
	frozen := !c.checked.IsZero() && gap > 2*period
	if frozen {
		c.hearing = later(c.hearing, c.opts.Now())
	}
	c.mu.Unlock()
	if frozen && c.opts.Log != nil {
		c.opts.Log.Warn("coordinator was not running (frozen or starved): each worker gets a heartbeat timeout from now to be heard before it is declared lost",
			"for", gap.Round(time.Millisecond), "heartbeat_timeout", c.opts.HeartbeatTimeout)
	}
	if !c.listening(period) {
		return
	}
	now := c.opts.Now()
	var lost []string
	c.mu.Lock()
	for s, at := range c.departed {
		if now.Sub(at) > 2*c.opts.HeartbeatTimeout {
			delete(c.departed, s)
		}
	}
	for id, w := range c.workers {
		if now.Sub(later(w.lastSeen, c.hearing)) > c.opts.HeartbeatTimeout {
			lost = append(lost, id)
			delete(c.workers, id)
		}
	}
	c.mu.Unlock()
	sort.Strings(lost)
	for _, id := range lost {
		c.h.WorkerLost(id)
	}
}

// listening reports whether the coordinator's connection carries what the
// workers send: it is connected and, when some worker is overdue, answers a
// flush within timeout. It keeps c.hearing: the time from which the
// connection has carried heartbeats without a break it knows of.
func (c *Coordinator) listening(timeout time.Duration) bool {
	c.mu.Lock()
	overdue := false
	now := c.opts.Now()
	for _, w := range c.workers {
		if now.Sub(later(w.lastSeen, c.hearing)) > c.opts.HeartbeatTimeout {
			overdue = true
			break
		}
	}
	c.mu.Unlock()
	ok := c.nc.IsConnected()
	if ok && overdue {
		ok = c.nc.FlushTimeout(timeout) == nil
	}
	reconnects := c.nc.Stats().Reconnects
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		c.deaf = true
		return false
	}
	if c.deaf || reconnects != c.reconnects {
		c.deaf, c.reconnects, c.hearing = false, reconnects, c.opts.Now()
	}
	return true
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Forget drops a worker from the live set at once and reports it lost.
func (c *Coordinator) Forget(id string) {
	c.mu.Lock()
	_, ok := c.workers[id]
	delete(c.workers, id)
	c.mu.Unlock()
	if ok {
		c.h.WorkerLost(id)
	}
}

// WorkerLeaver is a CoordinatorHandler that tells a worker that stopped
// on purpose, saying goodbye (its process was told to stop: a rolling
// restart), from one lost: WorkerLeft is called instead of WorkerLost.
type WorkerLeaver interface {
	WorkerLeft(id string)
}

// leave forgets worker id, which said goodbye.
func (c *Coordinator) leave(id string) {
	c.mu.Lock()
	_, ok := c.workers[id]
	delete(c.workers, id)
	c.mu.Unlock()
	if !ok {
		return
	}
	if l, ok := c.h.(WorkerLeaver); ok {
		l.WorkerLeft(id)
		return
	}
	c.h.WorkerLost(id)
}

// LiveWorkers returns the IDs of the workers that are alive, sorted.
func (c *Coordinator) LiveWorkers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.workers))
	for id := range c.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// HeardFrom returns when each live worker was last heard from (its last
// heartbeat), by ID: one that went silent is live until HeartbeatTimeout
// passes, and its tasks' figures are its last report's meanwhile.
func (c *Coordinator) HeardFrom() map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]time.Time, len(c.workers))
	for id, w := range c.workers {
		out[id] = w.lastSeen
	}
	return out
}

// Workers returns what the live workers reported in their last heartbeat.
func (c *Coordinator) Workers() []Heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Heartbeat, 0, len(c.workers))
	for _, w := range c.workers {
		out = append(out, Heartbeat{Worker: w.info, Tasks: append([]TaskRef(nil), w.tasks...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Worker.ID < out[j].Worker.ID })
	return out
}

// Deploy sends a deploy request to worker and waits for its reply until
// ctx ends. The request is sent again each time the coordinator's NATS
// connection comes back while it waits (see resend): a worker keeps an
// attempt it runs already when asked to deploy it again.
func (c *Coordinator) Deploy(ctx context.Context, worker string, d Deploy) error {
	return c.resend(ctx, c.subj.Worker(worker, OpDeploy), d, nil)
}

// Cancel asks worker to stop a job attempt's tasks. Like Deploy, it is
// sent again when the connection comes back while it waits: a cancel of
// an attempt the worker no longer runs does nothing.
func (c *Coordinator) Cancel(ctx context.Context, worker string, m Cancel) error {
	return c.resend(ctx, c.subj.Worker(worker, OpCancel), m, nil)
}

// resend is request for requests a worker handles the same however often
// it gets them (every one but Trigger). Each time the coordinator's
// connection comes back after it dropped (nats.CONNECTED) while the
// request waits for its answer, the request is sent again at once: one
// written to a socket the server had closed, or a reply sent while the
// coordinator was away, is never answered, and the caller would otherwise
// wait until ctx ends — for a deploy, a minute (job.Options.DeployTimeout),
// however short the blip. A request the connection could not even buffer
// while it reconnected is sent again once it is back. After the
// connection came back, a worker that does not listen yet (its own
// connection may come back later) is asked again after pauses growing to
// a second, until it has not listened for the heartbeat timeout; only then
// does the request fail with ErrUnavailable, as it does at once without a
// reconnect (a worker gone between heartbeats).
func (c *Coordinator) resend(ctx context.Context, subject string, v, out any) error {
	ctx, release, err := c.guard(ctx)
	if err != nil {
		return err
	}
	defer release()
	back := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(back)
	var (
		cameBack bool
		deaf     time.Time // since when the worker has not listened
		pause    = 20 * time.Millisecond
	)
	for {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- request(rctx, c.nc, subject, v, out) }()
		var err error
		select {
		case err = <-done:
			cancel()
		case <-back:
			// The answer may be lost: ask again.
			cancel()
			<-done
			cameBack = true
			continue
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		// The connection announces that it is back before it sends what
		// it buffered meanwhile, so a reconnect that explains err is
		// already in back.
		select {
		case <-back:
			cameBack = true
		default:
		}
		switch {
		case errors.Is(err, nats.ErrReconnectBufExceeded):
			// Not sent: send it once the connection is back.
			select {
			case <-back:
				cameBack = true
				continue
			case <-ctx.Done():
				return err
			}
		case !cameBack || !errors.Is(err, ErrUnavailable):
			return err
		}
		if deaf.IsZero() {
			deaf = time.Now()
		} else if time.Since(deaf) >= c.opts.HeartbeatTimeout {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-back:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, time.Second)
	}
}

// Trigger asks worker to start a checkpoint at its source tasks. It is
// sent once: sent again, the sources would inject the checkpoint's barrier
// twice. A trigger lost in a NATS blip costs that checkpoint (it fails
// when ctx ends, and a failed trigger does not count as a checkpoint
// failure); the next one is triggered at its interval. Triggers that fail
// in a row for a checkpoint timeout do count (checkpoint.Machine.TriggerFailed).
func (c *Coordinator) Trigger(ctx context.Context, worker string, t Trigger) error {
	ctx, release, err := c.guard(ctx)
	if err != nil {
		return err
	}
	defer release()
	return request(ctx, c.nc, c.subj.Worker(worker, OpTrigger), t, nil)
}

// Complete tells worker that a checkpoint completed. Like Deploy, it is
// sent again when the connection comes back while it waits: a worker
// passes a checkpoint's completion on to its tasks once. (A completion
// lost all the same is made good by the next checkpoint's, which covers
// it, or, for a stop savepoint, by the Stop that follows.)
func (c *Coordinator) Complete(ctx context.Context, worker string, m Complete) error {
	return c.resend(ctx, c.subj.Worker(worker, OpComplete), m, nil)
}

// Abort tells worker that a checkpoint was aborted. Like Deploy, it is
// sent again when the connection comes back while it waits (an abort
// heard twice lets stopped sources go on once): lost, it would leave
// sources stopped for a stop savepoint that failed taking no input.
func (c *Coordinator) Abort(ctx context.Context, worker string, a Abort) error {
	return c.resend(ctx, c.subj.Worker(worker, OpAbort), a, nil)
}

// Stop asks worker to bring a job attempt's tasks to rest after its stop
// savepoint and waits until they are. Like Deploy, it is sent again when
// the connection comes back while it waits: tasks at rest stay so.
func (c *Coordinator) Stop(ctx context.Context, worker string, s Stop) error {
	return c.resend(ctx, c.subj.Worker(worker, OpStop), s, nil)
}

// EndInput asks worker to end the input of a job attempt's source tasks
// where they have read to (a drain). Like Stop, it is sent again when the
// connection comes back while it waits: a task whose input ended ignores
// it.
func (c *Coordinator) EndInput(ctx context.Context, worker string, e EndInput) error {
	return c.resend(ctx, c.subj.Worker(worker, OpEndInput), e, nil)
}

// HoldInput asks worker to hold a job attempt's JetStream source tasks for
// a drain and returns the stream sequence each held task covered. Like
// EndInput, it is sent again when the connection comes back while it
// waits: a held source says the same again.
func (c *Coordinator) HoldInput(ctx context.Context, worker string, h HoldInput) (map[string]uint64, error) {
	var rep HoldInputReply
	if err := c.resend(ctx, c.subj.Worker(worker, OpHoldInput), h, &rep); err != nil {
		return nil, err
	}
	return rep.Held, nil
}
