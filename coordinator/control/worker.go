package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// WorkerHandler is what a worker does on the coordinator's requests. An
// error is sent back as the reply. The calls of one job come one at a
// time, in order; those of different jobs may come at the same time, so
// that a job whose cancel or stop takes long (a sink finishing its
// commits) does not hold up the checkpoints of the others.
type WorkerHandler interface {
	// Deploy sets up an attempt's tasks on this worker (see Deploy).
	Deploy(ctx context.Context, d Deploy) error
	// Cancel stops every task of an attempt.
	Cancel(ctx context.Context, c Cancel) error
	// Trigger has the attempt's source tasks start a checkpoint.
	Trigger(ctx context.Context, t Trigger) error
	// Complete passes a checkpoint's completion on to the tasks.
	Complete(ctx context.Context, c Complete) error
	// Abort passes a checkpoint's abort on to the tasks.
	Abort(ctx context.Context, a Abort) error
	// Stop brings an attempt's tasks to rest after its stop savepoint.
	Stop(ctx context.Context, s Stop) error
}

// InputEnder is a WorkerHandler that can end its source tasks' input
// where they have read to (EndInput, a drain). A worker whose handler is
// not one answers EndInput with an error that says so.
type InputEnder interface {
	EndInput(ctx context.Context, e EndInput) error
}

// InputHolder is a WorkerHandler that can hold its JetStream source tasks
// for a drain (HoldInput). A worker whose handler is not one answers
// HoldInput with an error that says so, and the coordinator ends its
// sources' input where they have read to.
type InputHolder interface {
	HoldInput(ctx context.Context, h HoldInput) (map[string]uint64, error)
}

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	Prefix            string
	HeartbeatInterval time.Duration // default DefaultHeartbeatInterval
	// Tasks, if set, is called for every heartbeat to list the running tasks.
	Tasks func() []TaskRef
	Host  string
	Slots int
	// Store is where the worker writes snapshots (WorkerInfo.Store).
	Store string
	// Caps bound what operators may ask of the worker (WorkerInfo.Caps).
	Caps Caps
}

// Worker is the worker side of the control protocol.
type Worker struct {
	nc   *nats.Conn
	info WorkerInfo
	h    WorkerHandler
	opts WorkerOptions
	subj Subjects
}

// NewWorker returns the worker-side client for worker id; call Run.
func NewWorker(nc *nats.Conn, id string, h WorkerHandler, opts WorkerOptions) *Worker {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	return &Worker{nc: nc, h: h, opts: opts, subj: Subjects{opts.Prefix},
		info: WorkerInfo{ID: id, Host: opts.Host, Slots: opts.Slots, Store: opts.Store, Caps: opts.Caps}}
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.info.ID }

// Run subscribes to the worker's subjects, registers and heartbeats until
// ctx is done. It returns once subscribed and registered-or-heartbeating is
// under way only through ready (closed when the subscription is live);
// pass nil if not needed.
func (w *Worker) Run(ctx context.Context, ready chan<- struct{}) error {
	var sess [8]byte
	_, _ = rand.Read(sess[:])
	w.info.Session = hex.EncodeToString(sess[:])
	msgs := make(chan *nats.Msg, 256)
	sub, err := w.nc.ChanSubscribe(w.subj.Worker(w.info.ID, ">"), msgs)
	if err != nil {
		return fmt.Errorf("worker %s: subscribe: %w", w.info.ID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	defer func() {
		// Best effort, as heartbeats stop anyway: without NATS the flush
		// would wait for the server up to nats.go's 10 s.
		if data, err := json.Marshal(w.info); err == nil && w.nc.IsConnected() {
			_ = w.nc.Publish(w.subj.Unregister(), data)
			_ = w.nc.FlushTimeout(unregisterFlush)
		}
	}()
	if err := w.nc.Flush(); err != nil {
		return fmt.Errorf("worker %s: flush: %w", w.info.ID, err)
	}
	// Registration is best effort: heartbeats register too. A
	// coordinator that answers it may refuse the worker (Unusable): it
	// would place no tasks on it, and says why.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var rep RegisterReply
	err = request(rctx, w.nc, w.subj.Register(), w.info, &rep)
	cancel()
	if err == nil && rep.Refused != "" {
		return fmt.Errorf("worker %s: the coordinator places no tasks on it: %s", w.info.ID, rep.Refused)
	}
	w.heartbeat()
	if ready != nil {
		close(ready)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(w.opts.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.heartbeat()
			}
		}
	}()
	defer wg.Wait()
	q := jobQueues{run: func(m *nats.Msg) {
		if strings.HasSuffix(m.Subject, "."+OpHoldInput) {
			held, err := w.hold(ctx, m)
			respond(w.nc, m, HoldInputReply{Reply: replyFor(err), Held: held})
			return
		}
		respond(w.nc, m, replyFor(w.dispatch(ctx, m)))
	}}
	defer q.wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			q.add(m)
		}
	}
}

