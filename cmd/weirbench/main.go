// Command weirbench runs weir's benchmarks with `go test -bench` and writes
// BENCHMARKS.md: every figure beside its baseline measured in the same run,
// as a ratio, with the command that reproduces it and the machine it ran on.
//
//	go run ./cmd/weirbench            # all groups, writes BENCHMARKS.md
//	go run ./cmd/weirbench -only host # groups whose key contains "host"
//	go run ./cmd/weirbench -o -       # print instead of writing
//
// The analysis of each area (why a figure is what it is) lives in
// docs/bench/*.md; BENCHMARKS.md links to it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// group is one benchmark table.
type group struct {
	Key, Title string
	Pkg, Bench string
	Args       []string // extra go test flags (-benchtime, -cpu)
	Env        []string // extra environment ("NAME=value"), said in the reproduce line
	// Metric is the figure compared; Higher says whether more is better.
	Metric string
	Higher bool
	// Baseline maps a benchmark's name to its baseline's name ("" = none).
	Baseline func(name string) string
	Goal     string
	Details  string // docs/bench file with the analysis
	// Pairs, above 0, runs the benchmarks in that many go test processes,
	// one after another, each running every benchmark once right after its
	// baseline; "vs baseline" is then the median of the per-process
	// ratios. On a VM whose speed drifts over minutes, a ratio of two
	// figures measured seconds apart is steadier than a ratio of medians
	// measured minutes apart (-count runs each benchmark's runs back to
	// back).
	Pairs int
	// GoalRatio, above 0, is the goal as a "vs baseline" figure; a paired
	// group says how many of its processes reached it.
	GoalRatio float64
}

var batchRE = regexp.MustCompile(`^(.*?)/([^/]+)/(batch=\d+)$`)

