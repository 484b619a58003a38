package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/abi"
	"github.com/weirhq/weir/coordinator/jobspec"
	"github.com/weirhq/weir/host/snapshot"
	"github.com/weirhq/weir/host/wasm"
)

func init() {
	register(command{
		Name:    "exec",
		Summary: "run an operator module over newline-delimited records",
		Run:     runExec,
	})
}

const execUsage = `MODULE.wasm|GO-PACKAGE-DIR|SOURCE.{rs,c,cpp,ts,wat} [flags]

Reads records from stdin (or -in), one per line: "key<TAB>value", or just
"value" for an empty key. Feeds them to the module in batches and prints
every emitted record the same way ("[PORT] " first when -outputs > 1).
With -time each line starts with the record's timestamp and a TAB: input
in milliseconds since the Unix epoch or RFC 3339 (2026-12-03T10:00:00Z),
output in milliseconds; without it input records have timestamp 0, as a
message of unknown time has.
Guest logs and stdout/stderr go to stderr. An error inside a record names
its input line. -snapshot FILE alone snapshots after the last input record;
a snapshot in the keyed layout (abi/ABI.md §8) is checked as a worker checks
it, and for keys put twice. -restore FILE takes what -snapshot wrote, or an
operator task's snapshot from a checkpoint (the file DATA/checkpoints/JOB/
chk-ID/TASK of weir up's data directory, or the object JOB/chk-ID/TASK of
the JetStream object store weir_state): its operator state, checked the
same way.

To test an operator: -expect FILE compares the output with FILE (a golden
file) instead of printing it, and exits 1 with a diff when they differ;
-update writes the output to FILE. -check-restore also runs the input on
a second instance that, after every batch (-batch N records), is
snapshotted and replaced by a fresh one restored from the snapshot, and
fails where the two differ: state the snapshot leaves out.`

// inputFlag collects repeated -in values: FILE (port -port) or PORT=FILE.
type inputFlag []execInput

type execInput struct {
	port int
	path string // "-" is stdin
}

func (f *inputFlag) String() string { return fmt.Sprint(*f) }

func (f *inputFlag) Set(v string) error {
	in := execInput{port: -1, path: v}
	if p, path, ok := strings.Cut(v, "="); ok {
		if n, err := strconv.Atoi(p); err == nil && n >= 0 {
			in = execInput{port: n, path: path}
		}
	}
	*f = append(*f, in)
	return nil
}

// sizeFlag parses byte sizes as a job spec's limits do (jobspec.ParseSize:
// 65536, 64KiB, 64MiB or 64MB, 1GiB) and shows them so: 64MiB.
type sizeFlag uint64

func (s *sizeFlag) String() string {
	if *s == 0 {
		return "0"
	}
	return jobspec.FormatSize(int64(min(uint64(*s), math.MaxInt64)))
}

