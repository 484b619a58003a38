package wasm

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/weirhq/weir/abi"
)

// InstanceConfig configures one operator instance.
type InstanceConfig struct {
	// Name is the operator's name in errors and logs. Default: the
	// module's name.
	Name string
	// Config is handed to weir_init.
	Config []byte
	// Outputs is the number of output ports; 0 means 1.
	Outputs int
	// Logger receives the guest's log lines and stdout/stderr, tagged with
	// the operator's name. Default slog.Default().
	Logger *slog.Logger
	// LogRate bounds the lines the instance logs a second (weir_log,
	// stdout and stderr together; ten seconds' worth may come at once):
	// those over it are dropped, and a warning counts them. 0 means
	// DefaultLogRate, negative no limit.
	LogRate int
	// WholeBatches has Process hand every batch to weir_process in one
	// call, instead of in pieces that fit the call deadline at the
	// operator's pace (pace.go). For tests that compare guests call by
	// call.
	WholeBatches bool
}

type phase uint8

const (
	phaseNone phase = iota
	phaseInit
	phaseProcess
	phaseEndOfInput
	phaseSnapshot
	phaseRestore
	phaseOther
)

type emitted struct {
	port  int
	batch []byte
}

// Instance is one running operator: a module instance with its own memory,
// driven by one goroutine at a time (Close included: to stop a running call
// from elsewhere, cancel the context passed to it). It implements the task runtime's
// Operator interface. After any failure (trap, deadline, proc_exit, error
// status, misused import) every later call returns an error wrapping
// ErrInstanceFailed and the first failure; it is never reused.
type Instance struct {
	name    string
	limits  Limits
	outputs int
	logger  *slog.Logger
	logs    *logLimiter // every line of the guest's goes through it
	engine  *Engine
	module  *Module // what it was made from
	mod     api.Module
	mem     api.Memory
	gmem    guestMemory     // backs mem, under the memory limit (memory.go)
	ctx     context.Context // the context of every call; canceled to interrupt one
	cancel  context.CancelFunc

	fnInput, fnInit, fnProcess, fnSnapshot, fnRestore api.Function
	fnCheckpoint, fnEndOfInput                        api.Function      // optional
	interrupt                                         api.MutableGlobal // nil unless the module is instrumented
	cursorAddr                                        uint32
	hasCursor                                         bool
	stack                                             [3]uint64

	// State of the current call, touched only by the calling goroutine and
	// the host functions it runs.
	phase        phase
	export       string
	message      string
	fault        error
	pending      []emitted
	pendingBytes int
	maxEmitBytes int
	snapW        io.Writer
	stateBytes   int // written to snapW so far
	restR        io.Reader
	restEOF      bool
	stateErr     error
	failed       error
	stdout       *lineWriter
	stderr       *lineWriter
	// traceback is what the guest wrote to stderr after a fatal line in
	// a call that returned an error status (the Go SDK's stack of a
	// panic it recovered), which status gives the OperatorError.
	traceback string
	// grewPast says a call went on after the memory limit refused a
	// memory.grow, which the instance warned of (once).
	grewPast bool
	// memBytes is the linear memory's size after the latest call
	// (MemoryBytes), for goroutines other than the caller's.
	memBytes atomic.Uint64

	// calls counts the starts and ends of calls: odd while one runs.
	// stop marks the running call by setting stopBit, and only while its
	// count is still the one it was asked to stop; a call's end clears
	// the count to the next even one only if no stop marked it. So a stop
	// and the end of its call agree on whether the call was interrupted:
	// a stop that comes too late does nothing.
	calls          atomic.Uint64
	callStart      atomic.Int64           // when the running call started (UnixNano), 0 between calls: InCall
	callExport     atomic.Pointer[string] // the export the running call runs, nil between calls: InCallExport
	callTimeout    atomic.Int64           // the running call's deadline (ns): CallTimeout, or SnapshotTimeout
	stopMu         sync.Mutex             // serializes stop
	timedOut       atomic.Bool            // a call was interrupted by the watchdog: it overran its deadline
	callerCanceled atomic.Bool            // a call was interrupted as the caller's context ended
	hostIO         atomic.Int64           // ns spent in the snapshot writer / restore reader, ever
	ioStart        atomic.Int64           // when the current state I/O began, ns since epoch; 0 = none
	epoch          time.Time
	wdSeq          uint64        // watchdog's view, touched only by the watchdog:
	wdRan          time.Duration // how long the call wdSeq ran, as the watchdog counts
	wdIO           int64

	pace       pacer // sizes the pieces Process cuts a batch into
	recordBase int   // index of the current piece's first record in its batch
}