var groups = []group{
	{
		Key: "host", Title: "Operator calls: passthrough of 64-byte records, one core",
		Pkg: "./host/wasm", Bench: "Passthrough", Args: []string{"-benchtime", "1s", "-cpu", "1"},
		Metric: "cpu-ns/record",
		Baseline: func(n string) string {
			if m := batchRE.FindStringSubmatch(n); m != nil {
				return m[1] + "/native/" + m[3]
			}
			return ""
		},
		Goal:    "batch 1024: WAT ≥ 10 M records/s, Go SDK ≥ 3 M records/s (1e9 / cpu-ns/record)",
		Details: "docs/bench/host.md",
	},
	{
		Key: "guests", Title: "uppercase per guest language, batches of 1024 × 64 B",
		Pkg: "./guests/conformance", Bench: "Uppercase", Args: []string{"-benchtime", "1s"},
		Metric:   "cpu-ns/record",
		Baseline: func(string) string { return "BenchmarkUppercase/native-go" },
		Details:  "docs/bench/guests.md",
	},
	{
		Key: "runtime-checkpoint", Title: "Checkpoint completion under backpressure (operator at 1 ms/record)",
		Pkg: "./host", Bench: "CheckpointUnderBackpressure", Args: []string{"-benchtime", "5x"},
		Metric:   "ms/checkpoint",
		Baseline: func(string) string { return "BenchmarkCheckpointUnderBackpressure/aligned" },
		Goal:     "unaligned ≥ 50× faster than aligned and under 50 ms",
		Details:  "docs/bench/runtime.md",
	},
	{
		Key: "runtime-debloat", Title: "Checkpoints behind a slow operator (~0.5 MB/s) with 1 MiB channels: full buffers against debloated (1 s)",
		Pkg: "./host", Bench: "DebloatUnderBackpressure", Args: []string{"-benchtime", "3x"},
		Metric: "ms/checkpoint",
		Baseline: func(n string) string {
			if strings.HasSuffix(n, "-debloat") {
				return strings.TrimSuffix(n, "-debloat")
			}
			return ""
		},
		Goal:    "debloated aligned checkpoints about the 1 s target (full buffers hold ~4 s of the operator's work)",
		Details: "docs/bench/runtime.md",
	},
	{
		Key: "runtime-pipeline", Title: "Task loop throughput (source → task → sink, local channels)",
		Pkg: "./host", Bench: "Pipeline", Args: []string{"-benchtime", "100000x"},
		Metric: "records/s", Higher: true,
		Baseline: func(string) string { return "BenchmarkPipeline/channel-baseline" },
		Details:  "docs/bench/runtime.md",
	},
	{
		Key: "transport-core", Title: "Core NATS: raw, plain Go forwarder, weir with the Go-SDK uppercase (64 B)",
		Pkg: "./transport/benchmarks", Bench: "Core", Args: []string{"-benchtime", "1000000x"},
		Metric: "msgs/s", Higher: true,
		Baseline:  func(string) string { return "BenchmarkCoreForwarder" },
		Goal:      "weir ≥ 90 % of the forwarder",
		GoalRatio: 0.90,
		Pairs:     7,
		Details:   "docs/bench/transport.md",
	},
	{
		Key: "transport-jetstream", Title: "JetStream source → uppercase → exactly-once JetStream sink (64 B)",
		Pkg: "./transport/benchmarks", Bench: "JetStream(Raw|Sink|Weir)", Args: []string{"-benchtime", "500000x"},
		Metric: "msgs/s", Higher: true,
		Baseline: func(string) string { return "BenchmarkJetStreamRawAsyncPublish" },
		Goal:     "≥ 80 % of raw JetStream async publish",
		Details:  "docs/bench/transport.md",
	},
	{
		Key: "transport-jetstream-goal", Title: "Goal (d) in interleaved pairs: raw JetStream async publish, then the exactly-once pipeline, 2 M messages",
		Pkg: "./transport/benchmarks", Bench: "JetStreamRawAsyncPublish$|JetStreamWeirRuntime$/publish=auto",
		// 2 M messages: a run of ~15 s, so that the end of a run — the
		// output of the last checkpoint interval waits for one more
		// checkpoint and its commit, ~0.3 s — weighs under 2 %.
		Args:   []string{"-benchtime", "2000000x"},
		Metric: "msgs/s", Higher: true,
		Baseline:  func(string) string { return "BenchmarkJetStreamRawAsyncPublish" },
		Goal:      "≥ 80 % of raw JetStream async publish",
		GoalRatio: 0.80,
		Pairs:     9,
		Details:   "docs/bench/transport.md",
	},
	{
		Key: "transport-jetstream-sync", Title: "The same on an embedded server that fsyncs every write (weir up -sync always)",
		Pkg: "./transport/benchmarks", Bench: "JetStreamRawAsyncPublish$|JetStreamWeirRuntime$/publish=auto|JetStreamWeirRuntimeAtLeastOnce",
		Args: []string{"-benchtime", "100000x"}, Env: []string{"WEIR_BENCH_SYNC=always"},
		Metric: "msgs/s", Higher: true,
		Baseline: func(string) string { return "BenchmarkJetStreamRawAsyncPublish" },
		Details:  "docs/bench/transport.md",
	},
	{
		Key: "transport-source-split", Title: "Two JetStream source subtasks sharing one stream (64 B)",
		Pkg: "./transport/benchmarks", Bench: "JetStreamSourceSplit", Args: []string{"-benchtime", "200000x"},
		Metric: "msgs/s", Higher: true,
		Baseline: func(string) string { return "BenchmarkJetStreamSourceSplit/split=hash" },
		Goal:     "several source tasks share one stream without double-reading",
		Details:  "docs/bench/transport.md",
	},
	{
		Key: "transport-keyed", Title: "Exactly-once sink commit, 1000 keys: one subject against a subject per key (out.{key})",
		Pkg: "./transport/benchmarks", Bench: "KeyedSinkCommit", Args: []string{"-benchtime", "500000x"},
		Metric:   "cpu-ns/msg", // the whole process, server included: steadier than the rate
		Baseline: func(string) string { return "BenchmarkKeyedSinkCommit/subject=fixed" },
		Details:  "docs/bench/transport.md",
	},
	{
		Key: "transport-remote", Title: "Remote channel between two tasks, 64-byte records",
		Pkg: "./transport/remote", Bench: ".", Args: []string{"-benchtime", "2000000x"},
		Metric:   "ns/op", // one op is one record
		Baseline: func(string) string { return "BenchmarkRawCoreNATSBatches" },
		Goal:     "≥ 3 M records/s, i.e. ≤ 333 ns per record",
		Details:  "docs/bench/transport.md",
	},
}

