package control

import (
	"context"
	"encoding/json"
)

// Draining a worker (weir worker drain, uncordon): the job API's requests
// that cordon a worker — no task is placed on it any more — and move the
// jobs that have tasks on it to the other workers, each with a stop
// savepoint and a restore from it in the same run, which is no failover
// (no failure, no restart counted, nothing replayed).

// API operations of draining (subject suffixes).
const (
	APIDrain    = "drain"
	APIUncordon = "uncordon"
	APIMoveJob  = "move_job"
)

// Drainer is the part of the job API that drains workers. The job
// manager implements it; ServeAPI serves it when its API does.
type Drainer interface {
	// DrainWorker cordons a worker and says which jobs have tasks on it.
	// Before it cordons anything it checks that every such job fits on
	// the other workers (their slots, less what other jobs hold there),
	// and refuses (ErrConflict) saying which job does not, with what it
	// needs and what is free: nothing is cordoned or stopped then.
	DrainWorker(ctx context.Context, r DrainRequest) (DrainPlan, error)
	// Uncordon makes a cordoned worker placeable again.
	Uncordon(ctx context.Context, worker string) (CordonState, error)
	// MoveJob moves a running job off the cordoned workers: an aligned
	// stop savepoint (sources take nothing after its barrier, sinks
	// commit its output), then the job's next attempt restored from it,
	// placed on the workers not cordoned — no failure, not counted
	// against restart.attempts (the status counts it as a replacement).
	// It returns once the savepoint completed and the new attempt is
	// being placed; a savepoint that fails leaves the job running where
	// it was, and the error says why. A job that failed over meanwhile
	// (Move.FailedOver) is no error: its failover placed it.
	MoveJob(ctx context.Context, r MoveRequest) (Move, error)
}

// DrainRequest asks to drain Worker.
type DrainRequest struct {
	Worker string `json:"worker"`
}

// DrainPlan is what a drain found: the worker, now cordoned, and the
// jobs that have tasks on it.
type DrainPlan struct {
	Worker string `json:"worker"`
	// Live says the worker is live (a worker not live can be cordoned,
	// so that it gets no tasks once it joins again).
	Live bool `json:"live"`
	// AlreadyCordoned says it was cordoned before this request.
	AlreadyCordoned bool       `json:"already_cordoned,omitempty"`
	Jobs            []DrainJob `json:"jobs,omitempty"`
}

// DrainJob is a job with tasks on a worker being drained.
type DrainJob struct {
	Job   string   `json:"job"`
	State JobState `json:"state"`
	// Tasks counts its tasks on the worker, Needs all of its tasks: the
	// slots it takes on the other workers.
	Tasks int `json:"tasks"`
	Needs int `json:"needs"`
}

// CordonState is a worker's cordon.
type CordonState struct {
	Worker string `json:"worker"`
	// Cordoned says it is cordoned now; Was, before the request.
	Cordoned bool `json:"cordoned"`
	Was      bool `json:"was"`
}

// MoveRequest asks to move Job off the cordoned worker Worker.
type MoveRequest struct {
	Job    string `json:"job"`
	Worker string `json:"worker"`
}

// Move is a move under way: the stop savepoint taken, and the attempt it
// ended (Attempt); the next attempt restores Savepoint. Moved is false
// when there was nothing to move (Note says why: the job has no task on
// the worker any more, or it is not running and its next attempt is
// placed off the cordoned workers anyway).
//
// FailedOver says the job failed over while it was being moved — its
// stop savepoint was aborted as its attempt ended, or the attempt ended
// as the savepoint completed: a worker was lost (the one drained,
// often: WorkerLost), or a task failed. That is no refusal: the job's
// next attempt restores its latest checkpoint on the workers not
// cordoned, as a failover's does, and Note says what happened. Moved is
// false then, and there is nothing to try again.
type Move struct {
	Job        string `json:"job"`
	Moved      bool   `json:"moved"`
	Savepoint  int64  `json:"savepoint,omitempty"`
	Attempt    int    `json:"attempt,omitempty"`
	Note       string `json:"note,omitempty"`
	FailedOver bool   `json:"failed_over,omitempty"`
	WorkerLost bool   `json:"worker_lost,omitempty"`
}

// DrainWorker cordons a worker and lists the jobs with tasks on it (see
// Drainer).
func (c *APIClient) DrainWorker(ctx context.Context, r DrainRequest) (DrainPlan, error) {
	return call[DrainPlan](ctx, c, APIDrain, r)
}

// Uncordon makes a cordoned worker placeable again.
func (c *APIClient) Uncordon(ctx context.Context, worker string) (CordonState, error) {
	return call[CordonState](ctx, c, APIUncordon, nameRequest{worker})
}

// MoveJob moves a job off the cordoned workers (see Drainer).
func (c *APIClient) MoveJob(ctx context.Context, r MoveRequest) (Move, error) {
	return call[Move](ctx, c, APIMoveJob, r)
}

// drainOps are the handlers ServeAPI adds for an API that is a Drainer.
func drainOps(d Drainer) map[string]func(ctx context.Context, data []byte) (any, error) {
	return map[string]func(ctx context.Context, data []byte) (any, error){
		APIDrain: func(ctx context.Context, data []byte) (any, error) {
			var r DrainRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode drain request: %v", err)
			}
			return d.DrainWorker(ctx, r)
		},
		APIUncordon: func(ctx context.Context, data []byte) (any, error) {
			var r nameRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode request: %v", err)
			}
			return d.Uncordon(ctx, r.Name)
		},
		APIMoveJob: func(ctx context.Context, data []byte) (any, error) {
			var r MoveRequest
			if err := json.Unmarshal(data, &r); err != nil {
				return nil, Errorf(ErrInvalid, "decode move request: %v", err)
			}
			return d.MoveJob(ctx, r)
		},
	}
}