// Instantiate creates a fresh instance of the module: WASI with no
// arguments, environment or files, stdout/stderr to the logger, then
// _initialize (if exported) and weir_init with the config. An init failure
// returns an *OperatorError carrying the guest's message.
func (m *Module) Instantiate(ctx context.Context, cfg InstanceConfig) (*Instance, error) {
	name := cfg.Name
	if name == "" {
		name = m.name
	}
	outputs := cfg.Outputs
	if outputs <= 0 {
		outputs = 1
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	i := &Instance{
		name:         name,
		limits:       m.limits,
		outputs:      outputs,
		logger:       logger,
		logs:         newLogLimiter(logger, name, cfg.LogRate),
		engine:       m.engine,
		maxEmitBytes: max(64<<20, 16*m.limits.MaxBatchBytes),
		epoch:        time.Now(),
		pace:         newPacer(m.limits.CallTimeout),
	}
	if cfg.WholeBatches {
		i.pace = pacer{budget: 1<<63 - 1, perRecord: 1, largest: math.MaxInt / rampFactor}
	}
	i.stdout = &lineWriter{logs: i.logs, operator: name, stream: "stdout"}
	i.stderr = &lineWriter{logs: i.logs, operator: name, stream: "stderr"}
	base, cancel := context.WithCancel(context.Background())
	i.ctx = context.WithValue(base, instanceKey{}, i)
	i.cancel = cancel
	i.gmem.limit = uint64(m.limits.pages()) * PageSize

	mc := wazero.NewModuleConfig().
		WithName(fmt.Sprintf("%s#%d", name, m.engine.seq.Add(1))).
		WithStartFunctions(). // _initialize is called below, under the deadline
		WithStdout(i.stdout).
		WithStderr(i.stderr).
		WithSysWalltime().
		WithSysNanotime().
		// wazero's default random_get is a fixed sequence, the same in
		// every instance: two subtasks' "random" IDs would collide.
		WithRandSource(crand.Reader)
	if err := m.engine.acquire(m); err != nil {
		cancel()
		return nil, fmt.Errorf("operator %s: %w", name, err)
	}
	i.module = m
	mod, err := m.rt.r.InstantiateModule(experimental.WithMemoryAllocator(i.ctx, &i.gmem), m.compiled, mc)
	if err != nil {
		cancel()
		m.engine.releaseInstance(ctx, m)
		return nil, fmt.Errorf("operator %s: instantiating module %s: %w", name, m.name, err)
	}
	if !i.gmem.inited {
		// wazero did not take the allocator, so nothing enforces the limit.
		mod.Close(ctx)
		cancel()
		m.engine.releaseInstance(ctx, m)
		return nil, fmt.Errorf("operator %s: instantiating module %s: the runtime ignored the memory allocator that enforces the memory limit", name, m.name)
	}
	i.mod = mod
	i.mem = mod.ExportedMemory(abi.ExportMemory)
	i.fnInput = mod.ExportedFunction(abi.ExportInput)
	i.fnInit = mod.ExportedFunction(abi.ExportInit)
	i.fnProcess = mod.ExportedFunction(abi.ExportProcess)
	i.fnSnapshot = mod.ExportedFunction(abi.ExportSnapshot)
	i.fnRestore = mod.ExportedFunction(abi.ExportRestore)
	i.fnCheckpoint = mod.ExportedFunction(abi.ExportCheckpointComplete)
	i.fnEndOfInput = mod.ExportedFunction(abi.ExportEndOfInput)
	if m.instrumented {
		g, ok := mod.ExportedGlobal(interruptExport).(api.MutableGlobal)
		if !ok {
			mod.Close(ctx)
			cancel()
			m.engine.releaseInstance(ctx, m)
			return nil, fmt.Errorf("operator %s: module %s lacks its interrupt global", name, m.name)
		}
		i.interrupt = g
	}
	m.engine.register(i)

	if err := i.start(ctx, m.hasStart, cfg.Config); err != nil {
		i.Close(ctx)
		return nil, err
	}
	return i, nil
}

// start runs the module's start function (hoisted to an export by
// hoistStart), _initialize and weir_init, each under the call deadline.
func (i *Instance) start(ctx context.Context, hasStart bool, config []byte) error {
	if hasStart {
		fn := i.mod.ExportedFunction(startExport)
		if fn == nil {
			return fmt.Errorf("operator %s: module lacks its %s export", i.name, startExport)
		}
		if err := i.call(ctx, "start function", fn, phaseInit, i.stack[:0]); err != nil {
			return err
		}
	}
	if fn := i.mod.ExportedFunction(abi.ExportInitialize); fn != nil {
		if err := i.call(ctx, abi.ExportInitialize, fn, phaseInit, i.stack[:1]); err != nil {
			return err
		}
	}
	if fn := i.mod.ExportedFunction(abi.ExportCursor); fn != nil {
		if err := i.call(ctx, abi.ExportCursor, fn, phaseOther, i.stack[:1]); err != nil {
			return err
		}
		i.cursorAddr, i.hasCursor = api.DecodeU32(i.stack[0]), true
	}
	if limit := max(i.limits.MaxBatchBytes, 1<<20); len(config) > limit {
		// Handed over as an input batch is: what an instance takes at
		// once bounds it. Settings fit; data goes in another way.
		return fmt.Errorf("operator %s: config of %d bytes is larger than an instance takes (%d bytes, its largest input batch or 1MiB): "+
			"keep a config to settings, and feed large data to the job as a source (a stream an operator reads) or build it into the module",
			i.name, len(config), limit)
	}
	addr, err := i.writeInput(ctx, nil, config)
	if err != nil {
		return err
	}
	s := i.stack[:2]
	s[0], s[1] = api.EncodeU32(addr), api.EncodeU32(uint32(len(config)))
	if err := i.call(ctx, abi.ExportInit, i.fnInit, phaseInit, s); err != nil {
		return err
	}
	return i.status(abi.ExportInit, s[0], true)
}

// Name is the operator's name.
func (i *Instance) Name() string { return i.name }

// RecordsWithin returns how many records the instance is expected to
// process in d, judged from the time its calls took per record (pace.go):
// 1 until a call was timed. A task uses it to hand a slow operator a large
// batch in pieces (host.Paced).
func (i *Instance) RecordsWithin(d time.Duration) int { return i.pace.within(d) }

// Process hands one record batch from input port port to weir_process,
// whole or, when it is too large for the call deadline at the operator's
// pace, in pieces of consecutive records (pace.go). After each call
// succeeded, each batch the guest emitted in it is handed to emit, in emit
// order; emit owns the batch. So one Process may emit several batches per
// output port, and when a later piece fails, the output of the earlier ones
// has already been handed on. The batch itself is not validated
// here (the transport validates what it receives); the guest sees it as is.
func (i *Instance) Process(ctx context.Context, port int, batch []byte, emit func(port int, batch []byte) error) error {
	if len(batch) > i.limits.MaxBatchBytes {
		return fmt.Errorf("operator %s: batch of %d bytes is over the %d-byte limit", i.name, len(batch), i.limits.MaxBatchBytes)
	}
	if err := i.process(ctx, port, batch, emit); err != nil {
		describeRecord(err, batch)
		return err
	}
	return nil
}

func (i *Instance) process(ctx context.Context, port int, batch []byte, emit func(port int, batch []byte) error) error {
	it, err := abi.NewIter(batch)
	if n := it.Count(); err != nil || n <= i.pace.piece(n) {
		// Whole, as it came (a malformed batch is the guest's to report).
		return i.processPiece(ctx, port, nil, batch, n, emit)
	}
	// Too many records for one call at this operator's pace: hand them over
	// in pieces (pace.go).
	defer func() { i.recordBase = 0 }()
	var head [abi.BatchHeaderSize]byte
	for base, n := 0, it.Count(); base < n; {
		k, start := i.pace.piece(n-base), it.Offset()
		whole := true
		for range k {
			if whole = it.Next(); !whole {
				break
			}
		}
		end := it.Offset()
		if !whole || base+k == n {
			// The last piece, or records that do not add up: the rest as
			// it is, for the guest to process or report.
			k, end = n-base, len(batch)
		}
		binary.LittleEndian.PutUint32(head[:], uint32(k))
		i.recordBase = base
		if err := i.processPiece(ctx, port, head[:], batch[start:end], k, emit); err != nil {
			return err
		}
		base += k
	}
	return nil
}

// processPiece makes one weir_process call on the batch head+body of n
// records and times it for the pacer.
func (i *Instance) processPiece(ctx context.Context, port int, head, body []byte, n int, emit func(port int, batch []byte) error) error {
	addr, err := i.writeInput(ctx, head, body)
	if err != nil {
		return err
	}
	s := i.stack[:3]
	s[0], s[1], s[2] = api.EncodeI32(int32(port)), api.EncodeU32(addr), api.EncodeU32(uint32(len(head)+len(body)))
	timed := i.pace.times(n)
	var start time.Time
	if timed {
		start = time.Now()
	}
	if err := i.call(ctx, abi.ExportProcess, i.fnProcess, phaseProcess, s); err != nil {
		return err
	}
	if timed {
		i.pace.observe(n, time.Since(start))
	}
	if err := i.status(abi.ExportProcess, s[0], true); err != nil {
		return err
	}
	return i.deliver(emit)
}

// EndOfInput tells the guest that input port port has ended; it may emit
// final results, handed to emit like Process's. A module without
// weir_end_of_input ignores it.
func (i *Instance) EndOfInput(ctx context.Context, port int, emit func(port int, batch []byte) error) error {
	if i.fnEndOfInput == nil {
		return i.usable()
	}
	s := i.stack[:1]
	s[0] = api.EncodeI32(int32(port))
	if err := i.call(ctx, abi.ExportEndOfInput, i.fnEndOfInput, phaseEndOfInput, s); err != nil {
		return err
	}
	if err := i.status(abi.ExportEndOfInput, s[0], true); err != nil {
		return err
	}
	return i.deliver(emit)
}

// Snapshot has the guest write its state to w, in the chunks it passes to
// snapshot_write.
func (i *Instance) Snapshot(ctx context.Context, w io.Writer) error {
	i.snapW, i.stateBytes, i.stateErr = w, 0, nil
	defer func() { i.snapW = nil }()
	s := i.stack[:1]
	if err := i.call(ctx, abi.ExportSnapshot, i.fnSnapshot, phaseSnapshot, s); err != nil {
		return err
	}
	if i.stateErr != nil {
		err := &StateError{Operator: i.name, Export: abi.ExportSnapshot, Err: i.stateErr}
		i.fail(err)
		return err
	}
	return i.status(abi.ExportSnapshot, s[0], true)
}

// Restore has the guest read its state from r. Call it on a fresh
// instance, before any Process.
func (i *Instance) Restore(ctx context.Context, r io.Reader) error {
	i.restR, i.restEOF, i.stateErr = r, false, nil
	defer func() { i.restR = nil }()
	s := i.stack[:1]
	if err := i.call(ctx, abi.ExportRestore, i.fnRestore, phaseRestore, s); err != nil {
		return err
	}
	if i.stateErr != nil {
		err := &StateError{Operator: i.name, Export: abi.ExportRestore, Err: i.stateErr}
		i.fail(err)
		return err
	}
	return i.status(abi.ExportRestore, s[0], true)
}

// CheckpointComplete tells the guest that checkpoint id is durable. A
// module without weir_checkpoint_complete ignores it. An error status does
// not fail the instance; a trap does.
func (i *Instance) CheckpointComplete(ctx context.Context, id int64) error {
	if i.fnCheckpoint == nil {
		return i.usable()
	}
	s := i.stack[:1]
	s[0] = api.EncodeI64(id)
	if err := i.call(ctx, abi.ExportCheckpointComplete, i.fnCheckpoint, phaseOther, s); err != nil {
		return err
	}
	return i.status(abi.ExportCheckpointComplete, s[0], false)
}

// Close releases the instance. Later calls fail; Close is idempotent.
func (i *Instance) Close(ctx context.Context) error {
	if i.mod == nil {
		return nil
	}
	i.engine.unregister(i)
	if i.failed == nil {
		i.failed = errors.New("closed")
	}
	i.stdout.flush()
	i.stderr.flush()
	i.logs.close()
	err := i.mod.Close(ctx)
	// wazero's handles keep the module, and through it the linear memory,
	// reachable for as long as this Instance is: a failed attempt's task,
	// kept until the next deploy, held a memory bomb's whole limit.
	i.mod, i.mem = nil, nil
	i.stopMu.Lock() // stop reads it
	i.interrupt = nil
	i.stopMu.Unlock()
	i.fnInput, i.fnInit, i.fnProcess, i.fnSnapshot, i.fnRestore = nil, nil, nil, nil, nil
	i.fnCheckpoint, i.fnEndOfInput = nil, nil
	i.gmem.buf = nil
	i.pending, i.pendingBytes = nil, 0
	i.cancel()
	i.engine.releaseInstance(ctx, i.module)
	if i.gmem.grown >= releaseAbove {
		i.engine.releaseToOS()
	}
	if err != nil {
		return fmt.Errorf("operator %s: close: %w", i.name, err)
	}
	return nil
}

// InCall returns how long the call into the guest that runs now has run,
// 0 between calls (host.CallReporter): a task reports it, so that one
// stuck in a call shows as that, not as busy. Safe for any goroutine.
func (i *Instance) InCall() time.Duration {
	if start := i.callStart.Load(); start != 0 {
		return max(time.Since(time.Unix(0, start)), 0)
	}
	return 0
}

// InCallExport returns the export the call into the guest that runs now
// runs (abi.ExportProcess, abi.ExportSnapshot, …), "" between calls
// (host.CallReporter): a long call in weir_snapshot is a large state,
// not a record the operator is stuck on. Safe for any goroutine.
func (i *Instance) InCallExport() string {
	if p := i.callExport.Load(); p != nil {
		return *p
	}
	return ""
}

// exportNames holds the names of the exports the host calls, for
// InCallExport without an allocation per call.
var exportNames = func() map[string]*string {
	m := map[string]*string{}
	for _, e := range []string{abi.ExportInput, abi.ExportInit, abi.ExportInitialize, abi.ExportCursor, abi.ExportProcess, abi.ExportEndOfInput,
		abi.ExportSnapshot, abi.ExportRestore, abi.ExportCheckpointComplete, "start function"} {
		m[e] = &e
	}
	return m
}()

// exportName returns a pointer to export's name, shared for the known ones.
func exportName(export string) *string {
	if p, ok := exportNames[export]; ok {
		return p
	}
	return &export
}

// timeoutOf returns the deadline of a call of export: SnapshotTimeout for
// weir_snapshot and weir_restore, whose time grows with the state,
// CallTimeout for the others.
func (i *Instance) timeoutOf(export string) time.Duration {
	if isStateExport(export) {
		return i.limits.SnapshotTimeout
	}
	return i.limits.CallTimeout
}

// isStateExport reports whether export writes or reads the whole state.
func isStateExport(export string) bool {
	return export == abi.ExportSnapshot || export == abi.ExportRestore
}

// MemoryBytes returns the size of the instance's linear memory after its
// latest call, and its memory limit (limits.memory), in bytes: what a
// task reports of its operator, so that one near its limit shows before
// it fails. Safe for any goroutine.
func (i *Instance) MemoryBytes() (size, limit uint64) {
	return i.memBytes.Load(), i.gmem.limit
}

// usable returns the error of a failed or closed instance, or nil.
func (i *Instance) usable() error {
	if i.failed != nil {
		return fmt.Errorf("operator %s: %w: %w", i.name, ErrInstanceFailed, i.failed)
	}
	return nil
}

// writeInput asks the guest for an input buffer and copies head and then
// body into it.
func (i *Instance) writeInput(ctx context.Context, head, body []byte) (uint32, error) {
	size := len(head) + len(body)
	s := i.stack[:1]
	s[0] = api.EncodeI32(int32(size))
	if err := i.call(ctx, abi.ExportInput, i.fnInput, phaseOther, s); err != nil {
		return 0, err
	}
	addr := api.DecodeU32(s[0])
	if addr == 0 {
		detail := fmt.Sprintf("operator could not allocate %d bytes", size)
		if size, limit, refused := i.refusedGrow(); refused > 0 {
			detail += memoryNote(size, limit, refused)
		}
		err := &FaultError{Operator: i.name, Export: abi.ExportInput, Detail: detail, RecordIndex: -1}
		i.fail(err)
		return 0, err
	}
	if !i.mem.Write(addr, head) || !i.mem.Write(addr+uint32(len(head)), body) {
		err := &FaultError{Operator: i.name, Export: abi.ExportInput, Detail: fmt.Sprintf("input buffer of %d bytes at address %d passes the end of memory (%d bytes)", size, addr, i.mem.Size()), RecordIndex: -1}
		i.fail(err)
		return 0, err
	}
	return addr, nil
}

// call runs one export under the deadline and turns every way it can go
// wrong into the instance's failure.
func (i *Instance) call(ctx context.Context, export string, fn api.Function, ph phase, stack []uint64) error {
	if err := i.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("operator %s: %s: %w", i.name, export, err)
	}
	i.phase, i.export, i.message, i.traceback, i.fault = ph, export, "", "", nil
	i.gmem.resetRefused()
	i.callTimeout.Store(int64(i.timeoutOf(export)))
	i.callExport.Store(exportName(export)) // before the count says in a call
	seq := i.calls.Add(1)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { i.stop(&i.callerCanceled, seq) })
	}
	i.callStart.Store(time.Now().UnixNano())
	err := fn.CallWithStack(i.ctx, stack)
	i.callStart.Store(0)
	i.callExport.Store(nil)
	if stop != nil {
		stop()
	}
	interrupted := !i.calls.CompareAndSwap(seq, seq+1)
	if interrupted {
		// A stop marked the call: wait until it has said why, then end it.
		i.stopMu.Lock()
		i.calls.Store(seq + 1)
		i.stopMu.Unlock()
	}
	i.phase = phaseNone
	if err == nil && interrupted {
		// Interrupted while in a host function (a slow logger, say), the
		// guest returned before a loop iteration could stop it. The call
		// overran all the same, and the interrupt set for it would stop
		// some later call of the instance.
		err = errInterrupted
	}
	switch {
	case err != nil && i.fault == nil:
		err = i.classify(ctx, export, ph, err)
	case i.fault != nil:
		// The guest went on after an import refused it (an emit, a
		// state write) until it trapped or overran its deadline, or
		// returned: the refusal is what went wrong first.
		err = i.fault
	}
	i.memBytes.Store(uint64(len(i.gmem.buf)))
	if err == nil && !i.grewPast && i.gmem.refused > 0 {
		// The guest handled the refusal — or did not see it: C's malloc
		// and C++'s new without exceptions return NULL, and a write
		// through it corrupts memory quietly or traps later, far from
		// the cause. Said once per instance.
		i.grewPast = true
		size, limit, refused := i.refusedGrow()
		i.logs.logger.Warn(fmt.Sprintf("operator %s: %s went on after its memory limit refused a memory.grow%s; "+
			"C's malloc and C++'s new return NULL then, and a write through it corrupts memory or traps later", i.name, export, memoryNote(size, limit, refused)),
			"operator", i.name)
	}
	if err == nil && i.stderr.hasFatal.Load() && failedStatus(export, stack) {
		// A Go SDK that recovered a panic wrote the goroutine's stack
		// after a "panic: " line: the OperatorError's, as a trap's.
		_, i.traceback = i.stderr.takeFatal()
	}
	// What a guest runtime wrote after its fatal line is the trap's, the
	// exit's (classify took it) or the error status's, else it is logged
	// now.
	i.stderr.endCall()
	if err != nil {
		i.fail(err)
		return err
	}
	return nil
}