// result is one benchmark line's metrics, medians over -count runs.
type result struct {
	name    string
	metrics map[string][]float64
	// ratios are the "vs baseline" figures of a paired group, one per go
	// test process, each against the baseline of the same process.
	ratios []float64
}

// medianOf returns the median of v (the upper one of an even count).
func medianOf(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	return v[len(v)/2]
}

func (r *result) median(unit string) (float64, bool) {
	v := r.metrics[unit]
	if len(v) == 0 {
		return 0, false
	}
	return medianOf(v), true
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads `go test -bench` output.
func parse(out []byte) []*result {
	byName := map[string]*result{}
	var order []*result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		r := byName[name]
		if r == nil {
			r = &result{name: name, metrics: map[string][]float64{}}
			byName[name] = r
			order = append(order, r)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				r.metrics[f[i+1]] = append(r.metrics[f[i+1]], v)
			}
		}
	}
	return order
}

func run(ctx context.Context, g group, count int, log io.Writer) ([]*result, string, error) {
	args := append([]string{"test", "-run", "^$", "-bench", g.Bench, "-count", strconv.Itoa(count)}, g.Args...)
	args = append(args, g.Pkg)
	cmdline := "go " + strings.Join(quote(args), " ")
	if len(g.Env) > 0 {
		cmdline = strings.Join(g.Env, " ") + " " + cmdline
	}
	fmt.Fprintf(log, "weirbench: %s\n", cmdline)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), g.Env...)
	cmd.Stderr = log
	out, err := cmd.Output()
	if err != nil {
		return nil, cmdline, fmt.Errorf("%s: %w\n%s", cmdline, err, out)
	}
	return parse(out), cmdline, nil
}

// runPaired runs g g.Pairs times with -count 1 and merges the results:
// the metrics of every process, and each benchmark's ratio to its
// baseline from the same process.
func runPaired(ctx context.Context, g group, log io.Writer) ([]*result, string, error) {
	byName := map[string]*result{}
	var order []*result
	var cmdline string
	for i := range g.Pairs {
		rs, cl, err := run(ctx, g, 1, log)
		cmdline = cl
		if err != nil {
			return nil, cmdline, fmt.Errorf("process %d of %d: %w", i+1, g.Pairs, err)
		}
		here := map[string]*result{}
		for _, r := range rs {
			here[r.name] = r
		}
		for _, r := range rs {
			m := byName[r.name]
			if m == nil {
				m = &result{name: r.name, metrics: map[string][]float64{}}
				byName[r.name] = m
				order = append(order, m)
			}
			for unit, v := range r.metrics {
				m.metrics[unit] = append(m.metrics[unit], v...)
			}
			if ratio, ok := better(g, r, here[g.Baseline(r.name)]); ok {
				m.ratios = append(m.ratios, ratio)
			}
		}
	}
	return order, cmdline, nil
}

// better is how many times better than its baseline b result r is, by
// g's metric (above 1: better); false when there is no such ratio.
func better(g group, r, b *result) (float64, bool) {
	if b == nil || b.name == r.name {
		return 0, false
	}
	v, ok := r.median(g.Metric)
	bv, bok := b.median(g.Metric)
	if !ok || !bok || bv == 0 || v == 0 {
		return 0, false
	}
	if g.Higher {
		return v / bv, true
	}
	return bv / v, true
}

