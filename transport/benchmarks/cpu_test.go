package benchmarks

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time the process (benchmark, client and the embedded
// server) has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reports cpu-ns/msg: CPU time per message, steadier than
// wall-clock throughput on a busy machine.
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{start: cpuTime()} }

func (m cpuMeter) report(b *testing.B, msgs int) {
	b.ReportMetric(float64(cpuTime()-m.start)/float64(msgs), "cpu-ns/msg")
}