// errInterrupted is the error of a call that returned after it was
// interrupted.
var errInterrupted = errors.New("interrupted")

// stopBit marks the running call's count (calls) as stopped.
const stopBit = 1 << 63

// stop interrupts call seq (a count of calls, odd) for a reason (timedOut
// or callerCanceled), if it still runs and was not interrupted already: an
// instrumented module traps at its next loop iteration; otherwise wazero
// sees the canceled context. The watchdog and the caller's cancellation
// may call it at once; the first one sets the reason. A call that ended
// meanwhile is left alone, and so is the instance's next call.
func (i *Instance) stop(reason *atomic.Bool, seq uint64) {
	i.stopMu.Lock()
	defer i.stopMu.Unlock()
	if !i.calls.CompareAndSwap(seq, seq|stopBit) {
		return
	}
	reason.Store(true)
	if i.interrupt != nil {
		i.interrupt.Set(1)
	}
	i.cancel()
}

// watch is the watchdog's check of one instance at its tick now, ran
// after the previous one: how long the process ran since (Engine.watchdog).
func (i *Instance) watch(now time.Time, ran time.Duration) {
	s := i.calls.Load()
	if s&1 == 0 {
		return
	}
	io := i.hostIO.Load()
	if st := i.ioStart.Load(); st != 0 {
		io += int64(now.Sub(i.epoch)) - st // I/O in progress
	}
	if s != i.wdSeq {
		i.wdSeq, i.wdRan, i.wdIO = s, 0, io
		return
	}
	// Time the host spent streaming state (a slow checkpoint store) is not
	// the guest's; what the process did not run (a stop during the I/O)
	// is neither.
	i.wdRan += max(0, ran-time.Duration(io-i.wdIO))
	i.wdIO = io
	if i.wdRan >= time.Duration(i.callTimeout.Load()) && s&stopBit == 0 {
		i.stop(&i.timedOut, s)
	}
}

