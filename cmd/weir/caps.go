package main

import (
	"flag"
	"time"

	"github.com/weirhq/weir/coordinator/control"
	"github.com/weirhq/weir/coordinator/jobspec"
)

// capsFlags are the bounds whoever runs a worker sets on what a job's
// operators may ask of it (control.Caps), the same on weir up and weir
// worker. None is set by default: every job runs as before.
type capsFlags struct {
	memory, maxTaskMemory string
	maxCallTimeout        time.Duration
	maxLogRate            int
}

const capsUsage = `-memory SIZE is the worker's memory budget: the memory limits (limits.memory,
64MiB when a spec sets none) of the operator tasks placed on it add up to at
most SIZE. The coordinator counts it as it counts slots: a job whose tasks
do not fit waits, with the reason "waiting for free slots: needs 1GiB of
operator memory (limits.memory), workers have 512MiB free (w1 512MiB of
2GiB)". -max-task-memory SIZE, -max-call-timeout D and -max-log-rate N are
the most one operator instance may ask for as limits.memory, limits.timeout
and limits.log-rate (an unset one asks for the host's default: 64MiB, 5s,
100): a job asking for more is refused at submit when no live worker takes
it, and at deploy by the worker, in one line naming the job, the operator,
the setting, what it asks and the cap. -max-call-timeout bounds
limits.snapshot-timeout too: one a job sets is held to it, and the default
(60s, or limits.timeout if longer) is lowered to it. None is set by
default.`

func (c *capsFlags) register(fs *flag.FlagSet, whose string) {
	fs.StringVar(&c.memory, "memory", "", "memory budget of "+whose+": the most the memory limits of the operator tasks placed on it add up to (e.g. 8GiB; default no limit)")
	fs.StringVar(&c.maxTaskMemory, "max-task-memory", "", "most limits.memory one operator instance may ask for (e.g. 512MiB; default no cap)")
	fs.DurationVar(&c.maxCallTimeout, "max-call-timeout", 0, "most limits.timeout (and limits.snapshot-timeout) one operator instance may ask for, and the longest any call into it runs (default no cap)")
	fs.IntVar(&c.maxLogRate, "max-log-rate", 0, "most limits.log-rate (lines a second) one operator instance may ask for (default no cap)")
}

// caps returns the flags as control.Caps, or a usage error naming the
// flag at fault.
func (c *capsFlags) caps(cmd string) (control.Caps, error) {
	var out control.Caps
	for _, f := range []struct {
		name, v string
		to      *int64
	}{{"memory", c.memory, &out.Memory}, {"max-task-memory", c.maxTaskMemory, &out.MaxTaskMemory}} {
		if f.v == "" {
			continue
		}
		n, err := jobspec.ParseSize(f.v)
		if err != nil {
			return out, usagef("%s: -%s %s: %v", cmd, f.name, f.v, err)
		}
		if n < jobspec.MinMemory {
			return out, usagef("%s: -%s %s: give at least %s", cmd, f.name, f.v, jobspec.FormatSize(jobspec.MinMemory))
		}
		*f.to = n
	}
	if c.maxCallTimeout < 0 || (c.maxCallTimeout > 0 && c.maxCallTimeout < jobspec.MinTimeout) {
		return out, usagef("%s: -max-call-timeout %v: give at least %v", cmd, c.maxCallTimeout, jobspec.MinTimeout)
	}
	if c.maxLogRate < 0 {
		return out, usagef("%s: -max-log-rate %d: give a positive rate", cmd, c.maxLogRate)
	}
	out.MaxCallTimeout, out.MaxLogRate = c.maxCallTimeout, c.maxLogRate
	return out, nil
}