// unregisterFlush bounds the wait for the server to take a stopping
// worker's unregistration.
const unregisterFlush = 2 * time.Second

// jobQueues runs requests one job at a time, in arrival order: a goroutine
// per job with requests pending, gone once they are done.
type jobQueues struct {
	run func(*nats.Msg)

	mu      sync.Mutex
	pending map[string][]*nats.Msg // job → requests not yet run; present while its goroutine runs
	wg      sync.WaitGroup
}

// add queues m behind the requests of its job, starting the job's
// goroutine if it has none. A request whose job cannot be read is run in
// the queue of job "", where dispatch refuses it.
func (q *jobQueues) add(m *nats.Msg) {
	var hdr struct {
		Job string `json:"job"`
	}
	_ = json.Unmarshal(m.Data, &hdr)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string][]*nats.Msg{}
	}
	queued, running := q.pending[hdr.Job]
	q.pending[hdr.Job] = append(queued, m)
	if !running {
		q.wg.Add(1)
		go q.drain(hdr.Job)
	}
}

func (q *jobQueues) drain(job string) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		ms := q.pending[job]
		if len(ms) == 0 {
			delete(q.pending, job)
			q.mu.Unlock()
			return
		}
		m := ms[0]
		q.pending[job] = ms[1:]
		q.mu.Unlock()
		q.run(m)
	}
}

// wait waits for the requests being run and those queued.
func (q *jobQueues) wait() { q.wg.Wait() }

func (w *Worker) heartbeat() {
	hb := Heartbeat{Worker: w.info}
	if w.opts.Tasks != nil {
		hb.Tasks = w.opts.Tasks()
	}
	data, err := json.Marshal(hb)
	if err == nil {
		_ = w.nc.Publish(w.subj.Heartbeat(), data)
	}
}

// hold handles HoldInput.
func (w *Worker) hold(ctx context.Context, m *nats.Msg) (map[string]uint64, error) {
	var h HoldInput
	if err := json.Unmarshal(m.Data, &h); err != nil {
		return nil, Errorf(ErrInvalid, "decode %s request: %v", OpHoldInput, err)
	}
	ih, ok := w.h.(InputHolder)
	if !ok {
		return nil, Errorf(ErrInvalid, "worker %s cannot hold its sources for a drain (an older weir build?)", w.info.ID)
	}
	return ih.HoldInput(ctx, h)
}

func (w *Worker) dispatch(ctx context.Context, m *nats.Msg) error {
	op := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	dec := func(v any) error {
		if err := json.Unmarshal(m.Data, v); err != nil {
			return Errorf(ErrInvalid, "decode %s request: %v", op, err)
		}
		return nil
	}
	switch op {
	case OpDeploy:
		var d Deploy
		if err := dec(&d); err != nil {
			return err
		}
		return w.h.Deploy(ctx, d)
	case OpCancel:
		var c Cancel
		if err := dec(&c); err != nil {
			return err
		}
		return w.h.Cancel(ctx, c)
	case OpTrigger:
		var t Trigger
		if err := dec(&t); err != nil {
			return err
		}
		return w.h.Trigger(ctx, t)
	case OpComplete:
		var c Complete
		if err := dec(&c); err != nil {
			return err
		}
		return w.h.Complete(ctx, c)
	case OpAbort:
		var a Abort
		if err := dec(&a); err != nil {
			return err
		}
		return w.h.Abort(ctx, a)
	case OpStop:
		var s Stop
		if err := dec(&s); err != nil {
			return err
		}
		return w.h.Stop(ctx, s)
	case OpEndInput:
		var e EndInput
		if err := dec(&e); err != nil {
			return err
		}
		ie, ok := w.h.(InputEnder)
		if !ok {
			return Errorf(ErrInvalid, "worker %s cannot end its sources' input (an older weir build?)", w.info.ID)
		}
		return ie.EndInput(ctx, e)
	}
	return Errorf(ErrInvalid, "unknown worker operation %q", op)
}