// classify turns an error from wazero into the instance's typed error.
func (i *Instance) classify(ctx context.Context, export string, ph phase, err error) error {
	record := -1
	if ph == phaseProcess || ph == phaseEndOfInput {
		record = i.record()
	}
	if i.timedOut.Load() {
		de := &DeadlineError{Operator: i.name, Export: export, Timeout: i.timeoutOf(export), RecordIndex: record}
		de.MemorySize, de.MemoryLimit, de.GrowRefused = i.memoryState()
		return de
	}
	if i.callerCanceled.Load() {
		cause := ctx.Err()
		if cause == nil {
			cause = context.Canceled
		}
		return fmt.Errorf("operator %s: %s: interrupted: %w", i.name, export, cause)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		xe := &ExitError{Operator: i.name, Export: export, Code: exit.ExitCode(), RecordIndex: record}
		xe.Fatal, xe.Traceback = i.stderr.takeFatal()
		if xe.Fatal == "" {
			xe.LastStderr = i.stderr.takeLast()
		}
		xe.MemorySize, xe.MemoryLimit, xe.GrowRefused = i.refusedGrow()
		return xe
	}
	msg := err.Error()
	stack := ""
	if k := strings.Index(msg, "\nwasm stack trace:"); k >= 0 {
		stack = dropEmptyModuleName(demangleStack(strings.TrimSpace(msg[k+1:])))
	}
	te := &TrapError{Operator: i.name, Export: export, RecordIndex: record, Stack: stack, Err: err, Message: i.message}
	te.Fatal, te.Traceback = i.stderr.takeFatal()
	if te.Message == "" && te.Fatal == "" {
		te.LastStderr = i.stderr.takeLast()
	}
	if outOfBounds(err) {
		te.Recursion = recursion(stack)
	}
	te.MemorySize, te.MemoryLimit, te.GrowRefused = i.memoryState()
	return te
}

