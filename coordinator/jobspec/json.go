package jobspec

import "encoding/json"

// A spec that reaches the job API as JSON leaves out what its client
// leaves out, as a YAML spec does: decoded, it gets the defaults Parse
// gives a spec that leaves them out, and what it gives overrides them. Zero
// values Check cannot tell from a setting — restart.attempts, a delay of
// 0, a parallelism — are filled here, where the JSON still tells a field
// left out from one written 0.

// UnmarshalJSON decodes a spec with Parse's defaults for the checkpointing
// and restart fields it leaves out: exactly-once checkpoints every
// DefaultInterval, DefaultRestartAttempts restarts with exponential
// backoff (fixed-delay of DefaultRestartDelay for a restart block that
// names that strategy or gives a delay).
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	p := plain{
		Checkpointing: Checkpointing{
			Mode: ModeExactlyOnce, Interval: DefaultInterval, Timeout: DefaultTimeout,
			MaxConcurrent: DefaultMaxConcurrent, Retained: DefaultRetained,
		},
		Restart: Restart{Attempts: DefaultRestartAttempts},
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var given struct {
		Restart map[string]json.RawMessage `json:"restart"`
	}
	if err := json.Unmarshal(b, &given); err != nil {
		return err
	}
	_, delay := given.Restart["delay"]
	r := &p.Restart
	if r.Strategy == "" {
		r.Strategy = RestartExponentialBackoff
		if delay {
			r.Strategy = RestartFixedDelay
		}
	}
	switch r.Strategy {
	case RestartFixedDelay:
		if !delay {
			r.Delay = DefaultRestartDelay
		}
	case RestartNone:
		r.Attempts = 0
	}
	*s = Spec(p)
	return nil
}

// UnmarshalJSON decodes a source with Parse's defaults for what it leaves
// out: a parallelism of 1, keys from the Weir-Key header.
func (s *Source) UnmarshalJSON(b []byte) error {
	type plain Source
	p := plain{Parallelism: 1, Key: KeyFromHeader}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Source(p)
	return nil
}

// UnmarshalJSON decodes an operator with Parse's default parallelism of 1
// where it gives none.
func (o *Operator) UnmarshalJSON(b []byte) error {
	type plain Operator
	p := plain{Parallelism: 1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*o = Operator(p)
	return nil
}

// UnmarshalJSON decodes a sink with Parse's default parallelism of 1 where
// it gives none.
func (k *Sink) UnmarshalJSON(b []byte) error {
	type plain Sink
	p := plain{Parallelism: 1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*k = Sink(p)
	return nil
}