func (s *sizeFlag) Set(v string) error {
	n, err := jobspec.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

type execOptions struct {
	module        string
	inputs        inputFlag
	port          int
	batch         int
	config        string
	configFile    string
	snapshotAfter int64
	snapshot      string
	restore       string
	memory        sizeFlag
	timeout       time.Duration
	endOfInput    bool
	outputs       int
	name          string
	cacheDir      string
	logLevel      string
	stack         bool
	time          bool
	expect        string
	update        bool
	checkRestore  bool
}

func runExec(ctx context.Context, std Stdio, args []string) error {
	var o execOptions
	fs := newFlags(std, "exec", execUsage)
	fs.Var(&o.inputs, "in", "input `FILE` (- for stdin), or PORT=FILE; repeat for several inputs, read in order")
	fs.IntVar(&o.port, "port", 0, "input port for inputs given without PORT=")
	fs.IntVar(&o.batch, "batch", 1024, "records per batch")
	fs.StringVar(&o.config, "config", "", "operator config `STRING`")
	fs.StringVar(&o.configFile, "config-file", "", "read the operator config from `FILE`")
	fs.Int64Var(&o.snapshotAfter, "snapshot-after", 0, "take a snapshot after `N` input records (with -snapshot), then keep going")
	fs.StringVar(&o.snapshot, "snapshot", "", "write the snapshot to `FILE` (after -snapshot-after N records, else after the last)")
	fs.StringVar(&o.restore, "restore", "", "restore the operator's state from `FILE` before the input: a -snapshot file, or an operator task's snapshot from a checkpoint (JOB/chk-ID/TASK)")
	o.memory = wasm.DefaultMemoryBytes
	fs.Var(&o.memory, "memory", "memory limit, a `size` like 64MiB or 64MB (both powers of 1024)")
	fs.DurationVar(&o.timeout, "timeout", wasm.DefaultCallTimeout, "per-call deadline")
	fs.BoolVar(&o.endOfInput, "end-of-input", true, "call the module's end-of-input hook for each port at the end")
	fs.IntVar(&o.outputs, "outputs", 1, "number of output ports")
	fs.StringVar(&o.name, "name", "", "operator name in errors and logs (default: the module's file or directory name, without .wasm or a source's extension)")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "compilation cache directory (default: the user cache dir; - disables)")
	fs.StringVar(&o.logLevel, "log-level", "info", "guest log level: debug, info, warn, error")
	fs.BoolVar(&o.stack, "stack", false, "on a trap, print the wasm stack trace before the error; on a Go panic, the goroutine's stack")
	fs.BoolVar(&o.time, "time", false, "records' timestamps lead their lines, then a TAB: in milliseconds or RFC 3339, printed in milliseconds")
	fs.StringVar(&o.expect, "expect", "", "compare the output with `FILE` instead of printing it; exit 1 with a diff if they differ")
	fs.BoolVar(&o.update, "update", false, "with -expect, write the output to its FILE instead of comparing")
	fs.BoolVar(&o.checkRestore, "check-restore", false, "also run the input on a second instance, snapshotted and replaced by a fresh one restored from the snapshot after every batch, and fail where its output differs")
	// The module may come before, after or between the flags.
	pos, err := positional(fs, args, func(a []string) error { return parseFlags(fs, a) })
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
		return usagef("exec: missing MODULE.wasm (run 'weir exec -h')")
	case 1:
		o.module = pos[0]
	default:
		return usagef("exec: one module, not %d: %s", len(pos), strings.Join(pos, " "))
	}
	switch {
	case o.batch < 1:
		return usagef("exec: -batch must be at least 1")
	case o.snapshotAfter > 0 && o.snapshot == "":
		return usagef("exec: -snapshot-after and -snapshot go together")
	case o.config != "" && o.configFile != "":
		return usagef("exec: use -config or -config-file, not both")
	case o.outputs < 1:
		return usagef("exec: -outputs must be at least 1")
	case o.update && o.expect == "":
		return usagef("exec: -update writes the -expect FILE: give -expect FILE too")
	}
	if err := jobspec.CheckMemory(int64(min(uint64(o.memory), math.MaxInt64))); err != nil {
		return usagef("exec: -memory: %v", err)
	}
	if err := jobspec.CheckTimeout(o.timeout); err != nil {
		return usagef("exec: -timeout: %v", err)
	}
	err = execModule(ctx, std, &o)
	// The stacks go before the one-line reason main prints: the wasm
	// stack with -stack, and always what a guest runtime wrote after its
	// fatal line (the Go runtime's stack of the goroutine that failed),
	// which the log of the guest's stderr leaves out; the stack of a
	// panic the Go SDK recovered, whose message names where it happened,
	// with -stack.
	te, xe, oe := (*wasm.TrapError)(nil), (*wasm.ExitError)(nil), (*wasm.OperatorError)(nil)
	var de *diffError
	traceback := ""
	switch {
	case errors.As(err, &de):
		fmt.Fprint(std.Err, de.diff)
	case errors.As(err, &te):
		if o.stack && te.Stack != "" {
			fmt.Fprintf(std.Err, "%s\n", te.Stack)
		}
		traceback = te.Traceback
	case errors.As(err, &xe):
		traceback = xe.Traceback
	case errors.As(err, &oe) && o.stack:
		traceback = oe.Traceback
	}
	if traceback != "" {
		fmt.Fprintf(std.Err, "%s\n", traceback)
	}
	if err != nil {
		err = execLimitError{err}
	}
	return err
}