// outOfBounds reports whether err, a call's error from wazero, is the
// runtime's out-of-bounds memory access trap: wazero wraps its trap's
// error, "wasm error: %w" and the stack, and gives a host function's
// panic as "%w (recovered by wazero)". wazero v1.12.0 keeps its trap
// errors (wasmruntime.ErrRuntimeOutOfBoundsMemoryAccess and the others)
// in an internal package, where errors.Is cannot name them, so the error
// it wrapped is told by its text, whole: a host function's error that
// only says the words is not the trap.
func outOfBounds(err error) bool {
	inner := errors.Unwrap(err)
	return inner != nil && inner.Error() == "out of bounds memory access"
}

// memoryState returns what a trap's or a deadline's message says of the
// instance's memory: the grow refused during the call (refusedGrow), else
// its size and limit when it had grown near the limit (nearMemoryLimit).
func (i *Instance) memoryState() (size, limit, refused uint64) {
	if size, limit, refused = i.refusedGrow(); refused > 0 {
		return size, limit, refused
	}
	size, limit = i.nearMemoryLimit()
	return size, limit, 0
}

// refusedGrow returns the last memory.grow the memory limit refused during
// the current call: the memory's size then, the limit and the bytes asked
// for; 0, 0, 0 if none was refused.
func (i *Instance) refusedGrow() (size, limit, refused uint64) {
	if i.gmem.refused == 0 {
		return 0, 0, 0
	}
	return i.gmem.refusedAt, i.gmem.limit, i.gmem.refused
}

