package benchmarks

import (
	"os"
	"runtime"
	"runtime/pprof"
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
type cpuMeter struct {
	start   time.Duration
	alloc   uint64 // bytes allocated by the process so far
	profile *os.File
}

// allocated is how many heap bytes the process (benchmark, clients and
// server together) has allocated so far.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// profileEnv names a file that receives a CPU profile of the timed part of
// the benchmark (the last one run wins), without the set-up — filling
// streams, compiling guests — that -test.cpuprofile would include.
const profileEnv = "WEIR_BENCH_CPUPROFILE"

func startCPU() cpuMeter {
	m := cpuMeter{}
	if path := os.Getenv(profileEnv); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			m.profile = f
		}
	}
	m.alloc = allocated()
	m.start = cpuTime()
	return m
}

func (m cpuMeter) report(b *testing.B, msgs int) {
	b.ReportMetric(float64(cpuTime()-m.start)/float64(msgs), "cpu-ns/msg")
	b.ReportMetric(float64(allocated()-m.alloc)/float64(msgs), "heap-B/msg")
	if m.profile != nil {
		pprof.StopCPUProfile()
		m.profile.Close()
	}
}