// execLimitError names, in an error of the operator's host, the flags
// that set its limits here where a job's failure names the spec's limits
// (host/wasm's messages: "the operator's memory limit (limits.memory)",
// "if merely slow, raise limits.timeout").
type execLimitError struct{ error }

func (e execLimitError) Error() string {
	return strings.NewReplacer("(limits.memory)", "(-memory)", "raise limits.timeout", "raise -timeout").Replace(e.error.Error())
}

func (e execLimitError) Unwrap() error { return e.error }

func execModule(ctx context.Context, std Stdio, o *execOptions) error {
	// A Go package directory or a source file is built as weir run
	// builds one.
	builder := &moduleBuilder{std: std}
	defer builder.Close()
	path, _, err := builder.build(ctx, o.module)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	code, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	config := []byte(o.config)
	if o.configFile != "" {
		if config, err = os.ReadFile(o.configFile); err != nil {
			return fmt.Errorf("exec: config: %w", err)
		}
	}
	name := o.name
	if name == "" {
		name = execName(o.module)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("exec: -log-level: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: level}))

	engine, err := wasm.NewEngine(wasm.Config{CacheDir: o.cacheDir})
	if err != nil {
		return err
	}
	defer engine.Close(context.Background())
	lim := wasm.Limits{MemoryBytes: uint64(o.memory), CallTimeout: o.timeout}
	mod, err := engine.Load(ctx, name, code, lim)
	if err != nil {
		return err
	}
	icfg := wasm.InstanceConfig{Name: name, Config: config, Outputs: o.outputs, Logger: logger, LogRate: -1}
	inst, err := mod.Instantiate(ctx, icfg)
	if err != nil {
		return err
	}
	defer inst.Close(context.Background())

	if o.restore != "" {
		if err := restoreFrom(ctx, inst, o.restore); err != nil {
			return err
		}
	}

	// With -expect the output is kept, to compare or write at the end.
	var dst io.Writer = std.Out
	var got bytes.Buffer
	if o.expect != "" {
		dst = &got
	}
	out := bufio.NewWriterSize(dst, 64<<10)
	r := &execRun{inst: inst, opts: o, out: out, maxBatch: wasm.DefaultMaxBatchBytes}
	if o.checkRestore {
		if r.check, err = newRestoreCheck(ctx, r, mod, icfg); err != nil {
			return err
		}
		defer r.check.close()
	}
	inputs := o.inputs
	if len(inputs) == 0 {
		inputs = inputFlag{{port: -1, path: "-"}}
	}
	var ports []int
	for _, in := range inputs {
		port := in.port
		if port < 0 {
			port = o.port
		}
		if err := r.feed(ctx, std.In, port, in.path); err != nil {
			out.Flush()
			return err
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	if o.snapshotAfter > 0 && r.seen < o.snapshotAfter {
		out.Flush()
		return fmt.Errorf("exec: -snapshot-after %d: the input had only %d records", o.snapshotAfter, r.seen)
	}
	if o.snapshot != "" && o.snapshotAfter == 0 {
		// After the last record, before end of input: the state a restore
		// continues from with more input.
		if err := r.takeSnapshot(ctx); err != nil {
			out.Flush()
			return err
		}
	}
	if o.endOfInput {
		for _, p := range ports {
			if err := inst.EndOfInput(ctx, p, r.print); err != nil {
				if r.check != nil {
					r.check.passOn(r)
				}
				out.Flush()
				return err
			}
			if r.check != nil {
				err := r.check.follow(r, "the end of input", func(inst *wasm.Instance, emit func(int, []byte) error) error {
					return inst.EndOfInput(ctx, p, emit)
				})
				if err != nil {
					out.Flush()
					return err
				}
			}
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("exec: writing output: %w", err)
	}
	if o.expect != "" {
		return expectOutput(std.Err, o, got.Bytes())
	}
	return nil
}

// restoreFrom restores inst's state from the file at path: the operator's
// state as -snapshot writes it, or a task's snapshot from a checkpoint
// (host/snapshot, "WEIRSNAP": the object JOB/chk-ID/TASK of a store), whose
// operator state it takes, checked as a worker checks it. Every error
// names the file once, on one line: opening or reading it, a task
// snapshot that holds no operator state, and the operator's restore
// refusing or trapping on what it read.
func restoreFrom(ctx context.Context, inst *wasm.Instance, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("exec: restore from %s: %w", path, withoutPath(err))
	}
	defer f.Close()
	r := bufio.NewReaderSize(pathlessReader{f}, 64<<10)
	var state io.Reader = r
	if head, _ := r.Peek(len(snapshot.Magic)); string(head) == snapshot.Magic {
		st, err := taskSnapshotState(inst.Name(), r)
		if err != nil {
			return fmt.Errorf("exec: restore from %s: %w", path, err)
		}
		state = bytes.NewReader(st)
	}
	if err := inst.Restore(ctx, state); err != nil {
		return fmt.Errorf("exec: restore from %s: %w", path, err)
	}
	return nil
}

// taskSnapshotState decodes the task snapshot r holds and returns its
// operator's state, refusing a source's or a sink's snapshot and one with
// no operator state, and a state that claims the keyed layout and breaks
// it (checkKeyedState).
func taskSnapshotState(operator string, r io.Reader) ([]byte, error) {
	t, err := snapshot.Read(r)
	if err != nil {
		return nil, fmt.Errorf("a task snapshot (it starts %q) that does not decode: %w", snapshot.Magic, err)
	}
	what := fmt.Sprintf("the snapshot of task %s in checkpoint %d", t.Task, t.CheckpointID)
	switch {
	case len(t.SourceOffset) > 0:
		return nil, fmt.Errorf("%s is a source's (its read offsets), with no operator state: take an operator's task (JOB/chk-ID/OPERATOR-N)", what)
	case len(t.SinkState) > 0:
		return nil, fmt.Errorf("%s is a sink's (its staged output), with no operator state: take an operator's task (JOB/chk-ID/OPERATOR-N)", what)
	case len(t.ModuleState) == 0:
		return nil, fmt.Errorf("%s holds no operator state (the operator's snapshot was empty): nothing to restore", what)
	}
	if err := checkKeyedState(operator, t.ModuleState); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return t.ModuleState, nil
}

// pathlessReader reads from a file, its errors without the file's path,
// which restoreFrom puts at the start of the message instead.
type pathlessReader struct{ f *os.File }

func (r pathlessReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	return n, withoutPath(err)
}

// withoutPath turns a *fs.PathError ("read snap: is a directory") into its
// operation and cause ("read: is a directory"), for a message that names
// the file already; errors.Is still matches the cause.
func withoutPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// execRun feeds records into the instance and prints what it emits.
type execRun struct {
	inst     *wasm.Instance
	opts     *execOptions
	out      *bufio.Writer
	b        abi.Builder
	seen     int64 // input records processed so far
	maxBatch int
	outErr   error
	check    *restoreCheck // -check-restore, or nil
	// batchSrc and batchLine locate the batch's first record in the input
	// ("stdin", 1-based line), for errors inside a record.
	batchSrc  string
	batchLine int
	tsBuf     [20]byte // a timestamp's digits, printed
}

// inputError adds the input line of the record an operator failed at to
// its error.
type inputError struct {
	err   error
	where string
}

func (e *inputError) Error() string { return e.err.Error() + " (" + e.where + ")" }
func (e *inputError) Unwrap() error { return e.err }

// locate names the input line of the record err happened at, when the
// operator reported one.
func (r *execRun) locate(err error) error {
	idx := -1
	var oe *wasm.OperatorError
	var te *wasm.TrapError
	var de *wasm.DeadlineError
	var fe *wasm.FaultError
	switch {
	case errors.As(err, &fe):
		idx = fe.RecordIndex
	case errors.As(err, &oe):
		idx = oe.RecordIndex
	case errors.As(err, &te):
		idx = te.RecordIndex
	case errors.As(err, &de):
		idx = de.RecordIndex
	}
	if idx < 0 || idx >= r.b.Len() {
		return err
	}
	return &inputError{err: err, where: fmt.Sprintf("%s line %d", r.batchSrc, r.batchLine+idx)}
}

func (r *execRun) feed(ctx context.Context, stdin io.Reader, port int, path string) error {
	var src io.Reader = stdin
	srcName := "stdin"
	if path != "-" {
		srcName = path
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("exec: input: %w", err)
		}
		defer f.Close()
		src = f
	}
	sc := bufio.NewScanner(src)
	maxLine := r.maxBatch - abi.BatchHeaderSize - abi.RecordHeaderSize
	sc.Buffer(make([]byte, 64<<10), maxLine)
	r.b.Reset()
	lines := 0
	for sc.Scan() {
		lines++
		line := bytes.TrimSuffix(sc.Bytes(), []byte{'\r'})
		var ts int64
		if r.opts.time {
			var err error
			if ts, line, err = cutTimestamp(line); err != nil {
				return fmt.Errorf("exec: %s line %d: %w", srcName, lines, err)
			}
		}
		key, value, ok := bytes.Cut(line, []byte{'\t'})
		if !ok {
			key, value = nil, line
		}
		if r.b.Len() > 0 && r.b.Size()+abi.RecordSize(len(key), len(value)) > r.maxBatch {
			if err := r.flush(ctx, port); err != nil {
				return err
			}
		}
		if r.b.Len() == 0 {
			r.batchSrc, r.batchLine = srcName, lines
		}
		r.b.Add(key, value, ts)
		if r.b.Len() >= r.opts.batch || r.seen+int64(r.b.Len()) == r.opts.snapshotAfter {
			if err := r.flush(ctx, port); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("exec: reading %s: line %d is longer than a record may be (%d bytes: the %d-byte maximum batch)",
			path, lines+1, maxLine, r.maxBatch)
	} else if err != nil {
		return fmt.Errorf("exec: reading %s: %w", path, err)
	}
	return r.flush(ctx, port)
}

func (r *execRun) flush(ctx context.Context, port int) error {
	if r.b.Len() == 0 {
		return nil
	}
	n := int64(r.b.Len())
	err := r.inst.Process(ctx, port, r.b.Bytes(), r.print)
	if err != nil {
		if r.check != nil {
			r.check.passOn(r)
		}
		return r.locate(err)
	}
	if r.outErr != nil {
		return r.outErr
	}
	if r.check != nil {
		first := fmt.Sprintf("%s line %d", r.batchSrc, r.batchLine)
		if n > 1 {
			first = fmt.Sprintf("%s lines %d-%d", r.batchSrc, r.batchLine, r.batchLine+int(n)-1)
		}
		err := r.check.follow(r, first, func(inst *wasm.Instance, emit func(int, []byte) error) error {
			return inst.Process(ctx, port, r.b.Bytes(), emit)
		})
		if err == nil {
			err = r.check.restore(ctx, fmt.Sprintf("%s line %d", r.batchSrc, r.batchLine+int(n)-1))
		}
		if err != nil {
			return err
		}
	}
	r.b.Reset()
	r.seen += n
	if r.opts.snapshotAfter > 0 && r.seen == r.opts.snapshotAfter {
		return r.takeSnapshot(ctx)
	}
	return nil
}

func (r *execRun) takeSnapshot(ctx context.Context) error {
	tmp := r.opts.snapshot + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("exec: snapshot: %w", err)
	}
	var state bytes.Buffer
	err = r.inst.Snapshot(ctx, &state)
	if err == nil {
		err = checkKeyedState(r.inst.Name(), state.Bytes())
	}
	if err == nil {
		_, err = f.Write(state.Bytes())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.opts.snapshot)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("exec: snapshot: %w", err)
	}
	return nil
}

// checkKeyedState refuses a state that claims the keyed layout (abi/ABI.md
// §8) but breaks it, as a worker's checkpoint does, and one that has a key
// twice, which a worker notices only at a rescale.
func checkKeyedState(operator string, state []byte) error {
	if !abi.IsKeyedState(state) {
		return nil
	}
	seen := map[string]bool{}
	err := abi.KeyedEntries(state, func(k, _ []byte) error {
		if seen[string(k)] {
			return fmt.Errorf("key %q is put twice (put each key once)", k)
		}
		seen[string(k)] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("operator %s: state starts with %q but is not in the keyed layout: %w", operator, abi.KeyedStateMagic, err)
	}
	return nil
}

// print writes an emitted batch's records. A record over an operator's
// input batch limit fails the run, as it fails a job's task
// (wasm.CheckEmitted): no operator it went to could take it.
func (r *execRun) print(port int, batch []byte) error {
	if err := wasm.CheckEmitted(batch, r.maxBatch, ""); err != nil {
		return err // Process names the operator and the port
	}
	it, err := abi.NewIter(batch)
	if err != nil {
		return err
	}
	for it.Next() {
		rec := it.Record()
		if r.opts.outputs > 1 {
			fmt.Fprintf(r.out, "[%d] ", port)
		}
		if r.opts.time {
			r.out.Write(strconv.AppendInt(r.tsBuf[:0], rec.Timestamp, 10))
			r.out.WriteByte('\t')
		}
		if len(rec.Key) > 0 {
			r.out.Write(rec.Key)
			r.out.WriteByte('\t')
		}
		r.out.Write(rec.Value)
		if err := r.out.WriteByte('\n'); err != nil && r.outErr == nil {
			r.outErr = fmt.Errorf("exec: writing output: %w", err)
		}
	}
	if err := it.Err(); err != nil {
		return errors.New("exec: " + err.Error())
	}
	return r.outErr
}

// timeFlagUsage describes -time of weir run and weir input.
const timeFlagUsage = "each input line starts with its record's timestamp, the time of the event, and a TAB: milliseconds since the Unix epoch (not 0, which means none) or RFC 3339 (2026-12-03T10:00:00Z); it goes in the message's Weir-Time header, which the job's sources make the record's timestamp (without it: the time the message was stored)"

// cutTimestamp splits a -time input line into its leading timestamp
// (milliseconds since the Unix epoch, or RFC 3339 with a zone; not 0,
// errZeroTime) and the rest after the TAB.
func cutTimestamp(line []byte) (int64, []byte, error) {
	field, rest, ok := bytes.Cut(line, []byte{'\t'})
	if !ok {
		return 0, nil, fmt.Errorf("-time: want TIMESTAMP<TAB>[KEY<TAB>]VALUE, got no TAB after %q", truncate(field, 40))
	}
	ms, err := strconv.ParseInt(string(field), 10, 64)
	switch {
	case err == nil && ms == 0:
		return 0, nil, errZeroTime
	case err == nil:
		return ms, rest, nil
	case errors.Is(err, strconv.ErrRange):
		return 0, nil, fmt.Errorf("-time: timestamp %q is too large for milliseconds since the epoch (a 64-bit number)", truncate(field, 40))
	}
	t, err := time.Parse(time.RFC3339Nano, string(field))
	if err != nil {
		return 0, nil, fmt.Errorf("-time: timestamp %q is neither milliseconds since the epoch nor RFC 3339 (2026-12-03T10:00:00Z)", truncate(field, 40))
	}
	if t.UnixMilli() == 0 {
		return 0, nil, errZeroTime
	}
	return t.UnixMilli(), rest, nil
}

// errZeroTime refuses a -time timestamp of 0, which weir reads as none
// (ABI.md: a record's timestamp is 0 when unknown): a job's source would
// give the record the time its stream stored it instead (a publisher's
// Weir-Time of 0 is ignored), and weir exec would hand the operator 0.
var errZeroTime = errors.New("-time: timestamp 0 means no timestamp to weir (a job's source gives such a record the time its stream stores it): start the event times at 1")

// truncate shortens b to at most n bytes for a message, cut at a UTF-8
// boundary, marking the cut.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

// execName is the name weir exec gives the operator of module, a file or
// a Go package directory, without -name: the registry's base name of it
// (moduleBase: "upper" for upper.wasm, upper.rs or the directory upper),
// of its absolute path, so that "." and "dir/" name the directory.
func execName(module string) string {
	if abs, err := filepath.Abs(module); err == nil {
		module = abs
	}
	return moduleBase(module)
}