// nearMemoryLimit returns the instance's memory size and limit when the
// memory has grown to 7/8 of its limit or more (a guest runtime grows its
// heap in chunks, so that is how running out of memory looks), else 0, 0.
func (i *Instance) nearMemoryLimit() (size, limit uint64) {
	if i.mem == nil {
		return 0, 0
	}
	if size := uint64(i.mem.Size()); size*8 >= i.limits.MemoryBytes*7 {
		return size, i.limits.MemoryBytes
	}
	return 0, 0
}

// record returns the index, in the batch Process was given, of the record
// the guest's cursor is on, or -1.
func (i *Instance) record() int {
	c := i.cursor()
	if c < 0 {
		return -1
	}
	return i.recordBase + c
}

// cursor reads the guest's record cursor, or -1.
func (i *Instance) cursor() int {
	if !i.hasCursor {
		return -1
	}
	v, ok := i.mem.ReadUint32Le(i.cursorAddr)
	if !ok || int32(v) < 0 {
		return -1
	}
	return int(int32(v))
}

// failedStatus reports whether export is one that returns a status and
// the status its call left in stack is an error.
func failedStatus(export string, stack []uint64) bool {
	switch export {
	case abi.ExportInit, abi.ExportProcess, abi.ExportEndOfInput, abi.ExportSnapshot, abi.ExportRestore, abi.ExportCheckpointComplete:
		return len(stack) > 0 && api.DecodeI32(stack[0]) != abi.OK
	}
	return false
}

