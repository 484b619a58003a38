package job

import "github.com/weirhq/weir/coordinator/plan"

// ReasonWaitingForCaps begins a created or restarting job's reason while
// workers are live but the caps of none take it (control.Caps: weir
// worker -max-task-memory and the like); one worker's refusal follows.
const ReasonWaitingForCaps = "waiting for a worker whose caps take it: "

// cappedError is place's error when every live worker's caps refuse the
// job: it waits as for a worker to join (it is a plan.ErrNoWorkers), with
// the refusal of one as its reason.
type cappedError struct{ refused error }

func (e *cappedError) Error() string { return e.refused.Error() }

func (e *cappedError) Unwrap() error { return plan.ErrNoWorkers }