// ErrNotHeard is wrapped by the error of a task event (Worker.Send) that
// the coordinator did not answer: the request timed out, nobody listened
// on the event subject, or the connection was lost on the way — the
// worker's NATS connection or the coordinator, not the job. A task that
// fails for it (its running report not heard) fails as
// FailureConnection.
var ErrNotHeard = errors.New("no answer from the coordinator")

// Send reports a task event to the coordinator and waits for its receipt.
// An event the coordinator did not answer fails with an error wrapping
// ErrNotHeard.
func (w *Worker) Send(ctx context.Context, e Event) error {
	e.Worker = w.info.ID
	if err := request(ctx, w.nc, w.subj.Event(), e, nil); err != nil {
		if notHeard(err) {
			return fmt.Errorf("send %s event of %s: %w (%w)", e.Type, e.Task, err, ErrNotHeard)
		}
		return fmt.Errorf("send %s event of %s: %w", e.Type, e.Task, err)
	}
	return nil
}

// notHeard reports whether err, a request's, got no answer: not one that
// the answer was an error, nor a canceled request.
func notHeard(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// Running reports that task restored its state and runs (EventRunning):
// once every task of the attempt did, the coordinator starts checkpointing.
func (w *Worker) Running(ctx context.Context, t TaskRef) error {
	return w.Send(ctx, Event{Type: EventRunning, Job: t.Job, Attempt: t.Attempt, Task: t.Task})
}

// Ack reports that task stored its snapshot of checkpoint id under handle.
func (w *Worker) Ack(ctx context.Context, t TaskRef, id int64, handle string, metrics map[string]int64) error {
	return w.Send(ctx, Event{Type: EventAck, Job: t.Job, Attempt: t.Attempt, Task: t.Task,
		CheckpointID: id, Handle: handle, Metrics: metrics})
}

// Decline reports that task will not complete checkpoint id.
func (w *Worker) Decline(ctx context.Context, t TaskRef, id int64, kind, reason string) error {
	return w.Send(ctx, Event{Type: EventDecline, Job: t.Job, Attempt: t.Attempt, Task: t.Task,
		CheckpointID: id, Kind: kind, Reason: reason})
}

// Failed reports that task stopped with an error, of kind.
func (w *Worker) Failed(ctx context.Context, t TaskRef, kind FailureKind, reason string) error {
	return w.Send(ctx, Event{Type: EventFailed, Job: t.Job, Attempt: t.Attempt, Task: t.Task, FailureKind: kind, Reason: reason})
}

// FailedSecondary reports that task stopped because another task failed
// (see Event.Secondary).
func (w *Worker) FailedSecondary(ctx context.Context, t TaskRef, kind FailureKind, reason string) error {
	return w.Send(ctx, Event{Type: EventFailed, Job: t.Job, Attempt: t.Attempt, Task: t.Task, FailureKind: kind, Reason: reason,
		Secondary: true})
}

// FailedUnrecoverable reports that task stopped with an error that would
// recur on every restart (see ErrUnrecoverable): the job fails at once.
func (w *Worker) FailedUnrecoverable(ctx context.Context, t TaskRef, kind FailureKind, reason string) error {
	return w.Send(ctx, Event{Type: EventFailed, Job: t.Job, Attempt: t.Attempt, Task: t.Task, FailureKind: kind, Reason: reason,
		Unrecoverable: true})
}

// InputEnded reports that task's input ended (EventInputEnded): once
// every task of the attempt said so, the coordinator takes the job's final
// savepoint and ends the job.
func (w *Worker) InputEnded(ctx context.Context, t TaskRef) error {
	return w.Send(ctx, Event{Type: EventInputEnded, Job: t.Job, Attempt: t.Attempt, Task: t.Task})
}

// Committing reports that task handed its sink's output up to checkpoint
// id to the sink's commits (EventCommitting).
func (w *Worker) Committing(ctx context.Context, t TaskRef, id int64) error {
	return w.Send(ctx, Event{Type: EventCommitting, Job: t.Job, Attempt: t.Attempt, Task: t.Task, CheckpointID: id})
}

// Finished reports that task reached the end of its input.
func (w *Worker) Finished(ctx context.Context, t TaskRef) error {
	return w.Send(ctx, Event{Type: EventFinished, Job: t.Job, Attempt: t.Attempt, Task: t.Task})
}