// status turns an export's status result into an *OperatorError. With
// fatal the failure also fails the instance.
func (i *Instance) status(export string, res uint64, fatal bool) error {
	st := api.DecodeI32(res)
	if st == abi.OK {
		return nil
	}
	err := &OperatorError{Operator: i.name, Export: export, Status: st, Message: i.message, Traceback: i.traceback, RecordIndex: -1}
	err.MemorySize, err.MemoryLimit, err.GrowRefused = i.refusedGrow()
	if export == abi.ExportProcess || export == abi.ExportEndOfInput {
		// SDKs leave the cursor on the record a callback failed at.
		err.RecordIndex = i.record()
	}
	if fatal {
		i.fail(err)
	}
	i.dropPending()
	return err
}

// fail marks the instance failed and releases its memory.
func (i *Instance) fail(err error) {
	if i.failed == nil {
		i.failed = err
	}
	i.dropPending()
	if i.mod != nil {
		i.mod.CloseWithExitCode(context.Background(), 1)
	}
}

// faultf records a misuse of an import that fails the current call and
// returns the status code for the guest.
func (i *Instance) faultf(code int32, cause error, format string, args ...any) int32 {
	if i.fault == nil {
		record := -1
		if i.export == abi.ExportProcess || i.export == abi.ExportEndOfInput {
			record = i.record() // the record the guest was at, as a trap's
		}
		i.fault = &FaultError{Operator: i.name, Export: i.export, Detail: fmt.Sprintf(format, args...), Status: code, RecordIndex: record, Err: cause}
	}
	return code
}

// deliver hands the emitted batches to emit, in order.
func (i *Instance) deliver(emit func(port int, batch []byte) error) error {
	defer i.dropPending()
	for _, e := range i.pending {
		if err := emit(e.port, e.batch); err != nil {
			return fmt.Errorf("operator %s: forwarding output to port %d: %w", i.name, e.port, err)
		}
	}
	return nil
}

func (i *Instance) dropPending() {
	clear(i.pending)
	i.pending = i.pending[:0]
	i.pendingBytes = 0
}

