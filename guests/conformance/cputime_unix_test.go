//go:build unix

package conformance

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used so far.
// Benchmarks report it beside wall time: on a busy machine wall time
// includes waiting for a core, CPU time does not.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