func quote(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func table(w io.Writer, g group, rs []*result) {
	byName := map[string]*result{}
	for _, r := range rs {
		byName[r.name] = r
	}
	dir := "lower is better"
	if g.Higher {
		dir = "higher is better"
	}
	fmt.Fprintf(w, "| benchmark | %s | baseline | baseline %s | vs baseline |\n|---|---:|---|---:|---:|\n", g.Metric, g.Metric)
	for _, r := range rs {
		v, ok := r.median(g.Metric)
		if !ok {
			continue
		}
		bname := g.Baseline(r.name)
		b := byName[bname]
		if b == nil || bname == r.name {
			fmt.Fprintf(w, "| %s | %s | (baseline) | | |\n", short(r.name), num(v))
			continue
		}
		bv, _ := b.median(g.Metric)
		// Always "how many times better than the baseline": > 1 is better.
		if len(r.ratios) > 0 {
			spread := fmt.Sprintf("%.2f–%.2f", slices.Min(r.ratios), slices.Max(r.ratios))
			if g.GoalRatio > 0 {
				n := 0
				for _, x := range r.ratios {
					if x >= g.GoalRatio {
						n++
					}
				}
				spread += fmt.Sprintf("; %d of %d ≥ %.2f", n, len(r.ratios), g.GoalRatio)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f× (%s) |\n", short(r.name), num(v), short(bname), num(bv), medianOf(r.ratios), spread)
			continue
		}
		ratio, ok := better(g, r, b)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f× |\n", short(r.name), num(v), short(bname), num(bv), ratio)
	}
	fmt.Fprintf(w, "\n%s is %s; \"vs baseline\" is how many times better than the baseline the figure is (above 1: better, below 1: worse).", g.Metric, dir)
	if g.Pairs > 0 {
		fmt.Fprintf(w, " Run as %d go test processes one after another, each measuring every benchmark once right after its baseline: the figures are medians over the processes, \"vs baseline\" is the median of the %d per-process ratios (their range in brackets).", g.Pairs, g.Pairs)
	}
	if g.Goal != "" {
		fmt.Fprintf(w, " Goal: %s.", g.Goal)
	}
	fmt.Fprintln(w)
}

func short(name string) string { return strings.TrimPrefix(name, "Benchmark") }

func num(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + " M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " k"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	load := ""
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average " + strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return fmt.Sprintf("%d CPUs (%s), %s %s/%s%s", runtime.NumCPU(), cpu, runtime.Version(), runtime.GOOS, runtime.GOARCH, load)
}

func main() {
	only := flag.String("only", "", "run only the groups whose key contains this")
	count := flag.Int("count", 3, "runs of each benchmark (medians are reported)")
	out := flag.String("o", "BENCHMARKS.md", "output file (- for stdout)")
	flag.Parse()
	ctx := context.Background()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `go run ./cmd/weirbench` on %s.\n\nMachine: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), machine())
	fmt.Fprintf(&b, "Every figure is the median of %d runs and stands beside its baseline from the same `go test` run; "+
		"CPU-time metrics (`cpu-ns/…`, the process's user+system time) are steadier than wall-clock ones on a shared machine. "+
		"Why each figure is what it is: the `docs/bench/` file named under each table.\n", *count)
	failed := false
	for _, g := range groups {
		if *only != "" && !strings.Contains(g.Key, *only) {
			continue
		}
		var rs []*result
		var cmdline string
		var err error
		if g.Pairs > 0 {
			rs, cmdline, err = runPaired(ctx, g, os.Stderr)
		} else {
			rs, cmdline, err = run(ctx, g, *count, os.Stderr)
		}
		fmt.Fprintf(&b, "\n## %s\n\n", g.Title)
		if err != nil {
			fmt.Fprintf(os.Stderr, "weirbench: %v\n", err)
			fmt.Fprintf(&b, "Failed to run: `%s`\n", cmdline)
			failed = true
			continue
		}
		table(&b, g, rs)
		repro := "`" + cmdline + "`"
		if g.Pairs > 0 {
			repro = fmt.Sprintf("%d times `%s`", g.Pairs, cmdline)
		}
		fmt.Fprintf(&b, "\nReproduce: %s. Analysis: [%s](%s).\n", repro, g.Details, g.Details)
	}
	if *out == "-" {
		os.Stdout.Write(b.Bytes())
	} else if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "weirbench:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}