// lineWriter routes a guest's stdout or stderr to the logger, one record
// per line.
type lineWriter struct {
	mu       sync.Mutex
	logs     *logLimiter
	operator string
	stream   string
	buf      []byte
	// fatal is the first line of the current call that a guest runtime
	// writes to say why it is about to stop (fatalPrefixes), "" if none.
	fatal string
	// trace holds the lines written after fatal, the Go runtime's
	// goroutine stacks (traceback), until the call ends: its failure
	// takes them (takeFatal), else endCall logs them.
	trace traceback
	// taken says takeFatal took fatal and trace.
	taken bool
	// hasFatal says fatal is set, so that endCall, at the end of every
	// call, takes no lock while it is not.
	hasFatal atomic.Bool
	// last is the last line the current call wrote to stderr (cut at
	// maxFatalLine), "" if none: the only word of why a guest stopped
	// whose runtime writes a line of no known form first (C++'s libc++
	// built without exceptions writes "stoll: no conversion", then
	// aborts). hasLast says it is set, as hasFatal does.
	last    string
	hasLast atomic.Bool
}

// fatalPrefixes start the line a guest runtime writes to stderr before it
// traps or exits: the Go runtime's throw ("fatal error: out of memory",
// "fatal error: all goroutines are asleep - deadlock!") or a panic no
// recover caught, as one in a goroutine of the operator's ("panic: …";
// the Go SDK recovers panics in the operator's own methods itself), and
// wasi-libc's failed assert ("Assertion failed: n < 3 (op.c: process:
// 9)").
var fatalPrefixes = []string{"fatal error: ", "panic: ", "Assertion failed: "}

// maxFatalLine bounds the length of the line kept as fatal.
const maxFatalLine = 200

// endCall forgets the fatal line at the end of a call, and logs the lines
// held after it (traceback) unless the call's failure took them.
func (w *lineWriter) endCall() {
	if !w.hasFatal.Load() && !w.hasLast.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = ""
	w.hasLast.Store(false)
	if !w.hasFatal.Load() {
		return
	}
	if !w.taken {
		w.release()
	}
	w.fatal, w.trace, w.taken = "", traceback{}, false
	w.hasFatal.Store(false)
}

// takeLast returns the last line the current call wrote, one not ended
// by a newline yet included, or "".
func (w *lineWriter) takeLast() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		return cutLine(string(w.buf))
	}
	return w.last
}

// cutLine cuts line to maxFatalLine bytes, marking the cut.
func cutLine(line string) string {
	if len(line) > maxFatalLine {
		return strings.ToValidUTF8(line[:maxFatalLine], "") + "…"
	}
	return line
}

// takeFatal returns the fatal line written during the call, or "", and
// what the guest runtime wrote after it, cut to the goroutine that failed
// (traceback.text), or "". What it returns is not logged.
func (w *lineWriter) takeFatal() (fatal, trace string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal == "" {
		return "", ""
	}
	w.taken = true
	return w.fatal, w.trace.text()
}

// release logs the lines the traceback holds, then what it left out
// (traceback.note), and forgets them.
func (w *lineWriter) release() {
	for _, l := range w.trace.lines {
		w.log(l)
	}
	if note := w.trace.note(); note != "" {
		w.log(note)
	}
	w.trace.lines, w.trace.preamble, w.trace.size = nil, 0, 0
	w.trace.goroutines, w.trace.cut = 0, 0
}

func (w *lineWriter) log(line string) {
	w.logs.log(slog.LevelInfo, line, "operator", w.operator, "stream", w.stream)
}

const maxLogLine = 4096

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		// Look for the end of the line no further than where an over-long
		// line is cut, so that a huge write costs time linear in its size:
		// the guest is stopped in here, where no deadline reaches it.
		room := maxLogLine - len(w.buf)
		k := bytes.IndexByte(p[:min(len(p), room+1)], '\n')
		switch {
		case k >= 0:
			w.buf = append(w.buf, p[:k]...)
			p = p[k+1:]
		case len(p) < room:
			w.buf = append(w.buf, p...)
			return n, nil
		default: // cut an over-long line
			w.buf = append(w.buf, p[:room]...)
			p = p[room:]
		}
		w.emit()
	}
	return n, nil
}

func (w *lineWriter) emit() {
	line := string(w.buf)
	w.buf = w.buf[:0]
	if w.fatal != "" {
		if w.trace.hold(line) {
			return
		}
		if w.trace.passed {
			w.release() // no Go traceback: the lines as they came
		}
	}
	w.log(line)
	if w.fatal != "" || w.stream != "stderr" {
		return
	}
	if line != "" {
		w.last = cutLine(line)
		w.hasLast.Store(true)
	}
	for _, p := range fatalPrefixes {
		if strings.HasPrefix(line, p) {
			w.fatal = cutLine(line)
			w.hasFatal.Store(true)
			return
		}
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit()
	}
}

// stateIO runs one read or write of the state stream, keeping its duration
// out of the call deadline.
func (i *Instance) stateIO(f func() (int, error)) (int, error) {
	t0 := time.Since(i.epoch)
	i.ioStart.Store(max(int64(t0), 1))
	n, err := f()
	i.hostIO.Add(int64(time.Since(i.epoch) - t0))
	i.ioStart.Store(0)
	return n, err
}
